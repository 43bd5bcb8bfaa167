"""The structure figures are a ratchet: a new client session, a setting declared twice, a flag
written by hand or a new import cycle fails here, before review has to find it."""

from __future__ import annotations

from pathlib import Path

import gymbench
from gymbench.devtools.structure import PACKAGE, RATCHET, figures, limits, over_limits

PYPROJECT = Path(gymbench.__file__).resolve().parent.parent / "pyproject.toml"


def test_no_structure_figure_rose_above_its_limit() -> None:
    assert over_limits(figures(PACKAGE), limits(PYPROJECT)) == []


def test_every_ratcheted_figure_has_a_limit() -> None:
    assert set(RATCHET) <= set(limits(PYPROJECT))


def test_a_figure_above_its_limit_is_named_with_what_to_do() -> None:
    result = figures(PACKAGE)
    tight = {key: -1.0 for key in RATCHET}
    lines = over_limits(result, tight)
    assert len(lines) == len(RATCHET)
    assert any(line.startswith("client_sessions: ") and "above its limit -1" in line for line in lines)


def test_the_check_exits_non_zero_when_a_limit_is_missing(tmp_path: Path) -> None:
    from gymbench.devtools.structure import main

    assert main(["--check"]) == 0
    (tmp_path / "pyproject.toml").write_text("[tool.gymbench.structure]\nclient_sessions = 0\n")
    package = tmp_path / "gymbench"
    package.mkdir()
    (package / "client.py").write_text("import aiohttp\n\ndef open_session():\n    return aiohttp.ClientSession()\n")
    assert main(["--check", "--package", str(package)]) == 1
