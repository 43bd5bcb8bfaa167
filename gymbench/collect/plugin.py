"""The ``collect`` and ``merge-rollouts`` commands' plugin.

Registration only: each command's settings and code are imported when that command runs (the
``--help`` of one command builds only its own parser).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from gymbench.hookspecs import hookimpl
from gymbench.types import Command

if TYPE_CHECKING:
    from gymbench.plugins import Plugins


def _configure_collect(parser: argparse.ArgumentParser) -> None:
    from gymbench.collect.config import CollectConfig
    from gymbench.settings import add_settings_arguments

    parser.epilog = (
        "example: gymbench collect +input_jsonl_fpath=tasks.jsonl +output_jsonl_fpath=out.jsonl "
        "+num_samples_in_parallel=32 +limit=200"
    )
    add_settings_arguments(parser, CollectConfig)


def _run_collect(args: argparse.Namespace, plugins: Plugins) -> int:
    from gymbench.collect.command import run_collect
    from gymbench.collect.config import CollectConfig
    from gymbench.rollout.dataset import input_named_by
    from gymbench.settings import project_defaults, settings_from_args

    with input_named_by("+input_jsonl_fpath=PATH"):
        return run_collect(
            settings_from_args(CollectConfig, args, base=project_defaults("collect", CollectConfig)), plugins
        )


def _configure_merge(parser: argparse.ArgumentParser) -> None:
    from gymbench.collect.merge_command import configure

    configure(parser)


def _run_merge(args: argparse.Namespace, plugins: Plugins) -> int:
    from gymbench.collect.merge_command import run
    from gymbench.rollout.dataset import input_named_by

    with input_named_by("--input PATH"):
        return run(args, plugins)


@hookimpl
def gymbench_register_commands() -> list[Command]:
    return [
        Command(
            "collect",
            "collect rollouts: tasks JSONL -> backend -> verifier -> rollouts JSONL (NeMo Gym's ng_collect_rollouts)",
            _configure_collect,
            _run_collect,
        ),
        Command(
            "merge-rollouts",
            "join rollout files (shards, NeMo Gym's start_idx/end_idx splits) refusing duplicates and gaps",
            _configure_merge,
            _run_merge,
        ),
    ]
