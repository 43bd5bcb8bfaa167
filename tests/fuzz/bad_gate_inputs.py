"""Issue 24's smaller things and the gate's inputs, made hostile: ``gymbench compare`` and
``gymbench calibrate`` given bad option values, bad specs, bad calibrations and a bad
``[tool.gymbench.compare]``; records and calibrations that are no regular file or list a
benchmark twice; ``gymbench gate --base`` on refs that name no commit (issue 41);
``--gymbench-save`` names; ``merge-rollouts --input`` paths.

Every case is its own test (marked ``hostile``, counted in the issue's note). What each outcome
must satisfy is :mod:`.cases`: no traceback, a documented status, and on an input error one
``gymbench: error:`` line, last, naming what it must.
"""

from __future__ import annotations

import json
import os
import random
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

from .bad_records import DEEP, record
from .cases import Case, Env, Prepared

INPUT_ERROR = (2,)
ANY_VERDICT = (0, 1, 2, 3)
"""A value that may be valid: any of compare's documented statuses, never a traceback."""


def _store(workdir: Path, runs: int = 0, damaged: int | None = None) -> list[str]:
    """``base.json``, ``cand.json`` (30 % slower, as a load change makes a rerun) and ``runs`` stored runs."""
    (workdir / "base.json").write_text(json.dumps(record("base")))
    (workdir / "cand.json").write_text(json.dumps(record("cand", 1.3)))
    machine = workdir / "results" / "fuzz-machine"
    for index in range(runs):
        machine.mkdir(parents=True, exist_ok=True)
        path = machine / f"2026010{index + 1}T000000_aa-{index}.json"
        path.write_text(DEEP if index == damaged else json.dumps(record(f"aa-{index}", 1 + 0.01 * index)))
    return ["--results-dir", str(workdir / "results")]


def _special(workdir: Path) -> dict[str, Path]:
    """Paths that are no regular file (FIFOs nobody writes to, a socket, devices) and a record that
    lists a benchmark twice, made only when a case names them (issue 41)."""
    return {"FIFOJSON": workdir / "fifo.json", "BAREFIFO": workdir / "fifo", "SOCKET": workdir / "record.sock",
            "DEVZERO": Path("/dev/zero"), "DEVNULL": Path("/dev/null"), "TWICE": workdir / "twice.json"}  # fmt: skip


def _make_special(token: str, path: Path) -> None:
    if path.exists() or token.startswith("DEV"):
        return
    if token == "TWICE":
        data = record("twice")
        data["benchmarks"].append(data["benchmarks"][0])
        path.write_text(json.dumps(data))
    else:
        os.mknod(path, 0o600 | (stat.S_IFSOCK if token == "SOCKET" else stat.S_IFIFO))


def _words(words: list[str], workdir: Path) -> list[str]:
    (workdir / "file").write_text("in the way")
    (workdir / "dir").mkdir(exist_ok=True)
    (workdir / "empty.json").write_text("")
    (workdir / "deep.json").write_text(DEEP)
    special = _special(workdir)
    for token, path in special.items():
        if any(token in word for word in words):
            _make_special(token, path)
    places = {"BASE": workdir / "base.json", "CAND": workdir / "cand.json", "FILE": workdir / "file",
              "DIR": workdir / "dir", "EMPTY": workdir / "empty.json", "DEEPFILE": workdir / "deep.json",
              "MISSING": workdir / "missing.json", **special}  # fmt: skip
    out = []
    for word in words:
        for key, place in places.items():
            word = word.replace(key, str(place))
        out.append(word)
    return out


def compare_case(name: str, words: list[str], statuses: tuple[int, ...], mention: str = "") -> Case:
    def build(workdir: Path, env: Env) -> Prepared:
        store = _store(workdir)
        argv = _words(words, workdir)
        return Prepared(["compare", *argv, *store], mentions=_words([mention], workdir) if mention else [])

    return Case("gate", f"compare:{name}", build, statuses=statuses)


# (name, words after `compare`, statuses, what the error must name)
COMPARE_OPTIONS: list[tuple[str, list[str], tuple[int, ...], str]] = [
    *[(f"min-effect-{v}", ["BASE", "CAND", "--min-effect", v], INPUT_ERROR, "min")
      for v in ("nan", "inf", "-inf", "-1", "0", "1e999", "x", "")],  # 0x10 reads as 16, as +min_effect=0x10 does
    *[(f"alpha-{v}", ["BASE", "CAND", "--alpha", v], INPUT_ERROR, "alpha")
      for v in ("0", "1", "2", "-0.5", "nan", "inf", "x", "")],
    ("fail-on-bogus", ["BASE", "CAND", "--fail-on", "bogus"], INPUT_ERROR, "fail_on"),
    ("fail-on-empty", ["BASE", "CAND", "--fail-on", ""], INPUT_ERROR, "fail_on"),
    ("fail-on-upper", ["BASE", "CAND", "--fail-on", "REGRESSION"], INPUT_ERROR, "fail_on"),
    ("metric-unknown", ["BASE", "CAND", "--metric", "no_such_metric"], (3,), ""),
    ("metric-empty", ["BASE", "CAND", "--metric", ""], (3,), ""),
    ("calibration-missing", ["BASE", "CAND", "--calibration", "MISSING"], INPUT_ERROR, "MISSING"),
    ("calibration-a-directory", ["BASE", "CAND", "--calibration", "DIR"], INPUT_ERROR, "DIR"),
    ("calibration-empty", ["BASE", "CAND", "--calibration", "EMPTY"], INPUT_ERROR, "EMPTY"),
    ("calibration-deep", ["BASE", "CAND", "--calibration", "DEEPFILE"], INPUT_ERROR, "DEEPFILE"),
    ("calibration-a-record", ["BASE", "CAND", "--calibration", "BASE"], INPUT_ERROR, "BASE"),
    ("calibration-under-a-file", ["BASE", "CAND", "--calibration", "FILE/x.json"], INPUT_ERROR, "FILE"),
    ("calibration-nul", ["BASE", "CAND", "--calibration", "a\x00b.json"], INPUT_ERROR, "calibration"),
    ("calibration-long-name", ["BASE", "CAND", "--calibration", "c" * 5000 + ".json"], INPUT_ERROR, "ccc"),
    ("markdown-a-directory", ["BASE", "CAND", "--markdown", "DIR"], INPUT_ERROR, "DIR"),
    ("markdown-under-a-file", ["BASE", "CAND", "--markdown", "FILE/x.md"], INPUT_ERROR, "FILE"),
    ("baseline-empty", ["", "CAND"], INPUT_ERROR, "baseline"),
    ("baseline-nul", ["a\x00b", "CAND"], INPUT_ERROR, "a\\x00b"),
    ("baseline-long", ["b" * 5000, "CAND"], INPUT_ERROR, "baseline"),
    ("baseline-long-path", ["b" * 5000 + ".json", "CAND"], INPUT_ERROR, "bbb"),
    ("baseline-glob-no-match", ["zz-*", "CAND"], INPUT_ERROR, "zz-*"),
    ("baseline-bad-glob", ["[", "CAND"], INPUT_ERROR, "["),
    ("baseline-latest-empty-store", ["latest", "CAND"], INPUT_ERROR, "latest"),
    ("baseline-unknown-ref", ["v99.99.99", "CAND"], INPUT_ERROR, "v99.99.99"),
    ("baseline-a-directory", ["DIR", "CAND"], INPUT_ERROR, "DIR"),
    ("baseline-under-a-file", ["FILE/x.json", "CAND"], INPUT_ERROR, "FILE"),
    ("baseline-not-json", ["FILE", "CAND"], INPUT_ERROR, "FILE"),
    ("baseline-empty-file", ["EMPTY", "CAND"], INPUT_ERROR, "EMPTY"),
    ("candidate-empty", ["BASE", ""], INPUT_ERROR, "latest"),  # "" is the default, latest
    ("candidate-nul", ["BASE", "a\x00b"], INPUT_ERROR, "a\\x00b"),
    ("candidate-glob-no-match", ["BASE", "zz-*"], INPUT_ERROR, "zz-*"),
    ("candidate-a-directory", ["BASE", "DIR"], INPUT_ERROR, "DIR"),
    ("candidate-deep", ["BASE", "DEEPFILE"], INPUT_ERROR, "DEEPFILE"),
    ("itself", ["BASE", "BASE"], ANY_VERDICT, ""),
    ("load-shift-uncalibrated", ["BASE", "CAND", "--fail-on", "regression"], (0,), ""),
    # issue 41: no regular file (a FIFO blocked: --calibration forever, a record 30 s), a benchmark twice
    *[(f"{side}-{name}", words, INPUT_ERROR, said)
      for name, token, said in (("fifo-json", "FIFOJSON", "is a FIFO"), ("fifo", "BAREFIFO", "is a FIFO"),
                                ("socket", "SOCKET", "is a socket"), ("dev-zero", "DEVZERO", "is a device"),
                                ("dev-null", "DEVNULL", "is a device"), ("twice", "TWICE", "listed twice"))
      for side, words in (("baseline", [token, "CAND"]), ("candidate", ["BASE", token]),
                          ("calibration", ["BASE", "CAND", "--calibration", token]))
      if not (token == "TWICE" and side == "calibration")],
]  # fmt: skip

GATE_REFS: list[tuple[str, list[str], str]] = [
    ("empty", ["--base", ""], "got an empty ref"),
    ("blank", ["--base", "  "], "got an empty ref"),
    ("an-option", ["--base=--all"], "got an option"),
    ("far-back", ["--base", "HEAD~99999"], "past the history of HEAD, 1 commit long: it is the first commit"),
    ("parent-of-the-first", ["--base", "HEAD^"], "it is the first commit, with no parent"),
    ("a-blob", ["--base", "BLOB"], "it names a blob, not a commit"),
    ("a-tree", ["--base", "TREE"], "it names a tree, not a commit"),
    ("unknown", ["--base", "no-such-branch"], "no branch, tag or commit has that name"),
    ("long", ["--base", "x" * 5000], "..."),
    ("control-characters", ["--base", "HEAD\x1b[2J\u202e"], "'HEAD\\x1b[2J\\u202e'"),
]
"""``gymbench gate`` words on odd refs (issue 41), in a repository of one commit: one line saying why."""

PYPROJECT_TABLES: list[tuple[str, str, tuple[int, ...]]] = [
    ("invalid-toml", "[tool.gymbench.compare\nmin_effect = 0.1\n", INPUT_ERROR),
    ("unknown-key", "[tool.gymbench.compare]\nmin_efect = 0.1\n", INPUT_ERROR),
    ("min-effect-text", '[tool.gymbench.compare]\nmin_effect = "x"\n', INPUT_ERROR),
    ("min-effect-negative", "[tool.gymbench.compare]\nmin_effect = -1\n", INPUT_ERROR),
    ("min-effect-inf", "[tool.gymbench.compare]\nmin_effect = inf\n", INPUT_ERROR),
    ("min-effect-nan", "[tool.gymbench.compare]\nmin_effect = nan\n", INPUT_ERROR),
    ("min-effect-table", "[tool.gymbench.compare]\nmin_effect = {a = 1}\n", INPUT_ERROR),
    ("alpha-five", "[tool.gymbench.compare]\nalpha = 5\n", INPUT_ERROR),
    ("alpha-bool", "[tool.gymbench.compare]\nalpha = true\n", INPUT_ERROR),
    ("power-text", '[tool.gymbench.compare]\npower = "x"\n', INPUT_ERROR),
    ("instructions-zero", "[tool.gymbench.compare]\ninstructions_min_effect = 0\n", INPUT_ERROR),
    ("per-benchmark-list", "[tool.gymbench.compare]\nper_benchmark = [1]\n", INPUT_ERROR),
    ("per-benchmark-text-value", '[tool.gymbench.compare]\nper_benchmark = {"*" = "y"}\n', INPUT_ERROR),
    ("per-benchmark-negative", '[tool.gymbench.compare]\nper_benchmark = {"*" = -1}\n', INPUT_ERROR),
    ("per-benchmark-nan", '[tool.gymbench.compare]\nper_benchmark = {"*" = nan}\n', INPUT_ERROR),
    ("metrics-text", '[tool.gymbench.compare]\nmetrics = "time"\n', ANY_VERDICT),
    ("metrics-numbers", "[tool.gymbench.compare]\nmetrics = [1, 2]\n", (2, 3)),
    ("compare-not-a-table", "[tool.gymbench]\ncompare = 5\n", INPUT_ERROR),
    ("gymbench-not-a-table", "[tool]\ngymbench = [1]\n", ANY_VERDICT),
    ("not-utf8", b"[tool.gymbench.compare]\nmin_effect = 0.1 # \xff\n".decode("latin-1"), INPUT_ERROR),
]


def gate_ref_case(name: str, words: list[str], mention: str) -> Case:
    """``gymbench gate`` in a real repository of one commit, on a ref that names no commit."""

    def build(workdir: Path, env: Env) -> Prepared:
        def git(*args: str) -> str:
            done = subprocess.run(["git", "-c", "user.email=f@example.com", "-c", "user.name=f", *args], cwd=workdir,
                                  capture_output=True, text=True, check=True, timeout=60)  # fmt: skip
            return done.stdout.strip()

        git("init", "-q")
        (workdir / "README.md").write_text("first\n")
        git("add", "README.md")
        git("commit", "-qm", "first")
        ids = {"BLOB": git("rev-parse", "HEAD:README.md"), "TREE": git("rev-parse", "HEAD^{tree}")}
        return Prepared(["gate", *(ids.get(word, word) for word in words)], mentions=[mention])

    return Case("gate", f"gate-base:{name}", build)


def pyproject_case(name: str, content: str, statuses: tuple[int, ...]) -> Case:
    def build(workdir: Path, env: Env) -> Prepared:
        store = _store(workdir)
        pyproject = workdir / "pyproject.toml"
        pyproject.write_bytes(content.encode("latin-1") if name == "not-utf8" else content.encode())
        argv = ["compare", str(workdir / "base.json"), str(workdir / "cand.json"), *store]
        return Prepared(argv, mentions=["pyproject.toml"] if statuses == INPUT_ERROR else [])

    return Case("gate", f"pyproject:{name}", build, statuses=statuses)


def calibrate_case(name: str, words: list[str], runs: int, statuses: tuple[int, ...], mention: str,
                   damaged: int | None = None) -> Case:  # fmt: skip
    def build(workdir: Path, env: Env) -> Prepared:
        store = _store(workdir, runs, damaged)
        argv = _words(words, workdir)
        damaged_path = workdir / "results" / "fuzz-machine" / f"2026010{(damaged or 0) + 1}T000000_aa-{damaged}.json"
        named = str(damaged_path) if mention == "DAMAGED" else _words([mention], workdir)[0]
        return Prepared(["calibrate", *store, *argv], mentions=[named] if named else [])

    return Case("gate", f"calibrate:{name}", build, statuses=statuses)


CALIBRATE: list[tuple[str, list[str], int, tuple[int, ...], str, int | None]] = [
    ("from-no-match", ["--from", "zz-*"], 3, INPUT_ERROR, "zz-*", None),
    ("from-one-run", ["--from", "aa-*"], 1, INPUT_ERROR, "3", None),
    ("from-two-runs", ["--from", "aa-*"], 2, INPUT_ERROR, "3", None),
    ("from-empty", ["--from", ""], 3, INPUT_ERROR, "", None),
    ("from-bad-glob", ["--from", "["], 3, INPUT_ERROR, "[", None),
    ("from-nul", ["--from", "a\x00*"], 3, INPUT_ERROR, "", None),
    ("from-a-damaged-run", ["--from", "aa-*"], 3, INPUT_ERROR, "DAMAGED", 1),
    ("from-unknown-ref", ["--from", "v99.99.99"], 3, INPUT_ERROR, "v99.99.99", None),
    ("runs-zero", ["--runs", "0", "DIR"], 0, INPUT_ERROR, "runs", None),
    ("runs-negative", ["--runs", "-3", "DIR"], 0, INPUT_ERROR, "runs", None),
    ("runs-one", ["--runs", "1", "DIR"], 0, INPUT_ERROR, "runs", None),
    ("runs-text", ["--runs", "x", "DIR"], 0, INPUT_ERROR, "runs", None),
    ("runs-huge", ["--runs", "1" + "0" * 30, "MISSING"], 0, INPUT_ERROR, "", None),
    ("name-escapes", ["--from", "aa-*", "--name", "../x"], 3, INPUT_ERROR, "../x", None),
    ("name-slash", ["--from", "aa-*", "--name", "a/b"], 3, INPUT_ERROR, "a/b", None),
    ("name-empty", ["--from", "aa-*", "--name", ""], 3, INPUT_ERROR, "save", None),
    ("name-120", ["--from", "aa-*", "--name", "n" * 120], 3, INPUT_ERROR, "nnn", None),
    ("name-nul", ["--from", "aa-*", "--name", "a\x00b"], 3, INPUT_ERROR, "save", None),
    ("min-effect-nan", ["--from", "aa-*", "--min-effect", "nan"], 3, INPUT_ERROR, "min", None),
    ("min-effect-negative", ["--from", "aa-*", "--min-effect", "-1"], 3, INPUT_ERROR, "min", None),
    ("results-dir-under-a-file", ["--from", "aa-*", "--results-dir", "FILE/r"], 3, INPUT_ERROR, "FILE", None),
    ("results-dir-a-file", ["--from", "aa-*", "--results-dir", "FILE"], 3, INPUT_ERROR, "FILE", None),
]


def merge_input_case(name: str, where: str) -> Case:
    """``merge-rollouts --input PATH`` that cannot be read: the error names ``--input``, the flag run."""

    def build(workdir: Path, env: Env) -> Prepared:
        split = workdir / "a.jsonl"
        split.write_text(json.dumps({"task_index": 0, "rollout_index": 0, "status": "ok"}) + "\n")
        path = _words([where], workdir)[0]
        argv = ["merge-rollouts", str(split), "-o", str(workdir / "all.jsonl"), "--input", path]
        return Prepared(argv, mentions=["--input"])

    return Case("gate", f"merge-input:{name}", build)


MERGE_INPUTS = [("missing", "MISSING"), ("missing-dir", "DIR/nope/tasks.jsonl"), ("a-directory", "DIR"),
                ("under-a-file", "FILE/tasks.jsonl"), ("empty-path", "")]  # fmt: skip
KNOWN_DEFECTS: dict[str, str] = {}
"""Found by these cases in files this sweep's author does not own: strict xfails, for their owners."""


def save_name_case(name: str, save: str) -> Case:
    """``--gymbench-save NAME`` checked at session start by ``+run_name``'s rule: pytest's usage error (4)."""
    suite = "def test_sum(gymbench):\n    gymbench.measure(sum, range(10))\n"

    def build(workdir: Path, env: Env) -> Prepared:
        (workdir / "test_bench.py").write_text(suite)
        argv = [str(workdir / "test_bench.py"), "--gymbench-quick", "--gymbench-save", save,
                "--gymbench-results-dir", str(workdir / "results")]  # fmt: skip

        def nothing_saved(status: int | None, out: str, err: str) -> str | None:
            saved = list((workdir / "results").rglob("*.json")) if (workdir / "results").exists() else []
            return f"saved {saved} under a refused name" if saved else None

        return Prepared(argv, mentions=["--gymbench-save"], check=nothing_saved)

    return Case("gate", f"save-name:{name}", build, statuses=(4,), pytest_run=True)


def save_names(rng: random.Random) -> Iterator[tuple[str, str]]:
    for length in (102, 120, 255, 5000):
        yield f"length-{length}", "n" * length
    yield from [("empty", ""), ("dot", "."), ("dotdot", ".."), ("slash", "a/b"), ("backslash", "a\\b"),
                ("space", "a b"), ("tab", "a\tb"), ("leading-dash", "-x"), ("leading-dot", ".x"),
                ("accented", "café"), ("cjk", "名前"), ("newline", "a\nb"), ("colon", "a:b")]  # fmt: skip
    alphabet = "/\\:*?\"<>| \t'$`"
    for index in range(3):
        yield f"random-{index}", "r" + "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 8)))


def gate_input_cases(seed: int = 24) -> list[Case]:
    rng = random.Random(seed)
    cases = [compare_case(*spec) for spec in COMPARE_OPTIONS]
    cases += [gate_ref_case(*spec) for spec in GATE_REFS]
    cases += [pyproject_case(*spec) for spec in PYPROJECT_TABLES]
    cases += [calibrate_case(*spec) for spec in CALIBRATE]
    cases += [merge_input_case(*spec) for spec in MERGE_INPUTS]
    cases += [save_name_case(name, value) for name, value in save_names(rng)]
    return cases
