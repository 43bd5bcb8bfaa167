"""The ``gymbench engine`` command's plugin.

Registration only: the build, the model writer and the server are imported when the command runs.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from gymbench.hookspecs import hookimpl
from gymbench.types import Command

if TYPE_CHECKING:
    from gymbench.plugins import Plugins


def _configure(parser: argparse.ArgumentParser) -> None:
    from gymbench.engine.command import configure

    configure(parser)


def _run(args: argparse.Namespace, plugins: Plugins) -> int:
    from gymbench.engine.command import run

    return run(args, plugins)


@hookimpl
def gymbench_register_commands() -> list[Command]:
    return [
        Command(
            "engine",
            "build (once, cached) and run a real inference engine here: llama.cpp's llama-server with a tiny model",
            _configure,
            _run,
        )
    ]
