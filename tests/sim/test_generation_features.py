"""Tool calls, logprobs, ``n``, seeds and truncation: what the simulated model says, and what it costs.

Replies are planned by the same code the server runs (endpoint parsing, then the planner); what
``n`` costs the engine is checked on the engine itself in simulated time.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import jsonschema
import pytest

from gymbench.sim import InProcessBackend, SimConfig, run_in_simulated_time
from gymbench.sim.endpoints import CHAT, COMPLETIONS, RESPONSES
from gymbench.sim.openai_format import Reply
from gymbench.sim.planner import Planner
from gymbench.sim.schema_values import schema_value
from gymbench.sim.service import Refusal, SimService
from gymbench.sim.text import count_tokens
from gymbench.types import Generation, GenerationRequest

from .conftest import MODEL
from .test_agent_loop import RESPONSES_TOOLS, WEATHER_SCHEMA

SCHEMAS: list[dict[str, Any]] = [
    WEATHER_SCHEMA,
    {},
    {
        "type": "object",
        "properties": {
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 4, "uniqueItems": True}
        },
        "required": ["tags"],
    },  # noqa: E501
    {
        "type": "object",
        "properties": {
            "n": {"type": "integer", "exclusiveMinimum": 3, "exclusiveMaximum": 9},
            "x": {"type": "number", "multipleOf": 0.1, "minimum": -1, "maximum": 1},
            "k": {"type": "integer", "multipleOf": 5, "minimum": 101},
        },
        "required": ["n", "x", "k"],
    },  # noqa: E501
    {
        "type": "object",
        "properties": {
            "when": {"type": "string", "format": "date-time"},
            "mail": {"type": "string", "format": "email"},
            "id": {"type": "string", "format": "uuid"},
            "code": {"type": "string", "minLength": 30, "maxLength": 32},
        },
        "required": ["when", "mail", "id", "code"],
    },  # noqa: E501
    {
        "type": "object",
        "properties": {
            "value": {"anyOf": [{"type": "integer", "maximum": -5}, {"type": "null"}]},
            "mode": {"const": "fast"},
            "level": {"type": ["string", "null"], "enum": ["a", "b", None]},
        },
        "required": ["value", "mode", "level"],
    },  # noqa: E501
    {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/node"}},
                },
                "required": ["name"],
            }
        },
        "$ref": "#/$defs/node",
    },  # noqa: E501
    {
        "allOf": [
            {"type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"]},
            {"properties": {"b": {"type": "number", "maximum": -200}}, "required": ["b"]},
        ]
    },  # noqa: E501
    {
        "type": "object",
        "properties": {
            "pair": {
                "type": "array",
                "prefixItems": [{"type": "integer"}, {"type": "string"}],
                "minItems": 2,
                "maxItems": 2,
            }
        },
        "required": ["pair"],
        "additionalProperties": False,
    },  # noqa: E501
]


@pytest.mark.parametrize("schema", SCHEMAS, ids=range(len(SCHEMAS)))
def test_tool_arguments_validate_against_the_schema_and_repeat_per_seed(schema: dict[str, Any]) -> None:
    import random

    validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())
    values = [schema_value(schema, random.Random(seed)) for seed in range(60)]
    for value in values:
        validator.validate(json.loads(json.dumps(value)))
    assert values == [schema_value(schema, random.Random(seed)) for seed in range(60)]
    if schema:  # the empty schema allows anything: the empty object will do
        assert len({json.dumps(value, sort_keys=True) for value in values}) > 1


@pytest.mark.parametrize(
    "schema",
    [{"properties": [1, 2]}, {"type": "integer", "minimum": "low"}, {"type": "array", "minItems": 10**9}, {"$ref": 5}],
)
def test_a_malformed_schema_still_gets_arguments(schema: dict[str, Any]) -> None:
    import random

    value = schema_value(schema, random.Random(0))
    assert isinstance(json.dumps(value), str)
    if schema.get("minItems"):
        assert len(value) == 64


# --------------------------------------------------------------------------- planning


def reply(
    endpoint: Any, body: dict[str, Any], planner: Planner | None = None, config: SimConfig | None = None
) -> Reply:
    """What the server would answer to ``body`` (no engine, no HTTP)."""
    parsed = endpoint.parse({"model": MODEL, **body})
    planner = planner or Planner(config or SimConfig())
    return Reply(f"{endpoint.prefix}1", MODEL, 0, count_tokens(parsed.prompt), planner.plan(parsed), parsed)


def calls(endpoint: Any, body: dict[str, Any], count: int = 200, **config: Any) -> list[Reply]:
    planner = Planner(SimConfig(**config))
    return [reply(endpoint, {**body, "input": f"What is {i} + 1?"}, planner) for i in range(count)]


def test_tools_are_called_at_the_configured_rate_and_always_when_required() -> None:
    offered = {"tools": RESPONSES_TOOLS}
    called = sum(r.output.tool_call is not None for r in calls(RESPONSES, offered, tool_call_rate=0.3))
    assert 40 <= called <= 80  # 60 expected of 200
    for choice in ("required", {"type": "function", "name": "get_weather"}):
        replies = calls(RESPONSES, {**offered, "tool_choice": choice}, count=30)
        assert all(r.output.finish_reason == "tool_calls" for r in replies)
    assert not any(r.output.tool_call for r in calls(RESPONSES, {**offered, "tool_choice": "none"}, count=30))


def test_a_named_tool_is_the_one_called() -> None:
    tools = [*RESPONSES_TOOLS, {"type": "function", "name": "other", "parameters": {"type": "object"}}]
    for choice in ("other", "get_weather"):
        replies = calls(RESPONSES, {"tools": tools, "tool_choice": {"type": "function", "name": choice}}, count=20)
        assert {r.output.tool_call.name for r in replies if r.output.tool_call} == {choice}


def test_after_a_tools_result_the_model_answers() -> None:
    done = [
        {"role": "user", "content": "What is 2 + 5?"},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
    ]
    config = SimConfig(tool_call_rate=1.0, answer_accuracy=1.0)
    answered = reply(RESPONSES, {"input": done, "tools": RESPONSES_TOOLS}, config=config)
    assert answered.output.tool_call is None and answered.output.text.splitlines()[-1] == "7"
    forced = reply(RESPONSES, {"input": done, "tools": RESPONSES_TOOLS, "tool_choice": "required"}, config=config)
    assert forced.output.tool_call is not None


def test_a_tool_call_costs_one_token_plus_its_arguments() -> None:
    called = reply(RESPONSES, {"input": "weather?", "tools": RESPONSES_TOOLS, "tool_choice": "required"})
    call = called.output.tool_call
    assert call is not None and called.completion_tokens == 1 + count_tokens(call.arguments)
    cut = reply(
        RESPONSES, {"input": "weather?", "tools": RESPONSES_TOOLS, "tool_choice": "required", "max_output_tokens": 3}
    )
    assert cut.output.finish_reason == "length" and cut.completion_tokens == 3
    assert (
        call.arguments.startswith(cut.output.tool_call.arguments) and cut.output.tool_call.arguments != call.arguments
    )
    assert RESPONSES.full(cut)["output"][0]["status"] == "incomplete"


@pytest.mark.parametrize("cap", [1, 2, 3, 5, 8, 13, 40, None])
@pytest.mark.parametrize(
    "question",
    ["What is 7 * 6?", "hello", "Write a program that reads integers from standard input and prints their sum."],
)
def test_truncation_is_honest(cap: int | None, question: str) -> None:
    """Token counts follow the 4-bytes rule; a ``length`` finish is the whole reply, cut."""
    whole = reply(CHAT, {"messages": [{"role": "user", "content": question}], "seed": 3})
    body = {"messages": [{"role": "user", "content": question}], "seed": 3, "max_tokens": cap}
    got = reply(CHAT, body).output
    assert len(got.tokens) == count_tokens(got.text) and whole.output.text.startswith(got.text)
    if got.finish_reason == "length":
        assert len(got.tokens) == cap and got.text != whole.output.text
    else:
        assert got.text == whole.output.text and (cap is None or len(got.tokens) <= cap)


def test_logprobs_cover_every_token_without_changing_the_reply() -> None:
    body = {"messages": [{"role": "user", "content": "What is 3 + 4?"}], "n": 2}
    plain = reply(CHAT, body)
    with_logprobs = reply(CHAT, {**body, "logprobs": True, "top_logprobs": 5})
    assert [c.tokens for c in plain.choices] == [c.tokens for c in with_logprobs.choices]
    for choice in CHAT.full(with_logprobs)["choices"]:
        entries = choice["logprobs"]["content"]
        assert "".join(entry["token"] for entry in entries) == choice["message"]["content"]
        for entry in entries:
            top = [alt["logprob"] for alt in entry["top_logprobs"]]
            assert len(top) == 5 and top == sorted(top, reverse=True) and all(lp < 0 for lp in top)
            assert (
                entry["token"] == entry["top_logprobs"][0]["token"] and bytes(entry["bytes"]).decode() == entry["token"]
            )
    legacy = COMPLETIONS.full(reply(COMPLETIONS, {"prompt": "3 + 4 =", "logprobs": 2}))["choices"][0]
    assert "".join(legacy["logprobs"]["tokens"]) == legacy["text"]
    assert all(len(top) == 2 for top in legacy["logprobs"]["top_logprobs"])


def test_seeds_and_greedy_requests_repeat_others_draw_anew() -> None:
    planner = Planner(SimConfig(output_tokens_dist="uniform"))
    ask = {"messages": [{"role": "user", "content": "What is 9 + 9?"}]}

    def texts(body: dict[str, Any]) -> list[str]:
        return [reply(CHAT, body, planner).output.text for _ in range(5)]

    assert len(set(texts({**ask, "seed": 1}))) == 1 and len(set(texts({**ask, "temperature": 0}))) == 1
    assert len(set(texts(ask))) > 1
    assert texts({**ask, "seed": 1})[0] != texts({**ask, "seed": 2})[0]
    choices = reply(CHAT, {**ask, "n": 3}, planner).choices
    assert len({c.text for c in choices}) > 1
    greedy = reply(CHAT, {**ask, "n": 3, "temperature": 0}, planner).choices
    assert len({c.text for c in greedy}) == 1


# --------------------------------------------------------------------------- the engine


def test_each_of_n_choices_occupies_a_slot() -> None:
    config = SimConfig(max_num_seqs=8, step_base_s=0.01, step_per_seq_s=0.0, prefill_per_token_s=0.0)

    async def main() -> tuple[int, int]:
        service = SimService(config, asyncio.get_running_loop().time)
        service.engine.start()
        parsed = service.parse(CHAT.parse, {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "n": 3})
        _, seqs = service.submit(parsed, service.admit(parsed), CHAT.prefix)
        await asyncio.sleep(0.015)
        running = len(service.engine.running)
        await service.finish(seqs)
        await service.engine.stop()
        return running, service.engine.stats.generation_tokens

    running, generated = run_in_simulated_time(main())
    assert running == 3 and generated == 3 * config.output_tokens_mean


def test_a_request_is_admitted_with_all_its_choices_or_not_at_all() -> None:
    config = SimConfig(max_num_seqs=2, max_waiting=0, step_base_s=0.01)

    async def main() -> list[str]:
        service = SimService(config, asyncio.get_running_loop().time)
        outcomes = []
        for n in (3, 2):
            body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "n": n}
            parsed = service.parse(CHAT.parse, body)
            try:
                service.submit(parsed, service.admit(parsed), CHAT.prefix)
                outcomes.append("admitted")
            except Refusal as refusal:
                outcomes.append(refusal.code or "")
        return outcomes

    assert run_in_simulated_time(main()) == ["queue_full", "admitted"]


def test_the_in_process_backend_calls_tools_too() -> None:
    backend = InProcessBackend(SimConfig(tool_call_rate=1.0, step_base_s=0.01, step_per_seq_s=0.0))
    params = {"input": "weather?", "tools": RESPONSES_TOOLS, "model": "whatever-the-row-says"}

    async def main() -> Generation:
        async with backend:
            return await backend.generate(GenerationRequest(0, 0, params))

    generation = run_in_simulated_time(main())
    (item,) = generation.response["output"]
    assert item["type"] == "function_call" and generation.text == "" and generation.response["model"] == MODEL
    assert generation.usage.completion_tokens == 1 + count_tokens(item["arguments"])
    jsonschema.validate(json.loads(item["arguments"]), WEATHER_SCHEMA)
