"""Which backend a run uses: the simulator stands in only when no server at all is named.

A NeMo Gym user types ``+agent_name=...``; an OpenAI-compatible user ``+base_url=...``. Either one
names a server, so a run that cannot reach it fails with one clear line and writes no row; it never
collects from the simulator instead.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from gymbench.cli import main
from gymbench.collect.config import CollectConfig
from gymbench.collect.target import chosen_backend
from gymbench.settings import build_settings

from .test_collect_cli import EXAMPLES


@pytest.mark.parametrize(
    ("dotlist", "expected"),
    [
        ([], ("openai", True)),
        (["+model=m"], ("openai", True)),
        (["+base_url=http://h/v1"], ("openai", False)),
        (["+agent_name=a"], ("nemo-gym", False)),
        (["+agent_url=http://h:1"], ("nemo-gym", False)),
        (["+head_server.port=12000"], ("nemo-gym", False)),
        (["+backend=openai"], ("openai", False)),
        (["+backend=nemo-gym"], ("nemo-gym", False)),
        (["+backend=custom", "+agent_name=a"], ("custom", False)),
    ],
)
def test_the_simulator_stands_in_only_when_no_server_is_named(dotlist: list[str], expected: tuple) -> None:
    assert chosen_backend(build_settings(CollectConfig, [item.lstrip("+") for item in dotlist])) == expected


@pytest.mark.parametrize(
    ("settings", "says"),
    [
        (["+agent_name=simple_agent", "+head_server.port={dead}"], "cannot reach the NeMo Gym head server"),
        (["+backend=nemo-gym", "+head_server.port={dead}"], "cannot reach the NeMo Gym head server"),
        (["+agent_url=http://127.0.0.1:{dead}"], "cannot reach the agent server"),
        (["+base_url=http://127.0.0.1:{dead}/v1", "+model=m"], "cannot reach the model server"),
        (["+backend=openai", "+model=m"], "the openai backend needs +base_url"),
    ],
)
def test_a_named_server_that_is_not_there_is_a_clear_error_never_the_simulator(
    settings: list[str], says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead = probe.getsockname()[1]
    out = tmp_path / "o.jsonl"
    status = main([
        "collect", f"+input_jsonl_fpath={EXAMPLES}", f"+output_jsonl_fpath={out}", "+progress=false", "+limit=20",
        "+num_samples_in_parallel=2", "+save_results=false", *(item.format(dead=dead) for item in settings),
    ])  # fmt: skip
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("gymbench: error:")]
    assert status != 0 and len(errors) == 1 and says in errors[0], err
    assert "simulated server" not in err and "Traceback" not in err
    assert not out.exists() or out.read_text() == ""  # no row: nothing was tried, so nothing failed


def test_head_server_settings_are_checked_before_anything_runs() -> None:
    from gymbench import GymbenchError

    with pytest.raises(GymbenchError, match="head_server.port"):
        build_settings(CollectConfig, ["head_server.port=0"])
    with pytest.raises(GymbenchError, match="only the keys host and port"):
        build_settings(CollectConfig, ["head_server.hostname=x"])
