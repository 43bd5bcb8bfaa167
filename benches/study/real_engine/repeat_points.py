"""How much a truth point repeats: the same closed loop in turn, three rounds, on one llama-server.

``python benches/study/real_engine/repeat_points.py SLOTS WINDOW_S P1,P2,...`` (one compute thread,
the tiny model, the bench's request: a 24-word prompt, 64 output tokens, unstreamed).
"""

import asyncio
import os
import sys

sys.path.insert(0, "benches")
from test_real_engine import light_window

from gymbench.engine.build import cache_root, find_server
from gymbench.engine.model import cached_model
from gymbench.engine.server import start_llama_server


def main() -> None:
    slots, window = int(sys.argv[1]), float(sys.argv[2])
    points = [int(p) for p in sys.argv[3].split(",")]
    model = cached_model("tiny", cache_root())
    with start_llama_server(find_server(), model, slots=slots, threads=1, context=512, max_tokens=64) as server:
        for round_ in (1, 2, 3):
            for p in points:
                result = asyncio.run(light_window(server, p, window))
                load = os.getloadavg()[0]
                print(f"np={slots} round={round_} p={p} rps={result.requests_per_s:.2f} load={load:.2f}", flush=True)


if __name__ == "__main__":
    main()
