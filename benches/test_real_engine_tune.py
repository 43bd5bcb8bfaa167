"""``gymbench tune`` and ``gymbench diagnose`` on a real engine, against a brute-force truth (issue 23, item 4).

For each llama.cpp configuration (``slot-bound``: 4 slots, below the compute knee; ``compute-bound``:
64 slots, so that the single compute thread's step time is the limit), the bench starts
``llama-server`` (1 compute thread, ``--threads-http 256``), then

1. measures the truth: a closed loop of ``p`` clients (:func:`gymbench.sim.loadgen.closed_loop`,
   not gymbench's collection code) at each ``p`` of the grid, counting the requests that finish in a
   window after a warm-up; the true knee is the smallest ``p`` reaching 97% of the plateau
   (:func:`gymbench.curves.knee_of`, log2-interpolated between grid points);
2. runs ``gymbench tune`` (the sweep, then the adaptive search) with the same requests, and records
   each knee's error against the truth and the truth's throughput at the recommendation ÷ the truth's
   plateau (interpolated on the grid);
3. runs ``gymbench diagnose`` below the knee (which should read "parallelism") and above it
   (which should name the model server).

The requests: one fixed prompt, 64 output tokens (``ignore_eos``), not streamed, chat API. The
window is 30 s per point (the issue's); ``GYMBENCH_TRUTH_WINDOW_S`` shortens it. Quick mode: 3 s
windows at three points and the sweep alone. Skipped, with the reason, where no real engine can be
had (the ``gymbench_llama_server`` fixture's rules: build or cache).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gymbench import Recorder
from gymbench.curves import knee_of
from gymbench.engine.build import cache_root, find_server
from gymbench.engine.model import cached_model
from gymbench.engine.server import LlamaServer, start_llama_server
from gymbench.errors import GymbenchError
from gymbench.settings import build_settings
from gymbench.sim.loadgen import closed_loop
from gymbench.testing import make_plugins
from gymbench.tune.command import diagnose_run, tune_run
from gymbench.tune.config import DiagnoseConfig, TuneConfig

pytestmark = pytest.mark.real_engine

GRID = (1, 2, 4, 6, 8, 12, 16, 24, 32, 48, 64)
CONFIGS = {"slot-bound": 4, "compute-bound": 64}
"""Configuration → llama-server's ``-np``."""
PROMPT = "Count the apples, pears and plums in the basket and tell me how many fruits there are in all."
MAX_TOKENS = 64


def engine_server(slots: int) -> LlamaServer:
    try:
        return start_llama_server(find_server(), cached_model("tiny", cache_root()), slots=slots, threads=1,
                                  context=512, max_tokens=MAX_TOKENS)  # fmt: skip
    except GymbenchError as exc:
        pytest.skip(f"no real engine: {exc}")


@pytest.fixture(scope="module", params=list(CONFIGS))
def server(request: pytest.FixtureRequest) -> Iterator[tuple[str, LlamaServer]]:
    with engine_server(CONFIGS[request.param]) as running:
        yield request.param, running


def tasks_file(directory: Path, rows: int = 64) -> Path:
    """The truth's request as NeMo Gym rows (no verifier: a rollout is one request)."""
    path = directory / "tasks.jsonl"
    row = {"responses_create_params": {"input": [{"role": "user", "content": PROMPT}],
                                       "max_output_tokens": MAX_TOKENS, "temperature": 0.0}}  # fmt: skip
    path.write_text("".join(json.dumps({**row, "task_id": f"t{i}"}) + "\n" for i in range(rows)))
    return path


def truth_at(server: LlamaServer, p: int, window_s: float) -> float:
    body = {"model": server.model, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": MAX_TOKENS,
            "ignore_eos": True, "temperature": 0.0}  # fmt: skip
    result = asyncio.run(closed_loop(server.base_url, p, window_s, warmup_s=2.0, body=body))
    assert result.completed > 0, f"no request finished at p={p} ({result.errors} failed)"
    return result.requests_per_s


def interpolated(curve: dict[int, float], p: float) -> float:
    """The truth at ``p`` between grid points (log2-linear), the last point beyond the grid."""
    ps = sorted(curve)
    if p <= ps[0]:
        return curve[ps[0]] * p / ps[0]  # a closed loop below its first point scales with p
    for lo, hi in zip(ps, ps[1:], strict=False):
        if lo <= p <= hi:
            share = (math.log2(p) - math.log2(lo)) / (math.log2(hi) - math.log2(lo))
            return curve[lo] + share * (curve[hi] - curve[lo])
    return curve[ps[-1]]


def common(server: LlamaServer, tasks: Path) -> list[str]:
    return [f"input_jsonl_fpath={tasks}", "backend=openai", f"base_url={server.base_url}",
            f"model={server.model}", "api=chat", "stream=false", "extra_body.ignore_eos=true",
            "save_results=false", "progress=false"]  # fmt: skip


def test_tune_and_diagnose_against_the_truth(
    gymbench: Recorder, server: tuple[str, LlamaServer], tmp_path: Path
) -> None:
    name, running = server
    slots = CONFIGS[name]
    window_s = float(os.environ.get("GYMBENCH_TRUTH_WINDOW_S", 3 if gymbench.quick else 30))
    points = sorted({1, slots, 2 * slots}) if gymbench.quick else list(GRID)
    gymbench.record("load_before", os.getloadavg()[0], "load", "lower")
    truth = {p: truth_at(running, p, window_s) for p in points}
    true_knee = knee_of(truth)
    plateau = max(truth.values())
    print(f"\n{name} (-np {slots}, -t 1), {window_s:g} s per point")
    for p in points:
        print(f"  p={p:>3}  {truth[p]:8.2f} requests/s  ({truth[p] / plateau:6.1%} of the plateau)")
        gymbench.record(f"truth_rps_p{p}", truth[p], "requests/s", "higher")
    print(f"  true knee {true_knee:.1f}, plateau {plateau:.2f} requests/s")
    gymbench.record("truth_knee", true_knee, "parallelism", "higher")
    gymbench.record("truth_plateau", plateau, "requests/s", "higher")

    tasks = tasks_file(tmp_path)
    batches = ["min_batches=3", "max_batches=8"] if gymbench.quick else []
    methods = ["sweep"] if gymbench.quick else ["sweep", "adaptive"]
    for method in methods:
        settings = [*common(running, tasks), "plot=", f"method={method}", "start=1", *batches]
        result = tune_run(build_settings(TuneConfig, settings), make_plugins())
        knee = result.knee.parallelism
        delivered = interpolated(truth, result.recommended) / plateau
        print(f"  tune {method}: knee {knee:.1f} ({knee / true_knee - 1:+.0%}), recommended {result.recommended}"
              f" delivering {delivered:.1%} of the true plateau, {result.wall_s:.0f} s")  # fmt: skip
        gymbench.record(f"{method}_knee", knee, "parallelism", "higher")
        gymbench.record(f"{method}_knee_error", knee / true_knee - 1, "ratio", "lower")
        gymbench.record(f"{method}_recommended", result.recommended, "parallelism", "higher")
        gymbench.record(f"{method}_delivered_share", delivered, "ratio", "higher")
        gymbench.record(f"{method}_wall", result.wall_s, "s", "lower")
        assert 1 <= result.recommended <= 4 * max(points)

    verdicts: dict[str, Any] = {}
    for where, (low, high) in {"below": (1, max(2, slots // 2)), "above": (slots, 4 * slots)}.items():
        settings = [*common(running, tasks), f"low={low}", f"high={high}", *batches]
        diagnosis = diagnose_run(build_settings(DiagnoseConfig, settings), make_plugins())
        verdicts[where] = diagnosis.verdict
        print(f"  diagnose {low}→{high}: {diagnosis.verdict} (gain {diagnosis.gain:.2f}×)")
        gymbench.record(f"diagnose_{where}_gain", diagnosis.gain, "ratio", "higher")
    gymbench.record("load_after", os.getloadavg()[0], "load", "lower")
    print(f"  verdicts: {verdicts}")
