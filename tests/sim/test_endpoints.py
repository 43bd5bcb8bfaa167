"""Every endpoint, streamed and not, through a real aiohttp client over loopback."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest

from gymbench.sim import SimServerHandle

from .conftest import FAST, MODEL

QUESTION = "What is 17 + 25?"


async def post(server: SimServerHandle, path: str, body: Any) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{server.base_url}{path}", json=body) as answer:
            return answer.status, await answer.json()


async def stream_events(server: SimServerHandle, path: str, body: dict[str, Any]) -> list[tuple[str | None, str]]:
    """(event, data) pairs of a server-sent-events response."""
    events: list[tuple[str | None, str]] = []
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{server.base_url}{path}", json={**body, "stream": True}) as answer:
            assert answer.status == 200
            assert answer.headers["Content-Type"].startswith("text/event-stream")
            raw = (await answer.read()).decode()
    for block in raw.strip().split("\n\n"):
        event = None
        data = ""
        for line in block.splitlines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                data = line[6:]
        events.append((event, data))
    return events


async def test_chat_completion(fast_sim: SimServerHandle) -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": QUESTION}]
    status, body = await post(fast_sim, "/chat/completions", {"model": MODEL, "messages": messages})
    assert status == 200
    assert body["object"] == "chat.completion" and body["model"] == MODEL
    choice = body["choices"][0]
    assert choice["message"]["role"] == "assistant" and choice["finish_reason"] == "stop"
    usage = body["usage"]
    assert usage["completion_tokens"] == 8
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert choice["message"]["content"].splitlines()[-1] in {str(42 + d) for d in range(-9, 10)}


async def test_chat_stream_matches_whole_answer(fast_sim: SimServerHandle) -> None:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hello"}],
        "stream_options": {"include_usage": True},
    }
    events = await stream_events(fast_sim, "/chat/completions", body)
    assert events[-1] == (None, "[DONE]")
    chunks = [json.loads(data) for _, data in events[:-1]]
    assert all(chunk["object"] == "chat.completion.chunk" for chunk in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    finals = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finals[-1] == "stop"
    assert (
        chunks[-1]["usage"]["completion_tokens"]
        == 8
        == len([c for c in chunks[1:] if c["choices"] and c["choices"][0]["delta"].get("content")])
    )
    assert text.endswith("I cannot tell.")


async def test_completions(fast_sim: SimServerHandle) -> None:
    status, body = await post(fast_sim, "/completions", {"model": MODEL, "prompt": "3 * 4 =", "max_tokens": 5})
    assert status == 200 and body["object"] == "text_completion"
    assert body["usage"]["completion_tokens"] == 5
    assert body["choices"][0]["finish_reason"] == "length"
    events = await stream_events(fast_sim, "/completions", {"model": MODEL, "prompt": ["hi"], "max_tokens": 3})
    assert events[-1][1] == "[DONE]"
    texts = [json.loads(d)["choices"][0]["text"] for _, d in events[:-1]]
    assert len([t for t in texts if t]) == 3


async def test_completions_default_max_tokens_is_openais_16(fast_sim: SimServerHandle) -> None:
    status, body = await post(fast_sim, "/completions", {"model": MODEL, "prompt": "x"})
    assert status == 200 and body["usage"]["completion_tokens"] == 8  # mean 8 < default cap 16


async def test_responses_api(fast_sim: SimServerHandle) -> None:
    request = {
        "model": MODEL,
        "input": [{"role": "user", "content": [{"type": "input_text", "text": QUESTION}]}],
    }
    status, body = await post(fast_sim, "/responses", request)
    assert status == 200 and body["object"] == "response" and body["status"] == "completed"
    message = body["output"][0]
    assert message["type"] == "message" and message["role"] == "assistant"
    assert message["content"][0]["type"] == "output_text"
    assert body["usage"]["output_tokens"] == 8
    assert body["usage"]["input_tokens"] > 0


async def test_responses_stream_event_sequence(fast_sim: SimServerHandle) -> None:
    events = await stream_events(fast_sim, "/responses", {"model": MODEL, "input": QUESTION, "max_output_tokens": 4})
    names = [name for name, _ in events]
    assert names[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert names[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.incomplete",
    ]
    deltas = [json.loads(d)["delta"] for n, d in events if n == "response.output_text.delta"]
    done = json.loads(events[-4][1])
    assert len(deltas) == 4 and "".join(deltas) == done["text"]
    final = json.loads(events[-1][1])["response"]
    assert final["incomplete_details"] == {"reason": "max_output_tokens"}


async def test_models_and_health(fast_sim: SimServerHandle) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{fast_sim.base_url}/models") as answer:
            assert (await answer.json())["data"][0]["id"] == "gymbench-sim"
        async with session.get(f"{fast_sim.url}/health") as answer:
            assert answer.status == 200


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/chat/completions", {"messages": [{"role": "user", "content": "x"}]}, "model"),
        ("/chat/completions", {"model": MODEL}, "messages"),
        ("/chat/completions", {"model": MODEL, "messages": []}, "messages"),
        ("/chat/completions", {"model": MODEL, "messages": [{"role": "user"}], "max_tokens": 0}, "max_tokens"),
        ("/chat/completions", {"model": MODEL, "messages": [{"role": "user"}], "stream": "yes"}, "stream"),
        ("/completions", {"model": MODEL}, "prompt"),
        ("/completions", {"model": MODEL, "prompt": 5}, "prompt"),
        ("/responses", {"model": MODEL}, "input"),
        ("/responses", {"model": 3, "input": "x"}, "model"),
        ("/chat/completions", {"model": MODEL, "messages": [{"role": "user"}], "temperature": "hot"}, "temperature"),
        ("/chat/completions", {"model": MODEL, "messages": [{"role": "user"}], "top_p": 3}, "top_p"),
        ("/chat/completions", {"model": MODEL, "messages": [{"role": "user"}], "n": 0}, "n"),
        ("/chat/completions", {"model": MODEL, "messages": [{"role": "user"}], "seed": "7"}, "seed"),
        ("/chat/completions", {"model": MODEL, "messages": [{"role": "user"}], "logprobs": 1}, "logprobs"),
        ("/chat/completions", {"model": MODEL, "messages": [{"role": "user"}], "top_logprobs": 2}, "top_logprobs"),
        ("/chat/completions", {"model": MODEL, "messages": [{"role": "robot"}]}, "messages"),
        ("/chat/completions", {"model": MODEL, "messages": [{"role": "tool", "content": "1"}]}, "messages"),
        ("/chat/completions", {"model": MODEL, "messages": [{"role": "user"}], "tools": True}, "tools"),
        (
            "/chat/completions",
            {"model": MODEL, "messages": [{"role": "user"}], "tools": [{"type": "function"}]},
            "tools[0].function",
        ),  # noqa: E501
        (
            "/chat/completions",
            {"model": MODEL, "messages": [{"role": "user"}], "tool_choice": "required"},
            "tool_choice",
        ),  # noqa: E501
        ("/completions", {"model": MODEL, "prompt": "x", "logprobs": True}, "logprobs"),
        ("/completions", {"model": MODEL, "prompt": "x", "logprobs": 9}, "logprobs"),
        ("/responses", {"model": MODEL, "input": "x", "tools": [{"type": "web_search"}]}, "tools[0]"),
        ("/responses", {"model": MODEL, "input": "x", "tools": [{"type": "function", "name": ""}]}, "tools[0].name"),
        ("/responses", {"model": MODEL, "input": "x", "tool_choice": "sometimes"}, "tool_choice"),
        ("/responses", {"model": MODEL, "input": "x", "include": "logprobs"}, "include"),
        ("/responses", {"model": MODEL, "input": [{"type": "function_call_output", "output": "1"}]}, "input"),
    ],
)
async def test_missing_or_wrong_fields_are_400(fast_sim: SimServerHandle, path: str, body: Any, param: str) -> None:
    status, answer = await post(fast_sim, path, body)
    assert status == 400
    assert answer["error"]["type"] == "invalid_request_error"
    assert answer["error"]["param"] == param
    assert param in answer["error"]["message"]


async def test_malformed_json_is_400(fast_sim: SimServerHandle) -> None:
    async with aiohttp.ClientSession() as session:
        for raw in (b"{not json", b"[1, 2]", b"\xff\xfe"):
            async with session.post(f"{fast_sim.base_url}/chat/completions", data=raw) as answer:
                assert answer.status == 400
                assert "message" in (await answer.json())["error"]


async def test_agent_run_returns_the_row_with_response_and_reward(fast_sim: SimServerHandle) -> None:
    row = {
        "responses_create_params": {"input": [{"role": "user", "content": "What is 5 + 5?"}]},
        "expected_answer": "10",
        "task_id": "t1",
    }
    rewards = []
    async with aiohttp.ClientSession() as session:
        for _ in range(20):
            async with session.post(f"{fast_sim.url}/run", json=row) as answer:
                assert answer.status == 200
                body = await answer.json()
            assert body["task_id"] == "t1" and body["response"]["object"] == "response"
            last = body["response"]["output"][0]["content"][0]["text"].splitlines()[-1]
            assert body["reward"] == (1.0 if last == "10" else 0.0)
            rewards.append(body["reward"])
        assert 0 < sum(rewards) < 20
        async with session.post(f"{fast_sim.url}/run", json={"expected_answer": "1"}) as answer:
            assert answer.status == 400
            assert (await answer.json())["error"]["param"] == "responses_create_params"


async def test_an_unknown_model_is_404_and_aliases_are_served(sim_factory: Any) -> None:
    server = sim_factory(model="served", model_aliases=["alias"], **FAST)
    for name, status in (("served", 200), ("alias", 200), ("gymbench-sim", 404)):
        got, body = await post(server, "/completions", {"model": name, "prompt": "x"})
        assert got == status
        if status == 404:
            assert body["error"]["code"] == "model_not_found" and "served, alias" in body["error"]["message"]
        else:
            assert body["model"] == name
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{server.base_url}/models") as answer:
            assert [model["id"] for model in (await answer.json())["data"]] == ["served", "alias"]
    assert server.metrics()['gymbench_sim:requests_rejected_total{reason="model_not_found"}'] == 1
