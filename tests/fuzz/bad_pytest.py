"""pytest's ``--gymbench-*`` options given bad values and bad baselines.

pytest keeps its own exit codes: a usage or input error is 4, the gate's regression 6 and
inconclusive 7. A case runs a one-benchmark suite in a separate pytest session.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

from .bad_records import DEEP, at, pytest_benchmark, record
from .cases import Case, Env, Prepared

SUITE = """
def test_sum(gymbench):
    gymbench.measure(sum, range(100))
"""
BASELINES: list[tuple[str, Callable[[], bytes], tuple[int, ...]]] = [
    ("truncated", lambda: json.dumps(record())[:100].encode(), (4,)),
    ("deep", lambda: DEEP.encode(), (4,)),
    ("other-schema", lambda: json.dumps(at("schema_version", 2)(record())).encode(), (4,)),
    ("huge-value", lambda: json.dumps(at("benchmarks/0/metrics/time/value", 10**400)(record())).encode(), (4,)),
    ("samples-of-text", lambda: json.dumps(at("benchmarks/0/metrics/time/samples", ["x"])(record())).encode(), (4,)),
    ("not-utf8", lambda: b'{"schema": "\xff"}', (4,)),
    ("pytest-benchmark-stats-list", lambda: json.dumps(at("benchmarks/0/stats", [1])(pytest_benchmark())).encode(),
     (4,)),
    ("pytest-benchmark-machine-text", lambda: json.dumps(at("machine_info", "x")(pytest_benchmark())).encode(), (4,)),
    ("a-list", lambda: b"[]", (4,)),
    ("valid-other-suite", lambda: json.dumps(record()).encode(), (0, 7)),
]  # fmt: skip
OPTIONS: list[tuple[str, list[str], tuple[int, ...], str]] = [
    ("min-effect-nan", ["--gymbench-min-effect", "nan"], (4,), "min-effect"),
    ("min-effect-negative", ["--gymbench-min-effect", "-1"], (4,), "min-effect"),
    ("min-effect-text", ["--gymbench-min-effect", "x"], (4,), "min-effect"),
    ("min-rounds-negative", ["--gymbench-min-rounds", "-1"], (4,), "min-rounds"),
    ("max-time-nan", ["--gymbench-max-time", "nan"], (4,), "max-time"),
    ("max-time-inf", ["--gymbench-max-time", "inf"], (4,), "max-time"),
    ("fail-on-bogus", ["--gymbench-fail-on", "bogus"], (4,), "fail-on"),
    ("save-outside", ["--gymbench-save", "../x"], (4,), "../x"),
    ("results-dir-under-a-file", ["--gymbench-save", "x", "--gymbench-results-dir", "FILE/results"], (4,), "FILE"),
    ("compare-missing", ["--gymbench-compare", "nope.json"], (4,), "nope.json"),
    ("calibration-deep", ["--gymbench-compare", "GOOD", "--gymbench-calibration", "DEEP"], (4,), "DEEP"),
]


def _suite(workdir: Path) -> list[str]:
    (workdir / "test_bench.py").write_text(SUITE)
    return [str(workdir / "test_bench.py"), "--gymbench-quick", "-p", "no:cacheprovider",
            "--gymbench-results-dir", str(workdir / "results")]  # fmt: skip


def baseline_case(name: str, content: Callable[[], bytes], statuses: tuple[int, ...]) -> Case:
    def build(workdir: Path, env: Env) -> Prepared:
        baseline = workdir / "baseline.json"
        baseline.write_bytes(content())
        mentions = [str(baseline)] if statuses == (4,) else []
        return Prepared([*_suite(workdir), "--gymbench-compare", str(baseline), "--gymbench-fail-on", "inconclusive"],
                        mentions=mentions)  # fmt: skip

    return Case("pytest", f"baseline:{name}", build, statuses=statuses, pytest_run=True)


def option_case(name: str, words: list[str], statuses: tuple[int, ...], mention: str) -> Case:
    def build(workdir: Path, env: Env) -> Prepared:
        (workdir / "file").write_text("in the way")
        (workdir / "good.json").write_text(json.dumps(record()))
        (workdir / "deep.json").write_text(DEEP)
        paths = {"FILE": str(workdir / "file"), "GOOD": str(workdir / "good.json"), "DEEP": str(workdir / "deep.json")}
        words_now = list(words)
        for key, value in paths.items():
            words_now = [word.replace(key, value) for word in words_now]
        return Prepared([*_suite(workdir), *words_now], mentions=[paths.get(mention, mention)])

    return Case("pytest", f"option:{name}", build, statuses=statuses, pytest_run=True)


def pytest_cases() -> Iterator[Case]:
    for name, content, statuses in BASELINES:
        yield baseline_case(name, content, statuses)
    for name, words, statuses, mention in OPTIONS:
        yield option_case(name, words, statuses, mention)


def all_pytest_cases() -> list[Case]:
    return list(pytest_cases())
