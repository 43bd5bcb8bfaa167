"""Which replica is out of line, from per-replica figures (the p50s are llama.cpp's, measured)."""

from __future__ import annotations

from gymbench.replica_figures import ReplicaFigures, find_straggler


def replica(url: str, p50_ms: float, completed: int = 40) -> ReplicaFigures:
    return {"url": url, "requests": completed, "completed": completed, "errors": 0, "peak_in_flight": 4,
            "out": False, "latency_p50_s": p50_ms / 1e3, "latency_p99_s": None, "completed_per_s": 1.0,
            "share": None}  # fmt: skip


def test_a_replica_fast_at_p50_does_not_make_an_even_one_a_straggler() -> None:
    """Three llama.cpp replicas at 9 in parallel, the last with 1 slot (each request alone, fast):
    against the others' median the 312 ms one read 1.6x; against the replicas' median it is 1.1x."""
    assert find_straggler([replica("a", 283), replica("b", 312), replica("c", 106)]) is None


def test_the_slow_one_of_three_is_named_against_the_replicas_median() -> None:
    found = find_straggler([replica("a", 318), replica("b", 258), replica("c", 1230)])
    assert found == ("c", "p50 latency 3.9x the replicas' median")


def test_of_two_the_slow_one_is_judged_against_the_other() -> None:
    assert find_straggler([replica("a", 100), replica("b", 200)]) == ("b", "p50 latency 2.0x the other's")
    assert find_straggler([replica("a", 100), replica("b", 140)]) is None


def test_a_replica_with_a_small_share_of_the_completions_is_named_when_latencies_agree() -> None:
    found = find_straggler([replica("a", 100, 50), replica("b", 100, 50), replica("c", 100, 5)])
    assert found is not None and found[0] == "c" and "of the completions" in found[1]
