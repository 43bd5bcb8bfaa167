"""``gymbench train`` without the printing: settings in, a benchmark result and its summary out.

The command line and the pytest API call the same two functions: :func:`prepare` checks the
settings against the registered models (and reads a rollouts file) before anything long starts,
:func:`execute` runs the benchmark or the batch-size search and records its metrics. Neither
prints; warnings and the summary come back as lines.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, cast

from gymbench.errors import GymbenchError
from gymbench.jsonio import object_list
from gymbench.measure import Recorder
from gymbench.record import BenchmarkResult
from gymbench.train.config import StepSettings, TrainConfig, length_source
from gymbench.train.identity import record_params, work_definition
from gymbench.train.settings import TrainSettings
from gymbench.types import JSONObject

if TYPE_CHECKING:
    from gymbench.plugins import Plugins
    from gymbench.train.bench import TrainReport
    from gymbench.train.oom import SearchResult, Trial
    from gymbench.train.session import ModelFactory

    TrainDetail = TrainReport | SearchResult | list[Trial] | dict[str, Any]
    """Every detail of a run: the benchmark's report, the search's result, the halving's trials, or
    the data-parallel figures."""

MiB = 1 << 20
FP16_CPU_LIMITS = {"batch": 4, "seq_len": 32}


@dataclass
class PreparedTrain:
    settings: TrainSettings
    factory: ModelFactory
    config: TrainConfig
    warnings: list[str] = field(default_factory=list)


@dataclass
class TrainOutcome:
    result: BenchmarkResult
    """What goes into the results record: metrics, parameters, and context in ``extra``."""
    lines: list[str]
    """The human summary ``gymbench train`` prints."""
    warnings: list[str]
    report: TrainDetail
    """A ``TrainReport`` (benchmark), ``SearchResult`` (search) or a list of ``Trial`` (halve)."""


def prepare(settings: TrainSettings, plugins: Plugins) -> PreparedTrain:
    """The model factory and a checked configuration; bad input fails here, before any step runs."""
    factory = model_factory(plugins, settings.model)
    prepared = PreparedTrain(settings, factory, build_config(settings))
    if prepared.config.rollouts is not None:
        length_source(prepared.config)  # a bad file is reported now, with its line
    _slow_precision_on_cpu(prepared)
    _check_model(prepared)
    if settings.profile_trace:
        from gymbench.jsonio import check_writable_file

        check_writable_file(settings.profile_trace, "profile trace", "+profile_trace")
    return prepared


def execute(prepared: PreparedTrain, recorder: Recorder | None = None) -> TrainOutcome:
    """Run the benchmark (or the search) and record its metrics into ``recorder``."""
    recorder = recorder or Recorder()
    settings, config = prepared.settings, prepared.config
    report: TrainDetail
    if settings.dp > 1:
        report, lines = _data_parallel(prepared, recorder)
    elif settings.find_batch == "halve":
        report, lines = _halve(prepared, recorder)
    elif settings.find_batch == "search":
        report, lines = _search(prepared, recorder)
    else:
        report, lines = _benchmark(prepared, recorder)
    definition = _work_definition(prepared)
    recorder.extra.update(work=definition)
    name = f"train.{settings.find_batch}" if settings.find_batch else "train"
    if settings.dp > 1:
        name = "train.dp"
    result = recorder.result(name, params=record_params(settings, config, definition))
    return TrainOutcome(result, lines, prepared.warnings, report)


def _work_definition(prepared: PreparedTrain) -> dict[str, Any]:
    from gymbench.train.session import resolve_device

    return work_definition(prepared.settings, prepared.config, resolve_device(prepared.config.device).type)


def train(settings: TrainSettings, plugins: Plugins, recorder: Recorder | None = None) -> TrainOutcome:
    """Both steps at once: what a pytest benchmark calls."""
    return execute(prepare(settings, plugins), recorder)


def model_factory(plugins: Plugins, name: str) -> ModelFactory:
    registered = plugins.components.get("model", {})
    if name not in registered:
        known = ", ".join(sorted(registered)) or "(none registered)"
        raise GymbenchError(f"unknown model {name!r}; known models: {known}. `gymbench plugins` lists them.")
    return cast("ModelFactory", registered[name].item.factory)  # the models hook's contract


def build_config(settings: TrainSettings) -> TrainConfig:
    values = {name: getattr(settings, name) for name in StepSettings.__dataclass_fields__}
    return TrainConfig(model_config={"size": settings.size, **settings.model_options}, **values)


def _check_model(prepared: PreparedTrain) -> None:
    """Build the model on the meta device (no memory, no weights): its options and its fitness for
    the chosen step are checked before a run starts."""
    import torch

    from gymbench.train.session import checked_model

    with torch.device("meta"):
        checked_model(prepared.factory, prepared.config)


def _slow_precision_on_cpu(prepared: PreparedTrain) -> None:
    """fp16 or bf16 without native CPU kernels crawls: warn; for fp16, unless told otherwise, keep the
    shapes tiny (bf16 keeps them: it is the precision NeMo RL trains in, and a run asks for it)."""
    from gymbench.train import precision
    from gymbench.train.session import resolve_device

    config = prepared.config
    if resolve_device(config.device).type != "cpu":
        return
    warning = precision.slow_on_this_cpu(config.precision, precision.cpu_flags())
    if not warning:
        return
    prepared.warnings.append(warning)
    if config.precision != "fp16" or prepared.settings.allow_slow_fp16:
        return
    shrunk = {key: min(getattr(config, key), limit) for key, limit in FP16_CPU_LIMITS.items()}
    shrunk["batch"] = config.accumulation * max(1, shrunk["batch"] // config.accumulation)
    if config.step == "rl":
        shrunk["batch"] = max(shrunk["batch"] // config.group_size, 1) * config.group_size
    prepared.warnings.append(
        f"keeping fp16 shapes tiny: size=tiny, batch={shrunk['batch']}, seq_len={shrunk['seq_len']} "
        "(--allow-slow-fp16 keeps yours)"
    )
    model_config = {**config.model_config, "size": "tiny"}
    shrunk["min_len"] = min(config.min_len, shrunk["seq_len"])
    prepared.config = replace(config, model_config=model_config, **shrunk)


def _benchmark(prepared: PreparedTrain, recorder: Recorder) -> tuple[TrainReport, list[str]]:
    from gymbench.train.bench import record_metrics, run_benchmark
    from gymbench.train.summary import benchmark_lines

    report = _unless_out_of_memory(run_benchmark, prepared.factory, prepared.config, prepared.settings)
    record_metrics(recorder, report)
    return report, benchmark_lines(report)


def _unless_out_of_memory(
    run: Callable[[ModelFactory, TrainConfig, TrainSettings], TrainReport],
    factory: ModelFactory,
    config: TrainConfig,
    settings: TrainSettings,
) -> TrainReport:
    """A benchmark whose batch does not fit is a setting to change, said in one line."""
    from gymbench.train.oom import is_out_of_memory

    try:
        return run(factory, config, settings)
    except Exception as exc:
        if not is_out_of_memory(exc):
            raise
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise GymbenchError(
            f"batch {config.batch} x seq_len {config.seq_len} does not fit in memory ({reason}); lower +batch, "
            "or find the largest batch that fits with +find_batch=search"
        ) from None


def _search(prepared: PreparedTrain, recorder: Recorder) -> tuple[SearchResult, list[str]]:
    from gymbench.train.backoff import find_largest_batch
    from gymbench.train.oom import SearchPlan
    from gymbench.train.summary import search_lines

    settings, config = prepared.settings, prepared.config
    plan = SearchPlan(
        max_batch=settings.max_batch,
        tolerance=settings.tolerance,
        margin=settings.margin,
        verify_runs=settings.verify_runs,
        budget_bytes=int(settings.memory_budget_mib * MiB),
        guided=settings.guided,
    )
    result = find_largest_batch(
        prepared.factory,
        config,
        plan,
        steps=settings.trial_steps,
        memory_fraction=settings.memory_fraction,
        progress=settings.progress,
        allocator=settings.trial_allocator,
        colocated_share=settings.colocated_share,
    )
    recorder.record("largest_fit", result.largest_fit, "samples", "higher")
    recorder.record("chosen_batch", result.chosen, "samples", "higher")
    recorder.record("search_trials", result.search_trials, "trials", "lower")
    if result.verification:
        recorder.record("verification_pass_rate", result.pass_rate, "ratio", "higher")
        recorder.record("verification_backoffs", result.backoffs, "backoffs", "lower")
    note = _checkpoint_note(prepared)
    recorder.extra.update(result.to_dict(), notes=[note] if note else [])
    return result, search_lines(result, config, _longest(config)) + _note_lines(note)


def _halve(prepared: PreparedTrain, recorder: Recorder) -> tuple[list[Trial], list[str]]:
    from gymbench.train.backoff import halve_until_it_fits
    from gymbench.train.summary import halving_lines, settled_batch

    settings, config = prepared.settings, prepared.config
    trials = halve_until_it_fits(
        prepared.factory,
        config,
        int(settings.memory_budget_mib * MiB),
        steps=settings.trial_steps,
        memory_fraction=settings.memory_fraction,
        allocator=settings.trial_allocator,
        colocated_share=settings.colocated_share,
    )
    recorder.record("settled_batch", settled_batch(trials), "samples", "higher")
    recorder.record("tries", len(trials), "trials", "lower")
    note = _checkpoint_note(prepared)
    recorder.extra.update(trials=[trial.__dict__ for trial in trials], notes=[note] if note else [])
    return trials, halving_lines(trials, config) + _note_lines(note)


def _data_parallel(prepared: PreparedTrain, recorder: Recorder) -> tuple[JSONObject, list[str]]:
    from gymbench.train import data_parallel as dp

    settings = prepared.settings
    if settings.dist_backend == "nccl":
        _check_gpus(settings.dp)
    threads = dp.threads_per_rank(settings.dp, settings.threads)
    config = dp.rank_config(prepared.config, settings.dp, threads, settings.dist_backend)
    job = {"config": config.to_dict(), "backend": settings.dist_backend, "steps": config.steps, "warmup": config.warmup}
    launcher, hang_s = settings.launcher, settings.rank_hang_s
    answer = dp.launch(job, settings.dp, launcher, prepared.factory, settings.ray_address, hang_s)
    ranks = object_list(answer["ranks"], "the data-parallel job's ranks")
    figures = dp.summarise(ranks)
    setup = {"dp": settings.dp, "launcher": settings.launcher, "dist_backend": settings.dist_backend,
             "threads_per_rank": threads, "batch_per_rank": config.batch}  # fmt: skip
    dp.record(recorder, figures, ranks, setup)
    return figures, dp.summary_lines(figures, setup, ranks)


def _check_gpus(ranks: int) -> None:
    import torch

    found = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if found < ranks:
        raise GymbenchError(
            f"--dist-backend nccl needs one GPU per rank ({ranks}); torch sees {found} (no GPU here). "
            "Use --dist-backend gloo on CPUs"
        )


def _longest(config: TrainConfig) -> str:
    if not config.uses_sequences:
        return ""
    source = length_source(config)
    return f"{source.longest} tokens ({source.describe()})"


def _checkpoint_note(prepared: PreparedTrain) -> str:
    """The checkpoint plan, from the model built on the meta device (no memory, no weights)."""
    import torch

    from gymbench.train.checkpointing import apply_checkpointing

    config = prepared.config
    with torch.device("meta"):
        model = prepared.factory(dict(config.model_config))
    blocks = cast(torch.nn.ModuleList, model.blocks)  # the BenchModel contract (see the models hook)
    return apply_checkpointing(blocks, config.checkpointing, config.checkpoint_ratio).note


def _note_lines(note: str) -> list[str]:
    return [f"note        {note}"] if note else []
