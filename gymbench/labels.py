"""Human labels for metric names: one table for the terminal, HTML and markdown.

A result's metric ids (``stage_backend_other``, ``phase_policy_and_reference_logprobs``) are stable
keys for machines; a person reading a report wants "other backend time per rollout" or "policy and
reference log-probs phase". Every view asks :func:`label` so one metric never reads two ways. Names
not in the table get a rule-based label (words, acronyms upper-cased, ``per_s`` as "/s"), so a
user's own metric still reads as words. Core module: no imports beyond the standard library.
"""

from __future__ import annotations

import re

LABELS: dict[str, str] = {
    "rollouts_per_s": "rollouts/s",
    "requests_per_s": "requests/s",
    "tokens_per_s": "tokens/s",
    "output_tokens_per_s": "output tokens/s",
    "samples_per_s": "samples/s",
    "rows_per_s": "rows/s",
    "error_rate": "error rate",
    "mean_reward": "mean reward",
    "latency": "latency",
    "mean_latency": "mean latency",
    "latency_p50": "latency p50",
    "latency_p90": "latency p90",
    "latency_p99": "latency p99",
    "step_time": "training step time",
    "time": "time",
    "time_cpu": "CPU time",
    "peak_memory": "peak memory",
    "step_peak_memory": "peak memory per step",
    "stage_total": "time per rollout",
    "stage_generation": "generation time per rollout",
    "stage_verification": "verification time per rollout",
    "stage_slot_wait": "wait for a parallelism slot",
    "stage_connection_wait": "wait for a connection",
    "stage_backend_other": "other backend time per rollout",
    "phase_policy_and_reference_logprobs": "policy and reference log-probs phase",
    "phase_policy_training": "policy training phase",
    "phase_advantage_calculation": "advantage calculation phase",
    "phase_optimizer": "optimizer phase",
    "phase_data": "data phase",
    "phase_forward": "forward phase",
    "phase_backward": "backward phase",
    "client_cpu_per_rollout": "client CPU per rollout",
    "server_cpu_per_request": "server CPU per request",
    "achieved_tflops": "achieved TFLOP/s",
    "model_flops_per_step": "model FLOPs per step",
    "saturation_concurrency": "saturation parallelism",
    "verification_pass_rate": "verification pass rate",
    "instructions": "instructions",
    "failed": "failed rollouts",
    "goodput": "goodput (share within the SLO)",
    "knee_parallelism": "knee (parallelism)",
    "plateau_rollouts_per_s": "plateau rollouts/s",
    "recommended_parallelism": "recommended parallelism",
    "expected_rollouts_per_s": "expected rollouts/s at the recommendation",
    "expected_share_of_plateau": "share of the plateau at the recommendation",
    "wall_time": "wall time",
    "low_rollouts_per_s": "rollouts/s at the low parallelism",
    "high_rollouts_per_s": "rollouts/s at the high parallelism",
    "low_latency_p50": "latency p50 at the low parallelism",
    "high_latency_p50": "latency p50 at the high parallelism",
    "gain": "throughput gain, low to high parallelism",
    "mfu": "MFU",
    "memory_growth_per_step": "memory growth per step",
    "activation_memory": "activation memory",
    "padding_share": "padding share",
    "stage_ttft": "time to first token per rollout",
    "cpu_ms_per_rollout": "CPU per rollout",
}

ACRONYMS = {
    "cpu": "CPU",
    "gpu": "GPU",
    "rss": "RSS",
    "mfu": "MFU",
    "ttft": "TTFT",
    "ttst": "TTST",
    "itl": "ITL",
    "tpot": "TPOT",
    "e2e": "e2e",
    "fp32": "fp32",
    "bf16": "bf16",
    "fp16": "fp16",
    "ckpt": "checkpointed",
    "cli": "CLI",
    "ci": "CI",
    "oom": "OOM",
    "tflops": "TFLOP/s",
    "aa": "A/A",
}

_PERCENTILE = re.compile(r"^p\d{2,3}(\.\d+)?$")


def label(name: str) -> str:
    """The label a person reads for metric ``name`` (the table's, else words made from the id)."""
    if name in LABELS:
        return LABELS[name]
    if name.endswith("]") and "[" in name:  # ``metric[which]``: a server or replica's name, kept as written
        base, which = name[:-1].split("[", 1)
        return f"{label(base)}, {which}"
    for prefix in ("fp32_ckpt_", "bf16_ckpt_", "fp16_ckpt_", "fp32_", "bf16_", "fp16_"):
        if name.startswith(prefix) and name[len(prefix) :] in LABELS:
            return f"{_words(prefix.rstrip('_'))}: {LABELS[name[len(prefix) :]]}"
    return _words(name)


def _words(name: str) -> str:
    text = name.replace("_per_s", "/s")
    words = [w for w in re.split(r"_+", text) if w]
    out = []
    for word in words:
        lower = word.lower()
        if lower in ACRONYMS:
            out.append(ACRONYMS[lower])
        elif _PERCENTILE.match(lower):
            out.append(lower)
        else:
            out.append(word)
    return " ".join(out) or name
