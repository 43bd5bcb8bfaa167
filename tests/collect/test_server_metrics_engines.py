"""collect's ``/metrics`` scrape: each engine's highlights by its own names, and which engine it was."""

from __future__ import annotations

import pytest

from gymbench.collect.summary import server_lines
from gymbench.engine_metrics import ServerWatch
from gymbench.plugins import Plugins, get_plugin_manager
from tests.core.test_engine_metrics import AcmePlugin
from tests.engine_metrics_server import recorded, serving_metrics

BUILTINS = Plugins(get_plugin_manager(load_entry_points=False)).engine_metrics()


def scrape_run(text: str, after: str | None = None, engines: list | None = None) -> dict:
    """One run's record: ``text`` at /metrics before the run, ``after`` (default: the same) after it."""
    with serving_metrics(text) as server:
        watch = ServerWatch(server.base_url, interval_s=60, engines=engines or BUILTINS)
        with watch:
            if after is not None:
                server.text = after
    return watch.record()


def highlights(record: dict) -> dict:
    return {item["key"]: item["value"] for item in record["highlights"]}


@pytest.mark.parametrize(
    ("text", "engine", "expected"),
    [
        ("vllm_v1", "vllm", {"running": 13.0, "waiting": 5.0, "kv_cache": 0.42}),
        ("vllm_v0", "vllm", {"running": 12.0, "waiting": 4.0, "kv_cache": 0.87}),
        ("sglang", "sglang", {"running": 28.0, "waiting": 9.0, "kv_cache": 0.28}),
        ("llamacpp", "llamacpp", {"running": 4.0, "waiting": 6.0}),
        ("tgi", "tgi", {"running": 16.0, "waiting": 5.0}),
    ],
)
def test_each_engines_gauges_are_highlighted_and_the_engine_recorded(text: str, engine: str, expected: dict) -> None:
    record = scrape_run(recorded(text))
    assert record["engine"] == engine and record["note"] is None
    shown = highlights(record)
    assert {key: shown[key] for key in expected} == pytest.approx(expected)
    assert shown["generated_tokens"] == 0.0 and shown["prompt_tokens"] == 0.0  # nothing ran between scrapes
    if engine in ("llamacpp", "tgi"):
        assert "kv_cache" not in shown  # neither exposes a KV gauge
    assert f"(engine: {engine})" in server_lines(record)[0]


def test_counters_and_the_servers_ttft_are_read_over_the_run() -> None:
    before = recorded("vllm_v0")
    model = '{model_name="meta-llama/Llama-3.1-8B-Instruct"}'
    after = before.replace("} 20480.0", "} 21480.0")
    after = after.replace(f"_sum{model} 12.0", f"_sum{model} 14.0")
    after = after.replace(f"_count{model} 100.0", f"_count{model} 110.0")
    shown = highlights(scrape_run(before, after))
    assert shown["generated_tokens"] == 1000.0
    assert shown["ttft_mean"] == pytest.approx(0.2)  # 2 s over 10 requests


def test_llamacpps_counters_over_a_whole_run_are_read() -> None:
    before = recorded("llamacpp")
    after = before.replace("tokens_predicted_total 3200", "tokens_predicted_total 3712")
    shown = highlights(scrape_run(before, after))
    assert shown["generated_tokens"] == 512.0  # every request has finished by the last scrape


def test_an_unknown_engine_is_scraped_but_said_to_be_unrecognised() -> None:
    record = scrape_run(recorded("unknown"))
    assert record["before"] and record["highlights"] == []
    assert record["engine"] is None and "no known engine's metric names" in record["engine_note"]
    assert server_lines(record) == [f"server metrics: scraped, but {record['engine_note']}"]


def test_a_third_party_engine_is_highlighted() -> None:
    engines = Plugins(get_plugin_manager([AcmePlugin()], load_entry_points=False)).engine_metrics()
    record = scrape_run(recorded("acme"), engines=engines)
    assert record["engine"] == "acme" and highlights(record)["waiting"] == 7.0
