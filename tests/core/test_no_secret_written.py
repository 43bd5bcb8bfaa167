"""No API key in anything gymbench writes or prints, whatever a hostile server echoes.

End to end: a server on 127.0.0.1 (tests/hostile_server.py) echoes the key it is sent in every
way it can (error bodies, redirects to foreign schemes, malformed status lines, headers,
``/metrics`` labels and help text, SSE chunks, answers, ``/v1/models``); ``gymbench collect``
runs against each mode in one process and in two workers, then ``report``, ``timings`` and
``show`` read what it wrote. Every file under the run's directory, and every stdout and stderr,
is searched for the key. Two keys: one shaped like an OpenAI key (a pattern would catch it) and
one that is not (only the registry can).
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gymbench import secrets
from gymbench.builtin.http_client import auth_headers
from gymbench.jsonio import AtomicFile, write_json_atomic

from ..hostile_server import MODES, HostileServer, start_hostile_server

pytestmark = pytest.mark.hostile  # a case of the adversarial sweep (issue 24): benches/hostile_count.sh

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "gymbench" / "data" / "example_tasks.jsonl"
KEYS = {
    "sk": "sk-proj-Q7vX2mN9pL4kR8tY1wZ5bC3dF6gH0jK2",
    "plain": "gbq7Zr2TtW4vLp8NsY3Hc6JdKx9Mf",  # not shaped like any known key
}
RUNS = [("sk", 1), ("plain", 1), ("plain", 2)]
REPORTED = ("plain", 1)
COMMANDS = ("collect", "report", "timings", "show")
STOPS_EARLY = ("json_error_500", "header_echo", "redirect_foreign_scheme", "redirect_refused_port", "status_reason")
"""Modes whose failures trip the breaker: the "stopped early" line quotes what the server said."""


@dataclass
class Outcome:
    """One command's streams, and the run directory it (and the collect before it) wrote into."""

    returncode: int
    stdout: str
    stderr: str
    directory: Path
    commands: dict[str, Outcome] = field(default_factory=dict)


def _start(*args: str, key: str, cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "gymbench.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT), "HOSTILE_KEY": key, "OPENAI_API_KEY": ""},
    )


def _finish(process: subprocess.Popen[str], cwd: Path) -> Outcome:
    stdout, stderr = process.communicate(timeout=180)
    return Outcome(process.returncode, stdout, stderr, cwd)


def gymbench(*args: str, key: str, cwd: Path) -> Outcome:
    return _finish(_start(*args, key=key, cwd=cwd), cwd)


@pytest.fixture(scope="module")
def server() -> HostileServer:
    hostile = start_hostile_server(list(KEYS.values()))
    yield hostile  # type: ignore[misc]
    hostile.stop()


@pytest.fixture(scope="module")
def runs(server: HostileServer, tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str, int], Outcome]:
    """Each (mode, key, workers) collected once, lazily, and read back by every command."""
    done: dict[tuple[str, str, int], Outcome] = {}

    class Runs(dict):  # type: ignore[type-arg]
        def __missing__(self, case: tuple[str, str, int]) -> Outcome:
            done[case] = outcome = _collect_and_read(server, *case, tmp_path_factory.mktemp(case[0]))
            return outcome

    return Runs()


def _collect_and_read(server: HostileServer, mode: str, key_name: str, workers: int, directory: Path) -> Outcome:
    key = KEYS[key_name]
    out, results = directory / "out" / "rollouts.jsonl", directory / "results"
    collect = gymbench(
        "collect", "+backend=openai", f"+base_url={server.url(mode)}", "+model=m", f"+input_jsonl_fpath={EXAMPLES}",
        f"+output_jsonl_fpath={out}", "+limit=6", f"+results_dir={results}", "+api_key_env=HOSTILE_KEY",
        "+max_retries=1", "+backend_options.backoff_base_s=0.01", "+stop_after_failures=3",
        f"+num_workers={workers}", *(["+stream=true"] if mode == "sse_chunks" else []),
        key=key, cwd=directory,
    )  # fmt: skip
    collect.commands["collect"] = collect
    records = sorted(results.rglob("*.json"))
    readers = {  # at once: each is mostly interpreter start-up
        "timings": _start("timings", str(out), "-o", str(directory / "t.csv"), key=key, cwd=directory),
        "show": _start("show", str(records[-1] if records else directory), key=key, cwd=directory),
    }
    if (key_name, workers) == REPORTED:  # the slowest reader (plots): once per mode
        report = ("report", "--results-dir", str(results), "-o", str(directory / "report.html"))
        readers["report"] = _start(*report, key=key, cwd=directory)
    for name, process in readers.items():
        collect.commands[name] = _finish(process, directory)
    return collect


def _files_with(directory: Path, secret: str) -> list[str]:
    needle = secret.encode()
    return [str(p) for p in directory.rglob("*") if p.is_file() and needle in p.read_bytes()]


SHARDED_MODES = ("metrics_echo", "redirect_foreign_scheme", "json_error_500", "status_reason", "sse_chunks")
"""Two workers take a driver and two shard processes per run: the modes whose echo reaches the
driver by another route than one process's (a worker's failure report, the scrape, the summary)."""

CASES = [
    pytest.param(mode, key, workers, command, id=f"{mode}-{key}-{workers}w-{command}")
    for mode in MODES
    for key, workers in RUNS
    for command in COMMANDS
    if (command != "report" or (key, workers) == REPORTED) and (workers == 1 or mode in SHARDED_MODES)
]


@pytest.mark.parametrize(("mode", "key_name", "workers", "command"), CASES)
def test_no_key_in_any_file_or_stream(runs: dict, mode: str, key_name: str, workers: int, command: str) -> None:
    run = runs[(mode, key_name, workers)]
    key = KEYS[key_name]
    outcome = run.commands[command]
    assert key not in outcome.stdout and key not in outcome.stderr, outcome.stderr[-2000:]
    assert "Traceback" not in outcome.stderr, outcome.stderr[-3000:]
    assert _files_with(run.directory, key) == []
    if command == "collect":
        assert outcome.returncode in (0, 1, 2), outcome.stderr[-2000:]
        assert (run.directory / "out").exists() or outcome.returncode == 2
        if mode in STOPS_EARLY and workers == 1:  # shards of 6 rows may each stay under the limit
            assert "stopped early" in outcome.stderr, outcome.stderr[-2000:]


@pytest.mark.parametrize("ending", ["\r", "\n", "\r\n", " \t\r\n", "\n\n"])
def test_a_key_with_a_line_ending_is_stripped_and_never_printed(
    server: HostileServer, tmp_path: Path, ending: str
) -> None:
    key = KEYS["plain"]
    out = tmp_path / "rollouts.jsonl"
    done = gymbench(
        "collect", "+backend=openai", f"+base_url={server.url('answer_text')}", "+model=m",
        f"+input_jsonl_fpath={EXAMPLES}", f"+output_jsonl_fpath={out}", "+limit=3", "+save_results=false",
        "+api_key_env=HOSTILE_KEY", key=key + ending, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert key not in done.stderr + done.stdout and "Traceback" not in done.stderr
    assert _files_with(tmp_path, key) == []
    assert "[REDACTED]" in out.read_text()  # the server saw the stripped key and echoed it


@pytest.mark.parametrize("ending", ["\r", "\n", "\r\n", "  "])
def test_auth_headers_strip_the_key(monkeypatch: pytest.MonkeyPatch, ending: str) -> None:
    monkeypatch.setenv("GB_TEST_STRIP_KEY", "strip-me-please-" + ending[::-1] + "x" + ending)
    headers = auth_headers("GB_TEST_STRIP_KEY")
    assert headers["Authorization"] == "Bearer strip-me-please-" + ending[::-1] + "x"
    assert secrets.redact(f"said {headers['Authorization'][7:]}") == "said [REDACTED]"


def test_a_blank_key_is_refused_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GB_TEST_BLANK_KEY", " \r\n")
    with pytest.raises(secrets_error(), match="not set or blank"):
        auth_headers("GB_TEST_BLANK_KEY")


def secrets_error() -> type[Exception]:
    from gymbench.errors import GymbenchError

    return GymbenchError


SPLIT_SECRET = "zz-registry-only-5f3a9c1e7b"


@pytest.mark.parametrize(
    "text",
    [
        SPLIT_SECRET,
        f"ftp://files.example/?token={SPLIT_SECRET}",
        f"HTTP/1.1 500 {SPLIT_SECRET}",
        f'vllm:x{{token="{SPLIT_SECRET}"}} 1',
        f"Authorization: Bearer {SPLIT_SECRET}",
        f'data: {{"delta": "{SPLIT_SECRET}"}}',
    ],
)
@pytest.mark.parametrize("sink", ["atomic_text", "atomic_bytes", "json_atomic", "stream"])
def test_every_exit_redacts(tmp_path: Path, text: str, sink: str) -> None:
    """The filter at each exit, in process: what a new output path inherits by using them."""
    secrets.register_secret(SPLIT_SECRET)
    target = tmp_path / "f"
    if sink == "atomic_text":
        with AtomicFile(target, text=True) as handle:
            handle.write(text)
    elif sink == "atomic_bytes":
        with AtomicFile(target) as handle:
            handle.write(text.encode())
    elif sink == "json_atomic":
        write_json_atomic(target, {"k": text, text: [text]})
    else:
        buffer = io.StringIO()
        secrets.RedactingStream(buffer).write(text + "\n")
        target.write_text(buffer.getvalue())
    assert SPLIT_SECRET not in target.read_text() and "[REDACTED]" in target.read_text()


def test_the_cli_wraps_both_streams() -> None:
    code = (
        "import sys; from gymbench.cli import main; from gymbench.secrets import register_secret, RedactingStream;"
        "register_secret('zz-in-process-9f8e7d6c'); print('out zz-in-process-9f8e7d6c');"
        "print('err zz-in-process-9f8e7d6c', file=sys.stderr);"
        "assert isinstance(sys.stdout, RedactingStream) and isinstance(sys.stderr, RedactingStream)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == "out [REDACTED]\n" and done.stderr == "err [REDACTED]\n"


WRITES = re.compile(
    r"""\.write_text\(|\.write_bytes\(|os\.write\(|os\.fdopen\(|\bopen\([^)]*["'](?:w|a|x|wb|ab|xb)["']|\.open\(["'](?:w|a|x)"""
)
UNFILTERED_WRITES_ALLOWED = {
    "gymbench/jsonio.py": "AtomicFile itself: its write() redacts",
    "gymbench/rollout/output.py": "the rows writer: redact_bytes per row",
    "gymbench/gate/markdown.py": "GitHub's step summary, appended: redact_output per write",
    "gymbench/builtin/code_sandbox.py": "a verifier's scratch files for the program under test",
    "gymbench/builtin/sandbox_bootstrap.py": "inside the sandbox: the program's own files",
    "gymbench/testing.py": "a test kit installing a plugin's source",
    "gymbench/train/worker.py": "a training worker's answer to its driver, not an output",
    "gymbench/train/memory.py": "/proc/self/clear_refs",
    "gymbench/gate/ab/worker.py": "the A/B worker's listing for its driver, not an output",
    "gymbench/gate/ab/runner.py": "a child's log; the child is gymbench, whose streams are filtered",
    "gymbench/gate/instructions.py": "a child's log and counts; the child is gymbench, whose streams are filtered",
    "gymbench/collect/launch_ray.py": "a probe token, not an output",
    "gymbench/collect/output_lock.py": "the lock file beside an output: the holder's PID",
    "gymbench/engine/build.py": "the build lock, and its log: pip (masks index credentials), cmake, the compiler",
    "gymbench/engine/server.py": "llama-server's own log: the engine's output, not gymbench's",
    "gymbench/engine/nemo_gym_venv.py": "the venv build's log: pip's and venv's output, run without the secrets",
    "gymbench/engine/nemo_gym_stack.py": "ng_run's own log: NeMo Gym's output, children started without secrets",
    "gymbench/start_guard.py": "a fixed line on stderr (Ctrl-C before the filter is installed): no data in it",
    "gymbench/report/browser.py": "chromium's own log in a private scratch folder, and the screenshot's PNG "
    "pixels (an image, no text to redact); the child runs with a restricted environment",
    "gymbench/train/data_parallel.py": "torchrun's log and the pickled model factory, in a private scratch "
    "folder removed after the run; only the last error line is shown, through the filtered stderr",
}


def test_every_file_write_goes_through_a_filtered_exit() -> None:
    """A new output path that writes a file by hand fails here: use AtomicFile (or say why not)."""
    found = set()
    for path in sorted((ROOT / "gymbench").rglob("*.py")):
        if WRITES.search(path.read_text()):
            found.add(path.relative_to(ROOT).as_posix())
    assert found - set(UNFILTERED_WRITES_ALLOWED) == set()


@pytest.mark.parametrize("word", ["Bearer", "bearer", "BEARER", "BeArer", "bEARER", "beaRER"])
def test_a_bearer_token_is_redacted_in_any_casing(word: str) -> None:
    """The pattern is case-insensitive, so its fast pre-check must be too: 'BeArer' was let through."""
    token = "tok9Zq4Lm2Xv7Rw1Ny5"  # not registered, not shaped like an sk- key: only the pattern finds it
    text = f'{{"error": "bad header Authorization: {word} {token}"}}'
    assert token not in secrets.redact(text) and f"{word} [REDACTED]" in secrets.redact(text)
    redacted = secrets.redact_bytes(text.encode())
    assert token.encode() not in redacted and f"{word} [REDACTED]".encode() in redacted
