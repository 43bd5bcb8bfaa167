"""Client drivers run as separate processes by ``test_collect.py``: gymbench and a minimal loop.

``python benches/collect_drivers.py MODE BASE_URL TASKS PARALLELISM OUT [stream]`` prints one
JSON line with the process's CPU seconds, wall seconds and rollouts done. MODE ``minimal`` is the
smallest honest client: uvloop, one aiohttp session, an ``asyncio.Semaphore``, the same
Responses-API requests, each response parsed (streamed: each ``data:`` line of the event stream
parsed, up to ``[DONE]``). MODE ``minimal-rows`` is that loop plus the least a collector must do
with each answer: check it against ``expected_answer`` and append one orjson line to OUT. MODE
``gymbench`` is the real engine with the openai backend, the
exact-match verifier and the JSONL writer. ``memory`` runs the engine on the test kit's
in-process backend and reports peak RSS, to see whether memory grows with the input.
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
import time
from pathlib import Path

import aiohttp
import orjson
import uvloop

from gymbench.builtin.backend_settings import OpenAISettings
from gymbench.builtin.exact_match import ExactMatchVerifier
from gymbench.builtin.openai_backend import OpenAIBackend
from gymbench.builtin.semaphore import SemaphoreStrategy
from gymbench.rollout.engine import Collector, CollectSettings
from gymbench.rollout.verification import VerifySettings
from gymbench.testing import FakeBackend

# Everything is imported before the clock starts: the comparison is per rollout, not start-up.


async def minimal(base_url: str, tasks: Path, parallelism: int, stream: bool, out: Path | None = None) -> int:
    """The bare loop; with ``out``, also the least a collector must do with each answer: check it
    against the row's ``expected_answer`` and append one JSON line (the row, the response, the
    reward) to ``out`` (mode ``minimal-rows``)."""
    rows = [json.loads(line) for line in tasks.read_text().splitlines()]
    semaphore = asyncio.Semaphore(parallelism)
    connector = aiohttp.TCPConnector(limit=0)
    extra = {"stream": True} if stream else {}
    sink = open(out, "wb") if out is not None else None  # noqa: SIM115  # closed below

    def keep(row: dict, response: dict) -> None:
        if sink is None:
            return
        text = response["output"][-1]["content"][0]["text"]
        reward = 1.0 if text.strip().splitlines()[-1].strip() == row["expected_answer"] else 0.0
        sink.write(orjson.dumps({**row, "response": response, "reward": reward}, option=orjson.OPT_APPEND_NEWLINE))

    async with aiohttp.ClientSession(connector=connector) as session:

        async def one(row: dict) -> None:
            async with semaphore:
                body = {**row["responses_create_params"], "model": "gymbench-sim", **extra}
                async with session.post(f"{base_url}/responses", json=body) as answer:
                    if not stream:
                        keep(row, json.loads(await answer.read()))
                        return
                    async for line in answer.content:
                        if line.startswith(b"data:"):
                            payload = line[5:].strip()
                            if payload == b"[DONE]":
                                break
                            event = json.loads(payload)
                            if event.get("type") == "response.completed":
                                keep(row, event["response"])

        await asyncio.gather(*(one(row) for row in rows))
    if sink is not None:
        sink.close()
    return len(rows)


async def engine(base_url: str | None, tasks: Path, parallelism: int, out: Path, stream: bool) -> int:
    backend = (
        OpenAIBackend(OpenAISettings(base_url=base_url, model="gymbench-sim", stream=stream))
        if base_url
        else FakeBackend(respond=lambda r: "4", keep_calls=False)
    )
    settings = CollectSettings(tasks, out, overwrite=True, verify=VerifySettings(name="exact-match"))
    stats = await Collector(settings, backend, ExactMatchVerifier(), SemaphoreStrategy(parallelism)).run()
    return stats.completed


def main() -> None:
    mode, base_url, tasks, parallelism, out = sys.argv[1:6]
    stream = sys.argv[6:7] == ["stream"]
    cpu0, wall0 = time.process_time(), time.perf_counter()
    if mode in ("minimal", "minimal-rows"):
        rows_out = Path(out) if mode == "minimal-rows" else None
        done = uvloop.run(minimal(base_url, Path(tasks), int(parallelism), stream, rows_out))
    else:
        url = None if mode == "memory" else base_url
        done = uvloop.run(engine(url, Path(tasks), int(parallelism), Path(out), stream))
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    report = {"cpu_s": time.process_time() - cpu0, "wall_s": time.perf_counter() - wall0, "done": done}
    print(json.dumps({**report, "peak_rss_mib": peak_kib / 1024}))


if __name__ == "__main__":
    main()
