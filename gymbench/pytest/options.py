"""The pytest plugin's command-line options (``pytest --help``, group "gymbench benchmarks").

Kept apart from :mod:`gymbench.pytest.plugin` so the hooks stay readable; like the plugin, this
module loads in every pytest run, so it imports nothing heavy.
"""

from __future__ import annotations

import argparse

import pytest


def add_options(parser: pytest.Parser) -> None:
    """Every ``--gymbench-*`` option, in one group of ``pytest --help``."""
    group = parser.getgroup("gymbench", "gymbench benchmarks")
    group.addoption(
        "--gymbench-save",
        metavar="NAME",
        default=None,
        help="save this session's results record as results/<machine>/<time>_NAME.json",
    )
    group.addoption(
        "--gymbench-results-dir",
        metavar="DIR",
        default=None,
        help="where results records go (default: results/ under the rootdir)",
    )
    group.addoption(
        "--gymbench-quick",
        action="store_true",
        default=False,
        help="run every benchmark briefly: proves they run, figures are not comparable",
    )
    group.addoption(
        "--gymbench-compare",
        metavar="BASELINE",
        default=None,
        help="compare this run with a baseline: a results file, saved name, name glob, git ref or 'latest'",
    )
    group.addoption(
        "--gymbench-fail-on",
        choices=("none", "regression", "inconclusive"),
        default="none",
        help="fail the session on a regression (exit 6) or also on an inconclusive result (exit 7); "
        "default none: report only",
    )
    group.addoption("--gymbench-min-effect", type=float, default=None, help="smallest change that matters (0.05 = 5%%)")
    group.addoption("--gymbench-calibration", metavar="FILE", default=None, help="calibration file (default: latest)")
    group.addoption("--gymbench-min-rounds", type=int, default=None, help="minimum measured rounds per case")
    group.addoption("--gymbench-max-time", type=float, default=None, help="seconds per case, at most")
    group.addoption(
        "--gymbench-instructions",
        action="store_true",
        default=False,
        help="also count each benchmark's instructions under valgrind's callgrind (metric 'instructions'; "
        "needs valgrind; slow, so few calls)",
    )
    group.addoption(
        "--gymbench-instructions-timeout",
        type=float,
        default=3600.0,
        metavar="SECONDS",
        help="stop counting under callgrind after this long, keeping what was counted (default 3600)",
    )
    group.addoption(
        "--gymbench-instructions-brackets",
        type=int,
        default=5,
        metavar="N",
        help="counted brackets per benchmark, each after its own heap layout (default 5; each costs one "
        "more round of calls under callgrind; below 3 a comparison needs a calibration of counts)",
    )
    group.addoption(
        "--gymbench-ab",
        metavar="BASE_REF",
        default=None,
        help="instead of running the benchmarks here, compare this working tree with git ref BASE_REF: "
        "interleaved rounds in two worker processes pinned to one CPU (gymbench compare --ab)",
    )
    group.addoption("--gymbench-ab-repeats", type=int, default=None, help="A/B worker pairs (default 3)")
    group.addoption("--gymbench-instructions-worker", metavar="DIR", default=None, help=argparse.SUPPRESS)
    group.addoption("--gymbench-ab-worker", action="store_true", default=False, help=argparse.SUPPRESS)
    group.addoption("--gymbench-ab-list", metavar="FILE", default=None, help=argparse.SUPPRESS)
