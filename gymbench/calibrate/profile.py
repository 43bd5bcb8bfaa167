"""From a real engine's measurements to a simulator profile: the fit, the settings, the record.

The simulator counts a token per four bytes (:func:`gymbench.sim.text.count_tokens`), the engine
with its own tokenizer and after its prompt cache. The profile's ``prefill_per_token_s`` is
therefore the engine's cost of the workload's prompt as *it* processed it, divided by the tokens
the simulator counts in the same prompt: the simulator then charges the same prefill per request.
"""

from __future__ import annotations

import datetime
import os
import platform
from typing import Any

import numpy as np

from gymbench.calibrate.fit import DecodePoint, PrefillPoint, StepFit, fit_steps
from gymbench.calibrate.loadgen import Answer, LoadResult
from gymbench.calibrate.measure import LOAD_PROMPTS, Measurements, prompt_text
from gymbench.sim.config import SimConfig
from gymbench.sim.profile import public_url
from gymbench.sim.text import count_tokens
from gymbench.sim.virtual_load import simulated_closed_loop


def _number(timings: Any, key: str) -> float | None:
    value = timings.get(key) if isinstance(timings, dict) else None
    return float(value) if isinstance(value, (int, float)) else None


def prefill_points(answers: list[Answer]) -> list[PrefillPoint]:
    found = [(_number(a.timings, "prompt_n"), _number(a.timings, "prompt_ms")) for a in answers]
    return [PrefillPoint(n, ms) for n, ms in found if n and ms is not None]


def decode_points(points: list[LoadResult], slots: int, max_tokens: int) -> list[DecodePoint]:
    """One point per load, its requests' mean: every load weighs the same in the fit (a load above
    the slots answers many more requests, and would otherwise outweigh the slope's few)."""
    found = []
    for point in points:
        timed = [a.timings for a in point.answers if _number(a.timings, "predicted_per_token_ms")]
        if not timed:
            continue
        per_token = float(np.mean([_number(t, "predicted_per_token_ms") for t in timed]))
        prompt_n = float(np.mean([_number(t, "prompt_n") or 0.0 for t in timed]))
        found.append(DecodePoint(min(point.concurrency, slots), per_token, prompt_n, float(max_tokens)))
    return found


def sim_settings(fit: StepFit, measured: Measurements, prompt_words: int, max_tokens: int) -> dict[str, Any]:
    """The profile's ``sim`` section: what the simulator needs to behave as the engine did."""
    prompt_n = [_number(a.timings, "prompt_n") or 0.0 for p in measured.points for a in p.answers]
    engine_prompt = float(np.mean(prompt_n)) if prompt_n else 0.0
    sim_prompt = count_tokens(prompt_text(prompt_words))
    facts = measured.facts
    settings: dict[str, Any] = {
        "model": facts.model,
        "max_num_seqs": facts.slots,
        "step_curve_s": {n: round(ms / 1e3, 9) for n, ms in fit.curve_ms.items()},
        "prefill_per_token_s": round(fit.per_prompt_token_ms * engine_prompt / sim_prompt / 1e3, 9),
        "output_tokens_dist": "max_tokens",
        "output_tokens_mean": max_tokens,
    }
    if facts.context_per_slot:
        settings["kv_cache_tokens"] = facts.context_per_slot * facts.slots
    return settings


def _quantiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    q = np.percentile(np.array(values) * 1e3, [50, 90, 99])
    return {"p50_ms": round(float(q[0]), 3), "p90_ms": round(float(q[1]), 3), "p99_ms": round(float(q[2]), 3)}


def check_points(
    config: SimConfig, fit: StepFit, measured: Measurements, prompt_words: int, max_tokens: int
) -> list[dict[str, Any]]:
    """Each measured load beside the fitted step time and the fitted simulator's throughput at the same ``p``."""
    rows = []
    sim_prompt = count_tokens(prompt_text(prompt_words))
    for point in measured.points:
        simulated = simulated_closed_loop(config, point.concurrency, prompt_tokens=sim_prompt, output_tokens=max_tokens)
        latencies = [a.done - a.sent for a in point.answers]
        per_token = [_number(a.timings, "predicted_per_token_ms") or 0.0 for a in point.answers]
        prompt_n = float(np.mean([_number(a.timings, "prompt_n") or 0.0 for a in point.answers]))
        running = min(point.concurrency, measured.facts.slots)
        rows.append(
            {
                "concurrency": point.concurrency,
                "requests": len(point.answers),
                "errors": point.errors,
                "requests_per_s": round(point.requests_per_s, 4),
                **({"requests_per_s_passes": [round(r, 4) for r in point.pass_rates]} if point.pass_rates else {}),
                "simulated_requests_per_s": round(simulated.requests_per_s, 4),
                "error_pct": round(100 * (simulated.requests_per_s / point.requests_per_s - 1), 2),
                "predicted_per_token_ms_mean": round(float(np.mean(per_token)), 4),
                "fitted_per_token_ms": round(_profile_per_token_ms(config, fit, running, prompt_n, max_tokens), 4),
                "prompt_n_mean": round(prompt_n, 2),
                "latency_ms_mean": round(1e3 * float(np.mean(latencies)), 3),
                "ttft": _quantiles([_ttft(a) for a in point.answers]),
            }
        )
    return rows


def _profile_per_token_ms(config: SimConfig, fit: StepFit, running: int, prompt_n: float, max_tokens: int) -> float:
    """The per-token time the profile's step gives a request at ``running`` sequences (as the
    engine reports it: the decode step plus the other sequences' prefills landing in it)."""
    others = fit.per_prompt_token_ms * prompt_n * max(0, running - 1) / max_tokens
    return 1e3 * config.decode_step_s(running) + others


def build_profile(
    measured: Measurements, *, base_url: str, prompt_words: int, warmup_s: float, window_s: float
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(``sim`` settings, ``calibration`` record) of a profile; its output length is the one the
    loads' requests generated (:attr:`Measurements.output_tokens`)."""
    max_tokens = measured.output_tokens
    prefill = prefill_points(measured.prefill)
    decode = decode_points(measured.points, measured.facts.slots, max_tokens)
    if not decode:
        from gymbench.errors import GymbenchError

        raise GymbenchError(
            f"{public_url(base_url)} reported no per-request timings (predicted_per_token_ms): "
            "calibration reads llama.cpp's `timings`; is this a llama.cpp server?"
        )
    fit = fit_steps(prefill, decode)
    sim = sim_settings(fit, measured, prompt_words, max_tokens)
    effective_seqs, per_request_ms = fit_throughput(SimConfig(**sim), measured, prompt_words, max_tokens)
    sim["max_num_seqs"] = effective_seqs
    sim["prefill_per_token_s"] = round(
        sim["prefill_per_token_s"] + per_request_ms / 1e3 / count_tokens(prompt_text(prompt_words)), 9
    )
    config = SimConfig(**sim)
    record = {
        "engine_url": public_url(base_url),
        "engine": measured.facts.engine,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": _machine(),
        "took_s": round(measured.wall_s, 1),
        "workload": {
            "prompt_words": prompt_words,
            "prompts": LOAD_PROMPTS,
            "max_tokens": max_tokens,
            "max_tokens_sent": measured.max_tokens_sent,
            "warmup_s": warmup_s,
            "window_s": window_s,
            "passes": measured.passes,
        },
        "engine_limits": {"slots": measured.facts.slots, "context_per_slot": measured.facts.context_per_slot},
        "fit": {
            "model": "decode step = the measured curve (sim.step_curve_s; the line a + b*running summarises it) "
            "(+ c * other sequences' prompt tokens); prefill = a' + c*prompt_n",
            "a_ms": round(fit.base_ms, 5),
            "b_ms_per_seq": round(fit.per_seq_ms, 5),
            "c_ms_per_engine_prompt_token": round(fit.per_prompt_token_ms, 6),
            "prefill_fixed_ms": round(fit.prefill_fixed_ms, 5),
            "per_request_ms": round(per_request_ms, 4),
            "per_request_note": "work per request outside the step timings (HTTP, tokenizing), fitted to the "
            "measured throughput; charged as prefill (prefill_per_token_s includes it)",
            "effective_seqs": effective_seqs,
            "effective_seqs_note": "max_num_seqs: the engine's slots, or fewer where the machine fills first "
            "(fitted to the measured throughput)",
            "prefill_rms_residual_ms": _rms(fit.prefill_residuals_ms),
            "decode_rms_residual_ms": _rms(fit.decode_residuals_ms),
        },
        "prefill": [{"prompt_n": p.prompt_n, "prompt_ms": round(p.prompt_ms, 3)} for p in prefill],
        "check": check_points(config, fit, measured, prompt_words, max_tokens),
    }
    if measured.notes:
        record["notes"] = list(measured.notes)
    return sim, record


def fit_throughput(config: SimConfig, measured: Measurements, prompt_words: int, max_tokens: int) -> tuple[int, float]:
    """(sequences, milliseconds per request) that bring the simulator's closed-loop throughput
    (its own formula, :mod:`gymbench.sim.capacity`) closest to the measured one, in log ratio over
    every measured load; the step's ``a`` and ``b`` stay as the timings gave them.

    Milliseconds per request: on a small machine the server's HTTP threads (parsing, tokenizing,
    detokenizing, JSON) take CPU from the compute thread, so the clients' throughput levels off
    before the step timings say it should. The simulator charges a request's prefill to the step
    it lands in, so this cost is added there. Sequences: where the machine rather than the slots
    sets the ceiling (every core busy from a few clients on), the curve bends sharply at that
    concurrency, which the step model ``a + b·n`` cannot draw with all the slots running: the
    *effective* slot count, at most the engine's, draws it. The slots stay unless fewer fit
    clearly better (by more than 1% of the misfit).
    """
    from scipy.optimize import minimize_scalar

    from gymbench.sim.capacity import describe

    sim_prompt = count_tokens(prompt_text(prompt_words))
    loads = [(p.concurrency, p.requests_per_s) for p in measured.points if p.requests_per_s > 0]
    step_ms = 1e3 * config.decode_step_s(1)

    def misfit(seqs: int, per_request_ms: float) -> float:
        extra = per_request_ms / 1e3 / sim_prompt
        trial = config.replace(max_num_seqs=seqs, prefill_per_token_s=config.prefill_per_token_s + extra)
        capacity = describe(trial, prompt_tokens=sim_prompt, max_tokens=max_tokens)
        return float(sum(np.log(capacity.throughput_at(trial, n) / rate) ** 2 for n, rate in loads))

    def best_cost(seqs: int) -> tuple[float, float]:
        found = minimize_scalar(
            lambda ms: misfit(seqs, ms), bounds=(0.0, 4 * max_tokens * step_ms + 1.0), method="bounded"
        )
        cost = float(found.x) if misfit(seqs, float(found.x)) < misfit(seqs, 0.0) else 0.0
        return misfit(seqs, cost), cost

    slots = config.max_num_seqs
    at_slots = best_cost(slots)
    chosen, (error, cost) = slots, at_slots
    for seqs in range(1, slots):
        trial_error, trial_cost = best_cost(seqs)
        if trial_error < error:
            chosen, error, cost = seqs, trial_error, trial_cost
    if error > 0.99 * at_slots[0]:
        return slots, at_slots[1]
    return chosen, cost


def _ttft(answer: Answer) -> float:
    """The client's TTFT when streamed; else its latency less the server's generation time (the
    wait for a slot, the prefill and the network: what a streaming client would have waited)."""
    if answer.ttft is not None:
        return answer.ttft
    generation_ms = _number(answer.timings, "predicted_ms") or 0.0
    return max(0.0, answer.done - answer.sent - generation_ms / 1e3)


def _rms(values: list[float]) -> float:
    return round(float(np.sqrt(np.mean(np.square(values)))), 4) if values else 0.0


def _machine() -> dict[str, Any]:
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    return {
        "host": platform.node(),
        "platform": platform.platform(terse=True),
        "cpus": os.cpu_count(),
        "load_average_1m": round(load[0], 2),
    }
