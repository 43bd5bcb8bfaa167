"""The server's /metrics scraped around a collection into the summary and the record."""

from __future__ import annotations

import json
from pathlib import Path

from gymbench.builtin.engines import gymbench_register_engine_metrics
from gymbench.engine_metrics import ServerWatch, highlight, scrape
from gymbench.record import load_record
from gymbench.sim import SimConfig, running_sim_server

from .test_collect_cli import EXAMPLES, FAST_SIM, gymbench, rows

ENGINES = gymbench_register_engine_metrics()


def test_a_collection_records_the_servers_view(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    args = [f"+input_jsonl_fpath={EXAMPLES}", f"+output_jsonl_fpath={out}", "+num_samples_in_parallel=8", "+limit=30"]
    done = gymbench("collect", *args, f"+results_dir={tmp_path / 'r'}", "+stream=true", "+slo_e2e_ms=60000", *FAST_SIM)
    assert done.returncode == 0, done.stderr
    record = load_record(next((tmp_path / "r").glob("*/*_collect.json")))
    server = record.benchmarks[0].extra["summary"]["server_metrics"]
    generated = sum(row["usage"]["completion_tokens"] for row in rows(out))
    by_key = {item["key"]: item["value"] for item in server["highlights"]}
    assert by_key["generated_tokens"] == generated  # the server counted what the client received
    assert by_key["running"] == 0 and server["before"] and server["after"]
    assert "server metrics (/metrics, after the run): requests running 0" in done.stderr
    assert "latency percentiles (95% interval):" in done.stderr and "TTFT     30" in done.stderr
    assert "goodput: 100.0% of 30 rollouts within SLO (e2e <= 60 s)" in done.stderr
    assert record.benchmarks[0].metrics["goodput"].value == 1.0
    metrics = json.loads(out.with_name("out.jsonl.metrics.json").read_text())["summary"]
    assert metrics["latency_percentiles_s"]["ttft"]["p99"]["small_sample"]  # 30 rollouts: too few for p99


def test_without_metrics_nothing_is_scraped_and_one_line_says_why(tmp_path: Path) -> None:
    with running_sim_server(SimConfig()) as server:
        with ServerWatch(server.base_url, enabled=False, engines=ENGINES) as off:
            pass
        with ServerWatch(server.base_url + "/deeper/path", engines=ENGINES) as on:
            pass
        values, note = scrape(server.base_url + "/models")
        missing, why_missing = scrape(server.base_url.rsplit("/v1", 1)[0] + "/no-metrics")
    assert off.record() == {"url": on.url, "note": "not scraped (+scrape_metrics=false)", "engine": None}
    assert on.record()["before"]  # /metrics sits at the server's root whatever the base URL's path
    assert values is None and "/v1/models is not Prometheus text" in (note or "")
    assert missing is None and why_missing is not None and why_missing.endswith("/no-metrics answered HTTP 404")
    with ServerWatch(None, engines=ENGINES) as none:
        pass
    assert none.record()["note"] == "not scraped: this backend names no model server (no base_url)"
    unreachable, why = scrape("http://127.0.0.1:9/metrics", deadline_s=1)
    assert unreachable is None and "could not be read" in (why or "")


def test_highlights_read_sglang_names_too() -> None:
    values = {"sglang:num_queue_reqs": 3.0, "sglang:generation_tokens_total": 10.0}
    assert highlight(values, "waiting", ENGINES) == 3.0 and highlight(values, "generated_tokens", ENGINES) == 10.0
    assert highlight(values, "kv_cache", ENGINES) is None
