"""What ``gymbench train`` prints: a readable summary of a benchmark or of a batch-size search."""

from __future__ import annotations

import math

import numpy as np

from gymbench.errors import GymbenchError
from gymbench.measure import Recorder
from gymbench.trainstep.bench import BenchOptions, TrainReport, record_metrics, run_benchmark
from gymbench.trainstep.config import TrainConfig, scale_learning_rate
from gymbench.trainstep.oom import SearchPlan, SearchResult, Trial, is_out_of_memory
from gymbench.trainstep.session import ModelFactory
from gymbench.trainstep.settings import TrainSettings

MiB = 1 << 20


def benchmark(factory: ModelFactory, config: TrainConfig, args: TrainSettings, recorder: Recorder) -> None:
    options = BenchOptions(
        memory_pass=args.memory,
        count_flops=args.flops,
        peak_tflops=args.peak_tflops,
        leak_bound_bytes=args.leak_bound_mib * MiB,
        profile_path=args.profile,
        progress=args.progress,
    )
    try:
        report = run_benchmark(factory, config, options)
    except Exception as exc:
        if not is_out_of_memory(exc):
            raise
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise GymbenchError(
            f"batch {config.batch} x seq_len {config.seq_len} does not fit in memory ({reason}); lower +batch, "
            "or find the largest batch that fits with +find_batch=search"
        ) from None
    record_metrics(recorder, report)
    print("\n".join(benchmark_lines(report)))


def benchmark_lines(report: TrainReport) -> list[str]:
    config = report.config
    steps = np.asarray(report.timings.step_s)
    q1, q3 = np.percentile(steps, [25, 75])
    lines = [
        f"model {config.model} {dict(config.model_config)}, {config.precision}, "
        f"checkpointing {config.checkpointing} ({report.checkpointed_blocks} blocks), "
        f"batch {config.batch} = {config.accumulation} x {config.micro_batch}, "
        f"seq {config.seq_len}, lr {config.effective_lr:.3g}",
        f"step time    median {np.median(steps) * 1e3:.2f} ms, IQR {(q3 - q1) * 1e3:.2f} ms "
        f"over {len(steps)} steps ({config.warmup} warm-up excluded)",
        f"throughput   {report.samples_per_step / np.median(steps):.1f} samples/s, "
        f"{report.tokens_per_step / np.median(steps):.0f} tokens/s",
        "phases       " + ", ".join(f"{p} {np.median(s) * 1e3:.2f} ms" for p, s in report.timings.phases_s.items()),
    ]
    if config.base_batch is not None and config.base_batch != config.batch:
        lines.append(_lr_line(config, config.batch))
    lines += _flop_lines(report) + _memory_lines(report)
    if report.scaling.enabled:
        scale = report.scaling.scales[-1] if report.scaling.scales else float("nan")
        lines.append(f"loss scale   {scale:g}, skipped steps {report.scaling.skipped_steps}")
    lines.append(f"gpu monitor  {report.gpu.to_dict()}")
    if report.trace is not None:
        lines += [f"trace        {report.trace}", report.trace_table]
    return lines + [f"note         {note}" for note in report.notes]


def _flop_lines(report: TrainReport) -> list[str]:
    if report.flops is None:
        return []
    flops = report.flops
    attention = "attention counted" if flops.attention_counted else "attention NOT counted"
    mfu = f"MFU {report.mfu:.1%}" if report.mfu is not None else f"MFU n/a ({report.peak_source})"
    return [
        f"FLOPs/step   {flops.model:.3g} model, {flops.executed:.3g} executed (recompute included); "
        f"{flops.ratio_to_6nt:.3f}x of 6·N·tokens ({attention})",
        f"achieved     {flops.model / report.median_step_s / 1e12:.3f} TFLOP/s, {mfu}",
    ]


def _memory_lines(report: TrainReport) -> list[str]:
    lines = []
    memory = report.memory
    if memory is not None:
        reserved = f", reserved {memory.reserved_peak_bytes / MiB:.1f} MiB" if memory.reserved_peak_bytes else ""
        lines.append(
            f"memory       [{memory.label}] peak {memory.peak_bytes / MiB:.1f} MiB, step above baseline "
            f"{memory.step_peak_bytes / MiB:.1f} MiB, "
            f"activations {memory.activation_bytes / MiB:.1f} MiB{reserved}"
        )
    leak = report.leak
    verdict = "LEAK SUSPECTED" if leak.leaked else "no leak"
    lines.append(
        f"leak check   {verdict}: {leak.source} grew {leak.growth_bytes / MiB:.2f} MiB over the steps "
        f"(bound {leak.bound_bytes / MiB:.1f} MiB)"
    )
    return lines


def find_batch(factory: ModelFactory, config: TrainConfig, args: TrainSettings, recorder: Recorder) -> None:
    from gymbench.trainstep.backoff import find_largest_batch, halve_until_it_fits

    if args.memory_budget_mib <= 0 or not 0 < args.memory_fraction <= 1:
        raise GymbenchError(
            f"--memory-budget-mib must be positive and --memory-fraction in (0, 1]; got "
            f"{args.memory_budget_mib} and {args.memory_fraction}"
        )
    budget = int(args.memory_budget_mib * MiB)
    if args.find_batch == "halve":
        trials = halve_until_it_fits(
            factory, config, budget, steps=args.trial_steps, memory_fraction=args.memory_fraction
        )
        _record_halving(recorder, trials, config)
        return
    plan = SearchPlan(
        max_batch=args.max_batch,
        tolerance=args.tolerance,
        margin=args.margin,
        verify_runs=args.verify,
        budget_bytes=budget,
        guided=args.guided,
    )
    result = find_largest_batch(
        factory,
        config,
        plan,
        steps=args.trial_steps,
        memory_fraction=args.memory_fraction,
        progress=args.progress,
    )
    _record_search(recorder, result, config)


def trial_lines(trials: list[Trial]) -> list[str]:
    lines = [f"{'purpose':<8} {'batch':>7} {'result':<6} {'used MiB':>9} {'seconds':>8}  error"]
    for trial in trials:
        outcome = "fits" if trial.fits else "OOM"
        lines.append(
            f"{trial.purpose:<8} {trial.batch:>7} {outcome:<6} {trial.used_bytes / MiB:>9.1f} "
            f"{trial.seconds:>8.2f}  {trial.error or ''}"
        )
    return lines


def _record_search(recorder: Recorder, result: SearchResult, config: TrainConfig) -> None:
    print("\n".join(trial_lines(result.trials + result.verification)))
    passed = sum(trial.fits for trial in result.verification)
    print(
        f"largest fit {result.largest_fit}, first failure {result.first_failure}, "
        f"{result.search_trials} search trials (log2(size) + 4 = {math.log2(result.largest_fit) + 4:.1f})"
    )
    print(f"chosen {result.chosen} (safety margin), verification {passed}/{len(result.verification)} passed")
    print(_lr_line(config, result.chosen))
    recorder.record("largest_fit", result.largest_fit, "samples", "higher")
    recorder.record("chosen_batch", result.chosen, "samples", "higher")
    recorder.record("search_trials", result.search_trials, "trials", "lower")
    if result.verification:
        recorder.record("verification_pass_rate", result.pass_rate, "ratio", "higher")
    recorder.extra.update(result.to_dict())


def _record_halving(recorder: Recorder, trials: list[Trial], config: TrainConfig) -> None:
    print("\n".join(trial_lines(trials)))
    settled = trials[-1].batch if trials and trials[-1].fits else 0
    print(f"halving settled on {settled} after {len(trials)} tries, starting from {config.batch}")
    if settled:
        print(_lr_line(config, settled))
    recorder.record("settled_batch", settled, "samples", "higher")
    recorder.record("tries", len(trials), "trials", "lower")
    recorder.extra["trials"] = [trial.__dict__ for trial in trials]


def _lr_line(config: TrainConfig, batch: int) -> str:
    base = config.base_batch or config.batch
    scaled = scale_learning_rate(config.lr, batch, base)
    return f"square-root LR rule: lr {config.lr:g} at batch {base} -> {scaled:.3g} at batch {batch}"
