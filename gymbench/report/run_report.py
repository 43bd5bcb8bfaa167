"""``gymbench report RECORD``: one self-contained HTML page for a collection or a tuning sweep.

Everything comes from the results record (the collect summary, with its percentiles, timeline and
the server's /metrics; the tuner's probe table), so a report can be made later, elsewhere, from a
committed file.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

from gymbench.console import printable
from gymbench.errors import GymbenchError
from gymbench.labels import label
from gymbench.record import BenchmarkResult, ResultsRecord
from gymbench.replica_figures import REPLICA_HEADERS, replica_head, replica_rows
from gymbench.report.html import STYLE
from gymbench.report.run_headline import LATENCY_NAMES, Headline, headline, shown
from gymbench.report.run_plots import (
    bar_figure,
    diagnose_figure,
    over_time_figure,
    percentile_figure,
    png,
    replica_figure,
    server_figure,
    step_time_figure,
    tune_figure,
)
from gymbench.rollout.server_timings import COMPARISON_HEADERS, comparison_rows
from gymbench.units import duration, interval, plain

RUN_KINDS = ("collect", "tune", "diagnose", "train")
LATENCY_TITLES = {
    "ttft": "TTFT (time to first token)",
    "ttst": "TTST (second token)",
    "itl": "ITL (inter-token)",
    "tpot": "TPOT (per output token)",
    "e2e": "e2e (whole request)",
}
RUN_STYLE = """
.answer{font-size:17px;line-height:1.5;border-left:4px solid #2b6cb0;padding:4px 12px;margin:0 0 12px 0}
.answer p{margin:4px 0}.meta{color:#666;font-size:13px}img.figure{display:block;margin:8px 0}
"""


def render_run_report(record: ResultsRecord) -> str:
    """The answer first (what ran, in the title; the figures a reader came for), then the detail."""
    if record.kind not in RUN_KINDS:
        raise GymbenchError(
            f"a single-record report is for a collect, tune, diagnose or train record; this one is "
            f"{record.kind!r}. Compare two runs with `gymbench report BASELINE CANDIDATE`"
        )
    heads = [headline(record.kind, bench) for bench in record.benchmarks]
    first = heads[0] if heads else Headline(f"{record.kind}: {record.name}", ["The record holds no benchmark."])
    parts = [f"<h1>{_e(first.title)}</h1>", answer_html(first), f'<p class="meta">{_e(meta_text(record))}</p>']
    for index, bench in enumerate(record.benchmarks):
        if index:
            parts += [f"<h1>{_e(heads[index].title)}</h1>", answer_html(heads[index])]
        parts += DETAIL[record.kind](bench)
    body = "".join(parts)
    head = f"<meta charset='utf-8'><title>{_e(first.title)}</title><style>{STYLE}{RUN_STYLE}</style>"
    return f"<!doctype html><html><head>{head}</head><body>{body}</body></html>\n"


def answer_html(found: Headline) -> str:
    sentences = found.answer or ["The record holds none of this kind's headline figures: every metric is below."]
    lines = [f"<p>{_e(sentence)}</p>" for sentence in sentences]
    lines += [f'<p class="warn">{_e(note)}</p>' for note in found.notes]
    return f'<div class="answer">{"".join(lines)}</div>'


def meta_text(record: ResultsRecord) -> str:
    """When, where and from which commit: who ran it, not what it found, so below the answer."""
    machine = record.fingerprint.get("machine", {})
    commit = (record.fingerprint.get("commit") or {}).get("id")
    at = f", commit {str(commit)[:10]}" if commit else ""
    return (f"Run {record.name!r} at {record.created_at} on {machine.get('cpu_model', '?')} "
            f"(machine {machine.get('key', '?')}{at}).")  # fmt: skip


def collect_parts(bench: BenchmarkResult) -> list[str]:
    summary = bench.extra.get("summary", {})
    parts = []
    tables = summary.get("latency_percentiles_s") or {}
    if tables:
        parts += ["<h2>Latency percentiles (95% interval)</h2>", _percentile_table(tables),
                  _img(png(percentile_figure(tables)), "latency percentiles")]  # fmt: skip
    timeline = summary.get("timeline")
    if timeline and timeline.get("start_s"):
        parts += ["<h2>Over time</h2>", _img(png(over_time_figure(timeline)), "throughput and latency over time")]
    stages = {name: value for name, value in (summary.get("stage_mean_s") or {}).items() if name != "total"}
    if any(value is not None for value in stages.values()):
        named = {label(f"stage_{name}").removesuffix(" per rollout"): value for name, value in stages.items()}
        figure = bar_figure(named, "where a rollout's time goes (mean per rollout)", "mean per rollout")
        parts += ["<h2>Stage breakdown</h2>", _img(png(figure), "stage breakdown")]
    parts += replica_parts(summary.get("replicas"))
    parts += client_delay_parts(summary.get("client_delay"))
    parts += server_parts(summary.get("server_metrics"))
    parts += server_timing_parts(summary.get("server_timings"))
    parts += ["<h2>Every metric recorded</h2>", _metrics_table(bench)]
    return parts


def replica_parts(found: Mapping[str, Any] | None) -> list[str]:
    """Several model replicas (a list of ``base_url``): the answer (imbalance, straggler), a figure
    where the odd one out shows, and the table the terminal prints."""
    if not found or len(found.get("replicas", [])) < 2:
        return []
    head = replica_head(found)  # type: ignore[arg-type]
    kind = ' class="warn"' if found.get("straggler") else ""
    return ["<h2>Replicas</h2>", f"<p{kind}>{_e(head)}.</p>", _img(png(replica_figure(found)), "per-replica figures"),
            _table(REPLICA_HEADERS, replica_rows(found))]  # type: ignore[arg-type]  # fmt: skip


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
    parts = []
    if table:
        rows = [(str(p["parallelism"]), _rate_cell(p), f"{p['output_tokens_per_s']:.1f}",
                 duration(p["latency_p50_s"]), duration(p["latency_p99_s"]), f"{p['error_rate']:.1%}")
                for p in sorted(table, key=lambda p: p["parallelism"])]  # fmt: skip
        headers = ("parallelism", "rollouts/s (95% interval)", "output tokens/s", "p50 latency", "p99 latency",
                   "errors")  # fmt: skip
        recommended = bench.metrics.get("recommended_parallelism")
        figure = tune_figure(table, bench.extra.get("knee_ci"), recommended.value if recommended else None)
        parts += ["<h2>Throughput against parallelism</h2>", _img(png(figure), "throughput against parallelism"),
                  "<h2>Every level measured</h2>", _table(headers, rows)]  # fmt: skip
    parts += _list_parts("Notes", bench.extra.get("notes") or [])
    parts += ["<h2>Every metric recorded</h2>", _metrics_table(bench)]
    return parts


def _rate_cell(probe: Mapping[str, Any]) -> str:
    ci = probe.get("rollouts_per_s_ci")
    rate = f"{probe['rollouts_per_s']:.3g}"
    return f"{rate} [{ci[0]:.3g}–{ci[1]:.3g}]" if ci and len(ci) == 2 else rate


def diagnose_parts(bench: BenchmarkResult) -> list[str]:
    parts = []
    low, high = bench.params.get("low"), bench.params.get("high")
    rates = bench.metrics.get("low_rollouts_per_s"), bench.metrics.get("high_rollouts_per_s")
    if isinstance(low, int) and isinstance(high, int) and rates[0] is not None and rates[1] is not None:
        latencies = tuple(m.value if m is not None else None for m in (bench.metrics.get("low_latency_p50"),
                                                                    bench.metrics.get("high_latency_p50")))  # fmt: skip
        figure = diagnose_figure((low, high), (rates[0].value, rates[1].value), latencies)  # type: ignore[arg-type]
        parts += ["<h2>The two probes</h2>", _img(png(figure), "throughput and latency at the two parallelism levels")]
    parts += _list_parts("Evidence", bench.extra.get("evidence") or [])
    parts += replica_parts(bench.extra.get("replicas"))
    parts += _list_parts("Symptoms", bench.extra.get("symptoms") or [])
    return [*parts, "<h2>Every metric recorded</h2>", _metrics_table(bench)]


def train_parts(bench: BenchmarkResult) -> list[str]:
    phases = {label(name): m.value for name, m in bench.metrics.items() if name.startswith("phase_") and m.unit == "s"}
    parts = []
    step = bench.metrics.get("step_time")
    if step is not None and len(step.samples) > 1:
        parts += ["<h2>Step time, step by step</h2>", _img(png(step_time_figure(step.samples)), "step time per step")]
    if phases:
        figure = bar_figure(phases, "where a training step's time goes (median per step)", "median per step")
        parts += ["<h2>Phases of a step</h2>", _img(png(figure), "phases of a training step")]
    parts += ["<h2>Every metric recorded</h2>", _metrics_table(bench)]
    config = bench.extra.get("config") or {}
    if config:
        rows = [(str(key), plain(v, 6) if isinstance(v, float) else str(v)) for key, v in config.items()]
        parts.append(f"<details><summary>Settings</summary>{_table(('setting', 'value'), rows)}</details>")
    return parts


DETAIL = {"collect": collect_parts, "tune": tune_parts, "diagnose": diagnose_parts, "train": train_parts}


def _list_parts(title: str, items: Sequence[str]) -> list[str]:
    if not items:
        return []
    return [f"<h2>{_e(title)}</h2>", "<ul>" + "".join(f"<li>{_e(item)}</li>" for item in items) + "</ul>"]


def _metrics_table(bench: BenchmarkResult) -> str:
    rows = [(label(name), shown(name, m)) for name, m in bench.metrics.items()]
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
        rows.append((LATENCY_TITLES.get(name, LATENCY_NAMES.get(name, name)), str(table["count"]), *cells))
    note = "<p>* too few rollouts for a 95% interval on that percentile.</p>"
    return _table(("latency", "n", *columns), rows) + (note if any("*" in c for r in rows for c in r) else "")


def _table(headers: tuple[str, ...], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _img(data: str, alt: str) -> str:
    return f'<img class="figure" alt="{_e(alt)}" src="data:image/png;base64,{data}">'


def _e(text: object) -> str:
    return html.escape(printable(str(text)))  # a control character would reach whoever cats the file
