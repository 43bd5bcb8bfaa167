"""``gymbench timings ROLLOUTS``: one line per rollout with its timings, as CSV or JSON.

For a spreadsheet, pandas or another tool's plots: the same latencies the summary's percentiles
are made of (``gymbench.rollout.latency`` defines them), the stage times, the token counts, the
outcome, and the server's own timings where it reported them (``server_prompt_ms`` and the rest,
empty otherwise). Rows are streamed, so a million-rollout file needs no more memory than a small one.
"""

from __future__ import annotations

import csv
import itertools
import json
import math
import reprlib
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from gymbench.errors import GymbenchError
from gymbench.jsonio import AtomicFile
from gymbench.rollout.latency import LATENCY_METRICS, rollout_latencies
from gymbench.rollout.stats import STAGES
from gymbench.rollouts_file import RolloutsFile
from gymbench.types import SERVER_TIMING_FIELDS

IDENTITY = ("task_index", "rollout_index", "attempt", "status", "failure_kind", "reward", "prompt_tokens",
            "completion_tokens")  # fmt: skip
STAGE_COLUMNS = tuple(f"{stage}_s" for stage in STAGES if stage not in LATENCY_METRICS)
SERVER_COLUMNS = tuple(f"server_{name}" for name in SERVER_TIMING_FIELDS)
COLUMNS = (*IDENTITY, *(f"{name}_s" for name in LATENCY_METRICS), *STAGE_COLUMNS, *SERVER_COLUMNS)
FORMATS = ("csv", "json")
ADVICE = "; point this at the output_jsonl_fpath of `gymbench collect`"


def timing_rows(path: Path) -> Iterator[dict[str, Any]]:
    """The timing row of every rollout in ``path``; a line that is not a rollout is an error naming it."""
    for number, _raw, row in RolloutsFile(path, then=ADVICE).lines():
        if not isinstance(row.get("timings"), Mapping):
            raise GymbenchError(f'{path}:{number}: not a gymbench rollout (no "timings" object){ADVICE}')
        problem = _bad_number(row)
        if problem is not None:
            raise GymbenchError(f"{path}:{number}: not a gymbench rollout ({problem}){ADVICE}")
        yield timing_row(row)


def _bad_number(row: Mapping[str, Any]) -> str | None:
    """What is wrong with the numbers this export does arithmetic on (each timing in seconds, the
    completion token count), or None: a string or a 400-digit integer there is no rollout gymbench
    wrote, and one line says where it is rather than a TypeError or OverflowError."""
    for name, value in row["timings"].items():
        if value is not None and not _finite(value):
            return f"timings.{name} must be a number of seconds, got {reprlib.repr(value)}"
    for name in ("usage", "failure", "server_timings"):
        if row.get(name) and not isinstance(row[name], Mapping):
            return f"{name} must be an object, got {reprlib.repr(row[name])}"
    tokens = (row.get("usage") or {}).get("completion_tokens")
    if tokens is not None and not (type(tokens) is int and 0 <= tokens < 2**63):
        return f"usage.completion_tokens must be a whole number 0 or more, got {reprlib.repr(tokens)}"
    return None


def _finite(value: object) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:  # an integer past a float's range
        return False


def timing_row(row: Mapping[str, Any]) -> dict[str, Any]:
    usage = row.get("usage") or {}
    failure = row.get("failure") or {}
    found: dict[str, Any] = {
        "task_index": row.get("task_index"),
        "rollout_index": row.get("rollout_index"),
        "attempt": row.get("attempt"),
        "status": row.get("status"),
        "failure_kind": failure.get("kind"),
        "reward": row.get("reward"),
        "prompt_tokens": usage.get("prompt_tokens"),
        "completion_tokens": usage.get("completion_tokens"),
    }
    timings = row["timings"]
    tokens = int(usage.get("completion_tokens") or 0)
    latencies = rollout_latencies(timings, tokens) if row.get("status") == "ok" else {}
    found.update({f"{name}_s": latencies.get(name) for name in LATENCY_METRICS})
    found.update({column: timings.get(column.removesuffix("_s")) for column in STAGE_COLUMNS})
    server = row.get("server_timings") or {}
    found.update({column: server.get(column.removeprefix("server_")) for column in SERVER_COLUMNS})
    return found


def write_timings(rows: Iterator[dict[str, Any]], out: IO[str] | AtomicFile, fmt: str) -> int:
    """Nothing is written before the first row has been read, so a wrong file prints only the error."""
    first = next(rows, None)
    rows = itertools.chain([first] if first is not None else [], rows)
    count = 0
    if fmt == "csv":
        writer = csv.DictWriter(out, COLUMNS, lineterminator="\n")
        writer.writeheader()
        for count, row in enumerate(rows, 1):  # noqa: B007 (the count is the result)
            writer.writerow(row)
        return count
    out.write("[")
    for count, row in enumerate(rows, 1):  # noqa: B007
        out.write(("\n" if count == 1 else ",\n") + json.dumps(row))
    out.write("\n]\n")
    return count


def run_timings(path: Path, output: Path | None, fmt: str) -> int:
    """Write the file (atomically, so a bad line leaves no half export) or stdout; the count."""
    rows = timing_rows(path)
    if output is None:
        return write_timings(rows, sys.stdout, fmt)
    with AtomicFile(output, text=True, then="; choose another -o", inputs=[path]) as out:
        return write_timings(rows, out, fmt)
