"""tune's server-counter probe reads each engine's names from a real HTTP ``/metrics`` on 127.0.0.1."""

from __future__ import annotations

import pytest

from gymbench.engine_metrics import find_server_counters
from gymbench.plugins import Plugins, get_plugin_manager
from tests.core.test_engine_metrics import AcmePlugin
from tests.engine_metrics_server import recorded, serving_metrics

BUILTINS = Plugins(get_plugin_manager(load_entry_points=False)).engine_metrics()


@pytest.mark.parametrize(
    ("text", "engine", "waiting", "generated", "running"),
    [
        ("vllm_v1", "vllm", 5.0, 20224.0, 13.0),
        ("vllm_v0", "vllm", 4.0, 20480.0, 12.0),
        ("sglang", "sglang", 9.0, None, 28.0),
        ("llamacpp", "llamacpp", 6.0, None, 4.0),
        ("tgi", "tgi", 5.0, None, 16.0),
    ],
)
def test_the_probe_reads_the_recognised_engines_queue_tokens_and_running(
    text: str, engine: str, waiting: float, generated: float | None, running: float
) -> None:
    """The running gauge too: at a slot-bound server, how many slots are busy (tune's turnaround rule)."""
    with serving_metrics(recorded(text)) as server:
        found = find_server_counters(server.base_url, BUILTINS)
        assert found.counters is not None
        reading = found.counters.read()
    assert found.record["engine"] == engine and found.record["url"] == server.metrics_url
    assert reading is not None and reading.waiting == waiting and reading.generation_tokens == generated
    assert reading.running == running


def test_counters_that_move_only_when_a_request_finishes_are_not_read_as_throughput() -> None:
    with serving_metrics(recorded("llamacpp")) as server:
        record = find_server_counters(server.base_url, BUILTINS).record
    reads = record["reads"]
    assert isinstance(reads, dict)
    assert reads["waiting"] == "llamacpp:requests_deferred"
    assert reads["generated_tokens"] == (
        "llamacpp:tokens_predicted_total advances only when a request finishes, so throughput is read from the client"
    )
    assert record["unreadable"] == ["kv_cache"]  # older builds had a KV gauge; current ones leave it out


def test_the_counters_follow_the_server_between_polls() -> None:
    with serving_metrics(recorded("vllm_v0")) as server:
        counters = find_server_counters(server.base_url, BUILTINS).counters
        assert counters is not None
        server.text = server.text.replace("} 20480.0", "} 20992.0").replace("} 4.0", "} 0.0")
        later = counters.read()
    assert later is not None and later.generation_tokens == 20992.0 and later.waiting == 0.0


def test_an_unknown_engine_gives_no_counters_and_says_why() -> None:
    with serving_metrics(recorded("unknown")) as server:
        found = find_server_counters(server.base_url, BUILTINS)
    assert found.counters is None and found.record["engine"] is None
    assert "no known engine's metric names among 3 samples (nv_, process_)" in str(found.record["engine_note"])


def test_an_unreachable_or_missing_server_is_said() -> None:
    assert find_server_counters("http://127.0.0.1:9/v1", BUILTINS).record["engine_note"] == (
        "http://127.0.0.1:9/metrics could not be read"
    )
    assert find_server_counters(None, BUILTINS).record == {
        "url": None,
        "engine": None,
        "engine_note": "this backend names no server",
    }


def test_a_third_party_engine_is_read_and_the_hook_is_not_called_per_poll() -> None:
    acme = AcmePlugin()
    engines = Plugins(get_plugin_manager([acme], load_entry_points=False)).engine_metrics()
    with serving_metrics(recorded("acme")) as server:
        found = find_server_counters(server.base_url, engines)
        assert found.counters is not None
        readings = [found.counters.read() for _ in range(5)]
    assert found.record["engine"] == "acme"
    assert all(r is not None and r.waiting == 7.0 and r.generation_tokens == 5000.0 for r in readings)
    assert acme.calls == 1


def test_the_summary_says_what_was_read_or_why_nothing() -> None:
    from gymbench.tune.report import server_counters_text

    with serving_metrics(recorded("unknown")) as unknown, serving_metrics(recorded("llamacpp")) as llama:
        none = server_counters_text(find_server_counters(unknown.base_url, BUILTINS).record)
        some = server_counters_text(find_server_counters(llama.base_url, BUILTINS).record)
    assert none.startswith("none read: no known engine's metric names among 3 samples")
    assert some.startswith("engine llamacpp (waiting: llamacpp:requests_deferred; generated_tokens: ")


def test_replicas_are_read_as_one_server_their_queue_and_tokens_summed() -> None:
    """Three replicas: the tune's counters are the three's totals (it read the first one's alone,
    a third of the tokens); one unreadable replica makes the read None, never a partial sum."""
    with (
        serving_metrics(recorded("vllm_v0")) as one,
        serving_metrics(recorded("vllm_v0")) as two,
        serving_metrics(recorded("vllm_v0")) as three,
    ):
        found = find_server_counters([one.base_url, two.base_url, three.base_url], BUILTINS)
        assert found.counters is not None and found.record["engine"] == "vllm"
        assert found.record["url"] == f"{one.metrics_url}, {two.metrics_url}, {three.metrics_url}"
        reading = found.counters.read()
        assert reading is not None and reading.generation_tokens == 3 * 20480.0 and reading.waiting == 3 * 4.0
        two.text = two.text.replace("} 20480.0", "} 20992.0")
        later = found.counters.read()
        assert later is not None and later.generation_tokens == 2 * 20480.0 + 20992.0
    with serving_metrics(recorded("vllm_v0")) as alive:
        counters = find_server_counters([alive.base_url, "http://127.0.0.1:9/v1"], BUILTINS)
    assert counters.counters is None and "could not be read" in str(counters.record["engine_note"])
