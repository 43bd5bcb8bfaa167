"""Streamed answers are assembled into the shape a non-streamed call returns."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aiohttp import web

from gymbench import GenerationFailed, GenerationRequest
from gymbench.builtin.backend_settings import OpenAISettings
from gymbench.builtin.openai_backend import OpenAIBackend
from gymbench.builtin.stream_assembly import ChatStream, ResponsesStream
from gymbench.sim.endpoints import CHAT, RESPONSES
from gymbench.sim.openai_format import Reply, render_stream
from gymbench.sim.planner import PlannedOutput
from gymbench.sim.request import ParsedRequest
from tests.builtin.conftest import Serve
from tests.builtin.loopback import app_with_models, send_sse, sse_lines

REPLY = Reply(
    "chatcmpl-7",
    "m",
    1700000000,
    12,
    (PlannedOutput(("Six times seven", "\n", "42"), "stop"),),
    ParsedRequest("m", "", "", None, stream=True, include_usage=True),
)
QUESTION = GenerationRequest(0, 0, {"input": "What is 6 * 7?"})


def sim_events(stream: bytes) -> list[dict[str, Any]]:
    """The JSON events of a stream the simulator would send."""
    lines = [line[5:].strip() for line in stream.splitlines() if line.startswith(b"data:")]
    return [json.loads(line) for line in lines if line != b"[DONE]"]


def chat_stream_of(reply: Reply) -> list[dict[str, Any]]:
    return sim_events(render_stream(CHAT, reply))


def responses_stream_of(reply: Reply) -> list[dict[str, Any]]:
    return sim_events(render_stream(RESPONSES, reply))


def test_chat_chunks_assemble_into_the_completion_a_plain_call_returns() -> None:
    stream = ChatStream()
    produced = [stream.add(event) for event in chat_stream_of(REPLY)]
    assert stream.response() == CHAT.full(REPLY)
    assert stream.text == REPLY.output.text and produced.count(True) == len(REPLY.output.tokens)
    assert (stream.usage().prompt_tokens, stream.usage().completion_tokens) == (12, 3)


def test_responses_stream_keeps_its_final_response() -> None:
    stream = ResponsesStream()
    for event in responses_stream_of(REPLY):
        stream.add(event)
    assert stream.response() == RESPONSES.full(REPLY) and stream.text == REPLY.output.text
    assert stream.usage().completion_tokens == 3


def planned(endpoint: Any, body: dict[str, Any]) -> Reply:
    """The simulator's reply to ``body``, as its server plans it."""
    from gymbench.sim.config import SimConfig
    from gymbench.sim.planner import Planner

    parsed = endpoint.parse({"model": "m", "stream": True, "stream_options": {"include_usage": True}, **body})
    return Reply(f"{endpoint.prefix}1", "m", 1, 9, Planner(SimConfig()).plan(parsed), parsed)


TOOL = {"name": "lookup", "parameters": {"type": "object", "properties": {"word": {"type": "string"}}}}


@pytest.mark.parametrize(
    "body",
    [
        {"messages": [{"role": "user", "content": "2 + 2?"}], "logprobs": True, "top_logprobs": 2, "n": 2},
        {
            "messages": [{"role": "user", "content": "x"}],
            "tools": [{"type": "function", "function": TOOL}],
            "tool_choice": "required",
        },  # noqa: E501
    ],
    ids=["logprobs-n2", "tool-call"],
)
def test_chat_logprobs_and_tool_calls_assemble_as_sent_whole(body: dict[str, Any]) -> None:
    reply = planned(CHAT, body)
    stream = ChatStream()
    for event in sim_events(render_stream(CHAT, reply)):
        stream.add(event)
    assert stream.response() == as_sent(CHAT.full(reply))


@pytest.mark.parametrize(
    "body",
    [
        {"input": "2 + 2?", "include": ["message.output_text.logprobs"], "top_logprobs": 2},
        {"input": "x", "tools": [{"type": "function", **TOOL}], "tool_choice": "required"},
    ],
    ids=["logprobs", "tool-call"],
)
def test_responses_logprobs_and_tool_calls_assemble_without_the_final_event(body: dict[str, Any]) -> None:
    reply = planned(RESPONSES, body)
    stream = ResponsesStream()
    for event in sim_events(render_stream(RESPONSES, reply)):
        if event["type"] not in ("response.completed", "response.output_item.done"):
            stream.add(event)
    assert stream.response() == as_sent({**RESPONSES.full(reply), "usage": None})


def as_sent(value: dict[str, Any]) -> Any:
    return json.loads(json.dumps(value))


@pytest.mark.parametrize(
    "dropped",
    [
        ("response.completed",),
        ("response.completed", "response.output_item.done", "response.content_part.done", "response.output_text.done"),
    ],
)
def test_responses_stream_without_final_event_is_assembled(dropped: tuple[str, ...]) -> None:
    stream = ResponsesStream()
    for event in responses_stream_of(REPLY):
        if event["type"] not in dropped:
            stream.add(event)
    expected = {**RESPONSES.full(REPLY), "usage": None}  # only the final event tells the usage
    assert stream.response() == expected and stream.text == REPLY.output.text


def test_responses_deltas_alone_still_make_a_response() -> None:
    stream = ResponsesStream()
    for piece in ("4", "2"):
        stream.add({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "delta": piece})
    response = stream.response()
    assert response["object"] == "response" and response["status"] == "completed"
    assert response["output"][0]["content"] == [{"type": "output_text", "text": "42"}]
    assert stream.text == "42"


def tool_call_chunks(style: str) -> list[dict[str, Any]]:
    """Two parallel tool calls, streamed as OpenAI does (name and id with the first piece of
    arguments, ``content: null``) or as vLLM's tool parsers do (name alone, then argument pieces)."""
    head = {"id": "chatcmpl-9", "object": "chat.completion.chunk", "created": 5, "model": "m"}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**head, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

    def call(index: int, **fields: Any) -> dict[str, Any]:
        return {"tool_calls": [{"index": index, **fields}]}

    if style == "openai":
        opening = [
            chunk({"role": "assistant", "content": None, "refusal": None}),
            chunk(call(0, id="call_a", type="function", function={"name": "weather", "arguments": ""})),
            chunk(call(0, function={"arguments": '{"city": '})),
            chunk(call(1, id="call_b", type="function", function={"name": "time", "arguments": ""})),
        ]
    else:
        opening = [
            chunk({"role": "assistant", "content": ""}),
            chunk(call(0, id="chatcmpl-tool-a", type="function", function={"name": "weather"})),
            chunk(call(0, function={"arguments": '{"city": '})),
            chunk(call(1, id="chatcmpl-tool-b", type="function", function={"name": "time"})),
        ]
    return [
        *opening,
        chunk(call(0, function={"arguments": '"Paris"}'})),
        chunk(call(1, function={"arguments": '{"zone": "CET"}'})),
        chunk({}, "tool_calls"),
        {**head, "choices": [], "usage": {"prompt_tokens": 20, "completion_tokens": 11, "total_tokens": 31}},
    ]


@pytest.mark.parametrize("style", ["openai", "vllm"])
async def test_streamed_tool_calls_are_assembled_by_index(serve: Serve, style: str) -> None:
    async def chat(request: web.Request) -> web.StreamResponse:
        return await send_sse(request, sse_lines([*tool_call_chunks(style), "[DONE]"]))

    app = app_with_models()
    app.router.add_post("/v1/chat/completions", chat)
    base_url = await serve(app)
    async with OpenAIBackend(OpenAISettings(base_url=base_url, model="m", api="chat", stream=True)) as backend:
        result = await backend.generate(QUESTION)
    message = result.response["choices"][0]["message"]
    ids = ("call_a", "call_b") if style == "openai" else ("chatcmpl-tool-a", "chatcmpl-tool-b")
    assert message["tool_calls"] == [
        {"id": ids[0], "type": "function", "function": {"name": "weather", "arguments": '{"city": "Paris"}'}},
        {"id": ids[1], "type": "function", "function": {"name": "time", "arguments": '{"zone": "CET"}'}},
    ]
    assert message["role"] == "assistant" and message["content"] in (None, "") and result.text == ""
    assert result.response["choices"][0]["finish_reason"] == "tool_calls"
    assert result.response["object"] == "chat.completion" and result.response["id"] == "chatcmpl-9"
    assert result.response["usage"]["completion_tokens"] == 11 and result.usage.completion_tokens == 11
    assert result.timings["ttft"] > 0  # tool-call tokens count as generated tokens


async def test_an_event_longer_than_aiohttps_line_limit_is_read(serve: Serve) -> None:
    """A Responses API ``response.completed`` carries the whole output on one line; aiohttp's
    line reader refuses lines over 512 KiB (3.14; 128 KiB in 3.9)."""
    long_reply = Reply("resp_1", "m", 1, 5, (PlannedOutput(("x" * 600_000,), "stop"),), REPLY.request)

    async def responses(request: web.Request) -> web.StreamResponse:
        return await send_sse(request, render_stream(RESPONSES, long_reply), piece=65536)

    app = app_with_models()
    app.router.add_post("/v1/responses", responses)
    base_url = await serve(app)
    async with OpenAIBackend(OpenAISettings(base_url=base_url, model="m", stream=True)) as backend:
        result = await backend.generate(QUESTION)
    assert result.text == "x" * 600_000 and result.response == RESPONSES.full(long_reply)


async def test_a_bad_stream_event_is_an_invalid_response(serve: Serve) -> None:
    async def chat(request: web.Request) -> web.StreamResponse:
        return await send_sse(request, b"data: {not json\n\n")

    app = app_with_models()
    app.router.add_post("/v1/chat/completions", chat)
    base_url = await serve(app)
    async with OpenAIBackend(OpenAISettings(base_url=base_url, model="m", api="chat", stream=True)) as backend:
        with pytest.raises(GenerationFailed) as info:
            await backend.generate(QUESTION)
    assert info.value.kind == "invalid_response" and "bad stream event" in info.value.reason
