"""Damaged results records, pytest-benchmark files and calibrations, fed to every command that
reads them: ``show``, ``compare`` (as baseline and as candidate), ``report``, ``export``,
``import``, ``baselines`` (a store holding a damaged file).

A damage known to make a file invalid must give exit status 2 naming the file; one that may
leave it valid may also pass. Either way: no traceback, and the file is byte-identical afterwards.
"""

from __future__ import annotations

import copy
import functools
import json
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .cases import Case, Env, Prepared

MACHINE = {"key": "fuzz-machine", "cpu_model": "fuzz cpu", "cpu_count_logical": 2, "memory_total_bytes": None,
           "gpus": [], "gpu_note": "no GPU"}  # fmt: skip
Edit = Callable[[dict[str, Any]], Any]


@functools.lru_cache(maxsize=1)
def this_machine() -> str:
    """Where a store keeps this machine's runs and calibrations (the ones a comparison reads)."""
    from gymbench.fingerprint import machine_info

    return str(machine_info()["key"])


def record(name: str = "base", shift: float = 1.0) -> dict[str, Any]:
    samples = [shift * (1 + 0.01 * i) for i in range(8)]
    metric = {"value": sorted(samples)[4], "unit": "s", "direction": "lower", "samples": samples}
    bench = {"id": "t.py::test_a[n=1]", "name": "t.py::test_a", "params": {"n": 1}, "group": None,
             "metrics": {"time": metric}, "options": {}, "extra": {}}  # fmt: skip
    return {"schema": "gymbench.results", "schema_version": 1, "name": name, "kind": "pytest",
            "created_at": "2026-01-01T00:00:00+00:00",
            "fingerprint": {"machine": dict(MACHINE),
                            "software": {"python": "3.11", "gymbench": "0.1.0", "packages": {}},
                            "commit": {"id": None, "dirty": None, "branch": None}},
            "benchmarks": [bench, {**copy.deepcopy(bench), "id": "t.py::test_b", "name": "t.py::test_b",
                                   "params": {}}]}  # fmt: skip


def pytest_benchmark() -> dict[str, Any]:
    stats = {"min": 0.0009, "max": 0.0011, "mean": 0.001, "median": 0.001, "stddev": 0.0001, "rounds": 3,
             "iterations": 1, "data": [0.001, 0.0011, 0.0009]}  # fmt: skip
    return {
        "machine_info": {
            "node": "n",
            "processor": "p",
            "machine": "x86_64",
            "python_version": "3.11",
            "release": "r",
            "system": "Linux",
            "cpu": {"brand_raw": "cpu", "count": 2},
        },  # fmt: skip
        "commit_info": {"id": "abc", "dirty": False, "branch": "main"},
        "benchmarks": [
            {
                "group": None,
                "name": "test_a",
                "fullname": "t.py::test_a",
                "params": None,
                "param": None,
                "extra_info": {},
                "options": {},
                "stats": stats,
            }
        ],  # fmt: skip
        "datetime": "2026-01-01T00:00:00",
        "version": "4.0.0",
    }


def at(path: str, value: Any) -> Edit:
    """Set (or with ``...`` delete) the value at a ``/``-separated path."""

    def edit(data: dict[str, Any]) -> Any:
        *parents, last = [int(p) if p.isdigit() else p for p in path.split("/")]
        node: Any = data
        for part in parents:
            node = node[part]
        if value is ...:
            del node[last]
        else:
            node[last] = value
        return data

    return edit


def text(content: str | bytes) -> Edit:
    return lambda data: content


DEEP = "[" * 10_000 + "]" * 10_000
RECORD_EDITS: list[tuple[str, Edit, bool | None]] = [
    # (name, edit, valid afterwards: False = must be refused, None = may pass)
    ("no-schema", at("schema", ...), False),
    ("other-schema", at("schema", "other"), False),
    ("version-2", at("schema_version", 2), False),
    ("version-text", at("schema_version", "1"), False),
    ("version-null", at("schema_version", None), False),
    ("version-float", at("schema_version", 1.5), False),
    ("version-true", at("schema_version", True), False),
    ("benchmarks-object", at("benchmarks", {}), False),
    ("benchmarks-text", at("benchmarks", "x"), False),
    ("benchmarks-null", at("benchmarks", None), False),
    ("benchmark-number", at("benchmarks/0", 1), False),
    ("benchmark-list", at("benchmarks/0", []), False),
    ("metrics-list", at("benchmarks/0/metrics", []), False),
    ("metrics-text", at("benchmarks/0/metrics", "x"), False),
    ("metric-list", at("benchmarks/0/metrics/time", [1, 2]), False),
    ("value-text", at("benchmarks/0/metrics/time/value", "fast"), False),
    ("value-list", at("benchmarks/0/metrics/time/value", [1]), False),
    ("value-bool", at("benchmarks/0/metrics/time/value", True), False),
    ("value-huge-int", at("benchmarks/0/metrics/time/value", 10**400), None),
    ("value-20-digits", at("benchmarks/0/metrics/time/value", 10**20), None),
    ("value-null", at("benchmarks/0/metrics/time/value", None), None),
    ("value-huge-float", at("benchmarks/0/metrics/time/value", 1e308), None),
    ("samples-text", at("benchmarks/0/metrics/time/samples", "abc"), False),
    ("samples-of-text", at("benchmarks/0/metrics/time/samples", ["x", "y"]), False),
    ("samples-nested", at("benchmarks/0/metrics/time/samples", [[1], [2]]), False),
    ("samples-null", at("benchmarks/0/metrics/time/samples", [None, None, 1.0]), None),
    ("samples-huge-int", at("benchmarks/0/metrics/time/samples", [10**400, 1]), None),
    ("samples-overflowing", at("benchmarks/0/metrics/time/samples", [1e308] * 8), None),
    ("samples-zero", at("benchmarks/0/metrics/time/samples", [0.0] * 8), None),
    ("samples-negative", at("benchmarks/0/metrics/time/samples", [-1.0] * 8), None),
    ("samples-empty", at("benchmarks/0/metrics/time/samples", []), None),
    ("samples-many", at("benchmarks/0/metrics/time/samples", [1.0 + i * 1e-6 for i in range(3_000)]), None),
    ("unit-number", at("benchmarks/0/metrics/time/unit", 5), False),
    ("direction-odd", at("benchmarks/0/metrics/time/direction", "sideways"), False),
    ("name-empty", at("benchmarks/0/name", ""), False),
    ("name-number", at("benchmarks/0/name", 5), False),
    ("id-missing", at("benchmarks/0/id", ...), False),
    ("params-list", at("benchmarks/0/params", [1]), False),
    ("params-deep", at("benchmarks/0/params", {"p": json.loads("[" * 400 + "]" * 400)}), None),
    ("extra-deep", at("benchmarks/0/extra", {"x": json.loads("[" * 400 + "]" * 400)}), None),
    ("created-number", at("created_at", 5), False),
    ("created-garbage", at("created_at", "yesterday"), None),
    ("kind-number", at("kind", 5), False),
    ("machine-key-number", at("fingerprint/machine/key", 5), False),
    ("machine-missing", at("fingerprint/machine", ...), False),
    ("fingerprint-list", at("fingerprint", []), False),
    ("a-list", text("[]"), False),
    ("a-number", text("5"), False),
    ("null", text("null"), False),
    ("empty", text(""), False),
    ("whitespace", text(" \n\t\n"), False),
    ("deep", text(DEEP), False),
    ("deep-in-fingerprint", lambda d: json.dumps(d).replace('"gpus": []', '"gpus": []' + ', "x": ' + DEEP), False),
    ("nan", lambda d: json.dumps(d).replace('"value": 1.04', '"value": NaN'), False),
    ("infinity", lambda d: json.dumps(d).replace('"value": 1.04', '"value": -Infinity'), False),
    ("beyond-double", lambda d: json.dumps(d).replace('"value": 1.04', '"value": 1e999'), False),
    ("5000-digits", lambda d: json.dumps(d).replace('"value": 1.04', '"value": ' + "9" * 5000), False),
    ("not-utf8", lambda d: json.dumps(d).encode().replace(b"fuzz cpu", b"fuzz \xff cpu"), False),
    ("nul-byte", lambda d: json.dumps(d).encode().replace(b"fuzz cpu", b"fuzz \x00 cpu"), False),
    ("bom", lambda d: b"\xef\xbb\xbf" + json.dumps(d).encode(), None),
    ("utf-16", lambda d: json.dumps(d).encode("utf-16"), None),
    ("binary", text(bytes(range(256)) * 8), False),
]


def truncations(rng: random.Random, count: int) -> Iterator[tuple[str, Edit, bool | None]]:
    full = json.dumps(record(), indent=1)
    for i in range(count):
        cut = rng.randrange(1, len(full) - 2)
        yield f"truncated-{i}-at-{cut}", text(full[:cut]), False


def written(data: Any) -> bytes:
    if isinstance(data, bytes):
        return data
    return (data if isinstance(data, str) else json.dumps(data)).encode()


STATUSES = {"show": (0, 2), "compare-baseline": (0, 1, 2, 3), "compare-candidate": (0, 1, 2, 3),
            "report": (0, 1, 2, 3), "export": (0, 2)}  # fmt: skip


def record_case(name: str, edit: Edit, valid: bool | None, command: str, base: Callable[[], Any] = record) -> Case:
    def build(workdir: Path, env: Env) -> Prepared:
        bad, good = workdir / "bad.json", workdir / "good.json"
        bad.write_bytes(written(edit(base())))
        good.write_text(json.dumps(record("good", 1.02)))
        store = ["--results-dir", str(workdir / "results")]
        argv = {
            "show": ["show", str(bad)],
            "compare-baseline": ["compare", str(bad), str(good), *store],
            "compare-candidate": ["compare", str(good), str(bad), *store],
            "report": ["report", str(bad), str(good), *store, "-o", str(workdir / "r.html")],
            "export": ["export", str(bad), "-o", str(workdir / "exported.json")],
            "import": ["import", str(bad), *store],
        }[command]
        return Prepared(argv, mentions=[str(bad)])

    statuses = (2,) if valid is False else STATUSES.get(command, (0, 2))
    return Case("records", f"{command}:{name}", build, statuses=statuses)


UNSHOWABLE = "\x1b[2J\x1b]0;owned\x07\x9b31m\x00\x7f\x85\u202e\u2066\u2028"
"""Terminal escapes, C0 and C1 controls, a bidi override and isolate, a line separator (issue 41)."""
SHOWN_EDITS: list[tuple[str, Edit]] = [
    ("benchmark-id", lambda d: at("benchmarks/0/id", "t.py::test_a" + UNSHOWABLE)(d)),
    ("metric-name", lambda d: {**d, "benchmarks": [{**d["benchmarks"][0], "metrics": {
        "ti" + UNSHOWABLE: d["benchmarks"][0]["metrics"]["time"]}}, d["benchmarks"][1]]}),
    ("unit", at("benchmarks/0/metrics/time/unit", "s" + UNSHOWABLE)),
    ("record-name-and-machine", lambda d: at("fingerprint/machine/cpu_model", UNSHOWABLE)(at("name", UNSHOWABLE)(d))),
    ("commit", at("fingerprint/commit", {"id": "a" + UNSHOWABLE, "dirty": False, "branch": UNSHOWABLE})),
]  # fmt: skip
"""Strings of a valid record, from data, that every command shows: escaped, never raw."""


def shown_case(name: str, edit: Edit, command: str) -> Case:
    """A valid record holding :data:`UNSHOWABLE` in one string, through a command that shows it: no
    control character in its output, its ``--markdown`` or its HTML report."""

    def build(workdir: Path, env: Env) -> Prepared:
        bad, good = workdir / "bad.json", workdir / "good.json"
        bad.write_text(json.dumps(edit(record("bad", 1.5))))
        good.write_text(json.dumps(record("good", 1.0)))
        store = ["--results-dir", str(workdir / "results")]
        outputs = {"markdown": workdir / "summary.md", "html": workdir / "r.html"}
        argv = {
            "show": ["show", str(bad)],
            "compare-baseline": ["compare", str(bad), str(good), "-v", "--markdown", str(outputs["markdown"]), *store],
            "compare-candidate": ["compare", str(good), str(bad), "-v", "--markdown", str(outputs["markdown"]), *store],
            "report": ["report", str(good), str(bad), *store, "-o", str(outputs["html"])],
            "export": ["export", str(bad), "--metric", "nothing", "-o", str(workdir / "exported.json")],
        }[command]

        def nothing_raw(status: int | None, out: str, err: str) -> str | None:
            written = [p.read_text(errors="surrogateescape") for p in outputs.values() if p.exists()]
            raw = sorted(
                {repr(ch) for text in (out, err, *written) for ch in UNSHOWABLE if ch in text and not ch.isprintable()}
            )
            return f"passed raw: {', '.join(raw)}" if raw else None

        return Prepared(argv, check=nothing_raw)

    return Case("records", f"shown-{command}:{name}", build, statuses=(0, 1, 2, 3))


PB_EDITS: list[tuple[str, Edit, bool | None]] = [
    ("machine-info-list", at("machine_info", []), False),
    ("machine-info-text", at("machine_info", "x"), False),
    ("cpu-text", at("machine_info/cpu", "x"), None),
    ("commit-info-text", at("commit_info", "x"), None),
    ("commit-info-list", at("commit_info", [1]), None),
    ("benchmarks-object", at("benchmarks", {}), False),
    ("benchmark-number", at("benchmarks/0", 1), False),
    ("benchmark-list", at("benchmarks/0", []), False),
    ("no-stats", at("benchmarks/0/stats", ...), False),
    ("stats-list", at("benchmarks/0/stats", [1]), False),
    ("stats-text", at("benchmarks/0/stats", "x"), False),
    ("no-median-no-data", lambda d: at("benchmarks/0/stats/data", ...)(at("benchmarks/0/stats/median", ...)(d)), False),
    ("median-text", lambda d: at("benchmarks/0/stats/data", ...)(at("benchmarks/0/stats/median", "x")(d)), False),
    ("median-null", lambda d: at("benchmarks/0/stats/data", ...)(at("benchmarks/0/stats/median", None)(d)), False),
    (
        "median-huge-int",
        lambda d: at("benchmarks/0/stats/data", ...)(at("benchmarks/0/stats/median", 10**400)(d)),
        None,
    ),
    ("data-text", at("benchmarks/0/stats/data", "abc"), False),
    ("data-of-text", at("benchmarks/0/stats/data", ["x"]), False),
    ("data-nested", at("benchmarks/0/stats/data", [[1]]), False),
    ("data-null", at("benchmarks/0/stats/data", [None]), False),
    ("data-huge-int", at("benchmarks/0/stats/data", [10**400]), None),
    ("data-object", at("benchmarks/0/stats/data", {"a": 1}), None),
    ("data-empty", at("benchmarks/0/stats/data", []), None),
    ("fullname-missing", at("benchmarks/0/fullname", ...), False),
    ("fullname-number", at("benchmarks/0/fullname", 5), None),
    ("params-list", at("benchmarks/0/params", [1, 2]), None),
    ("params-text", at("benchmarks/0/params", "ab"), None),
    ("group-object", at("benchmarks/0/group", {"a": 1}), None),
    ("options-list", at("benchmarks/0/options", [1]), None),
    ("extra-info-text", at("benchmarks/0/extra_info", "x"), None),
    ("extra-info-deep", at("benchmarks/0/extra_info", {"x": json.loads("[" * 400 + "]" * 400)}), None),
    ("datetime-number", at("datetime", 5), None),
    ("deep", lambda d: json.dumps(d).replace('"extra_info": {}', '"extra_info": ' + DEEP), False),
    ("nan-beside-data", lambda d: json.dumps(d).replace('"median": 0.001', '"median": NaN'), None),
    ("nan-data", lambda d: json.dumps(d).replace('"data": [0.001', '"data": [NaN'), False),
    ("beyond-double", lambda d: json.dumps(d).replace('"median": 0.001', '"median": 1e999'), False),
    ("truncated", lambda d: json.dumps(d)[:200], False),
    ("not-utf8", lambda d: json.dumps(d).encode().replace(b'"node": "n"', b'"node": "\xff"'), False),
    ("a-gymbench-record", lambda d: record(), None),
    ("empty", text(""), False),
]


def calibration_case(name: str, content: bytes, where: str) -> Case:
    def build(workdir: Path, env: Env) -> Prepared:
        good, other = workdir / "good.json", workdir / "other.json"  # two files: compare refuses one run twice
        good.write_text(json.dumps(record("good", 1.02)))
        other.write_text(json.dumps(record("good", 1.02)))
        store = workdir / "results"
        if where == "flag":
            calibration = workdir / "calibration.json"
            argv = ["--calibration", str(calibration)]
        else:  # the store's own latest calibration
            calibration = store / this_machine() / "calibration" / "20260101T000000_cal.json"
            argv = []
        calibration.parent.mkdir(parents=True, exist_ok=True)
        calibration.write_bytes(content)
        return Prepared(
            ["compare", str(good), str(other), "--results-dir", str(store), *argv], mentions=[str(calibration)]
        )

    return Case("records", f"calibration-{where}:{name}", build)


CALIBRATIONS: list[tuple[str, bytes]] = [
    ("not-json", b"not json"),
    ("a-list", b"[]"),
    ("empty-object", b"{}"),
    ("wrong-schema", b'{"schema": "x"}'),
    ("deep", DEEP.encode()),
    ("not-utf8", b'{"schema": "\xff"}'),
    ("truncated", b'{"schema": "gymbench.calibration", "schema_ver'),
    ("metrics-list", b'{"schema": "gymbench.calibration", "schema_version": 1, "machine_key": "m", "metrics": []}'),
    ("runs-huge", b'{"schema": "gymbench.calibration", "schema_version": 1, "machine_key": "m", '
                  b'"metrics": {"b": {"time": {"run_sd": 0.1, "within_se": 0.1, "runs": 1e999}}}}'),
    ("sd-huge-int", b'{"schema": "gymbench.calibration", "schema_version": 1, "machine_key": "m", '
                    b'"metrics": {"b": {"time": {"run_sd": ' + b"9" * 400 + b', "within_se": 0.1, "runs": 3}}}}'),
    ("sd-text", b'{"schema": "gymbench.calibration", "schema_version": 1, "machine_key": "m", '
                b'"metrics": {"b": {"time": {"run_sd": "x", "within_se": 0.1, "runs": 3}}}}'),
]  # fmt: skip


def store_case(name: str, content: bytes, command: list[str], statuses: tuple[int, ...] = (2,)) -> Case:
    """A store holding one damaged record beside a good one: listing and ``latest`` must name it."""

    def build(workdir: Path, env: Env) -> Prepared:
        store = workdir / "results" / this_machine()
        store.mkdir(parents=True)
        (store / "20260101T000000_good.json").write_text(json.dumps(record("good")))
        bad = store / "20260102T000000_bad.json"
        bad.write_bytes(content)
        good = workdir / "good.json"
        good.write_text(json.dumps(record("good", 1.02)))
        words = [word.replace("GOOD", str(good)) for word in command]

        def named(status: int | None, out: str, err: str) -> str | None:
            return None if str(bad) in err else "the warning does not name the file"

        return Prepared([*words, "--results-dir", str(workdir / "results")], mentions=[str(bad)], check=named)

    return Case("records", f"store-{command[0]}:{name}", build, statuses=statuses)


def output_case(name: str, argv: list[str]) -> Case:
    """Where a command writes (``--markdown``, ``-o``) cannot be written."""

    def build(workdir: Path, env: Env) -> Prepared:
        (workdir / "file").write_text("in the way")
        good = workdir / "good.json"
        good.write_text(json.dumps(record("good")))
        words = [w.replace("GOOD", str(good)).replace("UNDER", str(workdir / "file" / "x")) for w in argv]
        return Prepared([*words, "--results-dir", str(workdir / "results")] if argv[0] != "export" else words,
                        mentions=[str(workdir / "file")])  # fmt: skip

    return Case("records", f"output:{name}", build)


def record_cases(seed: int = 11) -> list[Case]:
    rng = random.Random(seed)
    cases = []
    for name, edit, valid in [*RECORD_EDITS, *truncations(rng, 12)]:
        for command in ("show", "compare-baseline", "compare-candidate", "export"):
            cases.append(record_case(name, edit, valid, command))
        if rng.random() < 0.12:
            cases.append(record_case(name, edit, valid, "report"))
    for name, edit in SHOWN_EDITS:
        cases += [shown_case(name, edit, command) for command in STATUSES]
    for name, edit, valid in PB_EDITS:
        cases.append(record_case(f"pytest-benchmark-{name}", edit, valid, "import", pytest_benchmark))
        cases.append(record_case(f"pytest-benchmark-{name}", edit, valid, "compare-baseline", pytest_benchmark))
    for name, content in CALIBRATIONS:
        cases += [calibration_case(name, content, "flag"), calibration_case(name, content, "store")]
    for name, content in [("truncated", b'{"schema": "gymbench.results", "sche'), ("deep", DEEP.encode()),
                          ("huge-value", json.dumps(at("benchmarks/0/metrics/time/value", 10**400)(record())).encode()),
                          ("not-utf8", b"\xff\xfe\xfa")]:  # fmt: skip
        for command in (["compare", "GOOD", "latest"], ["report"]):
            cases.append(store_case(name, content, command))
        cases.append(store_case(name, content, ["baselines"], (0,)))  # lists every file, warns about this one
    for name, argv in [("markdown-under-a-file", ["compare", "GOOD", "GOOD", "--markdown", "UNDER"]),
                       ("report-under-a-file", ["report", "GOOD", "GOOD", "-o", "UNDER"]),
                       ("export-under-a-file", ["export", "GOOD", "-o", "UNDER"])]:  # fmt: skip
        cases.append(output_case(name, argv))
    return cases
