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

import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypedDict, runtime_checkable

from gymbench.units import duration

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

    def since(self, before: RoutingCounts) -> RoutingCounts:
        """What each replica did after ``before`` (the same router's counts earlier): one probe's
        figures out of counts kept from the start. Requests, completions and errors are the
        differences; the latencies those added after ``before`` (exact while the router's sample
        had room; after that the sample is the run's, as kept); the peak and ``out`` are the later
        counts' (a peak cannot be split)."""
        earlier = {replica.url: replica for replica in before.replicas}
        return RoutingCounts(self.policy, tuple(_since(replica, earlier.get(replica.url)) for replica in self.replicas))


def _since(now: ReplicaCounts, before: ReplicaCounts | None) -> ReplicaCounts:
    if before is None:
        return now
    seen = len(before.latencies_s)
    latencies = now.latencies_s[seen:] if seen < LATENCY_SAMPLE else now.latencies_s
    return ReplicaCounts(now.url, now.requests - before.requests, now.completed - before.completed,
                         now.errors - before.errors, now.peak_in_flight, now.out, latencies)  # fmt: skip


LATENCY_SAMPLE = 4096
"""Latencies kept per replica: each router's reservoir, and a merged record's sample."""


def merged_counts(parts: Sequence[RoutingCounts], order: Sequence[str] = ()) -> RoutingCounts | None:
    """Several collections' counts over the same replicas in one (a sharded run's workers, each
    routing over the whole list or its ``by_shard`` part): requests, completions and errors added
    up, the peaks of open requests added (the shards ran at once: an upper bound), a replica out if
    any worker took it out, and one latency sample drawn from each part's in proportion to the
    tries it answered, so a worker whose own sample was thinned weighs as much as it served and the
    merged p50/p99 are the run's, not a mean of the workers'. Replicas in ``order`` (the configured
    list) first, in that order."""
    if not parts:
        return None
    by_url: dict[str, list[ReplicaCounts]] = {}
    for part in parts:
        for replica in part.replicas:
            by_url.setdefault(replica.url, []).append(replica)
    ranked = sorted(by_url, key=lambda url: order.index(url) if url in order else len(order))
    merged = tuple(
        ReplicaCounts(
            url,
            sum(r.requests for r in by_url[url]),
            sum(r.completed for r in by_url[url]),
            sum(r.errors for r in by_url[url]),
            sum(r.peak_in_flight for r in by_url[url]),
            any(r.out for r in by_url[url]),
            _pooled_sample([(r.latencies_s, r.completed) for r in by_url[url]], LATENCY_SAMPLE),
        )
        for url in ranked
    )
    return RoutingCounts(parts[0].policy, merged)


def _pooled_sample(samples: list[tuple[tuple[float, ...], int]], size: int) -> tuple[float, ...]:
    """One sample of at most ``size`` from several, each ``(values, how many they stand for)``: each
    gives a share of ``size`` in proportion to what it stands for (all of it when everything fits)."""
    total = sum(count for _, count in samples)
    if total <= size:
        return tuple(value for values, _ in samples for value in values)
    rng = random.Random(0)
    pooled: list[float] = []
    for values, count in samples:
        pooled += rng.sample(values, min(len(values), round(size * count / total)))
    return tuple(pooled)


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


REPLICA_HEADERS = ("replica", "requests", "completed", "errors", "p50", "p99", "completed/s", "share", "peak open")


def replica_rows(found: ReplicaSummary) -> list[tuple[str, ...]]:
    """The per-replica table's rows (under :data:`REPLICA_HEADERS`), one text per cell: the
    terminal summary, diagnose and the HTML report show the same table."""
    rows: list[tuple[str, ...]] = []
    for replica in found["replicas"]:
        share = "-" if replica["share"] is None else f"{replica['share']:.0%}"
        rows.append((
            replica["url"] + (" (out)" if replica["out"] else ""), str(replica["requests"]), str(replica["completed"]),
            str(replica["errors"]), duration(replica["latency_p50_s"]), duration(replica["latency_p99_s"]),
            f"{replica['completed_per_s']:.2f}", share, str(replica["peak_in_flight"]),
        ))  # fmt: skip
    return rows


def replica_head(found: ReplicaSummary) -> str:
    """The table's answer in one line: the policy, the imbalance and the straggler (or none)."""
    imbalance = "-" if found["imbalance"] is None else f"{found['imbalance']:.2f}"
    head = f"{len(found['replicas'])} replicas ({found['policy']}): imbalance {imbalance}"
    head += " (most requests on one ÷ the mean)"
    straggler = found["straggler"]
    return head + (f"; straggler {straggler}: {found['straggler_reason']}" if straggler else "; no straggler")
