"""The ``tune`` and ``diagnose`` commands' plugin, and the ``adaptive`` concurrency strategy (the knee
search run during one collection).

Registration only: each command's settings and code are imported when that command runs.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from gymbench.hookspecs import hookimpl
from gymbench.types import Command, Component, ConcurrencyStrategy

if TYPE_CHECKING:
    from gymbench.plugins import Plugins
    from gymbench.tune.search_settings import AdaptiveSettings


def make_adaptive(settings: AdaptiveSettings) -> ConcurrencyStrategy:
    from gymbench.tune.adaptive import AdaptiveStrategy

    return AdaptiveStrategy(settings.search_settings(), settings.precision_rule(), settings.stop_when_converged)


@hookimpl
def gymbench_register_strategies() -> list[Component]:
    return [
        Component(
            "adaptive",
            make_adaptive,
            "finds the knee of the throughput curve during the run and settles there (gymbench tune +method=adaptive)",
            settings="gymbench.tune.search_settings:AdaptiveSettings",
        )
    ]


def _configure_tune(parser: argparse.ArgumentParser) -> None:
    from gymbench.settings import add_settings_arguments
    from gymbench.tune.config import TuneConfig

    parser.epilog = "example: gymbench tune +input_jsonl_fpath=tasks.jsonl +start=8 +stability_rollouts=1000"
    add_settings_arguments(parser, TuneConfig)


def _run_tune(args: argparse.Namespace, plugins: Plugins) -> int:
    from gymbench.collect.config import CollectConfig
    from gymbench.rollout.dataset import input_named_by
    from gymbench.settings import project_defaults, settings_from_args
    from gymbench.tune.command import run_tune
    from gymbench.tune.config import TuneConfig

    with input_named_by("+input_jsonl_fpath=PATH"):
        base = project_defaults("tune", TuneConfig, ("collect", CollectConfig))
        return run_tune(settings_from_args(TuneConfig, args, base=base), plugins)


def _configure_diagnose(parser: argparse.ArgumentParser) -> None:
    from gymbench.settings import add_settings_arguments
    from gymbench.tune.config import DiagnoseConfig

    parser.epilog = "example: gymbench diagnose +input_jsonl_fpath=tasks.jsonl +low=5 +high=20"
    add_settings_arguments(parser, DiagnoseConfig)


def _run_diagnose(args: argparse.Namespace, plugins: Plugins) -> int:
    from gymbench.collect.config import CollectConfig
    from gymbench.rollout.dataset import input_named_by
    from gymbench.settings import project_defaults, settings_from_args
    from gymbench.tune.command import run_diagnose
    from gymbench.tune.config import DiagnoseConfig

    with input_named_by("+input_jsonl_fpath=PATH"):
        base = project_defaults("diagnose", DiagnoseConfig, ("collect", CollectConfig))
        return run_diagnose(settings_from_args(DiagnoseConfig, args, base=base), plugins)


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
    ]
