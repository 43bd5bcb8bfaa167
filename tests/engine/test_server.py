"""Starting and stopping llama-server, played by a small local HTTP server with its command line."""

from __future__ import annotations

import json
import sys
import textwrap
import urllib.request
from pathlib import Path

import pytest

from gymbench.engine.server import HTTP_THREADS, server_command, start_llama_server
from gymbench.errors import GymbenchError

FAKE_SERVER = textwrap.dedent(f"""\
    #!{sys.executable}
    import http.server, json, sys
    args = sys.argv[1:]
    print("fake llama-server", *args, flush=True)
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({{"status": "ok", "argv": args}}).encode()
            self.send_response(200); self.end_headers(); self.wfile.write(body)
    port = int(args[args.index("--port") + 1])
    http.server.HTTPServer((args[args.index("--host") + 1], port), Handler).serve_forever()
    """)


def fake(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "llama-server"
    path.write_text(text)
    path.chmod(0o755)
    return path


def test_the_command_line_asks_for_continuous_batching_over_the_slots() -> None:
    command = server_command(
        Path("/x/llama-server"), Path("/m.gguf"), host="127.0.0.1", port=8080, slots=4, threads=2, context=4096,
        max_tokens=64,
    )  # fmt: skip
    text = " ".join(command)
    assert "-np 4" in text and "--cont-batching" in text and "--metrics" in text
    assert "-c 16384" in text and "-t 2" in text and "-m /m.gguf" in text and "--port 8080" in text
    # more HTTP threads than any parallelism tried: llama-server's default (slots + 4) stalls the rest
    assert command[command.index("--threads-http") + 1] == str(HTTP_THREADS) and HTTP_THREADS >= 128


def test_a_started_server_answers_and_is_stopped(tmp_path: Path) -> None:
    binary = fake(tmp_path, FAKE_SERVER)
    with start_llama_server(binary, tmp_path / "m.gguf", slots=3, ready_timeout_s=60) as server:
        assert server.base_url == f"http://127.0.0.1:{server.port}/v1" and server.slots == 3
        assert server.metrics_url.endswith(f":{server.port}/metrics")
        with urllib.request.urlopen(server.root_url + "/health", timeout=10) as answer:
            argv = json.loads(answer.read())["argv"]
        assert argv[argv.index("-np") + 1] == "3" and "--alias" in argv
        assert f"+base_url={server.base_url}" in server.collect_command()
        assert f"+model={server.model}" in server.tune_command()
    assert server.process.returncode is not None  # stopped on leaving the block


def test_a_server_that_dies_while_starting_is_one_line_with_its_last_words(tmp_path: Path) -> None:
    binary = fake(tmp_path, "#!/bin/sh\necho 'llama_model_load: error loading model: bad magic'\nexit 1\n")
    with pytest.raises(GymbenchError) as caught:
        start_llama_server(binary, tmp_path / "m.gguf", ready_timeout_s=60)
    message = str(caught.value)
    assert "exited with status 1 before it was ready" in message and "bad magic" in message and "\n" not in message


def test_a_server_that_never_gets_ready_is_stopped_after_the_wait(tmp_path: Path) -> None:
    binary = fake(tmp_path, "#!/bin/sh\necho loading\nexec sleep 600\n")
    with pytest.raises(
        GymbenchError, match=r"not ready after 1 s: .*/health never answered ok .*; its last lines: loading"
    ):
        start_llama_server(binary, tmp_path / "m.gguf", ready_timeout_s=1)


def test_an_unstartable_binary_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(GymbenchError, match="cannot start"):
        start_llama_server(tmp_path / "missing", tmp_path / "m.gguf", ready_timeout_s=1)


def test_the_server_gets_only_what_it_needs_of_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A key exported for gymbench is not the server's, and LLAMA_ARG_* would change the server."""
    exported = {"OPENAI_API_KEY": "sk-not-for-the-server", "LLAMA_API_KEY": "k", "LLAMA_ARG_N_PARALLEL": "9",
                "CUDA_VISIBLE_DEVICES": "1", "LC_ALL": "C.UTF-8"}  # fmt: skip
    for name, value in exported.items():
        monkeypatch.setenv(name, value)
    seen = tmp_path / "environ.json"
    binary = fake(tmp_path, FAKE_SERVER.replace("args = sys.argv[1:]\n",
                                                f"import os; json.dump(dict(os.environ), open({str(seen)!r}, 'w'))\n"
                                                "args = sys.argv[1:]\n"))  # fmt: skip
    with start_llama_server(binary, tmp_path / "m.gguf", ready_timeout_s=60):
        environ = json.loads(seen.read_text())
    assert not {"OPENAI_API_KEY", "LLAMA_API_KEY", "LLAMA_ARG_N_PARALLEL"} & set(environ)
    assert environ["CUDA_VISIBLE_DEVICES"] == "1" and environ["LC_ALL"] == "C.UTF-8" and "PATH" in environ
    err = capsys.readouterr().err  # the wait is said before it starts, never silent
    assert "waiting up to 60 s for http://127.0.0.1:" in err and "/health" in err


def test_a_host_that_is_not_an_address_here_is_one_line(tmp_path: Path) -> None:
    binary = fake(tmp_path, FAKE_SERVER)
    with pytest.raises(GymbenchError, match=r"^--host not\.\.a\.\.host: cannot listen there .*such as 127\.0\.0\.1$"):
        start_llama_server(binary, tmp_path / "m.gguf", host="not..a..host", ready_timeout_s=1)
