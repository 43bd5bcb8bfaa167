"""A model server that tries every way it can think of to make gymbench write its API key.

One thread, one event loop, one port per echo mode: the mode is known from the port a request
arrived on, so ``/v1/models`` and ``/metrics`` (which carry no request body) echo as the mode says
too. Most modes are aiohttp handlers; the modes that break HTTP itself (a malformed status line,
a reason phrase carrying the key) are raw asyncio servers that write bytes.

Every mode echoes what it received in the ``Authorization`` header, so the test needs no way to
tell the server the key: whatever the client sends is what comes back.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

HTTP_MODES = (
    "json_error_400",  # the key in a JSON error body, not retryable
    "json_error_500",  # ... retryable, so it reaches the circuit breaker's "stopped early" line
    "model_not_found_404",  # the 404 that gymbench explains, with the key in the server's text
    "redirect_foreign_scheme",  # 302 to ftp://...?token=KEY: aiohttp refuses to follow
    "redirect_refused_port",  # 307 to http://127.0.0.1:1/?token=KEY: a connection error naming the URL
    "redirect_loop",  # 302 to itself with the key in the query, until aiohttp gives up
    "header_echo",  # the key in response headers of a 503 (Retry-After, X-Echo, WWW-Authenticate)
    "metrics_echo",  # /metrics with the key in label values, HELP text and a label name's value
    "models_echo",  # /v1/models lists the key as a model id; answers fine otherwise
    "answer_text",  # the key in the model's answer, its id and a debug field
    "sse_chunks",  # streamed: the key in SSE chunks (text deltas and an event's id)
    "not_json_200",  # a 200 whose body is not JSON and carries the key
    "unauthorized_401",  # 401 with the key in the body, on the preflight too
)
RAW_MODES = (
    "status_reason",  # "HTTP/1.1 500 KEY": the key as the reason phrase
    "status_malformed",  # "HTTP/1.1 KEY": no status code, the key where it should be
    "status_garbage",  # a line that is not HTTP at all, then the key in a header-like line
)
MODES = HTTP_MODES + RAW_MODES
"""The key-echo modes (every one is tried for a leaked key); the modes below echo nothing."""
SHAPE_MODES = (
    "props_settings_list",  # /props: default_generation_settings a list, not an object
    "props_not_object",  # /props: a JSON list
    "models_data_dict",  # /v1/models: data an object, not a list
    "models_data_strings",  # /v1/models: data a list of model names, not of objects
    "chat_list",  # the chat (and responses) endpoint answers [] with status 200
)
STALL_MODES = (
    "props_stall",  # /props accepts the request and never answers
    "models_stall",  # /v1/models never answers (/props does)
    "chat_stall",  # the chat (and responses) endpoint never answers (/props and /v1/models do)
)
"""Wrong JSON shapes, and a hang at each stage of a calibration (llama.cpp's /props, the model
list, the first request); /props answers as llama.cpp's in these modes and is absent in the others."""
SERVED_MODES = MODES + SHAPE_MODES + STALL_MODES
SENTINELS = web.AppKey("sentinels", list)
STOPPING = web.AppKey("stopping", asyncio.Event)
LLAMA_PROPS = {"total_slots": 2, "default_generation_settings": {"n_ctx": 512}, "build_info": "b0-hostile"}


def _key(request: web.Request) -> str:
    return request.headers.get("Authorization", "").removeprefix("Bearer ")


def _answer(key: str, text: str | None = None) -> dict[str, object]:
    content = [{"type": "output_text", "text": text if text is not None else "The answer is 4."}]
    return {
        "id": f"resp_{key}",
        "object": "response",
        "output": [{"type": "message", "role": "assistant", "content": content}],
        "usage": {"input_tokens": 5, "output_tokens": 5, "total_tokens": 10},
        "debug": {"authorization": f"Bearer {key}", "echo": key},
    }


def _metrics(key: str) -> str:
    return (
        f"# HELP vllm:num_requests_waiting Requests waiting. Your key is {key}\n"
        "# TYPE vllm:num_requests_waiting gauge\n"
        f'vllm:num_requests_waiting{{model_name="m",token="{key}"}} 0\n'
        f"# HELP vllm:generation_tokens_total Tokens. Authorization: Bearer {key}\n"
        "# TYPE vllm:generation_tokens_total counter\n"
        f'vllm:generation_tokens_total{{engine="{key}"}} 10\n'
        f'vllm:num_requests_running{{key="{key}"}} 1\n'
    )


@dataclass
class HostileServer:
    """Start with :func:`start_hostile_server`; ``url(mode)`` is the ``+base_url`` of a mode."""

    ports: dict[str, int] = field(default_factory=dict)
    loop: asyncio.AbstractEventLoop | None = None
    thread: threading.Thread | None = None
    stop_event: asyncio.Event | None = None

    def url(self, mode: str) -> str:
        return f"http://127.0.0.1:{self.ports[mode]}/v1"

    def stop(self) -> None:
        if self.loop is not None and self.stop_event is not None:
            self.loop.call_soon_threadsafe(self.stop_event.set)
        if self.thread is not None:
            self.thread.join(timeout=10)


def _handlers(mode_of: Callable[[web.Request], str]) -> web.Application:
    async def models(request: web.Request) -> web.StreamResponse:
        mode, key = mode_of(request), _key(request)
        if mode == "unauthorized_401":
            return web.Response(status=401, text=f"invalid key {key}")
        if mode in ("models_data_dict", "models_data_strings", "models_stall"):
            return await _odd_models(request, mode)
        ids = [key, f"Bearer {key}"] if mode == "models_echo" else ["m"]
        return web.json_response({"object": "list", "data": [{"id": i, "object": "model"} for i in ids]})

    async def metrics(request: web.Request) -> web.StreamResponse:
        # /metrics is scraped without the key: it echoes the sentinels the test runs with.
        if mode_of(request) != "metrics_echo":
            return web.Response(text=_metrics("0").replace("0", "1"), content_type="text/plain")
        text = "".join(
            _metrics(key).replace("vllm:", f"vllm{n}:") if n else _metrics(key)
            for n, key in enumerate(request.app[SENTINELS])
        )
        return web.Response(text=text, content_type="text/plain")

    async def props(request: web.Request) -> web.StreamResponse:
        mode = mode_of(request)
        if mode not in SHAPE_MODES + STALL_MODES:
            raise web.HTTPNotFound()
        if mode == "props_stall":
            return await _never_answer(request)
        if mode == "props_not_object":
            return web.json_response([LLAMA_PROPS])
        settings = [512] if mode == "props_settings_list" else LLAMA_PROPS["default_generation_settings"]
        return web.json_response({**LLAMA_PROPS, "default_generation_settings": settings})

    async def generate(request: web.Request) -> web.StreamResponse:
        mode, key = mode_of(request), _key(request)
        await request.read()
        if mode == "chat_stall":
            return await _never_answer(request)
        if mode == "chat_list":
            return web.json_response([])
        error = {"error": {"message": f"Incorrect API key provided: {key}", "auth": f"Bearer {key}"}}
        if mode == "json_error_400":
            return web.json_response(error, status=400)
        if mode == "json_error_500":
            return web.json_response(error, status=500)
        if mode == "model_not_found_404":
            return web.json_response({"error": {"code": "model_not_found", "message": f"no model {key}"}}, status=404)
        if mode == "redirect_foreign_scheme":
            raise web.HTTPFound(f"ftp://files.example/?token={key}")
        if mode == "redirect_refused_port":
            raise web.HTTPTemporaryRedirect(f"http://127.0.0.1:1/v1/responses?token={key}")
        if mode == "redirect_loop":
            raise web.HTTPTemporaryRedirect(f"{request.path}?token={key}")
        if mode == "header_echo":
            headers = {"X-Echo": key, "Retry-After": key, "WWW-Authenticate": f"Bearer {key}"}
            return web.Response(status=503, text="busy", headers=headers)
        if mode == "not_json_200":
            return web.Response(text=f"<html>your key {key} is {{broken", content_type="application/json")
        if mode == "unauthorized_401":
            return web.Response(status=401, text=f"invalid key {key}")
        if mode == "sse_chunks":
            return await _stream(request, key)
        return web.json_response(_answer(key, f"Here is your key: {key}" if mode == "answer_text" else None))

    app = web.Application()
    app.router.add_get("/props", props)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/v1/responses", generate)
    app.router.add_post("/v1/chat/completions", generate)
    return app


async def _odd_models(request: web.Request, mode: str) -> web.StreamResponse:
    if mode == "models_stall":
        return await _never_answer(request)
    data: object = {"m": {"id": "m"}} if mode == "models_data_dict" else ["m", "n"]
    return web.json_response({"object": "list", "data": data})


async def _never_answer(request: web.Request) -> web.StreamResponse:
    """Hold the request until the server stops (then a 503 nobody is waiting for any more)."""
    await request.app[STOPPING].wait()
    return web.Response(status=503)


async def _stream(request: web.Request, key: str) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "X-Key": key})
    await response.prepare(request)
    events = [
        {"type": "response.output_text.delta", "delta": f"key {key} "},
        {"type": "response.output_text.delta", "delta": "4"},
        {"type": "response.completed", "response": _answer(key)},
    ]
    for event in events:
        await response.write(f"id: {key}\nevent: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())
    await response.write(f"data: {{broken {key}\n\n".encode())
    await response.write_eof()
    return response


RAW_ANSWERS = {
    "status_reason": "HTTP/1.1 500 {key}\r\nContent-Length: 0\r\n\r\n",
    "status_malformed": "HTTP/1.1 {key}\r\nContent-Length: 0\r\n\r\n",
    "status_garbage": "{key} {key}\r\nX: {key}\r\n\r\n",
}


async def _raw_handler(mode: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(Exception):
        head = await reader.readuntil(b"\r\n\r\n")
        key = ""
        for line in head.decode("latin-1").split("\r\n"):
            if line.lower().startswith("authorization:"):
                key = line.split(":", 1)[1].strip().removeprefix("Bearer ")
        writer.write(RAW_ANSWERS[mode].format(key=key).encode("latin-1", "replace"))
        await writer.drain()
    writer.close()


async def _serve(server: HostileServer, sentinels: list[str], ready: threading.Event) -> None:
    server.stop_event = asyncio.Event()
    app = _handlers(lambda request: by_port[request.transport.get_extra_info("sockname")[1]])  # type: ignore[union-attr]
    app[SENTINELS] = sentinels
    app[STOPPING] = server.stop_event
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    by_port: dict[int, str] = {}
    for mode in HTTP_MODES + SHAPE_MODES + STALL_MODES:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        by_port[port] = mode
        server.ports[mode] = port
    raw_servers = await _raw_ports(server, RAW_MODES, _raw_handler)
    ready.set()
    await server.stop_event.wait()
    for raw in raw_servers:
        raw.close()
    await runner.cleanup()


async def _raw_ports(
    server: HostileServer,
    modes: Sequence[str],
    handler: Callable[[str, asyncio.StreamReader, asyncio.StreamWriter], Any],
) -> list[asyncio.Server]:
    """One raw asyncio server per mode, each answering with ``handler(mode, ...)``; ports in ``server.ports``."""
    raws = []
    for mode in modes:
        raw = await asyncio.start_server(lambda r, w, m=mode: handler(m, r, w), "127.0.0.1", 0)
        raws.append(raw)
        server.ports[mode] = raw.sockets[0].getsockname()[1]
    return raws


def _start(
    server: HostileServer, serve: Callable[[threading.Event], Coroutine[Any, Any, None]], name: str
) -> HostileServer:
    """Run ``serve(ready)`` on a thread's own event loop; return once it set ``ready``."""
    ready = threading.Event()

    def run() -> None:
        server.loop = asyncio.new_event_loop()
        server.loop.run_until_complete(serve(ready))

    server.thread = threading.Thread(target=run, daemon=True, name=name)
    server.thread.start()
    if not ready.wait(30):
        raise RuntimeError(f"the {name} did not start")
    return server


def start_hostile_server(sentinels: list[str]) -> HostileServer:
    """Serve every mode until ``stop()``; ``/metrics`` (scraped without a key) echoes ``sentinels``."""
    server = HostileServer()
    return _start(server, lambda ready: _serve(server, sentinels, ready), "hostile server")


# --------------------------------------------------------------------------- issue 41: every stage of an answer
# Modes for the generated client-path contracts (tests/fuzz/test_client_paths.py): a server that
# stops at each stage of an HTTP exchange, answers garbage, JSON of the wrong shape, an answer
# without end, or one byte a second. Raw asyncio servers, one port per mode, every path alike.

STAGE_MODES = (
    "hang_accept",  # listens and never accepts: the connection waits in the backlog
    "hang_headers",  # accepts, reads the request, never answers
    "hang_body",  # sends the status line and headers (Content-Length 1000), then a few bytes, then nothing
    "garbage",  # bytes that are not HTTP, then closes
    "close_at_once",  # accepts and closes without a byte
    "trickle",  # a whole valid answer, one byte a second
    "huge_body",  # 200, JSON content type, a body that never ends (chunked)
    "huge_headers",  # 200 with a header line that never ends
    "shape_list",  # 200, every path answers a JSON list of strings
    "shape_dict",  # 200, every path answers an object whose every field has the wrong type
    "shape_string",  # 200, a JSON string
    "shape_null",  # 200, JSON null
    "shape_empty_list",  # 200, []
    "shape_deep",  # 200, 100,000 nested lists
)
SHAPES = {
    "shape_list": b'["a", "b"]',
    "shape_dict": b'{"data": {"0": 1}, "object": [], "output": "x", "choices": {"a": 1}, "usage": [], '
    b'"default_generation_settings": [1], "n_ctx": "x", "id": 5}',
    "shape_string": b'"text"',
    "shape_null": b"null",
    "shape_empty_list": b"[]",
    "shape_deep": b"[" * 100_000 + b"]" * 100_000,
}


def _http(status: str, body: bytes, content_type: str = "application/json") -> bytes:
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


async def _stage_handler(mode: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(Exception):
        await reader.readuntil(b"\r\n\r\n")
        if mode == "hang_headers":
            await asyncio.sleep(3600)
        elif mode == "hang_body":
            writer.write(b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"da')
            await writer.drain()
            await asyncio.sleep(3600)
        elif mode == "garbage":
            writer.write(bytes(range(256)) * 16)
        elif mode == "trickle":
            for byte in _http("200 OK", b'{"object": "list", "data": [{"id": "m"}]}'):
                writer.write(bytes([byte]))
                await writer.drain()
                await asyncio.sleep(1)
        elif mode == "huge_body":
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
            chunk = b"[" * 65536
            while True:
                writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                await writer.drain()
        elif mode == "huge_headers":
            writer.write(b"HTTP/1.1 200 OK\r\nX-Long: ")
            while True:
                writer.write(b"x" * 65536)
                await writer.drain()
        elif mode in SHAPES:
            writer.write(_http("200 OK", SHAPES[mode]))
        await writer.drain()
    writer.close()


def start_stage_server() -> HostileServer:
    """Serve every :data:`STAGE_MODES` mode until ``stop()``; ``url(mode)`` as for the echo modes."""
    import socket

    server = HostileServer()
    backlog = socket.socket()
    backlog.bind(("127.0.0.1", 0))
    backlog.listen(1)
    server.ports["hang_accept"] = backlog.getsockname()[1]

    async def serve(ready: threading.Event) -> None:
        server.stop_event = asyncio.Event()
        raws = await _raw_ports(server, STAGE_MODES[1:], _stage_handler)
        ready.set()
        await server.stop_event.wait()
        for raw in raws:
            raw.close()
        backlog.close()
        handlers = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in handlers:  # the hanging answers: cancelled, so none is destroyed pending
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)

    return _start(server, serve, "stage server")
