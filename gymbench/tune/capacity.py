"""What the server says about its own capacity, and where a search starts from it.

A sweep that starts at 5 on a server with 4 slots never measures below its knee (llama.cpp with 4
slots: tune measured from 5 up, the truth's knee was 6-8 and its recommendation 15 and 38; issue
39). Where the server tells its slot count, the search starts below it: llama.cpp's ``/props``
(``total_slots``), or the simulator standing in (its ``--describe``: where it saturates). The queue
(requests waiting, from ``/metrics``: vLLM, SGLang, llama.cpp, the simulator) is read at every level
and printed beside it. With the slot count it also keeps the sweep growing past a flat stretch
while slots are free and nothing waits for one (:meth:`gymbench.tune.knee_search.KneeSearch._slots_free`).
The output names every signal used, and says which were not there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gymbench.engine_metrics import ScrapeFailed, fetch_metrics_text
from gymbench.errors import GymbenchError
from gymbench.jsonio import loads
from gymbench.sim.config import SimConfig

PROPS_DEADLINE_S = 5.0


@dataclass(frozen=True)
class CapacitySignals:
    slots: int | None = None
    """Sequences the server runs at once, as it says (None: it does not say)."""
    said: list[str] = field(default_factory=list)
    """One phrase per signal: what was read where, or why nothing was."""

    def start(self, configured: int) -> int:
        """The first level: below the slot count (half of it, so that a doubling lands on it), never
        above ``configured``."""
        return configured if self.slots is None else max(1, min(configured, self.slots // 2))


def slots_from_simulator(config: SimConfig) -> CapacitySignals:
    from gymbench.sim.capacity import describe

    capacity = describe(config)
    said = (f"the simulator's --describe: it saturates at {capacity.saturation_concurrency} sequences "
            f"(limited by {capacity.limited_by})")  # fmt: skip
    return CapacitySignals(capacity.saturation_concurrency, [said])


def slots_from_props(base_url: str) -> CapacitySignals:
    """llama.cpp's ``/props`` ``total_slots``, read within a deadline; anything else is "not said"."""
    url = base_url.rstrip("/").removesuffix("/v1") + "/props"
    try:
        props = loads(fetch_metrics_text(url, PROPS_DEADLINE_S, 1024 * 1024))
    except (ScrapeFailed, GymbenchError):  # not served, or not JSON
        return CapacitySignals(None, [f"no slot count ({url} not served: not llama.cpp)"])
    slots = props.get("total_slots") if isinstance(props, dict) else None
    if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
        return CapacitySignals(None, [f"no slot count ({url} gives no total_slots)"])
    return CapacitySignals(slots, [f"llama.cpp /props: total_slots {slots}"])


def slots_of_replicas(base_urls: Sequence[str]) -> CapacitySignals:
    """Several replicas' slots, added up: the load is spread over all of them, so the search starts
    below their total; one replica that does not say makes the total unknown."""
    each = [slots_from_props(url) for url in base_urls]
    said = [f"{len(each)} replicas: " + "; ".join(phrase for one in each for phrase in one.said)]
    if any(one.slots is None for one in each):
        return CapacitySignals(None, said)
    total = sum(one.slots or 0 for one in each)
    return CapacitySignals(total, [*said, f"{total} slots in all"])


def read_capacity(
    simulator: SimConfig | None, base_url: str | Sequence[str] | None, server: Mapping[str, object] | None
) -> CapacitySignals:
    """Every capacity signal the server gives: its slots (the simulator's, or ``/props``, added up
    over replicas) and its queue."""
    urls = [base_url] if isinstance(base_url, str) else list(base_url or ())
    if simulator is not None:
        found = slots_from_simulator(simulator)
    elif len(urls) > 1:
        found = slots_of_replicas(urls)
    elif urls:
        found = slots_from_props(urls[0])
    else:
        found = CapacitySignals(None, ["no slot count (the backend names no server)"])
    reads = server.get("reads") if server is not None else None
    waiting = reads.get("waiting") if isinstance(reads, dict) else None
    if isinstance(waiting, str) and " " not in waiting:
        found.said.append(f"queue: {waiting} at every level")
    else:
        found.said.append("no queue gauge (no recognised /metrics)")
    return found
