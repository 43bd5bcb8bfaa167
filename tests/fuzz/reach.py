"""What the generated contract tests reach, taken from the code rather than remembered.

* **Commands** come from the plugin registry (``Plugins().commands``); each command's settings
  schema is found by building its parser and catching the schema it hands to
  ``add_settings_arguments`` (every command, the built-in ones included, declares its settings that
  way). A command needs a *stopper* here (how a run of it ends at once once its settings are
  checked), or the reach test fails naming it.
* **Settings** are every field of every schema (nested settings dataclasses as dotted keys), each
  given hostile values chosen by its kind (:data:`VALUES`); a path-like field (``doc(path=True)``)
  also gets a directory, a FIFO, a missing file, a device, a dangling link.
* **File readers** are every function in ``gymbench`` named ``read_*``/``load_*`` whose first
  parameter is a path; each is listed in :data:`READERS` with the command line that reaches it, or
  in :data:`EXCUSED` with the reason, or the reach test fails naming it.
* **Defects known today** are one table, :data:`KNOWN_DEFECTS` (case-id prefix -> the defect),
  so the lead can remove a row once the branch that fixes it is merged.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import os
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .bad_tasks import GOOD, SERVER
from .cases import Env

PACKAGE = Path(__file__).resolve().parents[2] / "gymbench"
SECRET = "sk-fuzz-0123456789abcdefSECRET"
"""The API key every contract case runs with (``OPENAI_API_KEY``): it must appear nowhere."""


# --------------------------------------------------------------------------- commands and settings


def command_schemas() -> dict[str, type[Any]]:
    """Every registered command -> the settings schema its parser is generated from."""
    import gymbench.settings as settings
    from gymbench.plugins import Plugins

    found: dict[str, type[Any]] = {}
    original = settings.add_settings_arguments
    try:
        for name, registered in sorted(Plugins().commands.items()):

            def catch(parser: argparse.ArgumentParser, schema: type[Any], *args: Any, name: str = name,
                      **kwargs: Any) -> None:  # fmt: skip
                found.setdefault(name, schema)
                original(parser, schema, *args, **kwargs)

            settings.add_settings_arguments = catch  # type: ignore[assignment]
            registered.item.configure(argparse.ArgumentParser(prog=f"gymbench {name}"))
            found.setdefault(name, type(None))  # a command without a settings schema
    finally:
        settings.add_settings_arguments = original  # type: ignore[assignment]
    return found


@dataclasses.dataclass(frozen=True)
class Setting:
    command: str
    key: str
    """Dotted for a field of a nested settings dataclass (``cluster.nodes``)."""
    kind: str
    """int, float, str, bool, dict, list, path (see :data:`VALUES`)."""
    positional: bool = False


def kind_of(hint: Any, field: dataclasses.Field[Any]) -> str:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        hint = args[0] if len(args) == 1 else str
    if field.metadata.get("path"):
        return "path"
    origin = typing.get_origin(hint) or hint
    if origin in (dict, typing.Mapping):
        return "dict"
    if origin in (list, tuple):
        return "list"
    return {int: "int", float: "float", bool: "bool"}.get(hint, "str")


def settings_of(command: str, schema: type[Any], prefix: str = "") -> list[Setting]:
    """Every field, nested settings dataclasses flattened to dotted keys."""
    if not dataclasses.is_dataclass(schema):
        return []
    hints = typing.get_type_hints(schema)
    found = []
    for field in dataclasses.fields(schema):
        hint = hints[field.name]
        if dataclasses.is_dataclass(hint):
            found += settings_of(command, hint, f"{prefix}{field.name}.")  # type: ignore[arg-type]
            continue
        positional = bool(field.metadata.get("positional")) and not prefix
        found.append(Setting(command, prefix + field.name, kind_of(hint, field), positional))
    return found


def all_settings() -> list[Setting]:
    return [setting for command, schema in command_schemas().items() for setting in settings_of(command, schema)]


# --------------------------------------------------------------------------- hostile values by kind


def _dir(root: Path) -> str:
    (root / "a-dir").mkdir(exist_ok=True)
    return str(root / "a-dir")


def _fifo(root: Path) -> str:
    fifo = root / "a.fifo"
    if not fifo.exists():
        os.mkfifo(fifo)
    return str(fifo)


def _under_file(root: Path) -> str:
    (root / "a-file").write_text("in the way\n")
    return str(root / "a-file" / "x.json")


def _dangling(root: Path) -> str:
    link = root / "dangling.json"
    if not link.is_symlink():
        link.symlink_to(root / "nowhere" / "x.json")
    return str(link)


Value = str | Callable[[Path], str]
"""A literal, or made in the case's directory (a path to a directory, a FIFO, ...)."""
NUMERIC_COMMON: dict[str, Value] = {"empty": "", "unicode": "\uff13", "nan": "nan", "inf": "inf", "zero": "0",
                                    "negative": "-1"}  # fmt: skip
VALUES: dict[str, dict[str, Value]] = {
    "int": {"wrong-type": "x", "fraction": "1.5", **NUMERIC_COMMON, "huge": "99999999999999999999",
            "tiny": "1e-320"},
    "float": {"wrong-type": "x", **NUMERIC_COMMON, "-inf": "-inf", "huge": "1e308", "tiny": "1e-320",
              "overflow": "1e400"},
    "str": {"empty": "", "unicode": "\u202e\u00e9\U0001f600\u4e2d", "control": "\x1b[2J\x07", "huge": "x" * 5000,
            "wrong-type": "[1, 2]", "mapping": "{a: 1}", "negative": "-1", "interpolation": "${oc.env:HOME}"},
    "bool": {"wrong-type": "maybe", "number": "2", "empty": "", "unicode": "\uff54rue", "list": "[1]"},
    "dict": {"wrong-type": "5", "list": "[1, 2]", "empty": "", "nan": "{a: .nan}", "unicode": "{\u00e9: \u4e2d}",
             "deep": "{a: " * 200 + "1" + "}" * 200},
    "list": {"wrong-type": "{a: 1}", "empty": "", "nested": "[1, [2, [3]]]", "unicode": "[\u202e, \U0001f600]",
             "huge": "[" + ", ".join(["x"] * 2000) + "]"},
    "path": {"directory": _dir, "fifo": _fifo, "missing": lambda root: str(root / "missing" / "x.json"),
             "device": lambda root: "/dev/zero", "under-a-file": _under_file, "dangling-link": _dangling,
             "empty": "", "unicode": "\u202e\U0001f600.json", "name-too-long": lambda root: str(root / ("n" * 300))},
}  # fmt: skip
WRONG_TYPE = {"int": {"wrong-type", "fraction"}, "float": {"wrong-type"}, "bool": {"wrong-type", "unicode", "list"},
              "dict": {"wrong-type", "list"}}  # fmt: skip
"""Value classes that must be refused naming the setting. (A fullwidth digit is a digit to Python,
and a boolean setting reads a number as YAML's truth: both may be accepted.)"""


# --------------------------------------------------------------------------- stoppers per command

Stopper = Callable[[Path, Env, Setting], list[str]]
"""The rest of a command line that ends the command at once once its settings are checked (or
makes it fail fast: a dead server, a missing input), never a long run; it leaves out the setting
under test."""


def _tasks(root: Path) -> str:
    (root / "tasks.jsonl").write_text(GOOD + "\n")
    return str(root / "tasks.jsonl")


def _without(setting: Setting, pairs: list[tuple[str, str]]) -> list[str]:
    return [f"+{key}={value}" for key, value in pairs if key != setting.key]


def _collect(root: Path, env: Env, setting: Setting) -> list[str]:
    """Output is a directory: refused once settings and components are checked, before any server."""
    out = str(root) if setting.key != "input_jsonl_fpath" else str(root / "o.jsonl")
    inp = _tasks(root) if setting.key != "output_jsonl_fpath" else str(root / "no.jsonl")
    return ["collect", *_without(setting, [("progress", "false"), ("input_jsonl_fpath", inp),
                                           ("output_jsonl_fpath", out)])]  # fmt: skip


def _probe(command: str) -> Stopper:
    def stopper(root: Path, env: Env, setting: Setting) -> list[str]:
        return [command, *_without(setting, [("progress", "false"), ("save_results", "false")])]  # no input

    return stopper


def _train(root: Path, env: Env, setting: Setting) -> list[str]:
    (root / "file").write_text("in the way")
    return ["train", *_without(setting, [("save", "fuzz"), ("results_dir", str(root / "file" / "r")),
                                         ("progress", "false")])]  # fmt: skip


def _calibrate_sim(root: Path, env: Env, setting: Setting) -> list[str]:
    """A dead server (port 9): refused at the first probe, or earlier for an output that is a directory."""
    return ["calibrate-sim", *_without(setting, [("base_url", "http://127.0.0.1:9/v1"), ("model", "m"),
            ("progress", "false"), ("max_retries", "0"), ("output", str(root))])]  # fmt: skip


def _records(command: str) -> Stopper:
    """Records that do not exist: refused after the settings are read."""

    def stopper(root: Path, env: Env, setting: Setting) -> list[str]:
        missing = str(root / "missing.json")
        words = [missing, missing] if command in ("compare",) else [missing]
        return [command, *(words if not any(s in setting.key for s in ("baseline", "candidate", "path")) else [])]

    return stopper


def _plain(*words: str) -> Stopper:
    def stopper(root: Path, env: Env, setting: Setting) -> list[str]:
        return [word.format(root=root) for word in words]

    return stopper


STOPPERS: dict[str, tuple[Stopper, tuple[int, ...]]] = {
    # command -> (stopper, the exit statuses an accepted value may end in besides 2)
    "collect": (_collect, ()),
    "tune": (_probe("tune"), ()),
    "diagnose": (_probe("diagnose"), ()),
    "train": (_train, ()),
    "sim-server": (_plain("sim-server", "+describe=true"), (0,)),
    "engine": (_plain("engine", "llama-cpp", "+server_binary={root}/no-llama-server"), ()),
    "calibrate-sim": (_calibrate_sim, (1,)),
    "calibrate": (_plain("calibrate", "--from", "{root}/missing-runs"), ()),
    "compare": (_records("compare"), ()),
    "report": (_records("report"), ()),
    "show": (_records("show"), ()),
    "export": (_plain("export", "{root}/missing.json", "-o", "{root}/out.json"), ()),
    "import": (_records("import"), ()),
    "timings": (_records("timings"), ()),
    "gate": (_plain("gate"), ()),  # the case's directory is not a git repository
    "merge-rollouts": (_plain("merge-rollouts", "{root}/missing.jsonl", "-o", "{root}/merged.jsonl"), ()),
    "baselines": (_plain("baselines", "+results_dir={root}/a-file/results"), (0,)),
    "plugins": (_plain("plugins"), (0,)),
}
LEFT_OUT: dict[str, str] = {
    # "command:key" -> why the generated values are not tried there (a value that is accepted starts real work)
    "collect:input_jsonl_fpath": "an accepted input starts a run; bad_tasks.py and READERS try input files",
    "collect:output_jsonl_fpath": "an accepted output starts a run; bad_command_lines.destination_cases tries them",
    "train:results_dir": "an accepted results_dir starts training; destination_cases tries it",
    "train:save": "an accepted name starts training; destination_cases tries it",
    "sim-server:describe": "false starts a server that runs until stopped",
    "engine:server_binary": "an accepted binary is started; tests/engine tries missing, empty and never-healthy ones",
    "engine:build_only": "true builds llama.cpp (minutes)",
    "baselines:results_dir": "the stopper itself",
    "calibrate:source": "the stopper itself",
    "calibrate:pytest_args": "arguments for pytest, which runs the suite they name",
    "gate:pytest_args": "arguments for pytest, which runs the suite they name",
}


# --------------------------------------------------------------------------- file readers


def _good_records(root: Path) -> tuple[str, str]:
    from .bad_records import record, written

    (root / "base.json").write_bytes(written(record("base")))
    (root / "cand.json").write_bytes(written(record("base", 1.01)))
    return str(root / "base.json"), str(root / "cand.json")


ReaderArgv = Callable[[Path, Env, Callable[[Path], None]], list[str]]
"""(case directory, env, place) -> argv; ``place(path)`` puts the hostile file at ``path``."""


def _at(name: str, argv: Callable[[Path, Env, Path], list[str]]) -> ReaderArgv:
    def build(root: Path, env: Env, place: Callable[[Path], None]) -> list[str]:
        path = root / name
        place(path)
        return argv(root, env, path)

    return build


def _sim_collect(root: Path, env: Env, *extra: str) -> list[str]:
    return ["collect", f"+input_jsonl_fpath={_tasks(root)}", f"+output_jsonl_fpath={root / 'o.jsonl'}",
            f"+base_url={env.base_url}", *SERVER, "+progress=false", *extra]  # fmt: skip


def _sidecar(root: Path, env: Env, place: Callable[[Path], None]) -> list[str]:
    argv = _sim_collect(root, env, "+resume=true")
    (root / "o.jsonl").write_text("")
    place(root / "o.jsonl.run.json")
    return argv


def _resume(root: Path, env: Env, place: Callable[[Path], None]) -> list[str]:
    argv = _sim_collect(root, env, "+resume=true")
    place(root / "o.jsonl")
    return argv


READERS: dict[str, tuple[str, ReaderArgv]] = {
    # "module:function" -> (what it reads, the command line that reaches it with the hostile file)
    "gymbench.record:load_record": ("results records", _at("r.json", lambda r, e, p: ["show", str(p)])),
    "gymbench.record:read_results_json": ("results records", _at("r.json", lambda r, e, p: [
        "compare", str(p), str(p)])),
    "gymbench.gate.pytest_benchmark:load_any": ("records of either format", _at("r.json", lambda r, e, p: [
        "report", str(p)])),
    "gymbench.gate.pytest_benchmark:load_pytest_benchmark": ("pytest-benchmark files",
                                                              _at("pb.json", lambda r, e, p: ["import", str(p)])),
    "gymbench.gate.store:read_json": ("calibrations", _at("cal.json", lambda r, e, p: [
        "compare", *_good_records(r), f"+calibration={p}"])),
    "gymbench.gate.store:load_calibration": ("calibrations", _at("cal.json", lambda r, e, p: [
        "report", *_good_records(r), f"+calibration={p}"])),
    "gymbench.settings:load_settings_file": ("--config YAML/JSON", _at("s.yaml", lambda r, e, p: [
        *_collect(r, e, Setting("collect", "", "str")), "--config", str(p)])),
    "gymbench.sim.profile:read_profile": ("simulator profiles", _at("p.yaml", lambda r, e, p: [
        "sim-server", "+describe=true", f"+profile={p}"])),
    "gymbench.sim.config:load_profile": ("simulator profiles (collect's sim_profile)", _at("p.yaml", lambda r, e, p: [
        *_collect(r, e, Setting("collect", "", "str")), f"+sim_profile={p}"])),
    "gymbench.rollout.dataset:read_tasks": ("task JSONL", _at("t.jsonl", lambda r, e, p: [
        "collect", f"+input_jsonl_fpath={p}", f"+output_jsonl_fpath={r / 'o.jsonl'}", f"+base_url={e.base_url}",
        *SERVER, "+progress=false"])),
    "gymbench.rollout.output:load_resume_state": ("a collect output resumed", _resume),
    "gymbench.rollout.identity:read_run_fingerprint": ("OUT.run.json", _sidecar),
    "gymbench.builtin.arrivals:read_trace": ("trace files", _at("trace.txt", lambda r, e, p: [
        *_sim_collect(r, e), "+strategy=trace", f"+strategy_options.trace_file={p}"])),
    "gymbench.train.lengths:read_rollout_lengths": ("rollouts for train's lengths", _at("rollouts.jsonl",
        lambda r, e, p: ["train", "--size", "tiny", "--steps", "1", "--warmup", "0", "--no-progress", "--no-memory",
                         "--no-flops", "+lengths=rollouts", f"+rollouts={p}"])),
}  # fmt: skip
OTHER_INPUTS: dict[str, tuple[str, ReaderArgv]] = {
    # inputs read by functions not named read_*/load_*: tried the same way
    "timings": ("rollouts for timings", _at("rows.jsonl", lambda r, e, p: ["timings", str(p)])),
    "merge-rollouts": ("rollouts merged", _at("rows.jsonl", lambda r, e, p: [
        "merge-rollouts", str(p), "-o", str(r / "merged.jsonl")])),
}  # fmt: skip
EXCUSED: dict[str, str] = {
    "gymbench.rollout.output:read_pair": "parses one row load_resume_state has read (the path is for messages)",
    "gymbench.rollout.agent_metrics:read_rows": "reads collect's own finished output for NeMo Gym's aggregate",
    "gymbench.builtin.code_sandbox:read_report": "reads the report gymbench's own sandbox child wrote",
    "gymbench.train.rank_watch:read_folder": "reads the heartbeats gymbench's own training ranks write",
    "gymbench.jsonio:read_capped": "the bounded read every whole-file reader above goes through",
    "gymbench.jsonio:read_json_file": "the JSON read of read_run_fingerprint and shard plans (test_bounded_inputs)",
    "gymbench.devtools.structure:load_modules": "a developer tool reading the package's own source",
}
PATH_PARAMETERS = {"path", "sidecar", "folder", "file", "fpath", "source"}


def path_readers() -> set[str]:
    """Every ``read_*``/``load_*`` function in gymbench whose first parameter is a path."""
    found = set()
    for source in PACKAGE.rglob("*.py"):
        module = ".".join(source.relative_to(PACKAGE.parent).with_suffix("").parts)
        for node in ast.walk(ast.parse(source.read_text())):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or not node.args.args:
                continue
            if not node.name.startswith(("read_", "load_")):
                continue
            first = node.args.args[0]
            annotation = ast.unparse(first.annotation) if first.annotation else ""
            if first.arg in PATH_PARAMETERS or "Path" in annotation:
                found.add(f"{module}:{node.name}")
    return found


def _bomb() -> bytes:
    lines = [b"a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        lines.append(f"{chr(97 + i)}: &{chr(97 + i)} [".encode() + b", ".join([f"*{chr(96 + i)}".encode()] * 10) + b"]")
    return b"\n".join(lines) + b"\n"


FileMaker = Callable[[Path], None]


def _bytes(content: bytes) -> FileMaker:
    return lambda path: path.write_bytes(content)


def _fifo_file(path: Path) -> None:
    os.mkfifo(path)


def _link(target: str) -> FileMaker:
    return lambda path: path.symlink_to(target)


def _mkdir(path: Path) -> None:
    path.mkdir()


HOSTILE_FILES: dict[str, FileMaker] = {
    "empty": _bytes(b""),
    "garbage": _bytes(bytes(range(256)) * 8),
    "not-utf8": _bytes(b'{"a": "\xff\xfe"}\n'),
    "truncated": _bytes(b'{"schema": "gymbench'),
    "deep": _bytes(b"[" * 100_000 + b"]" * 100_000 + b"\n"),
    "wrong-shape-list": _bytes(b"[1, 2, 3]\n"),
    "wrong-shape-string": _bytes(b'"text"\n'),
    "null": _bytes(b"null\n"),
    "nan": _bytes(b'{"a": NaN, "b": Infinity}\n'),
    "huge-number": _bytes(b'{"a": ' + b"9" * 5000 + b"}\n"),
    "alias-bomb": _bytes(_bomb()),
    "long-line": _bytes(b'{"a": "' + b"x" * 3_000_000 + b'"}\n'),
    "directory": _mkdir,
    "fifo": _fifo_file,
    "device": _link("/dev/zero"),
    "dangling-link": _link("/nonexistent/gymbench-fuzz"),
    "missing": lambda path: None,
}


# --------------------------------------------------------------------------- defects known today

FIXED_ELSEWHERE = "fixed on another branch"
OPEN = "open: found by the generated sweep, not fixed on this branch"
KNOWN_DEFECTS: dict[str, tuple[str, str]] = {
    # case-id prefix -> (the defect, where it stands); remove a row once the fix is merged
}
"""The one table of generated cases that fail today: each is marked ``xfail(strict=False)`` with
``issue 41: <defect>, <where it stands>``."""


def known_defect(case_id: str) -> str | None:
    """The xfail reason of a case that fails today, or None."""
    for prefix, (defect, where) in KNOWN_DEFECTS.items():
        if case_id.startswith(prefix):
            return f"issue 41: {defect}, {where}"
    return None
