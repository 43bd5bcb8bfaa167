"""``gymbench train``: benchmark training steps (LM or RL), or find the largest batch that fits.

torch is imported only when the command runs, never when the CLI starts. The work itself is
:func:`gymbench.train.execute.train` (settings in, result out, nothing printed), which the
pytest API calls too; this module only prints and keeps the record.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from gymbench.train.settings import TrainSettings

if TYPE_CHECKING:
    from gymbench.plugins import Plugins


def configure(parser: argparse.ArgumentParser) -> None:
    from gymbench.settings import add_settings_arguments

    parser.epilog = (
        "examples: gymbench train --model transformer --size tiny --batch 16 --precision bf16; "
        "gymbench train --step rl --lengths skewed --packing --batch 16 --seq-len 256"
    )
    add_settings_arguments(parser, TrainSettings)


def run(args: argparse.Namespace, plugins: Plugins) -> int:
    from gymbench.settings import project_defaults, settings_from_args

    return run_train(settings_from_args(TrainSettings, args, base=project_defaults("train", TrainSettings)), plugins)


def run_train(settings: TrainSettings, plugins: Plugins) -> int:
    from gymbench.run import Run
    from gymbench.train.execute import execute, prepare

    prepared = prepare(settings, plugins)
    for warning in prepared.warnings:
        print(f"gymbench: warning: {warning}", file=sys.stderr)
    name = settings.save or "train"
    with Run(plugins, "train", name, prepared.config.to_dict(), results_dir=settings.results_dir,
             save=settings.save is not None) as run:  # fmt: skip
        outcome = execute(prepared)
        print("\n".join(outcome.lines))
        run.finish([outcome.result])
    return 0
