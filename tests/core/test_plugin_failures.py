"""A third-party plugin that fails (raises on import, names a module or attribute that is not there,
has a syntax error, raises in a registration hook) is skipped with one line naming its entry point
and distribution; every command goes on without it, and a command that asks for what it would have
registered refuses with that line. Never a traceback. Real distributions on ``sys.path``."""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gymbench.cli import main
from gymbench.testing import install_entry_point_plugin

pytestmark = pytest.mark.hostile  # a case of the adversarial sweep (issue 24): benches/hostile_count.sh

_NAMES = itertools.count()

GOOD_HOOK = """
from gymbench import Component, hookimpl
from gymbench.testing import FakeBackend


@hookimpl
def gymbench_register_backends():
    return [Component("{name}-backend", lambda config: FakeBackend(), "a plugin that works")]
"""

FAILURES = {
    "raises-on-import": ("raise RuntimeError('plugin is broken\\non two lines')\n", "failed to load: RuntimeError"),
    "missing-import": ("import gymbench_no_such_module_xyz\n", "failed to load: ModuleNotFoundError"),
    "syntax-error": ("def broken(:\n", "failed to load: SyntaxError"),
    "missing-module": (None, "failed to load: ModuleNotFoundError"),
    "missing-attribute": ("x = 1\n", "failed to load: AttributeError"),
    "hook-raises": (
        "from gymbench import hookimpl\n\n@hookimpl\ndef gymbench_register_verifiers():\n"
        "    raise ValueError('no licence file')\n",
        "failed in gymbench_register_verifiers: ValueError: no licence file",
    ),
    "hook-raises-in-commands": (
        "from gymbench import hookimpl\n\n@hookimpl\ndef gymbench_register_commands():\n    raise KeyError('cmd')\n",
        "failed in gymbench_register_commands: KeyError",
    ),
}

COMMANDS = {
    "version": ["--version"],
    "plugins": ["plugins"],
    "collect-help": ["collect", "--help"],
    "sim-describe": ["sim-server", "+describe=true"],
    "show-help": ["show", "--help"],
    "compare-help": ["compare", "--help"],
    "no-command": [],
}


@pytest.fixture
def broken(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[str, str]]:
    """A broken plugin of the kind asked for, and a working one beside it; (entry point, expected words)."""
    kind = request.param
    source, says = FAILURES[kind]
    module = f"gymbench_broken_{next(_NAMES)}_{kind.replace('-', '_')}"
    install_entry_point_plugin(tmp_path, module, source or "")
    info = tmp_path / f"{module}-0.1.dist-info"
    if kind == "missing-module":
        (tmp_path / f"{module}.py").unlink()
    if kind == "missing-attribute":
        (info / "entry_points.txt").write_text(f"[gymbench]\n{module} = {module}:no_such_plugin\n")
    good = f"gymbench_good_{next(_NAMES)}"
    install_entry_point_plugin(tmp_path, good, GOOD_HOOK.replace("{name}", good))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield module, says
    for name in (module, good):
        sys.modules.pop(name, None)


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        status = main(argv)
    except SystemExit as exc:  # --version and --help end through argparse
        status = int(exc.code or 0)
    out, err = capsys.readouterr()
    return status, out, err


def _the_line(err: str, module: str, says: str) -> None:
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if "plugin" in line and "gymbench: warning" in line]
    assert len(lines) == 1 and module in lines[0], err
    assert lines[0].startswith(f"gymbench: warning: plugin '{module}' (distribution {module} 0.1) "), lines[0]
    assert says in lines[0] and lines[0].endswith("; skipped"), lines[0]


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("broken", list(FAILURES), indirect=True)
def test_a_broken_plugin_is_one_line_and_the_command_goes_on(
    broken: tuple[str, str], command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    module, says = broken
    status, out, err = _run(COMMANDS[command], capsys)
    _the_line(err, module, says)
    assert status == (2 if command == "no-command" else 0), err
    if command == "plugins":
        assert "gymbench_good_" in out  # the working plugin beside it is there


@pytest.mark.parametrize("kind", ["verifier", "backend", "strategy"])
@pytest.mark.parametrize("broken", list(FAILURES), indirect=True)
def test_asking_for_what_a_broken_plugin_would_register_refuses_with_its_line(
    broken: tuple[str, str], kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module, says = broken
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"responses_create_params": {"input": "q"}, "expected_answer": "a"}\n')
    out = tmp_path / "out.jsonl"
    status, _, err = _run(["collect", f"+input_jsonl_fpath={tasks}", f"+output_jsonl_fpath={out}",
                           f"+{kind}=its-{kind}", "+progress=false", "+save_results=false"], capsys)  # fmt: skip
    assert status == 2 and "Traceback" not in err, err
    (error,) = [line for line in err.splitlines() if line.startswith("gymbench: error:")]
    assert f"{kind} 'its-{kind}' is not available: plugin '{module}' (distribution {module} 0.1)" in error
    assert says in error and not out.exists()
