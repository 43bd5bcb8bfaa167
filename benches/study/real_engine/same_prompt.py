"""Issue 39: does one prompt repeated read the engine as 64 distinct prompts do? ``calibrate-sim``
sent one prompt to every request while the truth it is judged against sends 64 distinct ones; in
run 12 (docs/engine.md) its loads read 7-36% below the truth's, more the more clients.

Run from the repository root::

    python benches/study/real_engine/same_prompt.py SLOTS [ROUNDS] [WINDOW_S]

At the slot count and at twice it, the truth's closed loop with the one prompt and with the 64,
in adjacent windows, each round in the reverse order of the last; per load, the mean ratio
(one ÷ distinct) with its 95% interval over the rounds.
"""

from __future__ import annotations

import asyncio
import os
import sys

import numpy as np
from scipy import stats

sys.path.insert(0, "benches")
from test_real_engine import MAX_TOKENS, PLUGINS, PROMPT_WORDS, distinct_tasks

from gymbench.calibrate.loadgen import closed_loop, load_backend, load_settings, session_of, settle_server
from gymbench.calibrate.measure import IGNORE_EOS, workload_params
from gymbench.engine.build import cache_root, find_server
from gymbench.engine.model import cached_model
from gymbench.engine.server import LlamaServer, start_llama_server

SLOTS = int(sys.argv[1])
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 6
WINDOW_S = float(sys.argv[3]) if len(sys.argv) > 3 else 5.0
WORKLOADS = {"one": [workload_params(PROMPT_WORDS, MAX_TOKENS)], "distinct": distinct_tasks()}


async def window(server: LlamaServer, tasks: list, p: int) -> float:
    settings = load_settings(server.base_url, server.model, extra_body=dict(IGNORE_EOS), max_retries=0)
    async with load_backend(settings) as backend:
        await settle_server(session_of(backend.client), server.metrics_url, PLUGINS.engine_metrics())
        return (await closed_loop(backend, tasks, p, WINDOW_S, 2.0)).requests_per_s


server = start_llama_server(
    find_server(), cached_model("tiny", cache_root()), slots=SLOTS, threads=1, context=512, max_tokens=MAX_TOKENS
)
cells = [(name, p) for p in (SLOTS, 2 * SLOTS) for name in WORKLOADS]
rates: dict[tuple[str, int], list[float]] = {cell: [] for cell in cells}
with server:
    print(f"-np {SLOTS}: {ROUNDS} rounds of {WINDOW_S:g} s windows, load {os.getloadavg()[0]:.1f}", flush=True)
    for turn in range(ROUNDS):
        for name, p in cells if turn % 2 == 0 else cells[::-1]:
            rates[name, p].append(asyncio.run(window(server, WORKLOADS[name], p)))
        print(f"  round {turn + 1}: " + ", ".join(f"{n} p={p}: {rates[n, p][-1]:.1f}" for n, p in cells), flush=True)
    print(f"load {os.getloadavg()[0]:.1f}")
for p in (SLOTS, 2 * SLOTS):
    ratio = np.array(rates["one", p]) / np.array(rates["distinct", p])
    half = stats.t.ppf(0.975, len(ratio) - 1) * ratio.std(ddof=1) / np.sqrt(len(ratio))
    print(f"p={p}: one prompt {np.mean(rates['one', p]):.1f}, 64 prompts {np.mean(rates['distinct', p]):.1f} "
          f"requests/s; one ÷ distinct {ratio.mean():.1%}"
          f" (95% CI {ratio.mean() - half:.1%}-{ratio.mean() + half:.1%})")  # fmt: skip
