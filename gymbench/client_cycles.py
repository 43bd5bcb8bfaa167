"""A closed loop's rate from its clients' whole cycles: what the simulator's closed loops, its
calibration and the benches' truths count (the core: the simulator and tune both use it)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass
class ClientCycles:
    """One closed-loop client's cycles (send → answer → next send) that ended inside a window.

    Counting the requests that finish in a window quantises a batch engine's rate: requests sent
    together with equal lengths finish together, so a 6 s window at 64 clients holds 5 or 6 whole
    batches (53 or 64 requests/s on llama.cpp with 64 slots). A client's completions over the
    time its whole cycles covered are not cut by the window's edges (the same Little's law the
    :class:`~gymbench.tune.rates.Meter` applies to a probe's holds)."""

    started: float | None = None
    """When the first counted cycle began (the client's answer before it, or its first send)."""
    ended: float = 0.0
    completed: int = 0

    def cycle(self, began: float, ended: float, ok: bool) -> None:
        """A cycle that ended inside the window; ``ok`` false: its time counts, not its request."""
        if self.started is None:
            self.started = began
        self.ended = ended
        self.completed += ok


def closed_loop_rate(clients: Sequence[ClientCycles]) -> float | None:
    """Requests/s of a closed loop: Σ over clients of completions ÷ the time their cycles covered;
    ``None`` when a client had no whole cycle in the window (it is too short to say)."""
    total = 0.0
    for client in clients:
        if client.started is None or client.ended <= client.started:
            return None
        total += client.completed / (client.ended - client.started)
    return total if clients else None
