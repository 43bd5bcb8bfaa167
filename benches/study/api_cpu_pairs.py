"""``gymbench.collect`` (pytest API) ÷ ``gymbench collect`` (command): client CPU per rollout, in pairs.

    python benches/study/api_cpu_pairs.py --verifier math --repeats 15 --pairs 3 [--profile DIR]

Runs the two sides of ``benches/test_pytest_api.py`` alternated, each in a fresh process against one
zero-latency simulator (200 tasks × ``--repeats`` rollouts, 64 in parallel), and prints each pair,
the medians and their ratio, with the load average. ``--profile DIR`` runs one more pair under
cProfile (``cli.prof``, ``pytest.prof``) to see where any difference goes.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from test_pytest_api import cli_cpu_per_rollout, pytest_cpu_per_rollout  # noqa: E402

from gymbench.sim.launcher import start_sim_server  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verifier", default="exact-match")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--pairs", type=int, default=3)
    args = parser.parse_args()
    server = start_sim_server(preset="zero-latency")
    cli: list[float] = []
    api: list[float] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for pair in range(args.pairs):
                cli.append(cli_cpu_per_rollout(server, args.repeats, Path(tmp), args.verifier) * 1e6)
                api.append(pytest_cpu_per_rollout(server, args.repeats, Path(tmp), args.verifier) * 1e6)
                print(f"pair {pair + 1}: command {cli[-1]:.1f} µs, pytest API {api[-1]:.1f} µs, "
                      f"ratio {api[-1] / cli[-1]:.3f}  (load {os.getloadavg()[0]:.1f})", flush=True)  # fmt: skip
    finally:
        server.stop()
    ratio = statistics.median(api) / statistics.median(cli)
    print(f"{args.verifier}, {200 * args.repeats} rollouts, p=64: command median {statistics.median(cli):.1f} µs, "
          f"pytest API median {statistics.median(api):.1f} µs, ratio of medians {ratio:.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
