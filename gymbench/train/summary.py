"""What ``gymbench train`` prints: a benchmark's or a batch-size search's summary, as lines.

Pure formatting: the lines are returned, never printed, so the pytest API can show or keep them.
"""

from __future__ import annotations

import math

import numpy as np

from gymbench.train.bench import TrainReport
from gymbench.train.config import TrainConfig, scale_learning_rate
from gymbench.train.flops import flop_rate_text
from gymbench.train.oom import SearchResult, Trial

MiB = 1 << 20
THIN_HEADROOM = 0.05
"""Less room than this in verification: the same step's footprint varies about this much between
ordinary processes (glibc's default malloc settings), so the size may still fail now and then."""


def benchmark_lines(report: TrainReport) -> list[str]:
    config, timings = report.config, report.timings
    steps = np.asarray(timings.step_s)
    q1, q3 = np.percentile(steps, [25, 75])
    plan = report.checkpointing
    lines = [
        f"model {config.model} {dict(config.model_config)}, {config.step} step, {config.precision}, "
        f"checkpointing {config.checkpointing if config.checkpoint_ratio is None else config.checkpoint_ratio} "
        f"({plan.wrapped} of {plan.total} blocks), batch {config.batch} = {config.accumulation} x "
        f"{config.micro_batch}, seq {config.seq_len}, lr {config.effective_lr:.3g}",
    ]
    if config.step == "rl":
        lines.append(rl_line(config))
    if report.lengths:
        layout = f"packed into rows of up to {report.config.seq_len}" if config.packing else "padded to the longest"
        lines.append(f"lengths      {report.lengths}; {layout}: padding {timings.padding_share:.1%} of slots")
    lines += [
        f"step time    median {np.median(steps) * 1e3:.2f} ms, IQR {(q3 - q1) * 1e3:.2f} ms "
        f"over {len(steps)} steps ({config.warmup} warm-up excluded)",
        f"throughput   {report.samples_per_step / np.median(steps):.1f} samples/s, "
        f"{report.median_tokens_per_s:.0f} tokens/s (real tokens; pad slots not counted)",
        "phases       " + ", ".join(f"{p} {np.median(s) * 1e3:.2f} ms" for p, s in timings.phases_s.items()),
    ]
    if config.base_batch is not None:
        lines.append(lr_line(config, config.batch))
    lines += _flop_lines(report) + _memory_lines(report)
    if report.scaling.enabled:
        scale = report.scaling.scales[-1] if report.scaling.scales else float("nan")
        lines.append(f"loss scale   {scale:g}, skipped steps {report.scaling.skipped_steps}")
    lines.append(f"gpu monitor  {report.gpu.text()}")
    if report.trace is not None:
        lines += [f"trace        {report.trace}", report.trace_table]
    return lines + [f"note         {note}" for note in report.notes]


def _flop_lines(report: TrainReport) -> list[str]:
    flops, achieved = report.flops, report.achieved_flops
    if flops is None or achieved is None:
        return []
    counts = report.timings.counts
    model = float(np.median(report.model_flops_per_step()))
    hardware = float(np.median([flops.hardware_flops(count) for count in counts]))
    ratio = float(np.median([flops.ratio_to_rule(count) for count in counts]))
    attention = "attention counted" if flops.attention_counted else "attention NOT counted"
    mfu = f"MFU {report.mfu:.1%}" if report.mfu is not None else f"MFU n/a ({report.peak_source})"
    return [
        f"FLOPs/step   {model:.3g} model (real tokens, no recompute: MFU's numerator), {hardware:.3g} hardware "
        f"(recompute and pad slots included); model = {ratio:.3f}x {flops.rule} ({attention})",
        f"achieved     {flop_rate_text(achieved)} of model FLOPs, {mfu}",
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
        f"leak check   {verdict}: {leak.source} grew {leak.growth_per_step_bytes / MiB:.3f} MiB per step over "
        f"{leak.steps} steps (bound {leak.bound_per_step_bytes / MiB:.2f} MiB per step)"
    )
    return lines


def trial_lines(trials: list[Trial]) -> list[str]:
    """Each trial's own memory: address space as the cap counts it (``-`` when unknown), and RSS."""
    lines = [f"{'purpose':<8} {'batch':>7} {'result':<6} {'cap MiB':>8} {'RSS MiB':>8} {'seconds':>8}  error"]
    for trial in trials:
        outcome = "fits" if trial.fits else "OOM"
        used = f"{trial.used_bytes / MiB:.1f}" if trial.used_bytes else "-"
        rss = f"{trial.rss_bytes / MiB:.1f}" if trial.rss_bytes else "-"
        lines.append(
            f"{trial.purpose:<8} {trial.batch:>7} {outcome:<6} {used:>8} {rss:>8} {trial.seconds:>8.2f}  "
            f"{trial.error or ''}"
        )
    return lines


def search_lines(result: SearchResult, config: TrainConfig, longest: str) -> list[str]:
    final = result.final_verification
    passed = sum(trial.fits for trial in final)
    lines = trial_lines(result.trials + result.verification)
    if longest:
        lines.append(f"trials ran  every sequence at its longest: {longest}")
    lines += [
        f"allocator   trials and verification ran under {result.allocator}",
        f"largest fit {result.largest_fit}, first failure {result.first_failure}, {result.search_trials} search "
        f"trials (log2(size) + 4 = {math.log2(result.largest_fit) + 4:.1f})",
        f"chosen {result.chosen} ({_how_chosen(result)}), verification {passed}/{len(final)} passed in "
        f"{result.verified_in}",
    ]
    lines += _headroom_lines(result)
    if config.step == "rl" and config.group_size > 1:
        groups = result.chosen // config.group_size
        lines.append(f"for GRPO groups of {config.group_size}: {groups * config.group_size} samples ({groups} groups)")
    if config.base_batch is not None:
        lines.append(lr_line(config, result.chosen))
    return lines


def rl_line(config: TrainConfig) -> str:
    """Which GRPO the step ran: the advantage and KL variant, updates per batch, the logprob batch."""
    variant = {
        "plain": "plain (group mean, population std, unclamped KL)",
        "nemo-rl": "nemo-rl (leave-one-out baseline, Bessel std, KL clamped: NeMo RL's defaults)",
    }[config.grpo]
    updates = config.updates_per_batch
    lag = (
        f"{updates} updates per batch of {config.rollouts_per_step} rollouts" if updates > 1 else "1 update (on-policy)"
    )
    return f"grpo         {variant}; {lag}; logprobs {config.logprob_batch or config.micro_batch} samples per forward"


def _headroom_lines(result: SearchResult) -> list[str]:
    headroom = result.headroom
    if headroom is None:
        return []
    used = [trial.used_bytes / MiB for trial in result.final_verification if trial.used_bytes > 0]
    lines = [
        f"headroom    verification used {min(used):.0f}-{max(used):.0f} MiB of the "
        f"{result.budget_bytes / MiB:.0f} MiB budget: {headroom:.1%} left"
    ]
    if headroom < THIN_HEADROOM:
        lines.append(
            f"warning     under {THIN_HEADROOM:.0%} left: a step's footprint varies by a few percent between "
            "ordinary processes, so this size may still fail now and then; a larger --margin leaves more room"
        )
    return lines


def _how_chosen(result: SearchResult) -> str:
    if not result.backoffs:
        return "safety margin below the largest fit"
    tried = sorted({t.batch for t in result.verification if t.batch != result.chosen}, reverse=True)
    failed = {t.batch for t in result.verification if not t.fits}
    said = ", ".join(f"{batch} ({'OOM' if batch in failed else 'under the margin left'})" for batch in tried)
    return (
        f"safety margin, then {result.backoffs} back-off(s) from {said} in verification: near the boundary "
        "a size can fit in one process and fail in the next"
    )


def halving_lines(trials: list[Trial], config: TrainConfig) -> list[str]:
    settled = settled_batch(trials)
    lines = trial_lines(trials) + [f"halving settled on {settled} after {len(trials)} tries, from {config.batch}"]
    if settled and config.base_batch is not None:
        lines.append(lr_line(config, settled))
    return lines


def settled_batch(trials: list[Trial]) -> int:
    return trials[-1].batch if trials and trials[-1].fits else 0


def lr_line(config: TrainConfig, batch: int) -> str:
    """Only meaningful when the user named the batch the learning rate was tuned for."""
    assert config.base_batch is not None
    scaled = scale_learning_rate(config.lr, batch, config.base_batch)
    return f"square-root LR rule: lr {config.lr:g} at batch {config.base_batch} -> {scaled:.3g} at batch {batch}"
