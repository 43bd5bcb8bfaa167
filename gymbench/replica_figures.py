"""Many model replicas behind one backend: what each one did, and whether one is out of line.

The router of a backend with several ``base_url`` s (:mod:`gymbench.builtin.routing`) counts every
try it sends to each replica; :func:`replica_summary` turns those counts into the figures the
summary, the record and the metrics file carry: requests, completions, errors, latency p50/p99 and
throughput per replica, an imbalance figure (max ÷ mean requests) and the straggler, when one
replica's latency or throughput is out of line with the others'. It lives in the core so that the
backend (which counts), the statistics (which type the summary) and the collect command (which
prints it) share one shape.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypedDict, runtime_checkable

STRAGGLER_LATENCY = 1.5
"""A replica whose p50 latency is above this many times the replicas' median p50 is named (with
two replicas, the other's: the median of two would be their mean)."""
STRAGGLER_SHARE = 0.5
"""A replica that completed less than this share of its fair part (1/N of all) is named."""
STRAGGLER_MIN_COMPLETED = 8
"""Completions per live replica, on average, below which no throughput share is judged (chance)."""


@dataclass(frozen=True)
class ReplicaCounts:
    """One replica's figures as its router counted them: every try, so a failed-over request counts
    once on the replica that failed it and once on the one that answered."""

    url: str
    requests: int
    completed: int
    errors: int
    peak_in_flight: int
    out: bool
    """Taken out of the rotation (it stopped answering); the run went on over the others."""
    latencies_s: tuple[float, ...]
    """A sample of the answered tries' durations, send to last byte read."""


@dataclass(frozen=True)
class RoutingCounts:
    policy: str
    replicas: tuple[ReplicaCounts, ...]


def merged_counts(parts: Sequence[RoutingCounts]) -> RoutingCounts | None:
    """Several collections' counts over the same replicas in one (a sharded run's workers, each
    routing over the whole list): requests, completions and errors added up, the peaks of open
    requests added (the shards ran at once: an upper bound), a replica out if any worker took it
    out, the latency samples pooled (each worker's sample counts as many tries as its size)."""
    if not parts:
        return None
    by_url: dict[str, list[ReplicaCounts]] = {}
    for part in parts:
        for replica in part.replicas:
            by_url.setdefault(replica.url, []).append(replica)
    merged = tuple(
        ReplicaCounts(
            url,
            sum(r.requests for r in each),
            sum(r.completed for r in each),
            sum(r.errors for r in each),
            sum(r.peak_in_flight for r in each),
            any(r.out for r in each),
            tuple(value for r in each for value in r.latencies_s),
        )
        for url, each in by_url.items()
    )
    return RoutingCounts(parts[0].policy, merged)


@runtime_checkable
class RoutesReplicas(Protocol):
    """A backend that spreads its requests over several replicas and counts them."""

    def replica_counts(self) -> RoutingCounts | None: ...


class ReplicaFigures(TypedDict):
    url: str
    requests: int
    completed: int
    errors: int
    peak_in_flight: int
    out: bool
    latency_p50_s: float | None
    latency_p99_s: float | None
    completed_per_s: float
    share: float | None
    """This replica's part of all completions (1/N is a fair part)."""


class ReplicaSummary(TypedDict):
    policy: str
    replicas: list[ReplicaFigures]
    imbalance: float | None
    """Most requests on one replica ÷ the mean over the replicas (1.0: even)."""
    straggler: str | None
    """The replica out of line, by URL, or None."""
    straggler_reason: str | None


def replica_summary(counts: RoutingCounts, elapsed_s: float) -> ReplicaSummary:
    total = sum(replica.completed for replica in counts.replicas)
    figures = [_figures(replica, elapsed_s, total) for replica in counts.replicas]
    requests = [replica.requests for replica in counts.replicas]
    mean = sum(requests) / len(requests) if requests else 0.0
    straggler = find_straggler(figures)
    return {
        "policy": counts.policy,
        "replicas": figures,
        "imbalance": max(requests) / mean if mean else None,
        "straggler": straggler[0] if straggler else None,
        "straggler_reason": straggler[1] if straggler else None,
    }


def _figures(replica: ReplicaCounts, elapsed_s: float, total: int) -> ReplicaFigures:
    p50, p99 = _percentiles(replica.latencies_s)
    return {
        "url": replica.url,
        "requests": replica.requests,
        "completed": replica.completed,
        "errors": replica.errors,
        "peak_in_flight": replica.peak_in_flight,
        "out": replica.out,
        "latency_p50_s": p50,
        "latency_p99_s": p99,
        "completed_per_s": replica.completed / max(elapsed_s, 1e-9),
        "share": replica.completed / total if total else None,
    }


def _percentiles(values: tuple[float, ...]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    if len(values) == 1:
        return values[0], values[0]
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return cuts[49], cuts[98]


def find_straggler(figures: list[ReplicaFigures]) -> tuple[str, str] | None:
    """The live replica whose p50 latency is far above the others' median, else the one whose share
    of the completions is far below a fair part; a replica taken out is no straggler (it is out)."""
    live = [replica for replica in figures if not replica["out"]]
    if len(live) < 2:
        return None
    slow = _slowest_out_of_line(live)
    if slow is not None:
        return slow
    total = sum(replica["completed"] for replica in live)
    if total < STRAGGLER_MIN_COMPLETED * len(live):
        return None
    fair = 1 / len(live)
    least = min(live, key=lambda replica: replica["completed"])
    share = least["completed"] / total
    if share < STRAGGLER_SHARE * fair:
        return least["url"], f"{share:.0%} of the completions, against a fair {fair:.0%}"
    return None


def _slowest_out_of_line(live: list[ReplicaFigures]) -> tuple[str, str] | None:
    """The slowest replica by p50, against the median of all the replicas' p50 (the other's, with two).

    Not the median of the *others*: with three replicas that is the mean of two, and one replica
    fast at p50 drags it down. Three llama.cpp replicas, the last with 1 slot of 4, at 9 rollouts
    in parallel: p50 283, 312 and 106 ms (the 1-slot one runs each request alone, fast, and queues
    the rest); against the others' median the 312 ms one read as a straggler at 1.6x, against the
    replicas' median (283 ms) it is 1.1x, as even as it is."""
    timed = [replica for replica in live if replica["latency_p50_s"] is not None]
    if len(timed) < 2:
        return None
    slowest = max(timed, key=lambda replica: replica["latency_p50_s"] or 0.0)
    if len(timed) == 2:
        reference = min(r["latency_p50_s"] or 0.0 for r in timed)
        against = "the other's"
    else:
        reference = statistics.median(r["latency_p50_s"] or 0.0 for r in timed)
        against = "the replicas' median"
    p50 = slowest["latency_p50_s"] or 0.0
    if reference > 0 and p50 > STRAGGLER_LATENCY * reference:
        return slowest["url"], f"p50 latency {p50 / reference:.1f}x {against}"
    return None
