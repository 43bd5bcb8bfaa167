"""A model server on 127.0.0.1 that answers rollouts well and ``/metrics`` badly.

Modes (one port each): ``trickle_body`` sends the headers, then one byte of metrics a second,
forever; ``trickle_head`` sends even the status line one byte a second; ``endless`` sends a valid
metrics line over and over, as fast as it is read, forever. Every mode answers ``/v1/models`` and
``/v1/responses`` as a healthy server does, so a collection against it has rollouts to make.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator

from aiohttp import web

MODES = ("trickle_body", "trickle_head", "endless")
LINE = b"vllm:num_requests_waiting 0\n"


async def _models(request: web.Request) -> web.StreamResponse:
    return web.json_response({"object": "list", "data": [{"id": "m", "object": "model"}]})


async def _respond(request: web.Request) -> web.StreamResponse:
    await request.read()
    content = [{"type": "output_text", "text": "The answer is 4."}]
    return web.json_response(
        {
            "id": "resp_1",
            "object": "response",
            "output": [{"type": "message", "role": "assistant", "content": content}],
            "usage": {"input_tokens": 5, "output_tokens": 5, "total_tokens": 10},
        }
    )


def _metrics(mode: str, stop: asyncio.Event) -> web.RequestHandler:  # type: ignore[type-arg]
    async def metrics(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        with contextlib.suppress(ConnectionError, asyncio.CancelledError):
            while not stop.is_set():
                if mode == "endless":
                    await response.write(LINE * 1024)
                else:
                    await response.write(b"v")
                    await asyncio.sleep(1)
        return response

    return metrics


async def _trickle_head(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(Exception):
        for byte in b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n" + LINE * 100:
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.sleep(1)
    writer.close()


class SlowMetricsServer:
    def __init__(self) -> None:
        self.ports: dict[str, int] = {}
        self.loop = asyncio.new_event_loop()
        self.stop_event: asyncio.Event | None = None
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="slow-metrics-server")

    def base_url(self, mode: str) -> str:
        return f"http://127.0.0.1:{self.ports[mode]}/v1"

    def metrics_url(self, mode: str) -> str:
        return f"http://127.0.0.1:{self.ports[mode]}/metrics"

    def _run(self) -> None:
        self.loop.run_until_complete(self._serve())

    async def _serve(self) -> None:
        self.stop_event = stop = asyncio.Event()
        runners, raw = [], []
        for mode in MODES:
            if mode == "trickle_head":
                server = await asyncio.start_server(_trickle_head, "127.0.0.1", 0)
                raw.append(server)
                self.ports[mode] = server.sockets[0].getsockname()[1]
                continue
            app = web.Application()
            app.router.add_get("/v1/models", _models)
            app.router.add_post("/v1/responses", _respond)
            app.router.add_get("/metrics", _metrics(mode, stop))
            runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            runners.append(runner)
            self.ports[mode] = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.ready.set()
        await stop.wait()
        for server in raw:
            server.close()
        for runner in runners:
            await runner.cleanup()


@contextlib.contextmanager
def slow_metrics_server() -> Iterator[SlowMetricsServer]:
    server = SlowMetricsServer()
    server.thread.start()
    if not server.ready.wait(30):
        raise RuntimeError("the slow metrics server did not start")
    try:
        yield server
    finally:
        assert server.stop_event is not None
        server.loop.call_soon_threadsafe(server.stop_event.set)
        server.thread.join(timeout=10)
