"""What a launcher tells the driver about shards, the same for every launcher."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from gymbench.collect.shard_worker import ShardJob


@dataclass
class ShardEvent:
    kind: str
    """``progress`` (rollouts done in the shard so far), ``done`` (an outcome) or ``lost`` (its worker died)."""
    shard: int
    done: int = 0
    outcome: Any = None
    reason: str = ""


class Launcher(Protocol):
    name: str
    num_workers: int
    rows_travel_by: str
    """How shard rows reach the driver's ``OUT.shards/``, for the record."""

    def start(self) -> None: ...

    def free_slots(self) -> int: ...

    def busy(self) -> bool: ...

    def submit(self, job: ShardJob) -> None: ...

    def poll(self, timeout: float) -> list[ShardEvent]: ...

    def close(self) -> None: ...
