"""``gymbench engine llama-cpp`` end to end, with a fake llama-server standing in for the real one."""

from __future__ import annotations

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
    assert err.startswith("gymbench: error: llama-server stopped (status 0)") and err.count("\n") == 1
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
    with pytest.raises(SystemExit):
        main(["engine", "vllm"])
    assert "invalid choice: 'vllm'" in capsys.readouterr().err
