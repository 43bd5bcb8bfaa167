"""Issue 39: does the slot count deliver 95% of the plateau? The tune validation's truth reads each
point in a few windows minutes apart, and its interval at one point held 66-109% of the plateau
(4 slots, 2026-11-29 afternoon). Here the slot count, one above it and twice it are measured in
adjacent windows, round after round (each round in the reverse order of the last), so that each
round's ratio compares windows seconds apart and the machine's drift between minutes cancels.

Run from the repository root::

    python benches/study/real_engine/paired_slots.py SLOTS [ROUNDS] [WINDOW_S]

Prints every round and, per point, the mean ratio to twice the slot count with its 95% interval
(Student's t over the rounds). The truth's closed loop (``benches/test_real_engine.py``) is the client.
"""

from __future__ import annotations

import os
import sys

import numpy as np
from scipy import stats

sys.path.insert(0, "benches")
from test_real_engine import MAX_TOKENS, one_window

from gymbench.engine.build import cache_root, find_server
from gymbench.engine.model import cached_model
from gymbench.engine.server import start_llama_server

SLOTS = int(sys.argv[1])
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 10
WINDOW_S = float(sys.argv[3]) if len(sys.argv) > 3 else 5.0
POINTS = [SLOTS, SLOTS + 1, 2 * SLOTS]

server = start_llama_server(
    find_server(), cached_model("tiny", cache_root()), slots=SLOTS, threads=1, context=512, max_tokens=MAX_TOKENS
)
rates: dict[int, list[float]] = {p: [] for p in POINTS}
with server:
    load = os.getloadavg()[0]
    print(f"-np {SLOTS}: {ROUNDS} rounds of {WINDOW_S:g} s windows at {POINTS}, load {load:.1f}", flush=True)
    for turn in range(ROUNDS):
        order = POINTS if turn % 2 == 0 else POINTS[::-1]
        for p in order:
            rates[p].append(one_window(server, p, WINDOW_S).requests_per_s)
        print(f"  round {turn + 1}: " + ", ".join(f"{p}: {rates[p][-1]:.1f}" for p in POINTS), flush=True)
    print(f"load {os.getloadavg()[0]:.1f}")
top = np.array(rates[POINTS[-1]])
for p in POINTS[:-1]:
    ratio = np.array(rates[p]) / top
    half = stats.t.ppf(0.975, len(ratio) - 1) * ratio.std(ddof=1) / np.sqrt(len(ratio))
    print(f"p={p}: {np.mean(rates[p]):.1f} requests/s; ÷ p={POINTS[-1]} ({top.mean():.1f}): "
          f"{ratio.mean():.1%} (95% CI {ratio.mean() - half:.1%}-{ratio.mean() + half:.1%})")  # fmt: skip
