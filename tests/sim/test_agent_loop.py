"""A multi-turn tool-calling agent, as NeMo Gym's ``simple_agent`` runs one, through the ``openai`` SDK.

The agent asks the model, runs each tool the model calls, hands the results back, and stops at
the first answer without a call. On the simulator that loop is reproducible: the same server
seed and the same requests give the same calls, arguments and answers, and a request ``seed``
makes each turn repeat whatever else the server has served.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx2
import jsonschema
import openai
import pytest

from gymbench.sim import SimServerHandle

from .conftest import FAST, MODEL
from .openai_strict import Exchange, RecordingTransport, check_all

WEATHER_SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "enum": ["Paris", "Oslo", "Lima"]},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city", "unit"],
    "additionalProperties": False,
}
RESPONSES_TOOLS = [{"type": "function", "name": "get_weather", "parameters": WEATHER_SCHEMA, "strict": True}]
CHAT_TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER_SCHEMA}}]
QUESTIONS = [f"What is {a} + {a + 3}? Check the weather first." for a in range(4)]
MAX_TURNS = 4


def get_weather(arguments: str) -> str:
    """The resources server's tool: what an agent hands back as the call's output."""
    call = json.loads(arguments)
    jsonschema.validate(call, WEATHER_SCHEMA)
    return json.dumps({"city": call["city"], "temperature": 21, "unit": call["unit"]})


def responses_agent(sdk: openai.OpenAI, question: str, seed: int | None = None) -> list[Any]:
    """The Responses API loop; its transcript: each call (name, arguments, id), then the answer."""
    items: list[Any] = [{"role": "user", "content": question}]
    transcript: list[Any] = []
    extra = {"seed": seed} if seed is not None else {}
    for _ in range(MAX_TURNS):
        response = sdk.responses.create(model=MODEL, input=items, tools=RESPONSES_TOOLS, extra_body=extra)
        calls = [item for item in response.output if item.type == "function_call"]
        if not calls:
            return [*transcript, response.output_text]
        for call in calls:
            transcript.append((call.name, call.arguments, call.call_id))
            items.append(
                {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments}
            )
            items.append(
                {"type": "function_call_output", "call_id": call.call_id, "output": get_weather(call.arguments)}
            )
    raise AssertionError(f"no answer after {MAX_TURNS} turns: {transcript}")


def chat_agent(sdk: openai.OpenAI, question: str, seed: int | None = None) -> list[Any]:
    """The same loop over chat completions (tool results as ``tool`` messages)."""
    messages: list[Any] = [{"role": "user", "content": question}]
    transcript: list[Any] = []
    for _ in range(MAX_TURNS):
        completion = sdk.chat.completions.create(model=MODEL, messages=messages, tools=CHAT_TOOLS, seed=seed)
        message = completion.choices[0].message
        if not message.tool_calls:
            return [*transcript, message.content]
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            transcript.append((call.function.name, call.function.arguments, call.id))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": get_weather(call.function.arguments)})
    raise AssertionError(f"no answer after {MAX_TURNS} turns: {transcript}")


AGENTS = {"responses": responses_agent, "chat": chat_agent}


def sdk_for(server: SimServerHandle, exchanges: list[Exchange]) -> openai.OpenAI:
    http = httpx2.Client(transport=RecordingTransport(exchanges))
    return openai.OpenAI(
        base_url=server.base_url, api_key="sk-sim", max_retries=0, http_client=http, _strict_response_validation=True
    )


def run_all(server: SimServerHandle, agent: Callable[..., list[Any]], seed: int | None = None) -> list[list[Any]]:
    exchanges: list[Exchange] = []
    transcripts = [agent(sdk_for(server, exchanges), question, seed) for question in QUESTIONS]
    check_all(exchanges)  # every answer of every turn, strictly
    return transcripts


@pytest.mark.parametrize("api", AGENTS)
def test_an_agent_calls_a_tool_then_answers(sim_factory: Callable[..., SimServerHandle], api: str) -> None:
    server = sim_factory(tool_call_rate=1.0, answer_accuracy=1.0, **FAST)
    for question, transcript in zip(QUESTIONS, run_all(server, AGENTS[api]), strict=True):
        (name, arguments, call_id), answer = transcript
        assert name == "get_weather" and call_id.startswith("call_")
        jsonschema.validate(json.loads(arguments), WEATHER_SCHEMA)
        a = int(question.split()[2])
        assert answer.splitlines()[-1] == str(2 * a + 3)


@pytest.mark.parametrize("api", AGENTS)
def test_the_same_server_seed_repeats_every_rollout(sim_factory: Callable[..., SimServerHandle], api: str) -> None:
    settings = {"seed": 4, "tool_call_rate": 0.5, "output_tokens_dist": "uniform", **FAST}
    first = run_all(sim_factory(**settings), AGENTS[api])
    again = run_all(sim_factory(**settings), AGENTS[api])
    other = run_all(sim_factory(**{**settings, "seed": 5}), AGENTS[api])
    assert first == again and first != other
    assert all(len(transcript) in (1, 2) for transcript in first)  # an answer at once, or after one call


def test_a_request_seed_repeats_a_rollout_whatever_else_was_served(sim_factory: Callable[..., SimServerHandle]) -> None:
    server = sim_factory(tool_call_rate=0.5, output_tokens_dist="uniform", **FAST)
    exchanges: list[Exchange] = []
    sdk = sdk_for(server, exchanges)
    seeded = [responses_agent(sdk, QUESTIONS[0], seed=seed) for seed in range(6)]
    run_all(server, responses_agent)  # other traffic in between
    assert [responses_agent(sdk, QUESTIONS[0], seed=seed) for seed in range(6)] == seeded
    assert len({json.dumps(transcript) for transcript in seeded}) > 1
    check_all(exchanges)
