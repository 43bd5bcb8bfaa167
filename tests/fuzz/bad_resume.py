"""Existing output files for ``+resume=true``: truncated rows, bad attempts and indices, rows of
other tools, a corrupted ``.run.json`` sidecar, a resume of a different run.

Each case starts from what a real run of 6 tasks (on the shared simulator) left, cut to 4 rows as
if killed, damages it, then resumes. A refused resume names the file and line and leaves the file byte-identical;
an accepted one keeps every completed row and ends with a row for every task.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from gymbench.cli import main

from .bad_tasks import SERVER
from .cases import Case, Env, Prepared

TASKS = 6
Damage = Callable[[Path, Path], None]
"""Changes what the first run left: ``(output, sidecar)``."""


def _rows(out: Path) -> list[bytes]:
    return out.read_bytes().splitlines(keepends=True)


def set_line(number: int, text: bytes) -> Damage:
    def damage(out: Path, sidecar: Path) -> None:
        rows = _rows(out)
        rows[number - 1] = text + b"\n"
        out.write_bytes(b"".join(rows))

    return damage


def edit_row(number: int, **changes: Any) -> Damage:
    """Row ``number`` with fields changed (a value of ``...`` deletes the field)."""

    def damage(out: Path, sidecar: Path) -> None:
        rows = _rows(out)
        row = json.loads(rows[number - 1])
        row.update({key: value for key, value in changes.items() if value is not ...})
        for key in [key for key, value in changes.items() if value is ...]:
            row.pop(key, None)
        rows[number - 1] = json.dumps(row).encode() + b"\n"
        out.write_bytes(b"".join(rows))

    return damage


def failed_with_attempt(value: Any) -> Damage:
    return edit_row(2, status="failed", attempt=value, failure={"kind": "http_error", "reason": "x"})


def replace_file(content: bytes, target: str = "out") -> Damage:
    def damage(out: Path, sidecar: Path) -> None:
        (out if target == "out" else sidecar).write_bytes(content)

    return damage


def cut_last(out: Path, sidecar: Path) -> None:
    out.write_bytes(out.read_bytes()[:-25])


def sidecar_dir(out: Path, sidecar: Path) -> None:
    sidecar.unlink()
    sidecar.mkdir()


def deep_sidecar(out: Path, sidecar: Path) -> None:
    sidecar.write_text('{"format": "gymbench-run/1", "fingerprint": ' + "[" * 5000 + "]" * 5000 + "}")


REFUSED_ROWS: list[tuple[str, Damage, int]] = [
    ("truncated-middle-row", lambda o, s: set_line(2, _rows(o)[1][:40])(o, s), 2),
    ("garbage-row", set_line(3, b"\x00\x01garbage"), 3),
    ("not-utf8-row", set_line(2, b'{"task_index": 1, "x": "\xff"}'), 2),
    ("deep-row", set_line(2, b"[" * 5000 + b"]" * 5000), 2),
    ("nan-row", set_line(2, b'{"task_index": 1, "rollout_index": 0, "status": "ok", "reward": NaN}'), 2),
    ("huge-float-row", set_line(2, b'{"task_index": 1, "rollout_index": 0, "status": "ok", "reward": 1e999}'), 2),
    ("5000-digit-row", set_line(2, b'{"task_index": ' + b"1" * 5000 + b', "rollout_index": 0}'), 2),
    ("row-is-a-list", set_line(2, b"[]"), 2),
    ("row-is-a-number", set_line(4, b"1"), 4),
    ("row-is-a-string", set_line(1, b'"x"'), 1),
    ("row-is-null", set_line(2, b"null"), 2),
    ("no-indices", edit_row(2, task_index=..., rollout_index=..., _ng_task_index=..., _ng_rollout_index=...), 2),
    ("indices-disagree", edit_row(2, _ng_task_index=7), 2),
    ("unknown-row", set_line(2, b'{"foo": 1}'), 2),
    ("rollout-index-beyond-24-bits", edit_row(2, rollout_index=1 << 24), 2),
]
for _value in ["x", 0, -1, 1.5, True, None, "1", [], {}]:
    REFUSED_ROWS.append((f"attempt-{json.dumps(_value)}", failed_with_attempt(_value), 2))
for _value in [-1, "0", 1.5, True, None, [0]]:
    REFUSED_ROWS.append((f"task-index-{json.dumps(_value)}", edit_row(2, task_index=_value), 2))
    REFUSED_ROWS.append((f"rollout-index-{json.dumps(_value)}", edit_row(3, rollout_index=_value), 3))

ACCEPTED: list[tuple[str, Damage]] = [
    ("truncated-last-row", cut_last),
    ("huge-attempt", failed_with_attempt(10**30)),
    ("failed-row", failed_with_attempt(1)),
    ("task-index-beyond-64-bits", edit_row(2, task_index=1 << 70, _ng_task_index=1 << 70)),
    ("nemo-gym-row", set_line(2, b'{"_ng_task_index": 1, "_ng_rollout_index": 0, "reward": 1.0}')),
    ("row-without-status", edit_row(2, status=...)),
    ("bom", lambda o, s: o.write_bytes(b"\xef\xbb\xbf" + o.read_bytes())),
    ("crlf", lambda o, s: o.write_bytes(o.read_bytes().replace(b"\n", b"\r\n"))),
    ("blank-lines", lambda o, s: o.write_bytes(o.read_bytes().replace(b"\n", b"\n\n  \n"))),
    ("duplicate-rows", lambda o, s: o.write_bytes(o.read_bytes() * 2)),
    ("empty-output", replace_file(b"")),
    ("no-sidecar", lambda o, s: s.unlink()),
    ("sidecar-with-bom", lambda o, s: s.write_bytes(b"\xef\xbb\xbf" + s.read_bytes())),
]
BAD_SIDECARS: list[tuple[str, Damage]] = [
    ("sidecar-truncated", lambda o, s: s.write_bytes(s.read_bytes()[:30])),
    ("sidecar-not-json", replace_file(b"not json", "sidecar")),
    ("sidecar-a-list", replace_file(b"[]", "sidecar")),
    ("sidecar-other-format", replace_file(b'{"format": "other/9", "fingerprint": {}}', "sidecar")),
    ("sidecar-empty", replace_file(b"", "sidecar")),
    ("sidecar-not-utf8", replace_file(b'{"format": "\xff"}', "sidecar")),
    ("sidecar-nan", replace_file(b'{"format": "gymbench-run/1", "fingerprint": {"a": NaN}}', "sidecar")),
    ("sidecar-deep", deep_sidecar),
    ("sidecar-is-a-directory", sidecar_dir),
]


_FIRST_RUNS: dict[str, dict[str, bytes]] = {}
"""What a first run leaves (tasks, rows, run fingerprint), per simulator: made once, then copied.
The fingerprint holds no paths, so a copy resumes exactly as the original would."""


def _first_run(workdir: Path, env: Env) -> tuple[list[str], Path]:
    tasks, out = workdir / "tasks.jsonl", workdir / "o.jsonl"
    sidecar = out.with_name(out.name + ".run.json")
    argv = ["collect", f"+input_jsonl_fpath={tasks}", f"+output_jsonl_fpath={out}", "+progress=false",
            f"+base_url={env.base_url}", *SERVER, "+num_samples_in_parallel=1"]  # fmt: skip
    if env.base_url not in _FIRST_RUNS:
        tasks.write_text("".join(
            json.dumps({"responses_create_params": {"input": f"What is {i} + {i}?"}, "expected_answer": str(2 * i),
                        "id": 10**20 + i}) + "\n" for i in range(TASKS)
        ))  # fmt: skip
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            assert main(argv) == 0
        rows = b"".join(_rows(out)[:4])  # as if killed after 4 rollouts
        _FIRST_RUNS[env.base_url] = {"tasks": tasks.read_bytes(), "rows": rows, "sidecar": sidecar.read_bytes()}
        (out.with_name(out.name + ".metrics.json")).unlink()
    first = _FIRST_RUNS[env.base_url]
    tasks.write_bytes(first["tasks"])
    out.write_bytes(first["rows"])
    sidecar.write_bytes(first["sidecar"])
    return argv, out


def _complete(out: Path) -> Callable[[int | None, str, str], str | None]:
    def check(status: int | None, stdout: str, stderr: str) -> str | None:
        if status != 0:
            return None
        rows = [json.loads(line) for line in out.read_bytes().splitlines() if line.strip()]
        done = {row.get("task_index", row.get("_ng_task_index")) for row in rows}
        return (
            None if set(range(TASKS)) <= done else f"tasks without a row after the resume: {set(range(TASKS)) - done}"
        )

    return check


def resume_case(name: str, damage: Damage, statuses: tuple[int, ...], line: int | None, resume: list[str],
                sidecar_named: bool = False, listing: bool = False, named: str | None = None) -> Case:  # fmt: skip
    def build(workdir: Path, env: Env) -> Prepared:
        argv, out = _first_run(workdir, env)
        sidecar = out.with_name(out.name + ".run.json")
        damage(out, sidecar)
        mentions = [f"{out}:{line}"] if line else [str(sidecar)] if sidecar_named else [named or str(out)]
        metrics = out.with_name(out.name + ".metrics.json")
        return Prepared([*argv, *resume], mentions=mentions, outputs=[out, sidecar, metrics], check=_complete(out))

    return Case("resume", name, build, statuses=statuses, listing=listing)


def resume_cases() -> Iterator[Case]:
    resume = ["+resume=true"]
    for name, damage, line in REFUSED_ROWS:
        yield resume_case(name, damage, (2,), line, resume)
    for name, damage in ACCEPTED:
        yield resume_case(name, damage, (0,), None, resume)
    for name, damage in BAD_SIDECARS:
        yield resume_case(name, damage, (2,), None, resume, sidecar_named=True)
        forced_status = (2,) if name == "sidecar-is-a-directory" else (0,)
        yield resume_case(f"{name}-forced", damage, forced_status, None, [*resume, "+resume_force=true"], True)
    untouched: Damage = lambda o, s: None  # noqa: E731
    changes = [("more-repeats", "+num_repeats=2"), ("other-verifier", "+verifier=none"),
               ("other-params", "+responses_create_params.temperature=0.1"), ("other-limit", "+limit=4")]  # fmt: skip
    for name, change in changes:
        yield resume_case(f"different-run-{name}", untouched, (2,), None, [*resume, change], listing=True)
    yield resume_case(
        "output-is-the-input",
        untouched,
        (2,),
        None,
        [*resume, "+output_jsonl_fpath=tasks.jsonl"],
        named="would destroy the tasks",
    )


def all_resume_cases() -> list[Case]:
    return list(resume_cases())
