"""A collection against a server that reports its own timings: rows keep them, the summary sets them
against the client's TTFT, ITL and e2e, and says when most of TTFT is spent outside the server.

Client times are real time on a loaded machine, so only relations that hold however slow it is are
asserted: figures the fake server reports come back exactly; a server that reports no prompt time
leaves all of TTFT outside it (share 1); one that reports more prompt time than the client could
have waited leaves a negative share; one that holds its first byte for :data:`HOLD_S` and reports a
1 ms prompt gets the line saying most of TTFT is spent before the server starts the prompt.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from gymbench.builtin.backend_settings import OpenAISettings
from gymbench.builtin.exact_match import ExactMatchVerifier
from gymbench.builtin.openai_backend import OpenAIBackend
from gymbench.builtin.semaphore import SemaphoreStrategy
from gymbench.collect.summary import format_summary
from gymbench.report.timings import timing_row
from gymbench.rollout.engine import Collector, CollectSettings
from gymbench.rollout.server_timings import LARGE_MIN_S, ServerTimingsStats, comparison_rows, finding
from gymbench.rollout.stats import CollectStats
from tests.builtin.fake_llama import TOKENS, FakeLlama, llama_timings

TASKS = 6
HOLD_S = 0.5
"""How long the slow fake holds its first byte: 25 times :data:`LARGE_MIN_S`, so the share stays above
half unless the client itself took longer than this to see the answer."""


@asynccontextmanager
async def serving(fake: FakeLlama) -> AsyncIterator[str]:
    runner = web.AppRunner(fake.app())
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
    finally:
        await runner.cleanup()


def collect(tmp_path: Path, fake: FakeLlama, stream: bool, api: str = "chat") -> tuple[Any, list[Any]]:
    """The summary (as a record holds it: figures read without narrowing) and the rows."""
    tasks, out = tmp_path / "tasks.jsonl", tmp_path / f"out-{api}-{stream}.jsonl"
    task = {"responses_create_params": {"input": "6 * 7?"}, "expected_answer": "42"}
    tasks.write_text((json.dumps(task) + "\n") * TASKS)

    async def run() -> CollectStats:
        async with serving(fake) as url:
            backend = OpenAIBackend(OpenAISettings(base_url=url, model="m", api=api, stream=stream))
            settings = CollectSettings(tasks, out, overwrite=True)
            return await Collector(settings, backend, ExactMatchVerifier(), SemaphoreStrategy(2)).run()

    stats = asyncio.run(run())
    assert stats.completed == TASKS
    return stats.summary(), [json.loads(line) for line in out.read_text().splitlines()]


@pytest.mark.parametrize("stream", [False, True])
def test_rows_keep_the_servers_timings_and_the_summary_compares_them(tmp_path: Path, stream: bool) -> None:
    summary, rows = collect(tmp_path, FakeLlama(), stream)
    reported = llama_timings()
    for row in rows:
        assert row["server_timings"]["prompt_ms"] == reported["prompt_ms"]
        assert row["server_timings"]["predicted_n"] == row["usage"]["completion_tokens"] == len(TOKENS)
    found = summary["server_timings"]
    assert found["rows"] == TASKS
    server_s = (reported["prompt_ms"] + reported["predicted_ms"]) / 1e3
    assert found["e2e_vs_server"]["server_s"] == {"p50": pytest.approx(server_s), "p90": pytest.approx(server_s)}
    if stream:
        assert found["ttft_vs_prompt"]["prompt_s"]["p50"] == pytest.approx(reported["prompt_ms"] / 1e3)
        per_token = found["itl_vs_predicted"]["predicted_per_token_s"]["p50"]
        assert per_token == pytest.approx(reported["predicted_per_token_ms"] / 1e3)
        ttft, before = found["ttft_vs_prompt"]["ttft_s"]["p50"], found["ttft_vs_prompt"]["before_prompt_s"]["p50"]
        assert before == pytest.approx(ttft - reported["prompt_ms"] / 1e3)
    else:  # no first token seen: no TTFT or ITL to set against the server's
        assert "ttft_vs_prompt" not in found and "itl_vs_predicted" not in found
    text = format_summary(summary, tmp_path / "out.jsonl")
    assert f"server timings (the server's own, {TASKS} rollouts):" in text
    exported = [timing_row(row) for row in rows]
    assert {row["server_prompt_ms"] for row in exported} == {reported["prompt_ms"]}
    assert ("TTFT vs prompt_ms" in text) is stream and "e2e vs prompt_ms + predicted_ms" in text


def test_a_responses_stream_is_compared_too(tmp_path: Path) -> None:
    summary, rows = collect(tmp_path, FakeLlama(), True, api="responses")
    assert all(row["server_timings"]["predicted_n"] == len(TOKENS) for row in rows)
    assert summary["server_timings"]["ttft_vs_prompt"]["ttft_s"]["p50"] is not None


def test_a_server_without_timings_leaves_rows_and_summary_without_them(tmp_path: Path) -> None:
    summary, rows = collect(tmp_path, FakeLlama(timings=None), True)
    assert not any("server_timings" in row for row in rows)
    assert "server_timings" not in summary
    assert "server timings" not in format_summary(summary, tmp_path / "out.jsonl")
    assert timing_row(rows[0])["server_prompt_ms"] is None


def test_with_no_prompt_time_reported_all_of_ttft_is_outside_the_server(tmp_path: Path) -> None:
    summary, _ = collect(tmp_path, FakeLlama(timings=llama_timings(prompt_ms=0.0)), True)
    figures = summary["server_timings"]["ttft_vs_prompt"]
    assert figures["share"] == {"p50": 1.0, "p90": 1.0}
    assert figures["before_prompt_s"]["p50"] == figures["ttft_s"]["p50"] > 0


def test_more_prompt_time_than_the_client_waited_gives_a_negative_share_and_no_finding(tmp_path: Path) -> None:
    summary, _ = collect(tmp_path, FakeLlama(timings=llama_timings(prompt_ms=600_000.0)), True)
    found = summary["server_timings"]
    assert found["ttft_vs_prompt"]["share"]["p50"] < 0 and found["finding"] is None


def test_a_held_first_byte_is_named_as_time_before_the_prompt(tmp_path: Path) -> None:
    fake = FakeLlama(timings=llama_timings(prompt_ms=1.0), first_byte_delay_s=HOLD_S)
    summary, _ = collect(tmp_path, fake, True)
    found = summary["server_timings"]
    assert found["ttft_vs_prompt"]["before_prompt_s"]["p50"] >= HOLD_S - 0.001
    assert found["finding"] is not None and found["finding"].startswith("most of TTFT (")
    assert "before the server starts the prompt" in found["finding"]
    assert found["finding"] in format_summary(summary, tmp_path / "out.jsonl")


def test_a_held_answer_without_streaming_is_named_as_time_outside_the_server(tmp_path: Path) -> None:
    fake = FakeLlama(timings=llama_timings(prompt_ms=1.0, predicted_per_token_ms=0.1), first_byte_delay_s=HOLD_S)
    summary, _ = collect(tmp_path, fake, False)
    note = summary["server_timings"]["finding"]
    assert note is not None and note.startswith("most of request time (")


def test_the_finding_needs_both_a_large_share_and_a_large_gap() -> None:
    def found(prompt_ms: float, ttft: float) -> str | None:
        stats = ServerTimingsStats()
        stats.add({"prompt_ms": prompt_ms, "predicted_ms": 10.0}, {"ttft": ttft, "e2e": ttft + 0.01})
        summary = stats.summary()
        assert summary is not None
        return summary["finding"]

    assert found(30.0, 0.120) == (
        "most of TTFT (75%, median 90 ms) is spent before the server starts the prompt: waiting for a free slot, "
        "in the network or in the client; raise the server's slots (llama.cpp -np, vLLM --max-num-seqs) or lower "
        "parallelism"
    )
    assert found(100.0, 0.120) is None  # the server's prompt is most of TTFT
    assert found(1.0, LARGE_MIN_S * 0.9) is None  # most of it, but a few ms: loopback and the client
    assert finding({"rows": 1}) is None and ServerTimingsStats().summary() is None


def test_shards_add_up_and_the_table_reads_back_from_a_record() -> None:
    one, two = ServerTimingsStats(), ServerTimingsStats()
    one.add({"prompt_ms": 20.0}, {"ttft": 0.1})
    two.add({"prompt_ms": 20.0, "predicted_per_token_ms": 5.0}, {"ttft": 0.1, "itl": 0.006})
    one.absorb(two)
    summary = one.summary()
    assert summary is not None and summary["rows"] == 2
    rows = comparison_rows(json.loads(json.dumps(summary)))
    assert rows[0] == ("TTFT vs prompt_ms", "100 ms / 100 ms", "20 ms / 20 ms", "80 ms / 80 ms", "80%")
    assert rows[1] == ("ITL vs predicted_per_token_ms", "6 ms / 6 ms", "5 ms / 5 ms", "-", "-")


@pytest.mark.real_engine
@pytest.mark.parametrize("stream", [False, True])
def test_llama_cpp_reports_timings_that_agree_with_its_usage(
    tmp_path: Path, request: pytest.FixtureRequest, stream: bool
) -> None:
    """On the real engine: every row carries the server's timings, its generated-token count is the
    usage's, and the client's TTFT (or whole request) contains the server's prompt (and generation)
    time, which holds however loaded the machine is: the client starts its clock before the server
    can and stops it after the server has stamped the first (or last) token."""
    try:
        server = request.getfixturevalue("gymbench_llama_server")
    except pytest.FixtureLookupError:
        pytest.skip("no real engine: the gymbench_llama_server fixture is not installed in this checkout")
    tasks, out = tmp_path / "tasks.jsonl", tmp_path / "out.jsonl"
    task = {"responses_create_params": {"input": "Count to ten.", "max_output_tokens": 12}, "expected_answer": "x"}
    tasks.write_text((json.dumps(task) + "\n") * 8)

    async def run() -> CollectStats:
        backend = OpenAIBackend(OpenAISettings(base_url=server.base_url, model=server.model, api="chat", stream=stream))
        settings = CollectSettings(tasks, out, overwrite=True)
        return await Collector(settings, backend, ExactMatchVerifier(), SemaphoreStrategy(4)).run()

    stats = asyncio.run(run())
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert stats.completed == 8 and stats.summary()["server_timings"]["rows"] == 8
    for row in rows:
        server_timings, usage, timings = row["server_timings"], row["usage"], row["timings"]
        assert server_timings["predicted_n"] == usage["completion_tokens"] > 0
        assert server_timings["prompt_n"] + server_timings["cache_n"] == usage["prompt_tokens"]
        if stream:
            assert timings["ttft"] >= server_timings["prompt_ms"] / 1e3
        else:
            server_s = (server_timings["prompt_ms"] + server_timings.get("predicted_ms", 0.0)) / 1e3
            assert timings["generation"] >= server_s
