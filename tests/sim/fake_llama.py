"""A stand-in for llama.cpp's server on 127.0.0.1: slots, ``/props`` and per-request ``timings``.

It answers from a known step model (``a + b·running`` per decode step, ``a + c·prompt_n`` for
the prefill), so a calibration against it has coefficients to find. ``running`` is the number of
slots held when a request takes one; requests beyond the slots wait, as llama.cpp's queue does.
The timings are computed, not measured: they do not depend on how busy the machine is.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass(frozen=True)
class StepModel:
    slots: int = 3
    a_ms: float = 2.0
    b_ms: float = 1.0
    c_ms: float = 0.02
    n_ctx: int = 512
    curve_ms: tuple[float, ...] = ()
    """A decode step by running count (``curve_ms[n-1]``) in place of ``a + b·running``: an engine
    whose step is concave in the batch, as llama.cpp's is on a CPU."""
    sleep_scale: float = 0.2
    """Wall time slept per modelled millisecond (the loop needs answers to take some time)."""
    cache_prompt: list[bool] = field(default_factory=list, compare=False)
    """Each chat request's ``cache_prompt`` in the order they arrived (True where not given)."""
    bodies: list[dict[str, Any]] = field(default_factory=list, compare=False)
    """Each chat request's body, in the order they arrived."""
    slowdown: list[float] = field(default_factory=lambda: [1.0], compare=False)
    """``slowdown[0]`` multiplies every sleep, and may be changed while serving (a machine that gets busy)."""
    default_max_tokens: int = 16
    """The output length of a request that sets no ``max_tokens`` (llama.cpp's ``-n``)."""


def app(model: StepModel) -> web.Application:
    slots = asyncio.Semaphore(model.slots)
    held = [0]

    async def props(request: web.Request) -> web.Response:
        generation = {"n_ctx": model.n_ctx, "params": {}}
        return web.json_response({"total_slots": model.slots, "default_generation_settings": generation,
                                  "build_info": "b0-fake"})  # fmt: skip

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "tiny", "object": "model"}]})

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        model.cache_prompt.append(bool(body.get("cache_prompt", True)))
        model.bodies.append(body)
        prompt_n = len(body["messages"][0]["content"].split()) + 10
        out = int(body.get("max_tokens") or model.default_max_tokens)
        async with slots:
            held[0] += 1
            running = held[0]
            try:
                prompt_ms = model.a_ms + model.c_ms * prompt_n
                step = model.curve_ms[running - 1] if model.curve_ms else model.a_ms + model.b_ms * running
                per_token = step + model.c_ms * prompt_n * (running - 1) / out
                await asyncio.sleep((prompt_ms + per_token * (out - 1)) * model.sleep_scale * model.slowdown[0] / 1e3)
            finally:
                held[0] -= 1
        timings = {"prompt_n": prompt_n, "prompt_ms": prompt_ms, "predicted_n": out,
                   "predicted_ms": per_token * out, "predicted_per_token_ms": per_token}  # fmt: skip
        if not body.get("stream"):
            message = {"role": "assistant", "content": "x " * out}
            return web.json_response({"choices": [{"index": 0, "message": message}], "timings": timings})
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for index in range(out):
            chunk: dict[str, Any] = {"choices": [{"index": 0, "delta": {"content": "x "}}]}
            if index == out - 1:
                chunk["timings"] = timings
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    application = web.Application()
    application.router.add_get("/props", props)
    application.router.add_get("/v1/models", models)
    application.router.add_post("/v1/chat/completions", chat)
    return application


@contextmanager
def fake_llama_server(model: StepModel) -> Iterator[str]:
    """The server's ``/v1`` URL, served from a thread of its own for the ``with`` block."""
    loop = asyncio.new_event_loop()
    started = threading.Event()
    address: list[str] = []
    runner = web.AppRunner(app(model))

    async def start() -> None:
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        address.append(f"http://127.0.0.1:{port}/v1")
        started.set()

    thread = threading.Thread(target=lambda: (loop.run_until_complete(start()), loop.run_forever()), daemon=True)
    thread.start()
    started.wait(30)
    try:
        yield address[0]
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
