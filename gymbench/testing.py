"""A test kit for plugin authors, in the spirit of pytest's ``pytester`` and tox's test kit.

Use it from your plugin's tests with ``pytest_plugins = ["gymbench.testing"]``:

* :class:`FakeBackend`: a real async :class:`~gymbench.types.Backend` whose answers come from a
  function you give it (like httpx's ``MockTransport``), with optional latency and failures.
* :func:`make_plugins` / the ``gymbench_plugins`` fixture: a fresh plugin manager with the
  built-ins plus your plugin objects, entry points off by default so the test sees only them.
* :func:`run_case`: the harness factory: measure a callable exactly as the ``gymbench`` fixture
  does and get the :class:`~gymbench.record.BenchmarkResult` back.
"""

from __future__ import annotations

import asyncio
import inspect
import signal
import textwrap
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest

from gymbench.measure import MeasureSettings, Recorder
from gymbench.plugins import Plugins, get_plugin_manager
from gymbench.record import BenchmarkResult
from gymbench.types import Generation, GenerationRequest, TokenUsage

Responder = Callable[[GenerationRequest], "str | Generation"]


def echo_last_user_message(request: GenerationRequest) -> str:
    """The default responder: the text of the request's ``input``."""
    data = request.params.get("input", "")
    if isinstance(data, str):
        return data
    return str(data[-1].get("content", "")) if data else ""


class FakeBackend:
    """A backend that needs no server. Counts calls and tracks peak concurrency for assertions."""

    def __init__(
        self,
        respond: Responder = echo_last_user_message,
        latency_s: float = 0.0,
        fail_with: Callable[[GenerationRequest], BaseException | None] | None = None,
        keep_calls: bool = True,
    ) -> None:
        self.respond = respond
        self.keep_calls = keep_calls
        self.latency_s = latency_s
        self.fail_with = fail_with
        self.calls: list[GenerationRequest] = []
        self.in_flight = 0
        self.peak_in_flight = 0
        self.opened = False
        self.closed = False

    async def __aenter__(self) -> FakeBackend:
        self.opened = True
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.closed = True

    async def generate(self, request: GenerationRequest) -> Generation:
        if self.keep_calls:  # off for long runs: the log grows with every request
            self.calls.append(request)
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            if self.latency_s:
                await asyncio.sleep(self.latency_s)
            error = self.fail_with(request) if self.fail_with else None
            if error is not None:
                raise error
            answer = self.respond(request)
        finally:
            self.in_flight -= 1
        if isinstance(answer, Generation):
            return answer
        return Generation(
            text=answer,
            response={"output_text": answer},
            usage=TokenUsage(prompt_tokens=1, completion_tokens=len(answer.split())),
        )


def make_plugins(*plugins: object, load_entry_points: bool = False, blocked: Iterable[str] = ()) -> Plugins:
    """A fresh registry with the built-ins and ``plugins``; no process-wide state is touched."""
    return Plugins(get_plugin_manager(plugins, load_entry_points=load_entry_points, blocked=blocked))


def run_case(
    fn: Callable[..., Any],
    *args: Any,
    name: str = "case",
    params: Mapping[str, Any] | None = None,
    settings: MeasureSettings | None = None,
    **kwargs: Any,
) -> BenchmarkResult:
    """Measure ``fn`` (sync, or ``async def`` run on a fresh loop) and return its result record."""
    recorder = Recorder(settings or MeasureSettings.quick_mode())
    if inspect.iscoroutinefunction(fn):
        coroutine_fn: Callable[..., Awaitable[Any]] = fn
        asyncio.run(recorder.ameasure(coroutine_fn, *args, **kwargs))
    else:
        recorder.measure(fn, *args, **kwargs)
    return recorder.result(name=name, params=params)


@pytest.fixture
def gymbench_plugins() -> Callable[..., Plugins]:
    """Factory fixture: ``gymbench_plugins(MyPlugin())`` gives a fresh registry per test."""
    return make_plugins


def install_entry_point_plugin(root: Path, module: str, source: str) -> None:
    """Install ``source`` as module ``module`` under ``root`` with a ``gymbench`` entry point.

    It is a real distribution (a ``.dist-info`` with ``entry_points.txt``): put ``root`` on
    ``sys.path`` and :func:`~gymbench.plugins.get_plugin_manager` finds it the way it finds a
    pip-installed plugin, so a test proves the entry point, not only the hooks.
    """
    (root / f"{module}.py").write_text(textwrap.dedent(source))
    info = root / f"{module}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[gymbench]\n{module} = {module}\n")


def terminal_sigint() -> None:
    """``preexec_fn`` for a child a test interrupts with SIGINT.

    A background job of a non-interactive shell (how CI may run a suite) starts with SIGINT ignored
    and its children inherit that, so Ctrl-C handling would go untested: give the child the
    disposition a terminal gives.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)
