"""Coverage that follows from the code: every command, setting and file reader in reach.

The reach tests fail, naming what is missing, when a command is registered without a stopper, a
setting's kind has no hostile values, or a ``read_*``/``load_*`` of a path is neither listed nor
excused (:mod:`.reach`). The generated cases (:mod:`.generated`) run through the real CLI; a
seeded sample (one case per setting and per reader) runs by default; the full sweep is ``slow``
and runs with ``GYMBENCH_FUZZ_FULL=1`` (it takes tens of minutes: CI runs ``slow`` tests).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .cases import Env
from .contract import ContractCase, as_params, run_contract, tally
from .generated import all_contract_cases, sample
from .reach import (
    EXCUSED,
    LEFT_OUT,
    OTHER_INPUTS,
    READERS,
    STOPPERS,
    VALUES,
    command_schemas,
    path_readers,
    settings_of,
)

CASES = all_contract_cases()


def check(
    case: ContractCase, tmp_path: Path, env: Env, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    result = run_contract(case, tmp_path, env, capsys, monkeypatch)
    tally(case, result)
    assert not result.problems, f"{case.id}: {result.summary()}"


@pytest.mark.parametrize("case", as_params(CASES, sample(CASES)))
def test_generated_cases(
    case: ContractCase, tmp_path: Path, env: Env, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    check(case, tmp_path, env, capsys, monkeypatch)


# --------------------------------------------------------------------------- reach


def test_every_registered_command_is_in_reach() -> None:
    commands = set(command_schemas())
    missing = sorted(commands - set(STOPPERS))
    stale = sorted(set(STOPPERS) - commands)
    assert not missing, "commands without generated cases (add a stopper to tests/fuzz/reach.py STOPPERS): " + (
        ", ".join(missing)
    )
    assert not stale, f"stoppers for commands no longer registered: {', '.join(stale)}"


def test_every_setting_of_every_command_gets_hostile_values() -> None:
    ids = {case.id.rsplit(":", 1)[0] for case in CASES}
    missing, seen = [], set()
    for command, schema in command_schemas().items():
        for setting in settings_of(command, schema):
            key = f"{command}:{setting.key}"
            seen.add(key)
            if key not in LEFT_OUT and (f"setting/{key}" not in ids or not VALUES.get(setting.kind)):
                missing.append(f"{key} ({setting.kind})")
    assert not missing, "settings without generated cases: " + ", ".join(missing)
    assert not set(LEFT_OUT) - seen, f"LEFT_OUT names settings that no longer exist: {sorted(set(LEFT_OUT) - seen)}"


def test_every_file_reader_is_in_reach() -> None:
    found = path_readers()
    listed = set(READERS) | set(EXCUSED)
    missing = sorted(found - listed)
    assert not missing, "file readers neither in READERS nor EXCUSED (tests/fuzz/reach.py): " + ", ".join(missing)
    assert not listed - found, f"READERS/EXCUSED name readers that no longer exist: {sorted(listed - found)}"
    ids = {case.id.rsplit(":", 1)[0] for case in CASES}
    assert all(f"reader/{name}" in ids for name in [*READERS, *OTHER_INPUTS])


def test_the_sample_touches_every_setting_and_reader_and_is_seeded() -> None:
    groups = {case.id.rsplit(":", 1)[0] for case in CASES}
    assert {case.id.rsplit(":", 1)[0] for case in sample(CASES)} == groups
    assert [case.id for case in sample(CASES)] == [case.id for case in sample(all_contract_cases())]
    assert len({case.id for case in CASES}) == len(CASES), "case ids must be unique"


def test_every_known_defect_names_generated_cases() -> None:
    """A row of KNOWN_DEFECTS that matches no case is stale (renamed, or its case is gone)."""
    from .reach import KNOWN_DEFECTS
    from .test_client_paths import CASES as CLIENT_CASES

    ids = [case.id for case in [*CASES, *CLIENT_CASES]]
    stale = [prefix for prefix in KNOWN_DEFECTS if not any(case_id.startswith(prefix) for case_id in ids)]
    assert not stale, f"KNOWN_DEFECTS rows that match no generated case: {stale}"
