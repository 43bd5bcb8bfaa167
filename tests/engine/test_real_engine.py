"""gymbench against a real engine: llama.cpp's llama-server serving the tiny random-weights model.

Few and quick (CI runs them on 2 cores): one collection of 100 rows streamed and one not, the
server's own /metrics read in the record, one short tune. They assert behaviour (rows, usage,
names recognised, a recommendation), never a speed. Skipped, with the reason, where the engine
cannot be had (see the ``gymbench_llama_server`` fixture)."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from gymbench.cli import main

if TYPE_CHECKING:
    from gymbench.engine.server import LlamaServer

pytestmark = pytest.mark.real_engine
TASKS = Path(__file__).resolve().parents[2] / "gymbench" / "data" / "example_tasks.jsonl"
REPLY_TOKENS = 8


def server_settings(server: LlamaServer, tmp_path: Path) -> list[str]:
    """The openai backend pointed at the engine; replies of exactly REPLY_TOKENS (random weights may
    otherwise end a reply early at the end-of-sequence token: llama.cpp's ``ignore_eos`` rules it out)."""
    return [
        "+backend=openai", f"+base_url={server.base_url}", f"+model={server.model}", "+api=chat",
        f"+input_jsonl_fpath={TASKS}", f"+results_dir={tmp_path / 'results'}", "+progress=false",
        f"+responses_create_params.max_output_tokens={REPLY_TOKENS}", "+extra_body.ignore_eos=true",
    ]  # fmt: skip


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_collect_100_rows(gymbench_llama_server: LlamaServer, tmp_path: Path, stream: bool) -> None:
    out = tmp_path / "rollouts.jsonl"
    argv = ["collect", *server_settings(gymbench_llama_server, tmp_path), f"+output_jsonl_fpath={out}", "+limit=100"]
    argv += [f"+num_samples_in_parallel={gymbench_llama_server.slots}", f"+stream={str(stream).lower()}"]
    assert main(argv) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 100 and len({row["task_index"] for row in rows}) == 100
    assert all(row["status"] == "ok" and row["usage"]["completion_tokens"] == REPLY_TOKENS for row in rows)
    assert all(row["usage"]["prompt_tokens"] > 0 for row in rows)
    assert all(("ttft" in row["timings"]) == stream for row in rows)  # time to first token: streamed only
    (record_path,) = (tmp_path / "results").glob("*/*_collect.json")
    server = json.loads(record_path.read_text())["benchmarks"][0]["extra"]["summary"]["server_metrics"]
    assert server["url"] == gymbench_llama_server.metrics_url
    names = set(server["after"])
    assert {"llamacpp:prompt_tokens_total", "llamacpp:tokens_predicted_total"} <= names
    generated = server["after"]["llamacpp:tokens_predicted_total"] - server["before"]["llamacpp:tokens_predicted_total"]
    assert generated == 100 * REPLY_TOKENS


def test_the_engine_serves_its_own_metrics_and_timings(gymbench_llama_server: LlamaServer) -> None:
    with urllib.request.urlopen(gymbench_llama_server.metrics_url, timeout=30) as answer:
        text = answer.read().decode()
    assert "llamacpp:requests_processing" in text and "llamacpp:n_decode_total" in text
    body = {"model": gymbench_llama_server.model, "prompt": "What is 2 + 2?", "max_tokens": 4, "ignore_eos": True}
    request = urllib.request.Request(
        gymbench_llama_server.base_url + "/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        reply = json.loads(answer.read())
    assert reply["usage"]["completion_tokens"] == 4
    assert {"prompt_ms", "predicted_ms", "predicted_per_token_ms"} <= set(reply["timings"])


def test_a_short_tune_recommends_a_parallelism(gymbench_llama_server: LlamaServer, tmp_path: Path) -> None:
    argv = ["tune", *server_settings(gymbench_llama_server, tmp_path), "+start=2", "+max_parallelism=8"]
    argv += ["+min_batches=2", "+max_batches=4", "+sample_size=40", "+plot="]
    assert main(argv) == 0
    (record_path,) = (tmp_path / "results").glob("*/*_tune.json")
    metrics = json.loads(record_path.read_text())["benchmarks"][0]["metrics"]
    assert 1 <= metrics["recommended_parallelism"]["value"] <= 8
