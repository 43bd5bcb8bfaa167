"""``/v1/responses``: the Responses API that NeMo Gym's ``responses_create_params`` are written for.

The output is one item: an assistant message, or a ``function_call`` when the model calls a
tool. A stream numbers its events (``sequence_number``) and runs ``response.created``,
``response.in_progress``, the item's ``added`` events with the first token, a delta per token,
the ``done`` events, and ``response.completed`` or, for a reply cut by ``max_output_tokens``,
``response.incomplete``: only the final event says why a response is incomplete.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gymbench.sim.logprobs import responses_logprobs
from gymbench.sim.openai_format import Reply, sse
from gymbench.sim.request import (
    RESPONSES_FIELDS,
    BadRequest,
    ParsedRequest,
    build_request,
    check_fields,
    require,
    tool_use,
)
from gymbench.sim.text import last_user_text, message_text

LOGPROBS_INCLUDE = "message.output_text.logprobs"


class Responses:
    path = "/v1/responses"
    prefix = "resp_"

    def parse(self, body: Mapping[str, Any]) -> ParsedRequest:
        require(body, "model", str, "a model name")
        data = require(body, "input", (str, list), "a string or a list of input items")
        check_fields(body, RESPONSES_FIELDS)
        if isinstance(data, str):
            prompt = question = data
            after_result = False
        else:
            prompt, question = _read_items(data)
            after_result = bool(data) and data[-1].get("type") == "function_call_output"
        tools = tool_use(body, nested=False, after_result=after_result)
        instructions = body.get("instructions")
        if instructions:
            prompt = f"{instructions}\n{prompt}"
        if tools.tools:
            prompt = f"{prompt}\n{tools.prompt_text()}"
        return build_request(
            body,
            prompt=prompt,
            question=question,
            max_tokens=body.get("max_output_tokens"),
            logprobs=LOGPROBS_INCLUDE in (body.get("include") or ()),
            top_logprobs=body.get("top_logprobs") or 0,
            tools=tools,
        )

    def full(self, reply: Reply) -> dict[str, object]:
        output = reply.output
        final = self.envelope(reply, "incomplete" if output.cut else "completed")
        final["output"] = [self.item(reply, "incomplete" if output.cut else "completed")]
        final["usage"] = _usage(reply)
        if output.cut:
            final["incomplete_details"] = {"reason": "max_output_tokens"}
        return final

    def envelope(self, reply: Reply, status: str) -> dict[str, object]:
        """The response object as it stands before its output: what ``response.created`` shows."""
        request = reply.request
        body = request.body
        return {
            "id": reply.request_id,
            "object": "response",
            "created_at": reply.created,
            "status": status,
            "error": None,
            "incomplete_details": None,
            "instructions": body.get("instructions"),
            "max_output_tokens": request.max_tokens,
            "model": reply.model,
            "output": [],
            "parallel_tool_calls": request.tools.parallel,
            "temperature": request.temperature if request.temperature is not None else 1.0,
            "tool_choice": request.tools.echoed_choice(),
            "tools": [tool.as_responses_tool() for tool in request.tools.tools],
            "top_logprobs": request.top_logprobs,
            "top_p": body.get("top_p") if body.get("top_p") is not None else 1.0,
            "usage": None,
        }

    def item(self, reply: Reply, status: str, tokens: int | None = None) -> dict[str, object]:
        """The output item with its first ``tokens`` tokens (all by default)."""
        output = reply.output
        call = output.tool_call
        if call is not None:
            arguments = call.arguments if tokens is None else "".join(output.tokens[1:tokens])
            return {
                "type": "function_call",
                "id": f"fc_{reply.key}",
                "call_id": call.call_id,
                "name": call.name,
                "arguments": arguments,
                "status": status,
            }
        content = [self.text_part(reply, len(output.tokens))] if tokens is None or tokens else []
        return {"type": "message", "id": f"msg_{reply.key}", "status": status, "role": "assistant", "content": content}

    def text_part(self, reply: Reply, tokens: int) -> dict[str, object]:
        text = "".join(reply.output.tokens[:tokens])
        logprobs = responses_logprobs(reply.logprobs(0)[:tokens], True) if reply.request.logprobs else []
        return {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs}

    def streamer(self, reply: Reply) -> ResponsesStreamer:
        return ResponsesStreamer(self, reply)


class ResponsesStreamer:
    def __init__(self, api: Responses, reply: Reply) -> None:
        self.api = api
        self.reply = reply
        self.sequence = 0
        self.item_id = f"fc_{reply.key}" if reply.output.tool_call else f"msg_{reply.key}"

    def start(self) -> bytes:
        envelope = self.api.envelope(self.reply, "in_progress")
        return self._event("response.created", response=envelope) + self._event(
            "response.in_progress", response=envelope
        )

    def token(self, choice: int, index: int) -> bytes:
        output = self.reply.output
        opening = self._opening() if index == 0 else b""
        where = {"item_id": self.item_id, "output_index": 0}
        if output.tool_call is not None:
            if index == 0:  # the token that opens the call carries its name: no argument text yet
                return opening
            return opening + self._event("response.function_call_arguments.delta", **where, delta=output.tokens[index])
        logprobs = responses_logprobs(self.reply.logprobs(0)[index : index + 1], False) if self._logprobs else []
        delta = {**where, "content_index": 0, "delta": output.tokens[index], "logprobs": logprobs}
        return opening + self._event("response.output_text.delta", **delta)

    def end(self) -> bytes:
        final = self.api.full(self.reply)
        output = final["output"]
        assert isinstance(output, list) and isinstance(output[0], dict)
        item = output[0]
        where = {"item_id": self.item_id, "output_index": 0}
        if self.reply.output.tool_call is not None:
            closing = self._event("response.function_call_arguments.done", **where, arguments=item["arguments"])
        else:
            content = item["content"]
            assert isinstance(content, list)
            part = content[0]
            logprobs = responses_logprobs(self.reply.logprobs(0), False) if self._logprobs else []
            closing = self._event(
                "response.output_text.done", **where, content_index=0, text=part["text"], logprobs=logprobs
            )
            closing += self._event("response.content_part.done", **where, content_index=0, part=part)
        closing += self._event("response.output_item.done", output_index=0, item=item)
        return closing + self._event(f"response.{final['status']}", response=final)

    @property
    def _logprobs(self) -> bool:
        return self.reply.request.logprobs

    def _opening(self) -> bytes:
        item = self.api.item(self.reply, "in_progress", tokens=0)
        added = self._event("response.output_item.added", output_index=0, item=item)
        if self.reply.output.tool_call is not None:
            return added
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        return added + self._event(
            "response.content_part.added", item_id=self.item_id, output_index=0, content_index=0, part=part
        )

    def _event(self, kind: str, **fields: Any) -> bytes:
        event = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return sse(event, kind)


def _usage(reply: Reply) -> dict[str, object]:
    return {
        "input_tokens": reply.prompt_tokens,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": reply.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": reply.prompt_tokens + reply.completion_tokens,
    }


def _read_items(items: Sequence[object]) -> tuple[str, str]:
    """The prompt text of an input list (messages, earlier tool calls, their results) and its question."""
    texts = []
    messages = []
    for index, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise BadRequest("'input' as a list must hold message objects", "input")
        kind = item.get("type", "message")
        if kind == "message":
            messages.append(item)
            texts.append(message_text(item.get("content", "")))
        elif kind == "function_call":
            texts.append(f"{item.get('name', '')} {item.get('arguments', '')}")
        elif kind == "function_call_output":
            if not isinstance(item.get("call_id"), str):
                raise BadRequest(f"'input[{index}]' is a function_call_output without a 'call_id'", "input")
            output = item.get("output", "")
            texts.append(output if isinstance(output, str) else message_text(output))
    return "\n".join(texts), last_user_text(messages)
