"""A few cases run as real ``gymbench`` processes: standard input, the terminal's encoding,
argument bytes that are not UTF-8, a server that cannot listen."""

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


def all_process_cases() -> list[Case]:
    return list(process_cases())
