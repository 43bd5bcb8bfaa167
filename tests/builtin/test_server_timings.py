"""The server's own per-request timings (llama.cpp's ``timings``), read from each API and mode."""

from __future__ import annotations

import pytest

from gymbench import Generation, GenerationRequest
from gymbench.builtin.backend_settings import OpenAISettings
from gymbench.builtin.openai_backend import OpenAIBackend
from gymbench.builtin.openai_shapes import read_server_timings
from tests.builtin.conftest import Serve
from tests.builtin.fake_llama import TOKENS, FakeLlama, llama_timings

KEPT = {"cache_n": 0, "prompt_n": 9, "prompt_ms": 12.5, "predicted_n": 4, "predicted_ms": 12.0,
        "predicted_per_token_ms": 4.0}  # fmt: skip


async def generate(serve: Serve, fake: FakeLlama, api: str, stream: bool) -> Generation:
    settings = {"base_url": await serve(fake.app()), "model": "m", "api": api, "stream": stream}
    async with OpenAIBackend(OpenAISettings(**settings)) as client:
        return await client.generate(GenerationRequest(0, 0, {"input": "6 * 7?"}))


@pytest.mark.parametrize("stream", [False, True])
async def test_chat_keeps_the_servers_timings_streamed_or_not(serve: Serve, stream: bool) -> None:
    generation = await generate(serve, FakeLlama(), "chat", stream)
    assert generation.text == "".join(TOKENS)
    assert generation.server_timings == KEPT  # rates and per-prompt-token figures are not kept: derived


async def test_a_responses_stream_keeps_the_completed_events_timings(serve: Serve) -> None:
    assert (await generate(serve, FakeLlama(), "responses", True)).server_timings == KEPT


async def test_a_non_streamed_responses_answer_has_none_as_llama_cpp_sends_none(serve: Serve) -> None:
    assert (await generate(serve, FakeLlama(), "responses", False)).server_timings is None


@pytest.mark.parametrize("api", ["chat", "responses"])
@pytest.mark.parametrize("stream", [False, True])
async def test_a_server_without_timings_gives_none_not_zeros(serve: Serve, api: str, stream: bool) -> None:
    generation = await generate(serve, FakeLlama(timings=None), api, stream)
    assert generation.text == "".join(TOKENS) and generation.server_timings is None


def test_only_numbers_are_kept_and_an_unmeasured_gap_is_left_out() -> None:
    one_token = {**llama_timings(), "predicted_n": 1, "predicted_per_token_ms": 0.0, "prompt_ms": "12"}
    kept = read_server_timings(one_token)
    assert kept is not None and "predicted_per_token_ms" not in kept and "prompt_ms" not in kept
    assert kept["predicted_n"] == 1
    assert read_server_timings({"prompt_ms": True, "predicted_ms": float("nan"), "cache_n": -1}) is None
    assert read_server_timings({"t_prompt": 3}) is None and read_server_timings([1, 2]) is None
    assert read_server_timings(None) is None
