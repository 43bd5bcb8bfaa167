"""The ``gymbench_llama_server`` fixture: a real engine (llama.cpp's ``llama-server``) for a suite.

Session-scoped: the server is built once per machine (cached, :mod:`gymbench.engine.build`) and
started once per session. Where it cannot be had (no compiler, no cmake, no network for the
source, a failed build, no ``tokenizers``/``gguf`` for the model), the tests that use it are
skipped with the reason, and nothing else is. Loaded by :mod:`gymbench.pytest.plugin`; imports
nothing heavy until a test asks for the fixture.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from gymbench.engine.server import LlamaServer

MARKER = "real_engine: needs the real llama.cpp engine (fixture gymbench_llama_server; skipped with the reason "
MARKER += "when it cannot be built)"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER)


@pytest.fixture(scope="session")
def gymbench_llama_server(request: pytest.FixtureRequest) -> Iterator[LlamaServer]:
    """A running ``llama-server`` serving the tiny random-weights model: ``.base_url`` (for
    ``+base_url=``), ``.model`` (for ``+model=``), ``.metrics_url``, ``.slots`` (4)."""
    from gymbench.engine.build import cache_root, find_server
    from gymbench.engine.model import cached_model
    from gymbench.engine.server import start_llama_server
    from gymbench.errors import GymbenchError

    try:
        with output_shown(request.config):
            binary = find_server(progress=_progress_lines())
        model = cached_model("tiny", cache_root())
        server = start_llama_server(binary, model, slots=4, threads=1, max_tokens=32)
    except GymbenchError as exc:
        pytest.skip(f"no real engine: {exc}")
    with server:
        yield server


@contextlib.contextmanager
def output_shown(config: pytest.Config) -> Iterator[None]:
    """Let the build's progress through pytest's capture: a first build takes many minutes."""
    capture = config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext():
        yield


def _progress_lines(every: int = 20) -> Callable[[int, int], None]:
    """One line per ``every`` compile steps (no bar: CI logs keep every line)."""

    def progress(done: int, total: int) -> None:
        if done == 1 or done % every == 0 or done == total:
            print(f"gymbench: building llama.cpp's llama-server (once, cached): [{done}/{total}]", file=sys.stderr)

    return progress
