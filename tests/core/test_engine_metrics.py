"""Engines' metric names as plugins: recognition from recorded ``/metrics`` texts, the hook's checks."""

from __future__ import annotations

import pytest

from gymbench import EngineMetrics, hookimpl
from gymbench.engine_metrics import QUANTITIES, recognise, sample_sums
from gymbench.errors import PluginError
from gymbench.plugins import Plugins, get_plugin_manager
from tests.engine_metrics_server import recorded

ACME = EngineMetrics(
    "acme",
    "acme_",
    running=("acme_inflight",),
    waiting=("acme_backlog",),
    generated_tokens=("acme_tokens_out_total",),
)


class AcmePlugin:
    """A third party's engine, registered exactly as the built-ins are."""

    def __init__(self, *engines: EngineMetrics) -> None:
        self.engines = engines or (ACME,)
        self.calls = 0

    @hookimpl
    def gymbench_register_engine_metrics(self) -> list[EngineMetrics]:
        self.calls += 1
        return list(self.engines)


def plugins(*extra: object, blocked: tuple[str, ...] = ()) -> Plugins:
    return Plugins(get_plugin_manager(extra, load_entry_points=False, blocked=blocked))


@pytest.mark.parametrize(
    ("text", "engine", "readable"),
    [
        ("vllm_v1", "vllm", ["running", "waiting", "kv_cache", "generated_tokens", "prompt_tokens"]),
        ("vllm_v0", "vllm", ["running", "waiting", "kv_cache", "generated_tokens", "prompt_tokens"]),
        ("sglang", "sglang", ["running", "waiting", "kv_cache", "generated_tokens", "prompt_tokens"]),
        ("llamacpp", "llamacpp", ["running", "waiting", "generated_tokens", "prompt_tokens"]),
        ("tgi", "tgi", ["running", "waiting", "generated_tokens", "prompt_tokens"]),
    ],
)
def test_each_builtin_engine_is_recognised_from_its_own_text(text: str, engine: str, readable: list[str]) -> None:
    names = sample_sums(recorded(text))
    found = recognise(plugins().engine_metrics(), names)
    assert found.engine is not None and found.engine.name == engine
    assert found.engine.readable(names) == readable
    assert found.record() == {"engine": engine, "unreadable": [q for q in QUANTITIES if q not in readable]}


def test_the_quantities_are_read_by_each_engines_names() -> None:
    engines = {e.name: e for e in plugins().engine_metrics()}
    v1 = sample_sums(recorded("vllm_v1"))
    assert engines["vllm"].value(v1, "waiting") == 5.0  # summed over the two data-parallel engines
    assert engines["vllm"].value(v1, "generated_tokens") == 20224.0
    assert engines["vllm"].ttft_totals(v1) == (8.0, 158.0)
    v0 = sample_sums(recorded("vllm_v0"))
    assert engines["vllm"].value(v0, "kv_cache") == 0.87  # v0's gpu_cache_usage_perc
    llama = sample_sums(recorded("llamacpp"))
    assert engines["llamacpp"].value(llama, "waiting") == 6.0  # requests_deferred
    assert engines["llamacpp"].value(llama, "kv_cache") is None
    assert engines["llamacpp"].unreadable() == [] and engines["tgi"].unreadable() == ["kv_cache"]
    assert engines["tgi"].value(sample_sums(recorded("tgi")), "generated_tokens") == 52480.0  # the histogram's _sum
    assert engines["sglang"].value(sample_sums(recorded("sglang")), "generated_tokens") == 7557572.0


def test_engines_whose_counters_move_only_when_a_request_finishes_say_so() -> None:
    engines = {e.name: e for e in plugins().engine_metrics()}
    assert not engines["vllm"].tokens_counted_at_finish
    assert all(engines[name].tokens_counted_at_finish for name in ("sglang", "llamacpp", "tgi"))


def test_an_unknown_engine_is_recognised_as_none_with_the_reason() -> None:
    found = recognise(plugins().engine_metrics(), sample_sums(recorded("unknown")))
    assert found.engine is None
    assert found.reason is not None and "nv_" in found.reason and "process_" in found.reason
    assert "known engines: vllm, sglang, llamacpp, tgi" in found.reason
    assert found.record() == {"engine": None, "engine_note": found.reason}


def test_a_third_party_engine_is_recognised_through_the_hook() -> None:
    acme = AcmePlugin()
    registered = plugins(acme)
    assert acme.calls == 1  # once, when the plugins are collected
    engines = registered.engine_metrics()
    assert [e.name for e in engines][-1] == "acme"
    found = recognise(engines, sample_sums(recorded("acme")))
    assert found.engine is ACME and found.engine.value(sample_sums(recorded("acme")), "waiting") == 7.0
    assert acme.calls == 1


def test_a_name_clash_stops_start_up_naming_both_and_blocking_replaces_a_builtin() -> None:
    mine = EngineMetrics("vllm", "vllm:", waiting=("vllm:num_requests_waiting",))
    with pytest.raises(PluginError, match="engine 'vllm' is registered by both plugin 'gymbench.builtin.engines'"):
        plugins(AcmePlugin(mine))
    custom = EngineMetrics("my-vllm", "vllm:", waiting=("vllm:num_requests_waiting",))
    replaced = plugins(AcmePlugin(custom), blocked=("engine:vllm",)).engine_metrics()
    assert "vllm" not in [e.name for e in replaced]
    assert recognise(replaced, sample_sums(recorded("vllm_v1"))).engine is custom


def test_a_hook_returning_something_else_is_refused_by_name() -> None:
    class Wrong:
        @hookimpl
        def gymbench_register_engine_metrics(self) -> list[object]:
            return [{"name": "dict-engine"}]

    with pytest.raises(PluginError, match="expected gymbench.types.EngineMetrics objects"):
        plugins(Wrong())


def test_sample_sums_reads_labels_timestamps_and_skips_what_does_not_parse() -> None:
    text = '# HELP x y\nx{a="1 2",b="}"} 3 1700000000000\nx{a="3"} 4\ny 2.5\nbroken{ oops\nz NaNx\nw NaN\n'
    assert sample_sums(text) == {"x": 7.0, "y": 2.5}
    assert sample_sums(text, frozenset({"y"})) == {"y": 2.5}
