"""An experiment (run 6 in docs/engine.md): at each p, the truth's light closed loop and ``gymbench tune``'s
probe (gymbench's collection pipeline) back to back on one llama-server ``-np 64``. Run from the repository root:
``python benches/study/real_engine/side.py 16,32,64 PASSES WINDOW_S``. Its output of run 6:
``git show bec7557:benches/study/real_engine/2026-11-26f_client_side_by_side.txt``."""

# ruff: noqa: E501

import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, "benches")
from test_real_engine import MAX_TOKENS, common, light_window, tasks_file

from gymbench.engine.build import cache_root, find_server
from gymbench.engine.model import cached_model
from gymbench.engine.server import start_llama_server
from gymbench.settings import build_settings
from gymbench.testing import make_plugins
from gymbench.tune.command import strategies_for, with_prober
from gymbench.tune.config import TuneConfig

PS = [int(x) for x in sys.argv[1].split(",")]
PASSES = int(sys.argv[2]) if len(sys.argv) > 2 else 2
WINDOW = float(sys.argv[3]) if len(sys.argv) > 3 else 8.0
server = start_llama_server(
    find_server(), cached_model("tiny", cache_root()), slots=64, threads=1, context=512, max_tokens=MAX_TOKENS
)
with server, tempfile.TemporaryDirectory() as tmp:
    tasks = tasks_file(Path(tmp))
    config = build_settings(TuneConfig, [*common(server, tasks), "plot="])
    plugins = make_plugins()
    strategies = strategies_for(config, plugins)

    async def work(prober):
        for turn in range(PASSES):
            order = list(PS)
            random.Random(turn).shuffle(order)
            for p in order:
                light = await light_window(server, p, WINDOW)
                t0 = time.perf_counter()
                r = await prober.probe(p, strategies.fixed(p))
                el = time.perf_counter() - t0
                print(
                    f"pass {turn} p={p:>3} light {light.requests_per_s:6.2f} (counted {light.counted_per_s:6.2f})"
                    f"  probe {r.rollouts_per_s:6.2f} ±{r.rate.relative:.1%} src={r.work_rate.source} n={r.rollouts} {el:.0f}s"
                    f" cpu={r.client_cpu_cores:.2f} lat50={r.latency_p50_s:.3f} light_lat50={sorted(light.latencies_s)[len(light.latencies_s) // 2]:.3f}"
                    f" notes={r.notes} load={os.getloadavg()[0]:.1f}",
                    flush=True,
                )

    with_prober(config, plugins, work)
