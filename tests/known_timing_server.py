"""An OpenAI-compatible chat server on 127.0.0.1 whose true timings are known.

Each request's time to first token is ``ttft_base_ms`` plus an exponential draw of mean
``ttft_exp_ms`` (seeded, in arrival order), then ``tokens`` tokens stream ``itl_ms`` apart: so
TTFT's true quantiles are ``base + mean * ln(1 / (1 - q))``, ITL is ``itl_ms`` and e2e is TTFT +
``(tokens - 1) * itl_ms``. No batching, no queue: a request's timing does not depend on the load.
The server also measures what it really did per request (from the request's arrival to the
write of its first and last token), which is the truth to compare a client's figures with when
the machine makes sleeps late. ``GET /truth`` returns those measurements, ``POST /reset`` clears
them and sets a new seed.

Run it as ``python -m tests.known_timing_server --port 0``: it prints ``PORT N`` once listening.
Tests and ``benches/study/latency_truth.py`` use it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

import numpy as np
from aiohttp import web


class KnownTiming:
    def __init__(self, ttft_base_ms: float, ttft_exp_ms: float, itl_ms: float, tokens: int, seed: int) -> None:
        self.ttft_base_s = ttft_base_ms / 1e3
        self.ttft_exp_s = ttft_exp_ms / 1e3
        self.itl_s = itl_ms / 1e3
        self.tokens = tokens
        self.reset(seed)

    def reset(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.measured: list[dict[str, float]] = []

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_get("/truth", self.truth)
        app.router.add_post("/reset", self.reset_route)
        return app

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "known", "object": "model"}]})

    async def truth(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "ttft_base_s": self.ttft_base_s,
                "ttft_exp_s": self.ttft_exp_s,
                "itl_s": self.itl_s,
                "tokens": self.tokens,
                "measured": self.measured,
            }  # fmt: skip
        )

    async def reset_route(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.reset(int(body.get("seed", 0)))
        return web.json_response({"ok": True})

    async def chat(self, request: web.Request) -> web.StreamResponse:
        arrived = time.perf_counter()
        await request.read()
        ttft = self.ttft_base_s + float(self.rng.exponential(self.ttft_exp_s)) if self.ttft_exp_s else self.ttft_base_s
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        stamps = []
        for index in range(self.tokens):
            due = arrived + ttft + index * self.itl_s
            wait = due - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
            chunk = {"choices": [{"index": 0, "delta": {"content": "x" if index else "4"}, "finish_reason": None}]}
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
            stamps.append(time.perf_counter())
        usage = {"prompt_tokens": 3, "completion_tokens": self.tokens, "total_tokens": 3 + self.tokens}
        final = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": usage}
        await response.write(f"data: {json.dumps(final)}\n\ndata: [DONE]\n\n".encode())
        await response.write_eof()
        itl = (stamps[-1] - stamps[0]) / (len(stamps) - 1) if len(stamps) > 1 else 0.0
        self.measured.append({"ttft": stamps[0] - arrived, "itl": itl, "e2e": stamps[-1] - arrived})
        return response


async def serve(args: argparse.Namespace) -> None:
    known = KnownTiming(args.ttft_base_ms, args.ttft_exp_ms, args.itl_ms, args.tokens, args.seed)
    runner = web.AppRunner(known.app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", args.port, backlog=1024)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    print(f"PORT {port}", flush=True)
    await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--ttft-base-ms", type=float, default=30.0)
    parser.add_argument("--ttft-exp-ms", type=float, default=20.0)
    parser.add_argument("--itl-ms", type=float, default=8.0)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    try:
        asyncio.run(serve(parser.parse_args()))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
