"""The gate's commands' plugin: ``compare``, ``gate`` and ``calibrate``, registered through the same
hook a third party's commands use.

Registration only: each command's flags, ``+key=value`` and ``--config`` keys are generated from its
settings schema (:mod:`gymbench.gate.command_settings`), imported when its parser is built; its work
(and scipy with it) from :mod:`gymbench.gate.command_runs` when it runs.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from gymbench.hookspecs import hookimpl
from gymbench.settings import settings_parser
from gymbench.types import Command

if TYPE_CHECKING:
    from gymbench.plugins import Plugins


def _configure_calibrate(parser: argparse.ArgumentParser) -> None:
    settings_parser("gymbench.gate.command_settings:CalibrateCommand", skip=("repeats",))(parser)  # --runs: pairs
    parser.add_argument(  # a flag with an optional value (REF), which a setting cannot spell
        "--ab", nargs="?", const="", metavar="REF",
        help="interleaved A/B: calibrate the A/B gate on REF, the same commit on both sides (A/A; default: "
        "the working tree)",
    )  # fmt: skip


def _run_compare(args: argparse.Namespace, plugins: Plugins) -> int:
    from gymbench.gate.command_runs import run_compare

    return run_compare(args)


def _run_gate(args: argparse.Namespace, plugins: Plugins) -> int:
    from gymbench.gate.command_runs import run_gate_command

    return run_gate_command(args)


def _run_calibrate(args: argparse.Namespace, plugins: Plugins) -> int:
    from gymbench.gate.command_runs import run_calibrate

    return run_calibrate(args)


@hookimpl
def gymbench_register_commands() -> list[Command]:
    return [
        Command("compare", "compare two runs; exit 0 pass, 1 regression, 3 inconclusive, 2 error",
                settings_parser("gymbench.gate.command_settings:CompareCommand"), _run_compare),
        Command("gate", "count instructions of --base REF (its own worktree and code) and of this checkout, then gate",
                settings_parser("gymbench.gate.command_settings:GateCommand"), _run_gate),
        Command("calibrate", "rerun a suite unchanged (A/A) to learn each benchmark's noise on this machine",
                _configure_calibrate, _run_calibrate),
    ]  # fmt: skip
