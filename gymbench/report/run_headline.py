"""What a run report says first: what ran, in its title, and the answer, before any detail.

A reader opening the report of a collection wants its throughput and latency; of a tuning sweep,
the parallelism to use; of a diagnosis, what limits throughput and what to do; of a training
benchmark, the step time, throughput, memory and MFU. Each comes from the results record alone
(so an old record still reads), in sentences built from :mod:`gymbench.labels` and
:mod:`gymbench.units`, never a raw metric id or ``1.02e+03``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from gymbench.labels import label
from gymbench.record import BenchmarkResult, Metric
from gymbench.replica_figures import replica_head
from gymbench.units import duration, interval, number, quantity

SIM_METRIC_PREFIX = "gymbench_sim:"
"""The embedded simulator's own /metrics names: how a record shows it ran against the simulator."""

LATENCY_NAMES = {"ttft": "TTFT", "ttst": "TTST", "itl": "ITL", "tpot": "TPOT", "e2e": "e2e"}
RATIO_AS_PERCENT = ("rate", "share", "goodput", "mfu", "efficiency")
"""Ratio metrics whose names say they are a part of a whole: shown as a percentage, others as ×."""


@dataclass
class Headline:
    """The first heading (what ran) and the answer's sentences, most important first."""

    title: str
    answer: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """Warnings that qualify the answer (a client that limited the run, a failed stability check)."""


def headline(kind: str, bench: BenchmarkResult) -> Headline:
    makers = {"collect": collect_headline, "tune": tune_headline, "diagnose": diagnose_headline}
    return makers.get(kind, train_headline)(bench)


def shown(name: str, metric: Metric) -> str:
    """A metric's value as people read it: a share as a percentage, a ratio as ×, no unit that only
    repeats the label (``mean reward 0.74``, not ``0.74 reward``)."""
    if metric.unit == "ratio":
        if any(word in name for word in RATIO_AS_PERCENT):
            return percent(metric.value)
        return f"{number(metric.value, 3)}×"
    if metric.unit and metric.unit in re.findall(r"[\w/]+", label(name)):
        return number(metric.value, 4)
    return quantity(metric.value, metric.unit)


def percent(share: float) -> str:
    return f"{share:.0%}" if share in (0.0, 1.0) else f"{share:.1%}"


# collect


def collect_headline(bench: BenchmarkResult) -> Headline:
    summary: Mapping[str, Any] = bench.extra.get("summary", {})
    params = bench.params
    attempted = summary.get("completed", 0) + summary.get("failed", 0)
    title = (
        f"collect: {attempted} rollouts of {params.get('input') or 'the input'} against "
        f"{server_text(params.get('backend'), summary.get('server_metrics'))} at {_load_text(params, summary)}"
    )
    reward = summary.get("mean_reward")
    first = (
        f"{number(summary.get('rollouts_per_s', 0.0), 3)} rollouts/s and "
        f"{number(summary.get('output_tokens_per_s', 0.0), 3)} output tokens/s over "
        f"{duration(summary.get('elapsed_s'))}: {summary.get('completed', 0)} completed, "
        f"{summary.get('failed', 0)} failed" + ("" if reward is None else f", mean reward {number(reward, 3)}") + "."
    )
    answer = [first, *latency_sentences(summary.get("latency_percentiles_s") or {})]
    answer += [s for s in (goodput_sentence(summary.get("goodput")), stage_sentence(summary)) if s]
    replicas = summary.get("replicas")
    if replicas and len(replicas.get("replicas", [])) > 1:
        answer.append(replica_head(replicas) + ".")  # it opens with the count: "3 replicas (sticky): ..."
    delay = summary.get("client_delay") or {}
    notes = list(delay.get("notes", [])) if delay.get("client_bound") or delay.get("cpu_limited") else []
    return Headline(title, answer, notes)


def server_text(backend: str | None, server: Mapping[str, Any] | None, replicas: int = 0) -> str:
    """The simulator when its own metrics say so, else the backend and the server's host."""
    server = server or {}
    names = {**(server.get("before") or {}), **(server.get("after") or {})}
    engine = server.get("engine")
    replicas = replicas or len(server.get("replicas") or [])
    over = f" over {replicas} replicas" if replicas > 1 else ""
    if any(str(name).startswith(SIM_METRIC_PREFIX) for name in names):
        return "the gymbench simulator" + (f" ({engine}-like)" if engine else "") + over
    what = backend or (f"a {engine} server" if engine else "a server")
    host = urlsplit(str(server.get("url") or "")).netloc
    return what + (over or (f" at {host}" if host else ""))


def _load_text(params: Mapping[str, Any], summary: Mapping[str, Any]) -> str:
    arrivals = summary.get("arrivals") or {}
    if arrivals.get("target_per_s"):
        return f"{number(arrivals['target_per_s'], 3)} arrivals/s ({arrivals.get('shape')})"
    strategy = params.get("strategy")
    tail = f" ({strategy})" if strategy and strategy != "semaphore" else ""
    return f"parallelism {params.get('num_samples_in_parallel', '?')}{tail}"


def latency_sentences(tables: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """One sentence per latency, TTFT and e2e first: p50, p90 and p99 with their 95% intervals."""
    order = [name for name in ("ttft", "e2e") if name in tables] or list(tables)[:1]
    return [f"{LATENCY_NAMES.get(name, name)} latency (95% intervals): {percentiles_text(tables[name])}."
            for name in order]  # fmt: skip


def percentiles_text(table: Mapping[str, Any]) -> str:
    cells = []
    for key in ("p50", "p90", "p99"):
        found = table.get(key)
        if found is None:
            continue
        if found.get("small_sample") or found.get("low") is None or found.get("high") is None:
            cells.append(f"{key} {duration(found['value'])} (too few rollouts for an interval)")
        else:
            cells.append(f"{key} {interval(found['value'], found['low'], found['high'])}")
    return ", ".join(cells) if cells else "not measured"


def goodput_sentence(goodput: Mapping[str, Any] | None) -> str:
    if not goodput or goodput.get("share") is None:
        return ""
    within = f"{goodput['within_slo']} of " if goodput.get("within_slo") is not None else ""
    return (f"Goodput {percent(goodput['share'])}: {within}{goodput['attempted']} rollouts within the SLO "
            f"({slo_text(goodput.get('slo') or {})}).")  # fmt: skip


def slo_text(slo: Mapping[str, float | None]) -> str:
    names = (("TTFT", "ttft_s"), ("e2e", "e2e_s"), ("ITL", "itl_s"), ("TPOT", "tpot_s"))
    return " and ".join(f"{name} ≤ {duration(slo[key])}" for name, key in names if slo.get(key) is not None)


def stage_sentence(summary: Mapping[str, Any]) -> str:
    """Where a rollout's time went: its largest stage as a share of the whole."""
    stages = {k: v for k, v in (summary.get("stage_mean_s") or {}).items() if v is not None and k != "total"}
    total = (summary.get("stage_mean_s") or {}).get("total")
    if not stages or not total:
        return ""
    name, value = max(stages.items(), key=lambda item: item[1])
    part = label(f"stage_{name}").removesuffix(" per rollout")
    return f"A rollout took {duration(total)} on average, {value / total:.0%} of it {part}."


# tune


def tune_headline(bench: BenchmarkResult) -> Headline:
    table = bench.extra.get("table") or []
    levels = sorted({row["parallelism"] for row in table})
    span = f" over parallelism {levels[0]}–{levels[-1]}" if levels else ""
    method = bench.params.get("method", "sweep")
    replicas = (bench.extra.get("per_replica") or {}).get("replicas", 0)
    title = (
        f"tune: {method} of {bench.params.get('input') or 'the input'}{span} against "
        f"{server_text(None, bench.extra.get('server_counters'), replicas)}"
    )
    m = bench.metrics
    answer = []
    if "recommended_parallelism" in m:
        expected = m.get("expected_rollouts_per_s")
        share = m.get("expected_share_of_plateau")
        answer.append(
            f"Use num_samples_in_parallel={number(m['recommended_parallelism'].value, 3)}"
            + (f": {number(expected.value, 3)} rollouts/s expected" if expected else "")
            + (f", {percent(share.value)} of the plateau" if share else "")
            + "."
        )
    if "knee_parallelism" in m:
        low_high = bench.extra.get("knee_ci") or []
        ci = f" (95% interval {number(low_high[0], 3)}–{number(low_high[1], 3)})" if len(low_high) == 2 else ""
        plateau = m.get("plateau_rollouts_per_s")
        answer.append(
            f"Knee at parallelism {number(m['knee_parallelism'].value, 3)}{ci}"
            + (f"; plateau {number(plateau.value, 3)} rollouts/s" if plateau else "")
            + "."
        )
    per_replica = bench.extra.get("per_replica")
    if per_replica:
        low, high = per_replica["knee_ci"]
        answer.append(
            f"Over {per_replica['replicas']} replicas that is {number(per_replica['recommended'], 3)} in parallel "
            f"per replica; knee {number(per_replica['knee'], 3)} per replica (95% interval {number(low, 3)}–"
            f"{number(high, 3)})."
        )
    if bench.extra.get("stop_reason"):
        answer.append(f"The sweep stopped: {bench.extra['stop_reason']}.")
    return Headline(title, answer)


# diagnose


def diagnose_headline(bench: BenchmarkResult) -> Headline:
    params, m = bench.params, bench.metrics
    found = bench.extra.get("replicas") or {}
    replicas = len(found.get("replicas", []))
    title = (
        f"diagnose: {params.get('input') or 'the input'} at parallelism {params.get('low', '?')} and "
        f"{params.get('high', '?')} against {server_text(None, bench.extra.get('server_counters'), replicas)}"
    )
    verdict = bench.extra.get("verdict", "unknown")
    advice = bench.extra.get("next_step")
    if verdict == "slow replica" and found.get("straggler"):
        verdict += f": {found['straggler']} ({found['straggler_reason']})"
    answer = [f"Bottleneck: {verdict}." + (f" Next step: {advice}." if advice else "")]
    if "low_rollouts_per_s" in m and "high_rollouts_per_s" in m:
        gain = f" ({number(m['gain'].value, 3)}×)" if "gain" in m else ""
        answer.append(
            f"Throughput {number(m['low_rollouts_per_s'].value, 3)} rollouts/s at {params.get('low', '?')} → "
            f"{number(m['high_rollouts_per_s'].value, 3)} at {params.get('high', '?')}{gain}."
        )
    return Headline(title, answer)


# train


def train_headline(bench: BenchmarkResult) -> Headline:
    p, m, extra = bench.params, bench.metrics, bench.extra
    size = f" ({p['size']})" if p.get("size") else ""
    shape = f"batch {p.get('batch', '?')} × seq {p['seq_len']}" if p.get("seq_len") else f"batch {p.get('batch', '?')}"
    step = f" {str(p['step']).upper()} step" if p.get("step") else ""
    details = ", ".join(str(x) for x in (p.get("precision"), shape, _checkpointing(p)) if x)
    title = f"train: {p.get('model', bench.name)}{size}{step}, {details}"
    answer = []
    if "step_time" in m:
        step_time = m["step_time"]
        iqr = extra.get("step_time_iqr_s")
        steps = f", {len(step_time.samples)} steps)" if step_time.samples else ")"
        spread = f" (IQR {duration(iqr)}{steps}" if iqr else ""
        answer.append(f"Step time {duration(step_time.value)} median{spread}.")
    rates = [quantity(m[name].value, m[name].unit) for name in ("samples_per_s", "tokens_per_s") if name in m]
    if rates:
        answer.append("Throughput " + ", ".join(rates) + ".")
    answer += [s for s in (_memory_sentence(m, extra), _mfu_sentence(m, extra), _batch_sentence(m)) if s]
    return Headline(title, answer, [str(note) for note in extra.get("notes", [])])


def _checkpointing(params: Mapping[str, Any]) -> str:
    found = params.get("checkpointing")
    return "" if found in (None, "off") else f"checkpointing {found}"


def _memory_sentence(m: Mapping[str, Metric], extra: Mapping[str, Any]) -> str:
    if "peak_memory" not in m:
        return ""
    kind = (extra.get("memory") or {}).get("label")
    return f"Peak memory {quantity(m['peak_memory'].value, 'B')}" + (f" ({kind})" if kind else "") + "."


def _mfu_sentence(m: Mapping[str, Metric], extra: Mapping[str, Any]) -> str:
    if "mfu" in m:
        return f"MFU {percent(m['mfu'].value)}."
    if "achieved_tflops" in m:
        why = extra.get("peak_source")
        tflops = m["achieved_tflops"].value
        achieved = f"{number(tflops, 3)} TFLOP/s" if tflops >= 1 else f"{number(tflops * 1e3, 3)} GFLOP/s"
        return f"Achieved {achieved} of model FLOPs; MFU n/a" + (f" ({why})" if why else "") + "."
    return ""


def _batch_sentence(m: Mapping[str, Metric]) -> str:
    found = [f"{label(name)} {number(m[name].value, 4)}" for name in ("largest_fit", "chosen_batch", "settled_batch")
             if name in m]  # fmt: skip
    return ("Batch search: " + ", ".join(found) + ".") if found else ""
