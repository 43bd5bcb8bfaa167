"""The ``gymbench sim-server`` command's plugin.

Registration only: the command's settings (:mod:`gymbench.sim.command`, built on the engine's
:class:`~gymbench.sim.config.SimConfig`) and its code are imported when the command's parser is
built or it runs. ``calibrate-sim`` is :mod:`gymbench.calibrate.plugin`'s.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from gymbench.hookspecs import hookimpl
from gymbench.types import Command

if TYPE_CHECKING:
    from gymbench.plugins import Plugins


def _configure(parser: argparse.ArgumentParser) -> None:
    from gymbench.sim.command import configure

    configure(parser)


def _run(args: argparse.Namespace, plugins: Plugins) -> int:
    from gymbench.sim.command import run

    return run(args, plugins)


@hookimpl
def gymbench_register_commands() -> list[Command]:
    return [
        Command(
            "sim-server",
            "run the simulated OpenAI-compatible continuous-batching server (or --describe its capacity)",
            _configure,
            _run,
        ),
    ]
