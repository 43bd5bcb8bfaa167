"""Issue 28: no command that writes may write over one of its inputs, also through links.

Each writing command (timings -o, export -o, report -o/--markdown, merge-rollouts -o over a part or
over --input) is pointed at its own input by the same path, a relative path, a symlink, a hard link
and a symlinked folder: every one is refused with one line and exit 2, and the input keeps its bytes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from gymbench.cli import main
from gymbench.errors import GymbenchError
from gymbench.jsonio import AtomicFile, refuse_inputs, same_file

pytestmark = pytest.mark.hostile  # a case of the adversarial sweep (issue 24): benches/hostile_count.sh

ROW = {"task_index": 0, "rollout_index": 0, "status": "ok", "timings": {"total": 1.0}, "usage": {}}


def _alias(kind: str, target: Path, tmp_path: Path) -> str:
    """Another name for ``target``: the same one, relative, a symlink, a hard link, through a linked folder."""
    if kind == "same":
        return str(target)
    if kind == "relative":
        return os.path.relpath(target)
    if kind == "symlink":
        link = tmp_path / "link.out"
        link.symlink_to(target)
        return str(link)
    if kind == "hardlink":
        link = tmp_path / "hard.out"
        os.link(target, link)
        return str(link)
    if kind == "linked_folder":
        folder = tmp_path / "elsewhere"
        folder.symlink_to(target.parent, target_is_directory=True)
        return str(folder / target.name)
    raise AssertionError(kind)


def _timings(inp: Path, out: str, tmp: Path) -> list[str]:
    return ["timings", str(inp), "-o", out]


def _export(inp: Path, out: str, tmp: Path) -> list[str]:
    return ["export", str(inp), "-o", out]


def _report(inp: Path, out: str, tmp: Path) -> list[str]:
    return ["report", str(inp), "-o", out]


def _report_markdown(inp: Path, out: str, tmp: Path) -> list[str]:
    return ["report", str(inp), "-o", str(tmp / "r.html"), "--markdown", out]


def _merge_part(inp: Path, out: str, tmp: Path) -> list[str]:
    return ["merge-rollouts", str(inp), "-o", out, "--overwrite"]


def _merge_second_part(inp: Path, out: str, tmp: Path) -> list[str]:
    other = tmp / "other.jsonl"
    other.write_text(json.dumps({**ROW, "task_index": 1}) + "\n")
    return ["merge-rollouts", str(other), str(inp), "-o", out, "+overwrite=true"]


def _merge_tasks(inp: Path, out: str, tmp: Path) -> list[str]:
    part = tmp / "part.jsonl"
    part.write_text(json.dumps(ROW) + "\n")
    return ["merge-rollouts", str(part), "-o", out, "--input", str(inp), "--overwrite"]


COMMANDS: dict[str, Callable[[Path, str, Path], list[str]]] = {
    "timings": _timings,
    "export": _export,
    "report": _report,
    "report_markdown": _report_markdown,
    "merge_part": _merge_part,
    "merge_second_part": _merge_second_part,
    "merge_tasks": _merge_tasks,
}
ALIASES = ("same", "relative", "symlink", "hardlink", "linked_folder")


@pytest.mark.parametrize("alias", ALIASES)
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_command_never_writes_over_its_input(
    command: str, alias: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    data = tmp_path / "data"
    data.mkdir()
    inp = data / "input.jsonl"
    inp.write_text(json.dumps(ROW) + "\n")
    before = inp.read_bytes()
    argv = COMMANDS[command](inp, _alias(alias, inp, tmp_path), tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "is also an input of this command" in err and "choose another" in err, err
    assert inp.read_bytes() == before
    assert inp.is_file() and not inp.is_symlink()
    assert not [p for p in data.iterdir() if p.name.endswith(".tmp")]  # no temporary file left


def test_same_file_sees_links_and_paths_not_yet_written(tmp_path: Path) -> None:
    first = tmp_path / "a"
    first.write_text("x")
    (tmp_path / "b").symlink_to(first)
    os.link(first, tmp_path / "c")
    assert same_file(first, tmp_path / "b") and same_file(tmp_path / "b", tmp_path / "c")
    assert same_file(tmp_path / "new", tmp_path / "." / "new")  # neither exists yet: the resolved path
    assert not same_file(first, tmp_path / "new")
    (tmp_path / "d").write_text("x")  # equal bytes, another file
    assert not same_file(first, tmp_path / "d")
    assert not same_file(first, "bad\0name")


def test_atomic_file_refuses_an_input_before_creating_anything(tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text("keep\n")
    with pytest.raises(GymbenchError, match=r"is also an input of this command .*; choose another -o"):
        AtomicFile(source, inputs=[None, tmp_path / "other", source])
    assert source.read_text() == "keep\n" and sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]
    refuse_inputs(tmp_path / "out", [source, None])  # another file: no error
