"""The ``gymbench calibrate-sim`` command's plugin.

Registration only: its settings (:mod:`gymbench.calibrate.command`) and code are imported when the
command's parser is built or it runs.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from gymbench.hookspecs import hookimpl
from gymbench.types import Command

if TYPE_CHECKING:
    from gymbench.plugins import Plugins


def _configure(parser: argparse.ArgumentParser) -> None:
    from gymbench.calibrate.command import configure

    configure(parser)


def _run(args: argparse.Namespace, plugins: Plugins) -> int:
    from gymbench.calibrate.command import run

    return run(args, plugins)


@hookimpl
def gymbench_register_commands() -> list[Command]:
    return [
        Command(
            "calibrate-sim",
            "measure a real engine (llama.cpp's server) and write a simulator profile that imitates it",
            _configure,
            _run,
        )
    ]
