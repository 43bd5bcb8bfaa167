"""A server that answers every request with the simulator's recorded answer, as fast as a socket can.

``python benches/canned_server.py SIM_BASE_URL`` asks the simulator at ``SIM_BASE_URL`` for one
answer and one streamed answer (real Responses-API bytes), then serves them on 127.0.0.1 from a raw
asyncio protocol under uvloop (HTTP/1.1 keep-alive, one answer per request, the streamed one when
the body asks for ``"stream": true``) and prints ``{"base_url": ...}`` once listening.

Why: the driver-overhead bench compares two clients' CPU per rollout. Against the simulator the
server is as fast as the client, so which of the two waits changes from one window to the next, and
with it how many answers each wake-up of the client's event loop finds: the minimal loop's own CPU
per rollout scattered by ±20% between runs. This server answers several times faster than either
client can ask, so both are always the limit, every wake-up finds a full batch, and what a run
measures is the client's own work.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import urllib.request

import uvloop

REQUEST = {"model": "gymbench-sim", "input": [{"role": "user", "content": "What is 2 + 2?"}]}


def recorded(base_url: str, stream: bool) -> bytes:
    """One real answer's body from the simulator (the whole event stream when streamed)."""
    body = json.dumps({**REQUEST, **({"stream": True} if stream else {})}).encode()
    request = urllib.request.Request(f"{base_url}/responses", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return answer.read()


def framed(body: bytes, content_type: str) -> bytes:
    head = f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


class Canned(asyncio.Protocol):
    def __init__(self, plain: bytes, streamed: bytes) -> None:
        self.plain, self.streamed = plain, streamed
        self.buffer = b""
        self.transport: asyncio.WriteTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's TCPTransport is not asyncio's class
        sock = transport.get_extra_info("socket")
        if sock is not None:  # an answer is one write; Nagle would hold a pipelined one back for an ACK
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        answers = []
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                break
            head = self.buffer[:end].lower()
            at = head.find(b"content-length:")
            stop = head.find(b"\r\n", at)
            length = int(head[at + 15 : stop if stop > 0 else None]) if at >= 0 else 0
            if len(self.buffer) < end + 4 + length:
                break
            body = self.buffer[end + 4 : end + 4 + length]
            self.buffer = self.buffer[end + 4 + length :]
            answers.append(self.streamed if b'"stream":true' in body.replace(b" ", b"") else self.plain)
        if answers and self.transport is not None:
            self.transport.write(b"".join(answers))


async def serve(sim_base_url: str) -> None:
    plain = framed(recorded(sim_base_url, False), "application/json")
    streamed = framed(recorded(sim_base_url, True), "text/event-stream")
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Canned(plain, streamed), "127.0.0.1", 0, backlog=4096)
    port = server.sockets[0].getsockname()[1]
    print(json.dumps({"base_url": f"http://127.0.0.1:{port}/v1", "pid": os.getpid()}), flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    uvloop.run(serve(sys.argv[1]))
