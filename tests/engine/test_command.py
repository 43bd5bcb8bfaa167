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


def test_replicas_start_on_consecutive_ports_one_with_fewer_slots_and_stop_together(tmp_path: Path) -> None:
    """``--replicas 3 --slow-replica-slots 1``: three servers, the last with one slot, the collect
    and tune lines over the three URLs; one replica killed leaves the other two serving (a run over
    them fails over: the command used to stop them all); SIGTERM stops the rest."""
    psutil = pytest.importorskip("psutil")
    binary = tmp_path / "llama-server"
    binary.write_text(FAKE_SERVER)
    binary.chmod(0o755)
    environment = {**os.environ, "GYMBENCH_LLAMA_SERVER": str(binary), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    port = consecutive_free_ports(3)
    command = subprocess.Popen(
        [sys.executable, "-m", "gymbench.cli", "engine", "llama-cpp", "--replicas", "3", "--slots", "4",
         "--slow-replica-slots", "1", "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environment, text=True, preexec_fn=_interruptible,
    )  # fmt: skip
    try:
        assert command.stdout is not None
        said = [command.stdout.readline() for _ in range(6)]
        urls = [f"http://127.0.0.1:{port + i}/v1" for i in range(3)]
        assert "as 3 replicas (Ctrl-C stops all)" in said[0], said
        slots = [line.strip().split("   ")[0] for line in said[1:4]]
        assert slots == [f"{urls[0]}: 4 slots", f"{urls[1]}: 4 slots", f"{urls[2]}: 1 slot"]
        assert f"'+base_url=[{','.join(urls)}]'" in said[4] and "+num_samples_in_parallel=9" in said[4]
        assert said[5].strip().startswith("gymbench tune +backend=openai '+base_url=[")
        servers = psutil.Process(command.pid).children()
        assert len(servers) == 3
        argv = [server.cmdline() for server in servers]
        assert sorted(a[a.index("-np") + 1] for a in argv) == ["1", "4", "4"]
        victim = next(server for server in servers if f"{port + 1}" in server.cmdline())
        victim.kill()  # one replica dies: the others go on serving, and the command says so once
        assert command.stderr is not None
        warned = next(line for line in command.stderr if "replicas still serving" in line)
        assert f"at {urls[1]}; 2 replicas still serving" in warned
        others = [server for server in servers if server is not victim]
        assert command.poll() is None and all(server.is_running() for server in others)
        command.send_signal(signal.SIGTERM)
        command.wait(timeout=120)
        gone, alive = psutil.wait_procs(others, timeout=120)
        assert not alive and command.returncode == 128 + signal.SIGTERM
    finally:
        if command.poll() is None:
            command.kill()


def test_a_slow_replica_needs_replicas(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["engine", "llama-cpp", "--slow-replica-slots", "1"]) == 2
    assert "slow_replica_slots" in capsys.readouterr().err


def consecutive_free_ports(count: int) -> int:
    """The first of ``count`` consecutive ports free at once (bound together, then let go), so that
    another test's ephemeral port is unlikely to sit on port+1 when the replicas start."""
    import contextlib
    import random
    import socket

    for _ in range(200):
        base = random.randint(20000, 32000)  # below Linux's ephemeral ports (32768-60999): no client lands there
        with contextlib.ExitStack() as held:
            try:
                for port in range(base, base + count):
                    sock = held.enter_context(socket.socket())
                    sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return base
    raise RuntimeError(f"no {count} consecutive free ports found")
