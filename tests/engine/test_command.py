"""``gymbench engine llama-cpp`` end to end, with a fake llama-server standing in for the real one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from gymbench.cli import main
from tests.engine.test_server import FAKE_SERVER

SHORT_LIVED = FAKE_SERVER.replace(".serve_forever()", ".handle_request()")
"""Answers one request (the health check), then exits: the command then says the server stopped."""

pytest.importorskip("gguf", reason="the model writer needs gguf: pip install 'gymbench[engine]'")
pytest.importorskip("tokenizers", reason="the model writer needs tokenizers: pip install 'gymbench[engine]'")


def test_it_serves_and_prints_the_collect_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    binary = tmp_path / "llama-server"
    binary.write_text(SHORT_LIVED)
    binary.chmod(0o755)
    monkeypatch.setenv("GYMBENCH_LLAMA_SERVER", str(binary))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setitem(sys.modules, "platformdirs", None)
    assert main(["engine", "llama-cpp", "--slots", "2", "--model-size", "tiny"]) == 2
    out, err = capsys.readouterr()
    assert "llama.cpp's llama-server is serving gymbench-tiny-" in out and "/v1 (Ctrl-C to stop)" in out
    assert "gymbench collect +backend=openai +base_url=http://127.0.0.1:" in out and "+model=gymbench-tiny" in out
    assert "gymbench tune +backend=openai" in out
    said = err.splitlines()  # the wait for /health is said as it starts, then the error in one line
    assert len(said) == 2 and "waiting up to" in said[0]
    assert said[1].startswith("gymbench: error: llama-server stopped (status 0)")
    assert list((tmp_path / "cache" / "gymbench" / "llama-cpp" / "models").glob("gymbench-tiny-*.gguf"))


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--slots", "0"], "setting 'slots': got 0, expected a number of at least 1"),
        (["--model-size", "huge"], "setting 'model_size': got 'huge', expected tiny or small"),
    ],
)
def test_bad_settings_are_one_line(argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["engine", "llama-cpp", *argv]) == 2
    err = capsys.readouterr().err
    assert err == f"gymbench: error: {expected}\n"


def test_only_known_engines(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["engine", "vllm"]) == 2
    assert capsys.readouterr().err == "gymbench: error: setting 'engine': got 'vllm', expected one of llama-cpp\n"
    assert main(["engine"]) == 2
    assert "name the engine to run: gymbench engine llama-cpp" in capsys.readouterr().err


def _interruptible() -> None:
    """Ctrl-C reaches the command even where this test runs in a background job, which starts its
    children with SIGINT ignored (and Python then keeps it ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=lambda s: s.name)
def test_a_stopped_or_killed_command_takes_its_server_with_it(tmp_path: Path, signum: signal.Signals) -> None:
    """Ctrl-C and SIGTERM stop the server on the way out; SIGKILL runs nothing, and the kernel then
    sends the server SIGTERM (PR_SET_PDEATHSIG). Either way no llama-server is left serving."""
    psutil = pytest.importorskip("psutil")
    binary = tmp_path / "llama-server"
    binary.write_text(FAKE_SERVER)
    binary.chmod(0o755)
    environment = {**os.environ, "GYMBENCH_LLAMA_SERVER": str(binary), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    command = subprocess.Popen(
        [sys.executable, "-m", "gymbench.cli", "engine", "llama-cpp"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environment, text=True,
        preexec_fn=_interruptible,
    )  # fmt: skip
    try:
        assert command.stdout is not None
        line = command.stdout.readline()  # blocks until the server answered /health (or the command died)
        assert "is serving" in line, line + command.stderr.read() if command.stderr else line
        (server,) = psutil.Process(command.pid).children()
        command.send_signal(signum)
        command.wait(timeout=120)
        gone, alive = psutil.wait_procs([server], timeout=120)
        assert server in gone and not alive
        if signum != signal.SIGKILL:
            assert command.returncode == 128 + signum or command.returncode == 130
            assert command.stderr is not None and "Traceback" not in command.stderr.read()
    finally:
        if command.poll() is None:
            command.kill()
