"""Every hook gymbench calls, in one place.

Hooks are synchronous factories and events: they run at start-up or once per run, never once per
request. The asynchronous work lives in the objects the factories return. An implementation may
accept any subset of a spec's arguments, so specs can grow without breaking plugins.

Third-party plugins implement these with :data:`hookimpl` and register through the ``gymbench``
entry-point group::

    [project.entry-points.gymbench]
    myplugin = "mypackage.gymbench_plugin"
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from gymbench.engine_metrics import EngineMetrics
    from gymbench.record import ResultsRecord
    from gymbench.types import Command, Component, RunInfo

PROJECT = "gymbench"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


# --------------------------------------------------------------------------- components


@hookspec
def gymbench_register_backends() -> list[Component]:
    """Register model backends (OpenAI-compatible servers, agent servers, simulators).

    :return: a list of :class:`gymbench.types.Component` whose factory takes the backend's settings
        and returns a :class:`gymbench.types.Backend`. A component that declares a settings schema
        (``Component(..., settings=MySettings)``, a dataclass, which may inherit
        :class:`gymbench.builtin.backend_settings.HttpSettings` and ``OpenAIServer``) gets an
        instance of it, checked, with the server settings it declares filled from the command
        (``+base_url``, ``+max_retries``, ...) and its ``+backend_options``; one without a schema
        gets a plain ``dict`` of the same, as before schemas existed. Names must be unique
        across all plugins; a clash stops start-up with an error naming both plugins.
    """


@hookspec
def gymbench_register_verifiers() -> list[Component]:
    """Register verifiers that score responses.

    :return: a list of :class:`gymbench.types.Component` whose factory takes the verifier's
        configuration mapping and returns a :class:`gymbench.types.Verifier`. Names are unique
        across plugins.
    """


@hookspec
def gymbench_register_strategies() -> list[Component]:
    """Register concurrency strategies (how many rollouts run at once, and when the next starts).

    :return: a list of :class:`gymbench.types.Component` whose factory takes the strategy's
        configuration mapping and returns a :class:`gymbench.types.ConcurrencyStrategy`. Names are
        unique across plugins.
    """


@hookspec
def gymbench_register_models() -> list[Component]:
    """Register models for the training-step benchmarks (``gymbench train``, ``benches/``).

    :return: a list of :class:`gymbench.types.Component` whose factory takes the model's
        configuration mapping (a ``size`` preset plus overrides) and returns a ``torch.nn.Module``
        that follows :class:`gymbench.train.models.BenchModel`: its repeated layers in
        ``blocks``, ``make_batch(batch_size, seq_len, generator)``, ``tokens_per_sample(seq_len)``
        and ``forward(inputs, targets)`` returning the loss. Import torch inside the factory, not
        at module level, and make the factory a module-level function: the CPU memory pass and
        OOM search send it pickled to a subprocess. Names are unique across plugins.
    """


@hookspec
def gymbench_register_engine_metrics() -> list[EngineMetrics]:
    """Register the Prometheus metric names of a model server (vLLM, SGLang, llama.cpp, TGI ...).

    Called once per run (when the plugins are collected), never per poll. The server-counter probe
    of ``gymbench tune`` and the ``/metrics`` scrape of ``gymbench collect`` read a server's queue,
    batch, KV-cache use and token counters through the engine whose names its ``/metrics`` exposes
    (the one with the most quantities readable); the record says which one, or that none was.

    :return: a list of :class:`gymbench.EngineMetrics`, each naming the samples its engine uses for
        each quantity. Names are unique across plugins; ``GYMBENCH_BLOCK_PLUGINS=engine:vllm`` blocks
        a built-in, so that an engine registered under another name reads those samples instead.
    """


# --------------------------------------------------------------------------- command line


@hookspec
def gymbench_register_commands() -> list[Command]:
    """Add subcommands to the ``gymbench`` command; every built-in command comes through here.

    :return: a list of :class:`gymbench.types.Command`. Command names are unique across plugins.
    """


@hookspec
def gymbench_add_options(parser: argparse.ArgumentParser, command: str) -> None:
    """Add options to a subcommand's parser, including commands other plugins registered.

    Called once for every subcommand after the command's own ``configure``.

    :param parser: the subcommand's argument parser; add arguments to it.
    :param command: the subcommand's name, so an implementation can pick the ones it extends.
    :return: nothing; implementations amend ``parser``.
    """


# --------------------------------------------------------------------------- results


@hookspec
def gymbench_update_fingerprint(fingerprint: dict[str, dict[str, Any]]) -> None:
    """Amend the machine/software/commit description saved with every results record.

    Every implementation runs (``update_*`` style): add keys such as a cluster name, a driver
    version or a container digest. Keep values JSON-serialisable and free of secrets.

    :param fingerprint: a mapping with the sections ``machine``, ``software`` and ``commit``,
        already filled by gymbench; change it in place.
    :return: nothing; implementations amend ``fingerprint``.
    """


# --------------------------------------------------------------------------- run events


@hookspec
def gymbench_run_start(run: RunInfo) -> None:
    """A run (a pytest session with benchmarks, a collection, a tuning sweep ...) begins.

    :param run: what is running, its name and options.
    :return: nothing; this is an event.
    """


@hookspec
def gymbench_run_finish(run: RunInfo, record: ResultsRecord, error: BaseException | None) -> None:
    """A run ended: with its results record (already saved when saving was asked for), or with an error.

    Fired once for every run that started, however it ends.

    :param run: the same :class:`gymbench.types.RunInfo` given to ``gymbench_run_start``.
    :param record: the run's :class:`gymbench.record.ResultsRecord`; when ``error`` is set, a record
        with no benchmarks, not saved.
    :param error: the exception that ended the run (a ``KeyboardInterrupt`` too), or ``None`` when it
        ended normally. An implementation may leave this argument out, as those written before it
        existed do.
    :return: nothing; this is an event.
    """
