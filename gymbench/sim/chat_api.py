"""``/v1/chat/completions``: messages in, ``chat.completion`` (or its chunks) out."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gymbench.sim.logprobs import chat_logprobs
from gymbench.sim.openai_format import Reply, chat_usage, chunked_stream_end, sse
from gymbench.sim.planner import PlannedOutput
from gymbench.sim.request import (
    CHAT_FIELDS,
    BadRequest,
    ParsedRequest,
    build_request,
    check_fields,
    first_set,
    require,
    tool_use,
)
from gymbench.sim.text import last_user_text, message_text

ROLES = ("system", "developer", "user", "assistant", "tool", "function")


class ChatCompletions:
    path = "/v1/chat/completions"
    prefix = "chatcmpl-"

    def parse(self, body: Mapping[str, Any]) -> ParsedRequest:
        require(body, "model", str, "a model name")
        messages = require(body, "messages", list, "a list of messages")
        if not messages or not all(isinstance(m, Mapping) and "role" in m for m in messages):
            raise BadRequest("'messages' must be a non-empty list of objects with a 'role'", "messages")
        for index, message in enumerate(messages):
            _check_message(message, index)
        check_fields(body, CHAT_FIELDS)
        if body.get("top_logprobs") is not None and not body.get("logprobs"):
            raise BadRequest("'top_logprobs' needs 'logprobs': true", "top_logprobs")
        tools = tool_use(body, nested=True, after_result=messages[-1]["role"] == "tool")
        prompt = "\n".join(_message_text(m) for m in messages)
        return build_request(
            body,
            prompt=f"{prompt}\n{tools.prompt_text()}" if tools.tools else prompt,
            question=last_user_text(messages),
            max_tokens=first_set(body, "max_completion_tokens", "max_tokens"),
            logprobs=bool(body.get("logprobs")),
            top_logprobs=body.get("top_logprobs") or 0,
            tools=tools,
            n=body.get("n") or 1,
        )

    def full(self, reply: Reply) -> dict[str, object]:
        choices = []
        for index, output in enumerate(reply.choices):
            logprobs = chat_logprobs(reply.logprobs(index)) if reply.request.logprobs else None
            message = _message(output)
            choices.append(
                {"index": index, "message": message, "logprobs": logprobs, "finish_reason": output.finish_reason}
            )
        return {
            "id": reply.request_id,
            "object": "chat.completion",
            "created": reply.created,
            "model": reply.model,
            "choices": choices,
            "usage": chat_usage(reply),
        }

    def streamer(self, reply: Reply) -> ChatStreamer:
        return ChatStreamer(reply)


class ChatStreamer:
    def __init__(self, reply: Reply) -> None:
        self.reply = reply
        self.head = {"id": reply.request_id, "object": "chat.completion.chunk", "created": reply.created}
        self.head["model"] = reply.model

    def start(self) -> bytes:
        return b"".join(self._chunk(index, _opening(output)) for index, output in enumerate(self.reply.choices))

    def token(self, choice: int, index: int) -> bytes:
        output = self.reply.choices[choice]
        logprobs = (
            chat_logprobs(self.reply.logprobs(choice)[index : index + 1]) if self.reply.request.logprobs else None
        )
        piece = self._chunk(choice, _delta(output, index), logprobs)
        if index + 1 < len(output.tokens):
            return piece
        return piece + self._chunk(choice, {}, None, output.finish_reason)

    def end(self) -> bytes:
        return chunked_stream_end({**self.head, "choices": []}, self.reply)

    def _chunk(
        self, choice: int, delta: dict[str, Any], logprobs: dict[str, Any] | None = None, finish: str | None = None
    ) -> bytes:
        return sse(
            {**self.head, "choices": [{"index": choice, "delta": delta, "logprobs": logprobs, "finish_reason": finish}]}
        )


def _message(output: PlannedOutput) -> dict[str, object]:
    call = output.tool_call
    if call is None:
        return {"role": "assistant", "content": output.text, "refusal": None}
    function = {"name": call.name, "arguments": call.arguments}
    return {
        "role": "assistant",
        "content": None,
        "refusal": None,
        "tool_calls": [{"id": call.call_id, "type": "function", "function": function}],
    }


def _opening(output: PlannedOutput) -> dict[str, object]:
    return {"role": "assistant", "content": None if output.tool_call else "", "refusal": None}


def _delta(output: PlannedOutput, index: int) -> dict[str, object]:
    call = output.tool_call
    if call is None:
        return {"content": output.tokens[index]}
    if index == 0:
        opened = {"index": 0, "id": call.call_id, "type": "function", "function": {"name": call.name, "arguments": ""}}
        return {"tool_calls": [opened]}
    return {"tool_calls": [{"index": 0, "function": {"arguments": output.tokens[index]}}]}


def _check_message(message: Mapping[str, Any], index: int) -> None:
    role = message["role"]
    if role not in ROLES:
        raise BadRequest(f"'messages[{index}].role' must be one of {', '.join(ROLES)}, got {role!r}", "messages")
    if role == "tool" and not isinstance(message.get("tool_call_id"), str):
        raise BadRequest(f"'messages[{index}]' is a tool result without a 'tool_call_id'", "messages")
    calls = message.get("tool_calls")
    if calls is not None and not (isinstance(calls, list) and all(isinstance(c, Mapping) for c in calls)):
        raise BadRequest(f"'messages[{index}].tool_calls' must be a list of objects", "messages")


def _message_text(message: Mapping[str, Any]) -> str:
    """A message's text as it counts towards the prompt, tool calls included."""
    text = message_text(message.get("content", ""))
    for call in message.get("tool_calls") or ():
        function = call.get("function")
        if isinstance(function, Mapping):
            text += f"\n{function.get('name', '')} {function.get('arguments', '')}"
    return text
