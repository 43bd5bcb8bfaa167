"""``gymbench engine llama-cpp`` with a llama-server that misbehaves, and what its child is given.

A fake binary (a script) stands in for llama-server: one that listens on another port than it was
given (so ``/health`` never answers), one that reports its own ``/proc/<pid>/environ``. Issue 41:
the first waited forever without a word after its first line; the server inherited
``OPENAI_API_KEY`` and the rest of the environment.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gymbench.cli import main
from gymbench.engine.server import READY_REPORTS, LlamaServer, server_environment, start_llama_server
from gymbench.errors import GymbenchError
from tests.engine.test_server import FAKE_SERVER

pytestmark = pytest.mark.hostile

ELSEWHERE = textwrap.dedent(f"""\
    #!{sys.executable}
    import http.server, sys
    args = sys.argv[1:]
    print("listening elsewhere", flush=True)
    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    server.serve_forever()
    """)
"""Serves, but on a port of its own choosing: the port gymbench gave it refuses every connection."""
SECRETS = {
    "OPENAI_API_KEY": "sk-parent-only-1",
    "MY_SERVICE_TOKEN": "t-parent-only-2",
    "DB_PASSWORD": "p-parent-only-3",
    "LC_SECRET_SAUCE": "s-parent-only-4",
    "AWS_SECRET_ACCESS_KEY": "a-parent-only-5",
}


def script(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "llama-server"
    path.write_text(text)
    path.chmod(0o755)
    return path


def test_a_server_listening_elsewhere_is_one_line_after_the_deadline_with_progress_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("gguf", reason="the model writer needs gguf: pip install 'gymbench[engine]'")
    pytest.importorskip("tokenizers", reason="the model writer needs tokenizers: pip install 'gymbench[engine]'")
    monkeypatch.setenv("GYMBENCH_LLAMA_SERVER", str(script(tmp_path, ELSEWHERE)))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setitem(sys.modules, "platformdirs", None)
    assert main(["engine", "llama-cpp", "--ready-timeout-s", "1"]) == 2
    said = capsys.readouterr().err.splitlines()
    assert "waiting up to 1 s for http://127.0.0.1:" in said[0] and "Traceback" not in "".join(said)
    error = said[-1]
    assert error.startswith("gymbench: error: llama-server was not ready after 1 s: http://127.0.0.1:"), error
    assert "/health never answered ok (is the binary listening elsewhere?" in error
    assert "its last lines: listening elsewhere" in error


def test_the_ready_timeout_is_a_checked_setting(capsys: pytest.CaptureFixture[str]) -> None:
    for bad in ("0", "-1", "nan", "inf"):
        assert main(["engine", "llama-cpp", "--ready-timeout-s", bad]) == 2
        err = capsys.readouterr().err
        assert err.startswith("gymbench: error: setting 'ready_timeout_s'") and err.count("\n") == 1, err


def test_the_wait_for_health_says_how_long_it_has_waited(tmp_path: Path) -> None:
    """Simulated time: a clock that moves a second a look, sleeps that take none."""
    process = subprocess.Popen(["sleep", "60"])
    server = LlamaServer("127.0.0.1", 9, 1, "m", process, tmp_path / "log")
    ticks = iter(range(10_000))
    said: list[str] = []
    from gymbench.engine.server import wait_until_ready

    try:
        with pytest.raises(GymbenchError, match=r"not ready after 180 s: http://127\.0\.0\.1:9/health never answered"):
            wait_until_ready(server, 180.0, clock=lambda: float(next(ticks)), sleep=lambda s: None, say=said.append)
    finally:
        server.stop()
    assert len(said) == READY_REPORTS - 1 and said[0].startswith("still waiting for http://127.0.0.1:9/health (30 s")


def test_no_secret_of_the_parents_environment_reaches_the_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    with start_llama_server(script(tmp_path, FAKE_SERVER), tmp_path / "m.gguf", ready_timeout_s=60) as server:
        environ = Path(f"/proc/{server.process.pid}/environ").read_bytes()
    for value in SECRETS.values():
        assert value.encode() not in environ
    assert b"LC_ALL=C.UTF-8" in environ.split(b"\0") and any(v.startswith(b"PATH=") for v in environ.split(b"\0"))
    assert not set(SECRETS) & set(server_environment())


def test_the_builds_tools_get_no_secret_either(monkeypatch: pytest.MonkeyPatch) -> None:
    """pip, cmake and the compiler need a proxy, pip's index and the compiler's flags, not a key."""
    from gymbench.engine.server import without_secrets

    kept = without_secrets(
        {**SECRETS, "HTTPS_PROXY": "http://proxy:3128", "PIP_INDEX_URL": "https://x/simple", "CXX": "g++"}
    )
    assert kept == {"HTTPS_PROXY": "http://proxy:3128", "PIP_INDEX_URL": "https://x/simple", "CXX": "g++"}
