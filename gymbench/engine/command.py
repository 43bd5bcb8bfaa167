"""``gymbench engine llama-cpp``: a real inference engine on this machine in one command.

Builds (once, cached) llama.cpp's ``llama-server``, makes (once, cached) a tiny random-weights
model, serves it on 127.0.0.1 and prints the lines to point ``gymbench collect`` and ``gymbench
tune`` at it, then serves until Ctrl-C.
"""

from __future__ import annotations

import argparse
import signal
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NoReturn

from gymbench.engine.build import SERVER_ENV
from gymbench.engine.model import MODEL_SIZES
from gymbench.engine.server import HTTP_THREADS, READY_TIMEOUT_S
from gymbench.settings import ServedReplicas, doc

if TYPE_CHECKING:
    from pathlib import Path

    from gymbench.engine.build import Progress
    from gymbench.plugins import Plugins

ENGINES = ("llama-cpp",)


@dataclass(frozen=True)
class EngineSettings(ServedReplicas):
    engine: str | None = field(default=None, metadata=doc("the engine to run: " + ", ".join(ENGINES), positional=True))
    model_size: str = field(
        default="tiny",
        metadata=doc("the random-weights model: " + "; ".join(f"{k}: {v.layers} layers, hidden {v.hidden}"
                                                            for k, v in MODEL_SIZES.items())),
    )  # fmt: skip
    slots: int = field(default=4, metadata=doc("requests served at once (llama-server -np)"))
    slow_replica_slots: int | None = field(
        default=None,
        metadata=doc("slots of the last replica, fewer than --slots to make it a straggler (default: --slots)"),
    )
    threads: int = field(default=1, metadata=doc("CPU threads for the model (llama-server -t)"))
    context: int = field(default=4096, metadata=doc("tokens of context per slot"))
    max_tokens: int = field(
        default=128, metadata=doc("longest reply when a request sets no max_tokens (llama-server -n)")
    )
    http_threads: int = field(
        default=HTTP_THREADS,
        metadata=doc(
            "HTTP threads (llama-server --threads-http); fewer than the client's connections stall requests up to 5 s"
        ),
    )
    ready_timeout_s: float = field(
        default=READY_TIMEOUT_S,
        metadata=doc("seconds to wait for the server's /health to say ok (loading the model) before giving up"),
    )
    build_only: bool = field(default=False, metadata=doc("build (or find) llama-server, print its path and exit"))
    server_binary: str | None = field(
        default=None,
        metadata=doc(f"a llama-server to run instead of the cached build (as {SERVER_ENV}=PATH)", path=True),
    )

    def __post_init__(self) -> None:
        from gymbench.settings import at_least, one_of, positive_finite, require

        super().__post_init__()  # host, port
        if self.engine is not None:
            one_of("engine", self.engine, ENGINES)
        require(self.model_size in MODEL_SIZES, "model_size", self.model_size, " or ".join(MODEL_SIZES))
        at_least("slots", self.slots, 1)
        if self.slow_replica_slots is not None:
            at_least("slow_replica_slots", self.slow_replica_slots, 1)
            require(self.replicas > 1, "slow_replica_slots", self.slow_replica_slots, "given with --replicas 2 or more")
        at_least("threads", self.threads, 1)
        at_least("context", self.context, 64)
        at_least("max_tokens", self.max_tokens, 1)
        at_least("http_threads", self.http_threads, 1)
        positive_finite("ready_timeout_s", self.ready_timeout_s)


def configure(parser: argparse.ArgumentParser) -> None:
    from gymbench.settings import add_settings_arguments

    parser.epilog = "example: gymbench engine llama-cpp --slots 8 --threads 2"
    add_settings_arguments(parser, EngineSettings)


def run(args: argparse.Namespace, plugins: Plugins) -> int:
    from gymbench.engine.build import cache_root, find_server
    from gymbench.engine.model import cached_model
    from gymbench.settings import settings_from_args

    settings = settings_from_args(EngineSettings, args)
    if settings.engine is None:
        from gymbench.errors import GymbenchError

        raise GymbenchError(f"name the engine to run: gymbench engine {' | '.join(ENGINES)}")
    binary = find_server(progress=bar_progress(), binary=settings.server_binary)
    if settings.build_only:
        print(binary)
        return 0
    model = cached_model(settings.model_size, cache_root())
    return serve(binary, model, settings)


def serve(binary: Path, model: Path, settings: EngineSettings) -> int:
    import contextlib
    import time

    from gymbench.engine.server import replicas_command, start_llama_server

    # SIGTERM (kill, a CI runner's cancel) leaves through the with block, which stops the servers,
    # as Ctrl-C does; exit status 143 is the shell's for a SIGTERM.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    with contextlib.ExitStack() as running:
        servers = []
        for index in range(settings.replicas):
            last = index == settings.replicas - 1 and settings.replicas > 1
            slots = settings.slow_replica_slots if last and settings.slow_replica_slots else settings.slots
            port = settings.port + index if settings.port else 0
            servers.append(running.enter_context(start_llama_server(
                binary, model, slots=slots, threads=settings.threads, port=port, host=settings.host,
                context=settings.context, max_tokens=settings.max_tokens,
                http_threads=settings.http_threads, ready_timeout_s=settings.ready_timeout_s,
            )))  # fmt: skip
        if len(servers) == 1:
            (server,) = servers
            print(f"llama.cpp's llama-server is serving {model.name} on {server.base_url} (Ctrl-C to stop)")
            print(f"  metrics: {server.metrics_url}   log: {server.log_path}   binary: {binary}")
            lines = (server.collect_command(), server.tune_command())
        else:
            print(f"llama.cpp's llama-server is serving {model.name} as {len(servers)} replicas (Ctrl-C stops all); "
                  f"binary: {binary}")  # fmt: skip
            for server in servers:
                where = f"metrics: {server.metrics_url}   log: {server.log_path}"
                print(f"  {server.base_url}: {server.slots} slot{'s' if server.slots != 1 else ''}   {where}")
            lines = replicas_command(servers)
        for line in lines:
            print(f"  {line}")
        sys.stdout.flush()
        said: set[int] = set()
        while True:  # one replica stopping leaves the others serving (a run over them fails over)
            stopped = [index for index, server in enumerate(servers) if server.process.poll() is not None]
            for index in sorted(set(stopped) - said):
                if len(stopped) < len(servers):
                    gone = servers[index]
                    print(
                        f"gymbench: warning: llama-server stopped (status {gone.process.returncode}) at "
                        f"{gone.base_url}; {len(servers) - len(stopped)} replicas still serving",
                        file=sys.stderr,
                    )
                said.add(index)
            if len(stopped) == len(servers):
                break
            time.sleep(0.5)
        final = servers[stopped[-1]]
    from gymbench.errors import GymbenchError

    raise GymbenchError(
        f"llama-server stopped (status {final.process.returncode}) at {final.base_url}; its last lines: "
        f"{final.log_tail()}" + ("; no replica is left serving" if len(servers) > 1 else "")
    )


def _exit_on_sigterm(signum: int, frame: object) -> NoReturn:
    raise SystemExit(128 + signum)


def bar_progress() -> Progress:
    """A tqdm bar over the compile's ``[n/N]`` steps, made on the first step (none when nothing is built)."""
    from tqdm import tqdm

    bars: list[tqdm[NoReturn]] = []

    def progress(done: int, total: int) -> None:
        if not bars:
            print("building llama.cpp's llama-server (once; cached afterwards)", file=sys.stderr)
            bars.append(tqdm(total=total, unit="step", desc="llama-server", file=sys.stderr))
        bar = bars[0]
        bar.update(done - bar.n)
        if done >= total:
            bar.close()

    return progress
