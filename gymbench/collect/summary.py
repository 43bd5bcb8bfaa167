"""The collect summary as people read it: counts, rates, latency percentiles with their intervals,
goodput, stage times and the server's own metrics, every duration in µs, ms or s."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gymbench.labels import label
from gymbench.replica_figures import REPLICA_HEADERS, ReplicaSummary, replica_head, replica_rows
from gymbench.rollout.client_delay import ClientDelaySummary
from gymbench.rollout.server_timings import COMPARISON_HEADERS, ServerComparison, comparison_rows
from gymbench.rollout.stats import CollectSummary, Goodput
from gymbench.units import duration, interval

LATENCY_NAMES = {"ttft": "TTFT", "ttst": "TTST", "itl": "ITL", "tpot": "TPOT", "e2e": "e2e"}
SMALL_SAMPLE_NOTE = "* too few rollouts for a 95% interval on that percentile"


def format_summary(summary: CollectSummary, output: Path, failures: Path | None = None) -> str:
    """``failures``: the failures sidecar a run through NeMo Gym agents writes its failed rollouts to."""
    reward = summary["mean_reward"]
    kinds = ", ".join(f"{k}: {v}" for k, v in summary["failure_kinds"].items())
    cache = summary["verification_cache"]
    latency = summary["latency_s"]
    lines = [
        f"completed {summary['completed']}, failed {summary['failed']}"
        + (f" ({kinds})" if kinds else "")
        + f", skipped (already done) {summary['skipped_from_resume']}, retries {summary['retries']}",
        f"{summary['rollouts_per_s']:.2f} rollouts/s, {summary['output_tokens_per_s']:.1f} output tokens/s, "
        f"mean reward {'-' if reward is None else f'{reward:.3f}'}, {duration(summary['elapsed_s'])}",
        f"rollout latency p50 {duration(latency['p50'])}  p90 {duration(latency['p90'])}  "
        f"p99 {duration(latency['p99'])} (slot wait and verification included)",
        *run_shape_lines(summary),
        *percentile_lines(summary.get("latency_percentiles_s", {})),
        *client_delay_lines(summary.get("client_delay")),
        *narrow_interval_lines(summary.get("latency_percentiles_s", {}), summary.get("client_delay")),
        *goodput_lines(summary.get("goodput")),
        stage_line(summary["stage_mean_s"]),
        f"verification: {summary['verification_failures']} could not judge, {summary['verification_skipped']} "
        f"skipped by fast mode, cache {cache['hits']} hits / {cache['misses']} misses",
        *server_lines(summary.get("server_metrics")),
        *replica_lines(summary.get("replicas")),
        *server_timing_lines(summary.get("server_timings")),
        f"rollouts: {output}",
        *([f"failed rollouts (NeMo Gym's failures sidecar): {failures}"] if failures is not None else []),
    ]
    return "\n".join(lines)


def stage_line(stage_mean_s: dict[str, float | None]) -> str:
    """Where a rollout's time went, each stage by its label (a stage not measured, such as TTFT
    without streaming, is left out rather than shown as ``-``)."""
    shown = [
        f"{label('stage_' + name).removesuffix(' per rollout')} {duration(value)}"
        for name, value in stage_mean_s.items()
        if value is not None and name != "total"
    ]
    total = stage_mean_s.get("total")
    return "time per rollout (mean): " + duration(total) + (f": {', '.join(shown)}" if shown else "")


def run_shape_lines(summary: CollectSummary) -> list[str]:
    """Why the run ended early, the open-loop arrivals against their target, what was left out."""
    lines = []
    if summary.get("stopped"):
        lines.append(f"stopped early (cleanly, in-flight rollouts written): {summary['stopped']}")
    arrivals: dict[str, Any] = summary.get("arrivals") or {}
    if arrivals:
        target, achieved = arrivals.get("target_per_s"), arrivals.get("achieved_per_s")
        ratio = f" ({achieved / target:.1%} of target)" if target and achieved is not None else ""
        late = arrivals.get("late_p99_s")
        lines.append(
            f"arrivals ({arrivals.get('shape')}): target {_rate(target)}, achieved {_rate(achieved)}{ratio}, "
            f"{arrivals.get('sent')} sent, p99 {duration(late)} behind schedule"
        )
    excluded = summary.get("excluded")
    if excluded:
        shown = ", ".join(f"{phase} {count}" for phase, count in excluded.items())
        lines.append(f"left out of the latencies (rows flagged with phase): {shown}")
    return lines


def _rate(value: Any) -> str:
    return "-" if value is None else f"{value:.2f} req/s"


def percentile_lines(tables: dict[str, Any]) -> list[str]:
    """A table: one row per latency, p50..p99 each with its 95% interval, ``*`` where too few."""
    if not tables:
        return []
    columns = [key for key in next(iter(tables.values())) if key.startswith("p")]
    rows = [("latency", "n", *columns)]
    marked = False
    for name, table in tables.items():
        cells = []
        for column in columns:
            found = table[column]
            cells.append(percentile_cell(found))
            marked = marked or bool(found and found["small_sample"])
        rows.append((LATENCY_NAMES.get(name, name), str(table["count"]), *cells))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    return ["latency percentiles (95% interval):", *lines, *(["  " + SMALL_SAMPLE_NOTE] if marked else [])]


def percentile_cell(found: dict[str, Any] | None) -> str:
    if found is None:
        return "-"
    if found["small_sample"]:
        return f"{duration(found['value'])}*"
    return interval(found["value"], found["low"], found["high"])


def narrow_interval_lines(tables: dict[str, Any], delay: ClientDelaySummary | None) -> list[str]:
    """The percentiles whose interval is narrower than the client's own delay, and what that means.

    An interval covers sampling error only. Where it is narrower than the delay every measurement
    carries (measured against a server with known timings at 8 in parallel on an idle machine: ITL
    intervals of ±2-10 µs beside a client delay of 0.2 ms, holding the server's true ITL in 2 of 20
    runs, while TTFT and e2e held it in 20 of 20), it may exclude the server's value by up to that
    delay; the line says so instead of letting a tight interval look exact."""
    if not delay or delay["p50_s"] is None or not tables:
        return []
    bound = delay["p50_s"]
    narrow = []
    for name, table in tables.items():
        for column, found in table.items():
            if not column.startswith("p") or not found or found["small_sample"]:
                continue
            if found["low"] is not None and found["high"] is not None and found["high"] - found["low"] < bound:
                narrow.append(f"{LATENCY_NAMES.get(name, name)} {column}")
    if not narrow:
        return []
    return [
        f"  intervals narrower than the client's own delay ({duration(bound)} p50): {', '.join(narrow)}; "
        "they cover sampling error only and may miss the server's value by up to that delay"
    ]


def client_delay_lines(found: ClientDelaySummary | None) -> list[str]:
    """The client's own delay beside the percentiles it is part of, and what it means."""
    if not found or found["p50_s"] is None:
        return []
    p50, p99 = found["components_p50_s"], found["components_p99_s"]
    parts = "; ".join(
        f"{label} {duration(p50[name])} / {duration(p99[name])}"
        for name, label in (("send_lag_s", "loop lag at send"), ("receive_lag_s", "at receipt"),
                            ("read_to_stamp_s", "socket read to stamp"))
        if p50.get(name) is not None
    )  # fmt: skip
    cpu = ""
    if found["cpu_cores"] is not None:
        queue = found["run_queue_share"]
        cpu = f"; client CPU {found['cpu_cores']:.2f} cores" + (
            f", waited for a CPU {queue:.0%} of the run" if queue is not None else ""
        )
    head = f"client delay per request: p50 {duration(found['p50_s'])}  p99 {duration(found['p99_s'])}"
    head += f" ({parts}, p50 / p99; {found['requests']:,} requests sampled){cpu}"
    return [head, *(f"  {note}" for note in found["notes"])]


def goodput_lines(goodput: Goodput | None) -> list[str]:
    if goodput is None:
        return []
    slo = goodput["slo"]
    names = {"ttft_s": "TTFT", "e2e_s": "e2e", "itl_s": "ITL", "tpot_s": "TPOT"}
    limits = " and ".join(
        f"{names.get(key, key)} <= {duration(limit)}" for key, limit in slo.items() if limit is not None
    )
    share = "-" if goodput["share"] is None else f"{goodput['share']:.1%}"
    return [
        f"goodput: {share} of {goodput['attempted']} rollouts within SLO ({limits}), "
        f"{goodput['rollouts_per_s']:.2f} good rollouts/s"
    ]


def server_lines(server: dict[str, Any] | None) -> list[str]:
    """The server's view (its /metrics), or the one-line note saying why there is none."""
    if server is None:
        return []
    if server.get("note"):
        return [f"server metrics: {server['note']}"]
    if "engine" in server and server["engine"] is None:
        return [f"server metrics: scraped, but {server.get('engine_note') or 'no engine recognised'}"]
    replicas = server.get("replicas")
    if replicas:
        return ["server metrics (/metrics of each replica, after the run):"] + [
            f"  {replica.get('url')}: " + (server_lines(replica) or ["-"])[0].partition(": ")[2] for replica in replicas
        ]
    shown = [f"{item['label']} {item['text']}" for item in server.get("highlights", [])]
    engine = f" (engine: {server['engine']})" if server.get("engine") else ""
    return ["server metrics (/metrics, after the run): " + ", ".join(shown) + engine] if shown else []


def server_timing_lines(found: ServerComparison | None) -> list[str]:
    """The server's per-request timings against the client's (``gymbench.rollout.server_timings``)."""
    if not found:
        return []
    rows = [COMPARISON_HEADERS, *comparison_rows(found)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    note = found.get("finding")
    title = f"server timings (the server's own, {found.get('rows', 0)} rollouts):"
    return [title, *lines, *([f"  {note}"] if note else [])]


def replica_lines(found: ReplicaSummary | None) -> list[str]:
    """One row per replica (several ``base_url``), the imbalance, and the straggler when one is out of line."""
    if not found:
        return []
    rows = [REPLICA_HEADERS, *replica_rows(found)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(REPLICA_HEADERS))]
    table = ["  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    return [replica_head(found), *table]
