"""The official ``openai`` SDK, sync and async, against the simulated server.

The clients run with the SDK's own strict response validation (``_strict_response_validation``,
so a missing or mistyped field raises ``APIResponseValidationError`` instead of being skipped),
and every answer's raw bytes are also validated with pydantic's strict mode
(:mod:`tests.sim.openai_strict`). The SDK's stream helpers (``chat.completions.stream``,
``responses.stream``) rebuild the answer from the events and fail on an event out of place.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx2
import jsonschema
import openai
import pytest

from gymbench.sim import SimServerHandle

from .conftest import FAST, MODEL
from .openai_strict import AsyncRecordingTransport, Exchange, RecordingTransport, check_all
from .test_openai_conformance import ASK, CHAT_TOOLS, RESPONSES_TOOLS, SCHEMA


@pytest.fixture(scope="module")
def server(sim_factory: Callable[..., SimServerHandle]) -> SimServerHandle:
    return sim_factory(**FAST)


@pytest.fixture
def exchanges() -> Iterator[list[Exchange]]:
    """The raw answers a test's clients received; all are validated strictly when it ends."""
    seen: list[Exchange] = []
    yield seen
    assert check_all(seen) >= len(seen)


def client(server: SimServerHandle, exchanges: list[Exchange], strict: bool = True) -> openai.OpenAI:
    http = httpx2.Client(transport=RecordingTransport(exchanges))
    return openai.OpenAI(
        base_url=server.base_url, api_key="sk-sim", max_retries=0, http_client=http, _strict_response_validation=strict
    )


def async_client(server: SimServerHandle, exchanges: list[Exchange]) -> openai.AsyncOpenAI:
    http = httpx2.AsyncClient(transport=AsyncRecordingTransport(exchanges))
    return openai.AsyncOpenAI(
        base_url=server.base_url, api_key="sk-sim", max_retries=0, http_client=http, _strict_response_validation=True
    )


def test_models_and_chat(server: SimServerHandle, exchanges: list[Exchange]) -> None:
    sdk = client(server, exchanges)
    assert [model.id for model in sdk.models.list()] == [MODEL]
    completion = sdk.chat.completions.create(model=MODEL, messages=ASK, n=2, logprobs=True, top_logprobs=2, seed=1)
    assert [choice.index for choice in completion.choices] == [0, 1]
    assert completion.usage is not None and completion.usage.completion_tokens == 16  # two choices of 8
    for choice in completion.choices:
        assert choice.logprobs is not None and choice.logprobs.content is not None
        assert "".join(entry.token for entry in choice.logprobs.content) == choice.message.content
        assert all(len(entry.top_logprobs) == 2 for entry in choice.logprobs.content)
    chunks = list(
        sdk.chat.completions.create(model=MODEL, messages=ASK, stream=True, stream_options={"include_usage": True})
    )
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 8


def test_chat_stream_helper_assembles_a_tool_call(server: SimServerHandle, exchanges: list[Exchange]) -> None:
    sdk = client(server, exchanges)
    with sdk.chat.completions.stream(model=MODEL, messages=ASK, tools=CHAT_TOOLS, tool_choice="required") as stream:
        final = stream.get_final_completion()
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls or []
    assert call.type == "function" and call.function.name == "lookup"
    jsonschema.validate(openai_json(call.function.arguments), SCHEMA)


def test_completions(server: SimServerHandle, exchanges: list[Exchange]) -> None:
    sdk = client(server, exchanges)
    completion = sdk.completions.create(model=MODEL, prompt="12 + 30 =", logprobs=2, max_tokens=3)
    (choice,) = completion.choices
    assert choice.finish_reason == "length" and choice.logprobs is not None
    assert choice.logprobs.tokens is not None and "".join(choice.logprobs.tokens) == choice.text
    # the SDK's strict mode refuses OpenAI's own completions chunks (finish_reason null): lenient client
    lenient = client(server, exchanges, strict=False)
    texts = [chunk.choices[0].text for chunk in lenient.completions.create(model=MODEL, prompt="x", stream=True)]
    assert len([text for text in texts if text]) == 8


def test_responses_whole_streamed_and_with_the_helper(server: SimServerHandle, exchanges: list[Exchange]) -> None:
    sdk = client(server, exchanges)
    response = sdk.responses.create(
        model=MODEL, input=ASK, include=["message.output_text.logprobs"], top_logprobs=2, max_output_tokens=3
    )
    assert response.status == "incomplete" and response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.usage is not None and response.usage.output_tokens == 3
    events = list(sdk.responses.create(model=MODEL, input="What is 1 + 1?", stream=True))
    assert [event.type for event in events[:2]] == ["response.created", "response.in_progress"]
    assert events[0].response.incomplete_details is None and events[-1].type == "response.completed"
    with sdk.responses.stream(model=MODEL, input=ASK, tools=RESPONSES_TOOLS, tool_choice="required") as stream:
        final = stream.get_final_response()
    (item,) = final.output
    assert item.type == "function_call" and item.status == "completed" and item.name == "lookup"
    jsonschema.validate(openai_json(item.arguments), SCHEMA)
    assert final.tools[0].type == "function" and final.tool_choice == "required"


def test_errors_raise_the_sdks_exceptions(server: SimServerHandle, exchanges: list[Exchange]) -> None:
    sdk = client(server, exchanges)
    with pytest.raises(openai.NotFoundError) as missing:
        sdk.chat.completions.create(model="gpt-nope", messages=ASK)
    assert missing.value.code == "model_not_found" and missing.value.param == "model"
    with pytest.raises(openai.BadRequestError) as mistyped:
        sdk.responses.create(model=MODEL, input="x", extra_body={"temperature": "hot"})
    assert mistyped.value.param == "temperature" and "'temperature'" in mistyped.value.message


async def test_async_client(server: SimServerHandle, exchanges: list[Exchange]) -> None:
    async with async_client(server, exchanges) as sdk:
        completion = await sdk.chat.completions.create(
            model=MODEL, messages=ASK, tools=CHAT_TOOLS, tool_choice="required"
        )
        assert completion.choices[0].message.tool_calls
        stream = await sdk.chat.completions.create(model=MODEL, messages=ASK, stream=True, logprobs=True)
        contents = [
            chunk.choices[0].logprobs.content async for chunk in stream if chunk.choices and chunk.choices[0].logprobs
        ]
        assert sum(len(content or []) for content in contents) == 8
        response = await sdk.responses.create(model=MODEL, input=ASK)
        assert response.output_text.splitlines()[-1] in {str(42 + d) for d in range(-9, 10)}
        async with sdk.responses.stream(model=MODEL, input=ASK, max_output_tokens=2) as events:
            kinds = [event.type async for event in events]  # the helper's final response needs completion
        assert kinds[-1] == "response.incomplete" and "response.incomplete" not in kinds[:-1]
        async with sdk.responses.stream(model=MODEL, input=ASK, tools=RESPONSES_TOOLS) as events:
            final = await events.get_final_response()
        assert final.status == "completed" and final.output[0].status == "completed"
        with pytest.raises(openai.BadRequestError):
            await sdk.chat.completions.create(model=MODEL, messages=ASK, extra_body={"tools": True})


def openai_json(text: str) -> Any:
    import json

    return json.loads(text)
