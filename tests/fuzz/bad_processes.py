"""A few cases run as real ``gymbench`` processes: standard input, the terminal's encoding,
argument bytes that are not UTF-8, a server that cannot listen, a server that is not there."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

from .bad_records import DEEP, record
from .bad_tasks import GOOD, SERVER
from .cases import Case, Env, Prepared


def _stdin_collect(content: bytes, mention: str) -> Case:
    """The rows before a bad one are collected (on the shared simulator), then the bad one is named."""

    def build(workdir: Path, env: Env) -> Prepared:
        argv = ["collect", "+input_jsonl_fpath=/dev/stdin", f"+output_jsonl_fpath={workdir / 'o.jsonl'}",
                "+progress=false", f"+base_url={env.base_url}", *SERVER]  # fmt: skip
        return Prepared(argv, mentions=[mention], stdin=content, outputs=[workdir / "o.jsonl"])

    return Case("processes", f"stdin:{mention}:{len(content)}", build, in_subprocess=True)


def _busy_port(workdir: Path, env: Env) -> Prepared:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]

    def release(status: int | None, out: str, err: str) -> None:
        holder.close()

    return Prepared(["sim-server", f"+port={port}"], mentions=[str(port)], check=release)


def _show(workdir: Path, env: Env, content: str) -> Prepared:
    path = workdir / "record.json"
    path.write_text(content)
    return Prepared(["show", str(path)], mentions=[str(path)])


def _surrogates() -> str:
    data = record("\ud800name")
    data["benchmarks"][0]["id"] = "t.py::test_\udfff"
    return json.dumps(data)


def _dead_server(workdir: Path, env: Env) -> Prepared:
    """Nothing listens: the run stops early, and its last line is the error, not aiohttp's noise."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # free once closed: connections are refused
    tasks = workdir / "tasks.jsonl"
    tasks.write_text((GOOD + "\n") * 5)
    argv = ["collect", f"+input_jsonl_fpath={tasks}", f"+output_jsonl_fpath={workdir / 'o.jsonl'}", "+backend=openai",
            f"+base_url=http://127.0.0.1:{port}/v1", "+model=m", "+max_retries=0", "+stop_after_failures=2",
            "+backend_options.preflight=false",  # the rollouts meet the dead server, not the start-up check
            "+save_results=false", "+progress=false", "+num_samples_in_parallel=1"]  # fmt: skip

    def last_line_is_the_error(status: int | None, out: str, err: str) -> str | None:
        last = err.strip().splitlines()[-1] if err.strip() else ""
        return None if last.startswith("gymbench: error: stopped early") else f"stderr ends with {last!r}"

    return Prepared(argv, outputs=[workdir / "o.jsonl"], check=last_line_is_the_error)


def process_cases() -> Iterator[Case]:
    yield _stdin_collect(b"\x00garbage\n", "/dev/stdin:1")
    yield _stdin_collect(b"", "/dev/stdin")
    yield _stdin_collect((GOOD + "\n").encode() + b"[1, 2]\n", "/dev/stdin:2")
    bad_host = Prepared(["sim-server", "+host=256.1.1.1"], mentions=["256.1.1.1"])
    yield Case("processes", "sim-server-bad-host", lambda w, e: bad_host, in_subprocess=True)
    yield Case("processes", "sim-server-busy-port", _busy_port, in_subprocess=True)
    yield Case("processes", "show-deep", lambda w, e: _show(w, e, DEEP), in_subprocess=True)
    yield Case("processes", "show-surrogates", lambda w, e: _show(w, e, _surrogates()), statuses=(0,),
               in_subprocess=True)  # fmt: skip
    yield Case("processes", "argument-not-utf8", lambda w, e: Prepared(
        ["collect", "+input_jsonl_fpath=\udcff.jsonl", "+output_jsonl_fpath=o.jsonl"], mentions=["not UTF-8"]),
        in_subprocess=True)  # fmt: skip
    yield Case("processes", "no-command", lambda w, e: Prepared([]), in_subprocess=True)
    yield Case("processes", "dead-server", _dead_server, statuses=(1,), in_subprocess=True)


def all_process_cases() -> list[Case]:
    return list(process_cases())
