"""``gymbench report RECORD``: one self-contained HTML page for a collection or a tuning sweep.

Everything comes from the results record (the collect summary, with its percentiles, timeline and
the server's /metrics; the tuner's probe table), so a report can be made later, elsewhere, from a
committed file.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

from gymbench.errors import GymbenchError
from gymbench.record import BenchmarkResult, ResultsRecord
from gymbench.report.html import STYLE
from gymbench.report.run_plots import over_time_figure, percentile_figure, png, server_figure, stage_figure, tune_figure
from gymbench.rollout.server_timings import COMPARISON_HEADERS, comparison_rows
from gymbench.units import duration, interval, quantity

RUN_KINDS = ("collect", "tune")
LATENCY_NAMES = {
    "ttft": "TTFT",
    "ttst": "TTST (second token)",
    "itl": "ITL (inter-token)",
    "tpot": "TPOT (per output token)",
    "e2e": "e2e",
}


def render_run_report(record: ResultsRecord) -> str:
    if record.kind not in RUN_KINDS:
        raise GymbenchError(
            f"a single-record report is for a collect or tune record; this one is {record.kind!r}. "
            "Compare two runs with `gymbench report BASELINE CANDIDATE`"
        )
    machine = record.fingerprint.get("machine", {})
    parts = [
        f"<h1>gymbench report: {_e(record.kind)} {_e(record.name)}</h1>",
        f"<p>{_e(record.created_at)} on {_e(machine.get('cpu_model', '?'))} (machine {_e(machine.get('key', '?'))})."
        "</p>",
    ]
    for bench in record.benchmarks:
        parts += collect_parts(bench) if record.kind == "collect" else tune_parts(bench)
    body = "".join(parts)
    return f"<!doctype html><html><head><meta charset='utf-8'><title>gymbench report</title><style>{STYLE}</style></head><body>{body}</body></html>\n"  # noqa: E501


def collect_parts(bench: BenchmarkResult) -> list[str]:
    summary = bench.extra.get("summary", {})
    parts = ["<h2>Summary</h2>", _metrics_table(bench)]
    tables = summary.get("latency_percentiles_s") or {}
    if tables:
        parts += ["<h2>Latency percentiles (95% interval)</h2>", _percentile_table(tables),
                  _img(png(percentile_figure(tables)), "latency percentiles")]  # fmt: skip
    parts += client_delay_parts(summary.get("client_delay"))
    goodput = summary.get("goodput")
    if goodput:
        share = "-" if goodput["share"] is None else f"{goodput['share']:.1%}"
        parts.append(f"<p>Goodput: <b>{share}</b> of {goodput['attempted']} rollouts within the SLO "
                     f"({_e(_slo_text(goodput['slo']))}).</p>")  # fmt: skip
    timeline = summary.get("timeline")
    if timeline and timeline.get("start_s"):
        parts += ["<h2>Over time</h2>", _img(png(over_time_figure(timeline)), "throughput and latency over time")]
    if summary.get("stage_mean_s"):
        parts += ["<h2>Stage breakdown</h2>", _img(png(stage_figure(summary["stage_mean_s"])), "stage breakdown")]
    parts += server_parts(summary.get("server_metrics"))
    parts += server_timing_parts(summary.get("server_timings"))
    return parts


def client_delay_parts(found: Mapping[str, Any] | None) -> list[str]:
    """The client's own delay, which every percentile above includes, and what it means."""
    if not found or found.get("p50_s") is None:
        return []
    p50, p99 = found["components_p50_s"], found["components_p99_s"]
    labels = {"send_lag_s": "event-loop lag at send", "receive_lag_s": "event-loop lag at receipt",
              "read_to_stamp_s": "socket read to timestamp"}  # fmt: skip
    rows = [("client delay per request (sum)", duration(found["p50_s"]), duration(found["p99_s"]))]
    rows += [(label, duration(p50.get(name)), duration(p99.get(name))) for name, label in labels.items()]
    parts = ["<h3>The client's own delay (inside every latency above)</h3>", _table(("delay", "p50", "p99"), rows)]
    if found.get("cpu_cores") is not None:
        queue = found.get("run_queue_share")
        waited = f", waited for a CPU {queue:.0%} of the run" if queue is not None else ""
        parts.append(f"<p>client CPU: {found['cpu_cores']:.2f} cores{_e(waited)}.</p>")
    parts += [f'<p class="warn">{_e(note)}</p>' for note in found.get("notes", [])]
    return parts


def server_timing_parts(found: Mapping[str, Any] | None) -> list[str]:
    """The server's per-request timings against the client's, and the finding when there is one."""
    if not found:
        return []
    parts = [
        "<h2>Server timings against the client's</h2>",
        f"<p>{found.get('rows', 0)} rollouts carried the server's own timings. The difference is time the "
        "server did not count as work: the network, the wait for a free slot, and the client.</p>",
        _table(COMPARISON_HEADERS, comparison_rows(found)),
    ]
    if found.get("finding"):
        parts.append(f'<p class="warn">{_e(found["finding"])}</p>')
    return parts


def server_parts(server: Mapping[str, Any] | None) -> list[str]:
    if server is None:
        return []
    parts = ["<h2>The server's view (/metrics)</h2>"]
    if server.get("note"):
        parts.append(f'<p class="warn">{_e(server["note"])}</p>')
    elif server.get("engine"):
        parts.append(f"<p>engine recognised: {_e(server['engine'])}</p>")
    elif "engine" in server:
        parts.append(f'<p class="warn">{_e(server.get("engine_note") or "no engine recognised")}</p>')
    rows = [(item["label"], item["text"]) for item in server.get("highlights", [])]
    if rows:
        parts.append(_table(("metric", "value"), rows))
    if server.get("over_time"):
        parts.append(_img(png(server_figure(server["over_time"])), "server queue and KV-cache over time"))
    return parts


def tune_parts(bench: BenchmarkResult) -> list[str]:
    table = bench.extra.get("table") or []
    parts = ["<h2>Summary</h2>", _metrics_table(bench)]
    if table:
        rows = [(str(p["parallelism"]), f"{p['rollouts_per_s']:.2f}", f"{p['output_tokens_per_s']:.1f}",
                 duration(p["latency_p50_s"]), duration(p["latency_p99_s"]), f"{p['error_rate']:.1%}")
                for p in sorted(table, key=lambda p: p["parallelism"])]  # fmt: skip
        headers = ("parallelism", "rollouts/s", "output tokens/s", "p50 latency", "p99 latency", "errors")
        figure = tune_figure(table, bench.extra.get("knee_ci"))
        parts += ["<h2>Probes</h2>", _table(headers, rows), _img(png(figure), "throughput against parallelism")]
    return parts


def _metrics_table(bench: BenchmarkResult) -> str:
    rows = [(name, quantity(m.value, m.unit)) for name, m in bench.metrics.items()]
    return _table(("metric", "value"), rows)


def _percentile_table(tables: Mapping[str, Mapping[str, Any]]) -> str:
    columns = [key for key in next(iter(tables.values())) if key.startswith("p")]
    rows = []
    for name, table in tables.items():
        cells = []
        for column in columns:
            p = table[column]
            if p is None:
                cells.append("-")
            elif p["small_sample"]:
                cells.append(f"{duration(p['value'])} *")
            else:
                cells.append(interval(p["value"], p["low"], p["high"]))
        rows.append((LATENCY_NAMES.get(name, name), str(table["count"]), *cells))
    note = "<p>* too few rollouts for a 95% interval on that percentile.</p>"
    return _table(("latency", "n", *columns), rows) + (note if any("*" in c for r in rows for c in r) else "")


def _slo_text(slo: Mapping[str, float | None]) -> str:
    names = (("TTFT", "ttft_s"), ("e2e", "e2e_s"), ("ITL", "itl_s"), ("TPOT", "tpot_s"))
    return " and ".join(f"{name} ≤ {duration(slo[key])}" for name, key in names if slo.get(key) is not None)


def _table(headers: tuple[str, ...], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _img(data: str, alt: str) -> str:
    return f'<img alt="{_e(alt)}" src="data:image/png;base64,{data}">'


def _e(text: object) -> str:
    return html.escape(str(text))
