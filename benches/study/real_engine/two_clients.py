"""An experiment (run 11 in docs/engine.md): at each p, the truth's closed loop
(:func:`gymbench.sim.loadgen.closed_loop`) and ``calibrate-sim``'s (:func:`gymbench.sim.calibrate.measure_closed_loop`)
back to back, alternating, on one llama-server ``-np 64 -t 1``: do the two clients read the same engine
alike? Run from the repository root: ``python benches/study/real_engine/two_clients.py 8,24,32,64 ROUNDS WINDOW_S``.
Its output of run 11: ``git show bec7557:benches/study/real_engine/2026-11-27c_device_two_clients.txt``."""

# ruff: noqa: E501

import asyncio
import os
import sys

sys.path.insert(0, "benches")
import aiohttp
from test_real_engine import MAX_TOKENS, PROMPT_WORDS

from gymbench.engine.build import cache_root, find_server
from gymbench.engine.model import cached_model
from gymbench.engine.server import start_llama_server
from gymbench.sim.calibrate import measure_closed_loop, workload_body
from gymbench.sim.loadgen import closed_loop, settle_server

PS = [int(x) for x in sys.argv[1].split(",")]
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 2
WINDOW = float(sys.argv[3]) if len(sys.argv) > 3 else 8.0

server = start_llama_server(
    find_server(), cached_model("tiny", cache_root()), slots=64, threads=1, context=512, max_tokens=MAX_TOKENS
)


async def main() -> None:
    body = workload_body(server.model, PROMPT_WORDS, MAX_TOKENS)
    metrics = server.base_url.removesuffix("/v1") + "/metrics"
    url = server.base_url + "/chat/completions"
    for turn in range(ROUNDS):
        for p in PS:
            for client in ("truth", "calibrate") if turn % 2 == 0 else ("calibrate", "truth"):
                async with aiohttp.ClientSession() as session:
                    await settle_server(session, metrics)
                if client == "truth":
                    rate = (await closed_loop(server.base_url, p, WINDOW, warmup_s=2.0, body=body)).requests_per_s
                else:
                    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
                        rate = (await measure_closed_loop(session, url, body, p, 2.0, WINDOW)).requests_per_s
                print(
                    f"round {turn} p={p:>3} {client:>9} {rate:7.2f} requests/s load={os.getloadavg()[0]:.1f}",
                    flush=True,
                )


with server:
    asyncio.run(main())
