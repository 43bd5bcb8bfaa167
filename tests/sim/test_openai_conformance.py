"""Every object and event the simulator sends validates strictly against the ``openai`` SDK's types.

A matrix of requests (plain, cut by the token limit, with logprobs, with ``n``, with a tool call
forced or named or cut, after a tool's result) on each endpoint, whole and streamed, plus every
error the server gives, is sent over loopback HTTP; each raw answer goes through
:mod:`tests.sim.openai_strict`. The last test checks that the matrix reached every type the
simulator can send, so a shape that stops being produced does not go unvalidated.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest

from gymbench.sim import SimServerHandle

from .conftest import FAST, MODEL
from .openai_strict import OBJECTS, VALIDATED, strict, strict_error, strict_models, strict_stream

SCHEMA = {
    "type": "object",
    "properties": {
        "word": {"type": "string", "minLength": 2},
        "limit": {"type": "integer", "minimum": 1, "maximum": 5},
        "exact": {"type": "boolean"},
    },
    "required": ["word"],
    "additionalProperties": False,
}
CHAT_TOOLS = [{"type": "function", "function": {"name": "lookup", "description": "Look up", "parameters": SCHEMA}}]
RESPONSES_TOOLS = [{"type": "function", "name": "lookup", "description": "Look up", "parameters": SCHEMA}]
ASK = [{"role": "user", "content": "What is 12 + 30?"}]
CALLED = {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": '{"word": "sum"}'}}
CHAT_AFTER_TOOL = [*ASK, {"role": "assistant", "content": None, "tool_calls": [CALLED]}]
CHAT_AFTER_TOOL.append({"role": "tool", "tool_call_id": "call_1", "content": "42"})
RESPONSES_AFTER_TOOL = [
    *ASK,
    {"type": "function_call", "call_id": "call_1", "name": "lookup", "arguments": '{"word": "sum"}'},
    {"type": "function_call_output", "call_id": "call_1", "output": "42"},
]

CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "chat": ("/chat/completions", {"messages": [{"role": "system", "content": "Be brief."}, *ASK]}),
    "chat-cut": ("/chat/completions", {"messages": ASK, "max_tokens": 3}),
    "chat-logprobs": ("/chat/completions", {"messages": ASK, "logprobs": True, "top_logprobs": 3}),
    "chat-n": ("/chat/completions", {"messages": ASK, "n": 2, "seed": 7}),
    "chat-tool-required": ("/chat/completions", {"messages": ASK, "tools": CHAT_TOOLS, "tool_choice": "required"}),
    "chat-tool-named": (
        "/chat/completions",
        {"messages": ASK, "tools": CHAT_TOOLS, "tool_choice": {"type": "function", "function": {"name": "lookup"}}},
    ),
    "chat-tool-cut": (
        "/chat/completions",
        {"messages": ASK, "tools": CHAT_TOOLS, "tool_choice": "required", "max_tokens": 2},
    ),
    "chat-after-tool": ("/chat/completions", {"messages": CHAT_AFTER_TOOL, "tools": CHAT_TOOLS, "logprobs": True}),
    "completions": ("/completions", {"prompt": "12 + 30 ="}),
    "completions-cut": ("/completions", {"prompt": "12 + 30 =", "max_tokens": 3}),
    "completions-logprobs": ("/completions", {"prompt": "12 + 30 =", "logprobs": 2}),
    "completions-n": ("/completions", {"prompt": ["12 + 30 ="], "n": 2}),
    "responses": ("/responses", {"input": "What is 12 + 30?"}),
    "responses-messages": ("/responses", {"input": ASK, "instructions": "Be brief.", "temperature": 0.5}),
    "responses-cut": ("/responses", {"input": ASK, "max_output_tokens": 3}),
    "responses-logprobs": (
        "/responses",
        {"input": ASK, "include": ["message.output_text.logprobs"], "top_logprobs": 2},
    ),
    "responses-tool-required": ("/responses", {"input": ASK, "tools": RESPONSES_TOOLS, "tool_choice": "required"}),
    "responses-tool-named": (
        "/responses",
        {"input": ASK, "tools": RESPONSES_TOOLS, "tool_choice": {"type": "function", "name": "lookup"}},
    ),
    "responses-tool-cut": (
        "/responses",
        {"input": ASK, "tools": RESPONSES_TOOLS, "tool_choice": "required", "max_output_tokens": 2},
    ),
    "responses-after-tool": ("/responses", {"input": RESPONSES_AFTER_TOOL, "tools": RESPONSES_TOOLS}),
}
ERRORS: dict[str, tuple[str, Any, int, str | None]] = {
    # name: (path, body, status, param)
    "unknown-model": ("/chat/completions", {"model": "gpt-nope", "messages": ASK}, 404, "model"),
    "unknown-model-responses": ("/responses", {"model": "gpt-nope", "input": "x"}, 404, "model"),
    "temperature-hot": (
        "/chat/completions",
        {"model": MODEL, "messages": ASK, "temperature": "hot"},
        400,
        "temperature",
    ),
    "tools-true": ("/responses", {"model": MODEL, "input": "x", "tools": True}, 400, "tools"),
    "no-messages": ("/chat/completions", {"model": MODEL}, 400, "messages"),
    "n-zero": ("/completions", {"model": MODEL, "prompt": "x", "n": 0}, 400, "n"),
    "unknown-tool": (
        "/responses",
        {"model": MODEL, "input": "x", "tools": RESPONSES_TOOLS, "tool_choice": {"type": "function", "name": "nope"}},
        400,
        "tool_choice",
    ),  # noqa: E501
    "malformed-json": ("/chat/completions", b"{not json", 400, None),
}
EXPECTED_TYPES = {
    "ChatCompletion",
    "ChatCompletionChunk",
    "Completion",
    "CompletionChunk",
    "Response",
    "Model",
    "ErrorObject",
    *(
        f"Response{name}Event"
        for name in (
            "Created",
            "InProgress",
            "OutputItemAdded",
            "ContentPartAdded",
            "Text" + "Delta",
            "TextDone",
            "ContentPartDone",
            "OutputItemDone",
            "FunctionCallArgumentsDelta",
            "FunctionCallArgumentsDone",
            "Completed",
            "Incomplete",
        )
    ),
}


async def _post(session: aiohttp.ClientSession, url: str, body: Any) -> tuple[int, str, bytes]:
    sent = {"data": body} if isinstance(body, bytes) else {"json": body}
    async with session.post(url, **sent) as answer:
        return answer.status, answer.content_type, await answer.read()


async def _gather(server: SimServerHandle, faulty: list[SimServerHandle]) -> dict[str, tuple[int, str, bytes]]:
    corpus = {}
    async with aiohttp.ClientSession() as session:
        for name, (path, body) in CASES.items():
            for stream in (False, True):
                request = {"model": MODEL, **body, "stream": stream}
                if stream and path != "/responses":
                    request["stream_options"] = {"include_usage": True}
                key = f"{name}-stream" if stream else name
                corpus[key] = await _post(session, server.base_url + path, request)
        for name, (path, body, _, _) in ERRORS.items():
            corpus[name] = await _post(session, server.base_url + path, body)
        for index, other in enumerate(faulty):
            for attempt in range(2):  # the rate-limited server refuses the second
                corpus[f"responses-fault-{index}-{attempt}"] = await _post(
                    session, other.base_url + "/responses", CASE_BODY
                )
        async with session.get(server.base_url + "/models") as answer:
            corpus["models"] = (answer.status, answer.content_type, await answer.read())
    return corpus


CASE_BODY = {"model": MODEL, "input": "x"}


@pytest.fixture(scope="module")
def corpus(sim_factory: Callable[..., SimServerHandle]) -> dict[str, tuple[int, str, bytes]]:
    server = sim_factory(**FAST)
    faulty = [sim_factory(rpm_limit=1, **FAST), sim_factory(error_rate=1.0, **FAST)]
    return asyncio.run(_gather(server, faulty))


def validate(key: str, answer: tuple[int, str, bytes]) -> list[Any]:
    status, content_type, raw = answer
    if key == "models":
        return strict_models(raw)
    if status != 200:
        return [strict_error(raw)]
    api = key.split("-")[0]
    if content_type == "text/event-stream":
        return strict_stream(api, raw)
    return [strict(OBJECTS[api], raw)]


@pytest.mark.parametrize("case", [*CASES, *(f"{name}-stream" for name in CASES)])
def test_answers_validate_strictly(corpus: dict[str, tuple[int, str, bytes]], case: str) -> None:
    status, content_type, _ = corpus[case]
    assert status == 200
    assert content_type == ("text/event-stream" if case.endswith("-stream") else "application/json")
    assert validate(case, corpus[case])


@pytest.mark.parametrize("case", ERRORS)
def test_errors_are_openais_error_body_with_vllms_status(corpus: dict[str, tuple[int, str, bytes]], case: str) -> None:
    _, _, _, param = ERRORS[case]
    status, _, raw = corpus[case]
    assert status == ERRORS[case][2]
    error = strict_error(raw)
    assert error.param == param and error.type == "invalid_request_error"
    if status == 404:
        assert error.code == "model_not_found" and "gpt-nope" in error.message and MODEL in error.message
    elif param is not None:
        assert param in error.message


def test_faults_and_limits_are_error_bodies_too(corpus: dict[str, tuple[int, str, bytes]]) -> None:
    statuses = [corpus[f"responses-fault-{index}-{attempt}"][0] for index in range(2) for attempt in range(2)]
    assert statuses == [200, 429, 500, 500]
    for key in ("responses-fault-0-1", "responses-fault-1-0"):
        strict_error(corpus[key][2])


def test_every_type_the_simulator_sends_is_covered(corpus: dict[str, tuple[int, str, bytes]]) -> None:
    VALIDATED.clear()
    for key, answer in corpus.items():
        validate(key, answer)
    assert set(VALIDATED) == EXPECTED_TYPES
    assert len(EXPECTED_TYPES) == 19
