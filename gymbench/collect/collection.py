"""What a collection is made of: its backend and settings, its run's identity, its standard metrics.

:class:`gymbench.collect.driver.Collection` drives one from these, the same way for
``gymbench collect``, a shard of a sharded collect and the pytest API.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import weakref
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from gymbench.collect.config import CollectConfig, ServerConfig
from gymbench.collect.progress import warn
from gymbench.errors import GymbenchError
from gymbench.jsonio import check_writable_file
from gymbench.plugins import Plugins
from gymbench.record import BenchmarkResult, Metric
from gymbench.rollout.dataset import input_identity
from gymbench.rollout.engine import CollectSettings
from gymbench.rollout.identity import check_run_fingerprint, write_run_fingerprint
from gymbench.rollout.run_settings import RunPolicy
from gymbench.rollout.stats import CollectStats, CollectSummary
from gymbench.settings import CheckedOptions, known_fields, run_defining_settings
from gymbench.types import ConcurrencyStrategy

if TYPE_CHECKING:
    from gymbench.sim.config import SimConfig

T = TypeVar("T")
STORED_LATENCY_SAMPLES = 2000
UNBOUNDED_WARNING = (
    "num_samples_in_parallel is unset: every task is dispatched at once (NeMo Gym's default). "
    "Set +num_samples_in_parallel=N, or find N with `gymbench tune`"
)


AGENT_SETTINGS = ("agent_url", "agent_name", "head_server")
"""Settings that name a NeMo Gym agent: with no backend given, they choose ``nemo-gym``."""


@dataclass(frozen=True)
class BackendChoice:
    """The backend a run uses, built once per settings object (:func:`backend_choice`)."""

    name: str
    options: Any
    """The backend's settings, checked: an instance of its schema (the raw mapping when it declares none)."""
    simulator: SimConfig | None
    """The simulator that stands in for the server, when no server is named."""


_BUILT: dict[int, dict[str, Any]] = {}
"""What was built from a settings object, by ``id``, while it lives (so one run builds each thing once)."""


def _built_once(config: ServerConfig, key: str, build: Callable[[], T]) -> T:
    built = _BUILT.get(id(config))
    if built is None:
        built = _BUILT[id(config)] = {}
        weakref.finalize(config, _BUILT.pop, id(config), None)
    if key not in built:
        built[key] = build()
    value: T = built[key]
    return value


def chosen_backend(config: ServerConfig) -> tuple[str, bool]:
    """The backend a run uses, and whether the simulator stands in for its server.

    The simulator stands in only when nothing names a server: a backend, an agent or a base URL
    given means that server or a clear error, never rows from the simulator instead."""
    if config.backend:
        return config.backend, False
    if any(getattr(config, key) for key in AGENT_SETTINGS):
        return "nemo-gym", False
    return "openai", not config.base_url


def backend_choice(config: ServerConfig, plugins: Plugins) -> BackendChoice:
    """The backend's name, its checked settings and the simulator's: built once for ``config``.

    A backend gets the server settings its schema declares, plus ``backend_options`` (checked
    against the schema: a misspelt option is an error)."""

    def build() -> BackendChoice:
        name = chosen_backend(config)[0]
        declared = plugins.options("backend", name)
        values = {key: value for key, value in config.backend_values().items() if declared is None or key in declared}
        values.update(config.backend_options)
        return BackendChoice(name, plugins.check("backend", name, values), simulator_config(config))

    built = _built_once(config, f"backend {id(plugins)}", lambda: (plugins, build()))
    return built[1]  # the plugins are held with it, so their id is not reused while it is kept


@contextlib.contextmanager
def backend_settings(
    config: ServerConfig, plugins: Plugins, running_sim: Any = None
) -> Iterator[tuple[str, CheckedOptions]]:
    """The backend's name and settings; starts (and stops) the simulator when no server is named.

    No server named at all: the simulator behind the ``openai`` backend; ``running_sim`` (a started
    :class:`~gymbench.sim.SimServerHandle`, as the pytest fixture keeps one per session) is used
    instead of starting one. The settings are read as data and hold the checked settings object,
    which ``plugins.backend`` takes as it is (:class:`~gymbench.settings.CheckedOptions`); with the
    simulator standing in, its address.
    """
    choice = backend_choice(config, plugins)
    if choice.simulator is None:
        yield choice.name, CheckedOptions(choice.options)
        return
    with contextlib.ExitStack() as stack:
        server = running_sim
        if server is None:
            from gymbench.sim import running_sim_server

            server = stack.enter_context(running_sim_server(choice.simulator))
            warn(
                f"no server set: using the simulated server ({_sim_named(config)}) at {server.url}; "
                "for a real one set +base_url=... +model=... (an OpenAI-compatible server), or "
                "+agent_name=NAME (a NeMo Gym agent, found through its head server) or +agent_url=..."
            )
        address = {"base_url": server.base_url, "model": config.model or server.config.model}
        yield choice.name, CheckedOptions(_with_values(choice.options, address))


def _sim_named(config: ServerConfig) -> str:
    profile = f", profile {config.sim_profile}" if config.sim_profile else ""
    return f"preset {config.sim_preset}{profile}"


def _with_values(options: Any, values: dict[str, Any]) -> Any:
    """``options`` with ``values`` in place: a settings object stays one, a mapping a mapping."""
    if dataclasses.is_dataclass(options) and not isinstance(options, type):
        return dataclasses.replace(options, **values)
    return {**options, **values}


def checked_backend(config: ServerConfig, plugins: Plugins) -> tuple[str, dict[str, Any]]:
    """The backend's name and the settings it is given (as data), checked against its schema now;
    the simulator's configuration is checked too, before anything starts."""
    choice = backend_choice(config, plugins)
    return choice.name, CheckedOptions(choice.options)


def simulator_config(config: ServerConfig) -> SimConfig | None:
    """The simulator's configuration (``sim_preset``, ``sim_profile``, ``+sim.*``, serving ``model`` when one is named)
    when no server is set, else None. Typed and checked like every setting; built once for ``config``."""

    def build() -> SimConfig | None:
        if not chosen_backend(config)[1]:
            return None
        from gymbench.sim.config import config_from_preset

        overrides = {"model": config.model, **config.sim} if config.model else config.sim
        return config_from_preset(config.sim_preset, overrides, config.sim_profile)

    return _built_once(config, "simulator", build)


def make_strategy(plugins: Plugins, name: str, options: dict[str, Any], parallelism: int | None) -> ConcurrencyStrategy:
    """A strategy from the registry; ``num_samples_in_parallel`` goes to those that take it (unless
    their own options set it). The strategy gets its checked settings object, not plain data."""
    settings = plugins.check("strategy", name, options)
    takes_parallelism = isinstance(settings, Mapping) or "num_samples_in_parallel" in known_fields(type(settings))
    if takes_parallelism and "num_samples_in_parallel" not in options:
        settings = _with_values(settings, {"num_samples_in_parallel": parallelism})
    elif not takes_parallelism and parallelism is not None:
        warn(f"num_samples_in_parallel does not apply to strategy {name!r}, which sets its own limit")
    return plugins.strategy(name, settings)


def collect_settings(config: CollectConfig) -> CollectSettings:
    if not config.input_jsonl_fpath:
        raise GymbenchError("collect needs +input_jsonl_fpath=TASKS.jsonl")
    if not config.output_jsonl_fpath:
        raise GymbenchError("collect needs +output_jsonl_fpath=ROLLOUTS.jsonl")
    policy = {name: getattr(config, name) for name in RunPolicy.__dataclass_fields__}
    return CollectSettings(
        input_path=Path(config.input_jsonl_fpath),
        output_path=Path(config.output_jsonl_fpath),
        selection=config.task_slice(),
        overrides=dict(config.responses_create_params),
        verify=config.verify_settings(),
        row_defaults={"agent_ref": {"name": config.agent_name}} if config.agent_name else {},
        **policy,
    )


def metrics_path(output: Path) -> Path:
    return output.with_name(output.name + ".metrics.json")


class EndOfRunFiles:
    """The files written after a run's summary (NeMo Gym's aggregate metrics, the results record,
    ``OUT.metrics.json``), each on its own: a full disk (or a results directory gone) at the end
    costs that file, said in one line, never the rest of the end of the run."""

    def __init__(self) -> None:
        self.unwritten: list[str] = []

    def write(self, what: str, write: Callable[[], T]) -> T | None:
        try:
            return write()
        except GymbenchError as exc:
            self.unwritten.append(f"{what} ({exc})")
            return None

    def status(self, output: Path, status: int) -> int:
        """``status``, or 1 (after one line naming them) when a file was not written."""
        if not self.unwritten:
            return status
        import sys

        print(
            f"gymbench: error: not written: {'; '.join(self.unwritten)}. The rollouts in {output} are kept; free "
            "space (or fix the path), then run the same command with +resume=true to write them",
            file=sys.stderr,
        )
        return max(status, 1)


def check_metrics_path(path: Path) -> None:
    check_writable_file(path, "run's metrics file", "+output_jsonl_fpath (or move it away)")


def run_identity(config: CollectConfig, settings: CollectSettings, regular_input: bool) -> dict[str, Any]:
    """What defines the rows of a run: the tasks selected (by content) and every setting that changes rows.

    The settings are those not declared ``doc(..., run_neutral=True)`` (:func:`run_defining_settings`),
    so a setting added later is in the fingerprint unless its declaration says it changes no row.
    """
    identity = input_identity(settings.input_path, settings.selection) if regular_input else {"kind": "pipe"}
    return {
        "input": {key: identity[key] for key in ("rows", "blake2b", "kind") if key in identity},
        "settings": run_defining_settings(config),
    }


def check_run_identity(config: CollectConfig, settings: CollectSettings, regular_input: bool) -> None:
    """A resume must continue the same run: refuse (or, forced, warn about) a different one."""
    identity = run_identity(config, settings, regular_input)
    if settings.resume:
        for message in check_run_fingerprint(settings.output_path, identity, config.resume_force):
            warn(message)
    else:
        write_run_fingerprint(settings.output_path, identity)


def server_timing_metrics(summary: CollectSummary) -> dict[str, Metric]:
    """The server's median prompt time and the share of TTFT spent before it, as metrics a gate can
    hold (only when the server reported timings and the run streamed)."""
    figures = summary.get("server_timings", {}).get("ttft_vs_prompt")
    if not figures:
        return {}
    found = {}
    prompt, share = figures["prompt_s"]["p50"], figures["share"]["p50"]
    if prompt is not None:
        found["server_prompt_p50"] = Metric(prompt, "s", "lower")
    if share is not None:
        found["ttft_before_prompt_share_p50"] = Metric(share, "ratio", "lower")
    return found


def collect_result(
    config: CollectConfig,
    backend_name: str,
    stats: CollectStats,
    client_cpu_s: float | None = None,
    summary: CollectSummary | None = None,
) -> BenchmarkResult:
    """The standard collection metrics, named, with units and directions (the CLI's record and the
    pytest fixture record the same ones)."""
    summary = summary if summary is not None else stats.summary()
    latencies = stats.latency.values
    if len(latencies) > STORED_LATENCY_SAMPLES:
        latencies = random.Random(0).sample(latencies, STORED_LATENCY_SAMPLES)
    metrics = {
        "rollouts_per_s": Metric(summary["rollouts_per_s"], "rollouts/s", "higher"),
        "output_tokens_per_s": Metric(summary["output_tokens_per_s"], "tokens/s", "higher"),
        "failed": Metric(float(stats.failed), "rollouts", "lower"),
    }
    attempted = stats.completed + stats.failed
    metrics["error_rate"] = Metric(stats.failed / attempted if attempted else 0.0, "ratio", "lower")
    if latencies:
        metrics["latency"] = Metric.from_samples(latencies, "s", "lower")
        for name, value in summary["latency_s"].items():
            if value is not None:  # always, with latencies
                metrics[f"latency_{name}"] = Metric(value, "s", "lower")
    if client_cpu_s is not None and attempted:
        metrics["client_cpu_per_rollout"] = Metric(client_cpu_s / attempted, "s", "lower")
    for stage, value in summary["stage_mean_s"].items():
        if value is not None:
            metrics[f"stage_{stage}"] = Metric(value, "s", "lower")
    if stats.mean_reward is not None:
        metrics["mean_reward"] = Metric(stats.mean_reward, "reward", "higher")
    goodput = summary["goodput"]
    if goodput is not None and goodput["share"] is not None:
        metrics["goodput"] = Metric(goodput["share"], "ratio", "higher")
    metrics.update(server_timing_metrics(summary))
    return BenchmarkResult(
        name="collect",
        params={
            "input": Path(config.input_jsonl_fpath or "").name,
            "backend": backend_name,
            "num_samples_in_parallel": config.num_samples_in_parallel,
            "strategy": config.strategy,
        },
        metrics=metrics,
        extra={"summary": summary},
    )
