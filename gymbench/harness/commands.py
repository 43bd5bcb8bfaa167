"""The ``collect``, ``merge-rollouts``, ``tune`` and ``diagnose`` commands' plugin.

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
    from gymbench.harness.collect_config import CollectConfig
    from gymbench.settings import add_settings_arguments

    parser.epilog = (
        "example: gymbench collect +input_jsonl_fpath=tasks.jsonl +output_jsonl_fpath=out.jsonl "
        "+num_samples_in_parallel=32 +limit=200"
    )
    add_settings_arguments(parser, CollectConfig)


def _run_collect(args: argparse.Namespace, plugins: Plugins) -> int:
    from gymbench.harness.collect import run_collect
    from gymbench.harness.collect_config import CollectConfig
    from gymbench.settings import settings_from_args

    return run_collect(settings_from_args(CollectConfig, args), plugins)


def _configure_tune(parser: argparse.ArgumentParser) -> None:
    from gymbench.harness.tune_config import TuneConfig
    from gymbench.settings import add_settings_arguments

    parser.epilog = "example: gymbench tune +input_jsonl_fpath=tasks.jsonl +start=8 +stability_rollouts=1000"
    add_settings_arguments(parser, TuneConfig)


def _run_tune(args: argparse.Namespace, plugins: Plugins) -> int:
    from gymbench.harness.tune import run_tune
    from gymbench.harness.tune_config import TuneConfig
    from gymbench.settings import settings_from_args

    return run_tune(settings_from_args(TuneConfig, args), plugins)


def _configure_diagnose(parser: argparse.ArgumentParser) -> None:
    from gymbench.harness.tune_config import DiagnoseConfig
    from gymbench.settings import add_settings_arguments

    parser.epilog = "example: gymbench diagnose +input_jsonl_fpath=tasks.jsonl +low=5 +high=20"
    add_settings_arguments(parser, DiagnoseConfig)


def _run_diagnose(args: argparse.Namespace, plugins: Plugins) -> int:
    from gymbench.harness.tune import run_diagnose
    from gymbench.harness.tune_config import DiagnoseConfig
    from gymbench.settings import settings_from_args

    return run_diagnose(settings_from_args(DiagnoseConfig, args), plugins)


def _configure_merge(parser: argparse.ArgumentParser) -> None:
    from gymbench.harness.merge_command import configure

    configure(parser)


def _run_merge(args: argparse.Namespace, plugins: Plugins) -> int:
    from gymbench.harness.merge_command import run

    return run(args, plugins)


@hookimpl
def gymbench_register_commands() -> list[Command]:
    return [
        Command(
            "tune",
            "find the parallelism knee: sweep (or adaptive search), recommendation, stability check, plot",
            _configure_tune,
            _run_tune,
        ),
        Command(
            "diagnose",
            "what limits throughput: parallelism, model server, verification, connection pool or client",
            _configure_diagnose,
            _run_diagnose,
        ),
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
