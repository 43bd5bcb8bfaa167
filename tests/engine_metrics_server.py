"""A real HTTP server on 127.0.0.1 serving an engine's recorded ``/metrics`` text.

The texts under ``tests/data/engine_metrics/`` are what vLLM (v0 and v1), SGLang, llama.cpp and TGI
write at ``/metrics`` (names and shapes from each engine's documentation and source); tests change
``server.text`` between scrapes to make counters advance.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

RECORDED = Path(__file__).parent / "data" / "engine_metrics"


def recorded(name: str) -> str:
    return (RECORDED / f"{name}.prom").read_text()


class MetricsServer:
    def __init__(self, text: str) -> None:
        self.text = text
        self.scrapes = 0
        self.base_url = ""

    @property
    def metrics_url(self) -> str:
        return self.base_url.rsplit("/v1", 1)[0] + "/metrics"


@contextmanager
def serving_metrics(text: str) -> Iterator[MetricsServer]:
    """``base_url`` is ``http://127.0.0.1:PORT/v1``, as a backend names it; ``/metrics`` serves ``text``."""
    state = MetricsServer(text)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path != "/metrics":
                self.send_error(404)
                return
            state.scrapes += 1
            body = state.text.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - http.server's name
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.base_url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
