"""``gymbench calibrate-sim`` against a hostile server: wrong JSON shapes and a hang at each stage.

Each case runs the real command (``main``) against :mod:`tests.hostile_server` on 127.0.0.1 and
asserts one line naming the URL (credentials stripped) and what was expected, exit status 2, no
traceback and no profile (nor its folder) left behind. Issue 41: these were ``KeyError: 0``,
``AttributeError: ... 'get'`` and silent waits of more than a minute.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gymbench.cli import main

from ..hostile_server import SHAPE_MODES, STALL_MODES, HostileServer, start_hostile_server

pytestmark = pytest.mark.hostile

QUICK = ["+passes=1", "+concurrencies=1", "+load_warmup_s=0", "+window_s=0.2", "+output_tokens=2"]
"""A calibration as short as it can be: these cases end before the loads (or after one)."""
PASSWORD = "hunter2-not-printed"


@pytest.fixture(scope="module")
def hostile() -> Iterator[HostileServer]:
    server = start_hostile_server([])
    yield server
    server.stop()


def calibrate(
    hostile: HostileServer, mode: str, output: Path, capsys: pytest.CaptureFixture[str], *extra: str
) -> tuple[int, str]:
    url = hostile.url(mode).replace("http://", f"http://me:{PASSWORD}@")
    code = main(["calibrate-sim", "--from", url, f"+output={output}", *QUICK, *extra])
    return code, capsys.readouterr().err.strip()


SHAPES = {
    "props_settings_list": ["/props: expected a JSON object", "got default_generation_settings as a list of numbers"],
    "props_not_object": ["/props: expected a JSON object", "got a list of objects"],
    "models_data_dict": ["/v1/models: expected", "got data as an object", "+model=NAME"],
    "models_data_strings": ["/v1/models: expected", "got data as a list of strings", "+model=NAME"],
    "chat_list": ["/v1/chat/completions: expected a chat completion (a JSON object with choices)"],
}


@pytest.mark.parametrize("mode", SHAPE_MODES)
def test_a_wrong_json_shape_is_one_line_naming_the_url_and_the_shape_expected(
    hostile: HostileServer, mode: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "missing" / "engine.yaml"
    code, err = calibrate(hostile, mode, output, capsys, "+progress=false")
    assert code == 2 and "\n" not in err and "Traceback" not in err and PASSWORD not in err, err
    assert err.startswith(f"gymbench: error: http://127.0.0.1:{hostile.ports[mode]}/"), err
    assert all(part in err for part in SHAPES[mode]), err
    assert not (tmp_path / "missing").exists()


STALLS = {
    "props_stall": "/props gave no answer in 3 tries of 0.3 s; is it running?",
    "models_stall": "/v1/models gave no answer in 3 tries of 0.3 s; is it running?",
    "chat_stall": "/v1/chat/completions gave no answer within 0.3 s: is the engine answering? raise +request_timeout_s",
}


@pytest.mark.parametrize("mode", STALL_MODES)
def test_an_engine_that_never_answers_is_one_line_after_the_deadline(
    hostile: HostileServer, mode: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each read of /props and /v1/models, and the first request, has ``+request_timeout_s`` (at most
    a reachability check's 10 s); the chat endpoint's hang was a wait of 10 minutes (300 s, retried)."""
    code, err = calibrate(hostile, mode, tmp_path / "p.yaml", capsys, "+request_timeout_s=0.3", "+progress=false")
    assert code == 2 and "\n" not in err and PASSWORD not in err, err
    assert f"http://127.0.0.1:{hostile.ports[mode]}{STALLS[mode]}" in err, err
    assert not (tmp_path / "p.yaml").exists()


def test_each_wait_is_said_before_it_starts(
    hostile: HostileServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = calibrate(hostile, "chat_stall", tmp_path / "p.yaml", capsys, "+request_timeout_s=0.3")
    root = f"http://127.0.0.1:{hostile.ports['chat_stall']}"
    lines = err.splitlines()
    assert code == 2 and len(lines) == 3 and PASSWORD not in err, err
    assert lines[0] == (
        f"calibrate-sim: reading the engine's slots and model from {root}/props and /v1/models "
        "(up to 3 tries of 0.3 s each)"
    )
    waits = f"{root}/v1/chat/completions (up to 0.3 s, +request_timeout_s)"
    assert lines[1] == f"calibrate-sim: waiting for a first answer from {waits}"
    assert lines[2].startswith("gymbench: error: ")


def test_credentials_in_the_url_beside_an_api_key_are_one_line_without_the_password(
    hostile: HostileServer, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Refused, not stripped: which of the two the server wants is the user's to say (aiohttp's
    ValueError "Cannot combine AUTHORIZATION header" was the traceback)."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key-for-the-refusal")
    code, err = calibrate(hostile, "chat_list", tmp_path / "p.yaml", capsys, "+progress=false")
    assert code == 2 and "\n" not in err and PASSWORD not in err and "sk-test" not in err, err
    assert "+base_url carries credentials (user:password@) and OPENAI_API_KEY holds an API key" in err
    assert "take the credentials out of +base_url, or unset OPENAI_API_KEY" in err


def test_the_profiles_folder_is_made_as_collects_output_folder_is_and_only_on_success(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A folder that does not exist yet is the project's convention for outputs (collect's
    ``check_output_path`` refuses only a parent that is a file): it appears with the profile. A run
    that fails leaves none (the shape cases above); a parent that is a file is one line."""
    from tests.sim.fake_llama import StepModel, fake_llama_server

    output = tmp_path / "new" / "dir" / "engine.yaml"
    with fake_llama_server(StepModel(slots=1)) as url:
        code = main(["calibrate-sim", "--from", url, f"+output={output}", *QUICK])
        err = capsys.readouterr().err
        assert code == 0 and output.is_file(), err
        assert "calibrate-sim: p=1: " in err and "(1 of 2 phases)" in err  # no terminal: a line a phase
        (tmp_path / "file").write_text("")
        code = main(["calibrate-sim", "--from", url, f"+output={tmp_path / 'file' / 'p.yaml'}", *QUICK])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and "cannot write the profile there" in err, err
    assert "choose another +output" in err
