"""How often the OOM search's chosen batch holds in fresh capped processes, on shapes it has not seen.

For each shape: one search (``find_largest_batch`` on the CPU, trials under an address-space cap in
fresh processes, the default allocator), then ``--runs`` more fresh capped processes at the chosen
batch, each running ``trial_steps`` steps as a user's process would. The hold rate is the share of
those runs that did not run out of memory. Run it against another checkout with ``PYTHONPATH``
(the script uses only the API both sides share)::

    PYTHONPATH=/path/to/checkout python benches/oom_hold_rate.py --runs 20 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import replace

from gymbench.errors import GymbenchError
from gymbench.train.backoff import cpu_trials, find_largest_batch
from gymbench.train.config import TrainConfig
from gymbench.train.oom import SearchPlan
from gymbench.train.plugin import build_mlp, build_transformer

MiB = 1 << 20
SHAPES = {
    "mlp w768 d6, every 2nd block checkpointed": (build_mlp, {"model": "mlp", "checkpointing": "every-2",
                                                               "model_config": {"width": 768, "depth": 6}}),
    "mlp w384 d10, every block checkpointed": (build_mlp, {"model": "mlp", "checkpointing": "on",
                                                            "model_config": {"width": 384, "depth": 10}}),
    "transformer d48 l3, seq 96, ratio 0.5": (build_transformer, {"model": "transformer", "seq_len": 96,
                                                                  "checkpoint_ratio": 0.5, "model_config": {
                                                                      "size": "tiny", "d_model": 48, "layers": 3,
                                                                      "heads": 2}}),
}  # fmt: skip


def hold_rate(name: str, runs: int, budget_mib: float, threads: int) -> dict[str, object]:
    factory, options = SHAPES[name]
    config = replace(TrainConfig(**options), threads=threads)  # type: ignore[arg-type]
    budget = int(budget_mib * MiB)
    try:
        result = find_largest_batch(factory, config, SearchPlan(budget_bytes=budget), steps=2)
    except GymbenchError as exc:  # the search itself met the variance it guards against: said, counted apart
        return {"shape": name, "search_failed": str(exc)[:200], "held": 0, "runs": 0, "hold_rate": None}
    try_batch = cpu_trials(factory, config, budget, 2)
    held = [try_batch(result.chosen, "verify").fits for _ in range(runs)]
    return {
        "shape": name,
        "largest_fit": result.largest_fit,
        "chosen": result.chosen,
        "search_verification": f"{sum(t.fits for t in result.final_verification)}/{len(result.final_verification)}",
        "headroom": result.headroom,
        "held": sum(held),
        "runs": runs,
        "hold_rate": sum(held) / runs,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--budget-mib", type=float, default=160.0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", default=None)
    parser.add_argument("--shape", action="append", type=int, help="only these shapes (0-based), repeatable")
    args = parser.parse_args()
    import gymbench

    rows = []
    names = list(SHAPES)
    for name in [names[i] for i in args.shape] if args.shape else names:
        rows.append(hold_rate(name, args.runs, args.budget_mib, args.threads))
        print(json.dumps(rows[-1]), flush=True)
    held, runs = sum(int(r["held"]) for r in rows), sum(int(r["runs"]) for r in rows)  # type: ignore[call-overload]
    summary = {"gymbench": os.path.dirname(gymbench.__file__), "held": held, "runs": runs, "rows": rows,
               "load": os.getloadavg()}  # fmt: skip
    print(f"held in {held}/{runs} fresh capped processes ({held / max(runs, 1):.1%}); load {os.getloadavg()[0]:.1f}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(summary, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
