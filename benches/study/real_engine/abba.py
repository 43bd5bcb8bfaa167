"""An experiment (run 6 in docs/engine.md, which has its caveats): ``gymbench tune``'s sweep on llama-server,
then every level it measured probed again in reverse order (ABBA: linear drift cancels in a level's mean).
Run from the repository root: ``python benches/study/real_engine/abba.py SLOTS``. Not a benchmark. Its output of
run 6: ``git show bec7557:benches/study/real_engine/2026-11-26f_abba_experiment.txt``."""

# ruff: noqa: E501

import math
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, "benches")
from test_real_engine import MAX_TOKENS, common, tasks_file

from gymbench.engine.build import cache_root, find_server
from gymbench.engine.model import cached_model
from gymbench.engine.server import start_llama_server
from gymbench.settings import build_settings
from gymbench.testing import make_plugins
from gymbench.tune.command import strategies_for, with_prober
from gymbench.tune.config import TuneConfig
from gymbench.tune.curves import find_knee
from gymbench.tune.rates import Rate
from gymbench.tune.sweep import doubling_sweep

slots = int(sys.argv[1])
server = start_llama_server(
    find_server(), cached_model("tiny", cache_root()), slots=slots, threads=1, context=512, max_tokens=MAX_TOKENS
)
with server, tempfile.TemporaryDirectory() as tmp:
    tasks = tasks_file(Path(tmp))
    config = build_settings(TuneConfig, [*common(server, tasks), "plot=", "start=1"])
    plugins = make_plugins()
    strategies = strategies_for(config, plugins)

    async def work(prober):
        t0 = time.perf_counter()
        result = await doubling_sweep(prober, config.search_settings(), strategies=strategies)
        fwd = [(p.parallelism, p.rollouts_per_s, p.rate.relative, time.perf_counter() - t0) for p in result.probes]
        k = result.knee
        print(
            f"forward: knee {k.parallelism:.1f} [{k.low:.1f}, {k.high:.1f}] plateau {k.plateau:.2f} rec {result.recommended} {time.perf_counter() - t0:.0f}s",
            flush=True,
        )
        back = {}
        for p, *_ in reversed(fwd):
            r = await prober.probe(p, strategies.fixed(p))
            back[p] = (r.rollouts_per_s, r.rate.relative, time.perf_counter() - t0)
        curve = {}
        for p, a, ra, ta in fwd:
            b, rb, tb = back[p]
            se = math.sqrt(((a * ra / 1.96) ** 2 + (b * rb / 1.96) ** 2) / 4 + ((a - b) / 2) ** 2)
            curve[p] = Rate((a + b) / 2, 1.96 * se, 30)
            print(
                f"  p={p:>4} forward {a:6.2f} ±{ra:.1%} @{ta:4.0f}s  reverse {b:6.2f} ±{rb:.1%} @{tb:4.0f}s  diff {b / a - 1:+.1%}",
                flush=True,
            )
        k2 = find_knee(curve)
        print(
            f"ABBA: knee {k2.parallelism:.1f} [{k2.low:.1f}, {k2.high:.1f}] plateau {k2.plateau:.2f} total {time.perf_counter() - t0:.0f}s load {os.getloadavg()[0]:.1f}",
            flush=True,
        )

    with_prober(config, plugins, work)
