"""``gymbench collect`` over several simulated replicas, one slow: the table, the straggler, the record."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from gymbench.cli import main
from gymbench.collect.shards import shard_replicas
from gymbench.record import load_record
from gymbench.replica_figures import LATENCY_SAMPLE, ReplicaCounts, RoutingCounts, merged_counts, replica_summary
from gymbench.sim import running_sim_replicas
from tests.report.test_run_report import image_sizes, opening

from .test_collect_cli import EXAMPLES, gymbench, rows

SIM = {"model": "m", "step_base_s": 0.004, "step_per_seq_s": 0.0, "output_tokens_mean": 8}


def test_a_collection_over_replicas_names_the_slow_one(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    with running_sim_replicas(replicas=3, slow_replica_factor=4.0, **SIM) as servers:
        urls = [server.base_url for server in servers]
        done = gymbench(
            "collect", f"+input_jsonl_fpath={EXAMPLES}", f"+output_jsonl_fpath={out}", f"+base_url={json.dumps(urls)}",
            "+model=m", "+num_samples_in_parallel=6", "+limit=45", f"+results_dir={tmp_path / 'r'}",
        )  # fmt: skip
        finished = [sum(v for k, v in s.metrics().items() if k.startswith("vllm:request_success")) for s in servers]
    assert done.returncode == 0, done.stderr
    assert len(rows(out)) == 45 and finished == [15, 15, 15]  # sticky: consecutive tasks take turns
    summary = load_record(next((tmp_path / "r").glob("*/*_collect.json"))).benchmarks[0].extra["summary"]
    replicas = summary["replicas"]
    watched = summary["server_metrics"]["replicas"]  # each replica's own /metrics, its engine recognised
    generated = [{h["key"]: h["value"] for h in each["highlights"]}["generated_tokens"] for each in watched]
    assert [each["engine"] for each in watched] == ["vllm"] * 3 and generated == [15 * 8] * 3
    assert "server metrics (/metrics of each replica, after the run):" in done.stderr
    assert [r["url"] for r in replicas["replicas"]] == urls
    assert [r["requests"] for r in replicas["replicas"]] == [15, 15, 15] and replicas["imbalance"] == 1.0
    assert replicas["policy"] == "sticky" and replicas["straggler"] == urls[2]  # 4x slower steps
    assert f"straggler {urls[2]}: p50 latency" in done.stderr and "replicas (sticky): imbalance 1.00" in done.stderr
    metrics = json.loads(out.with_name("out.jsonl.metrics.json").read_text())["summary"]
    assert metrics["replicas"]["straggler"] == urls[2]
    check_replica_report(tmp_path, urls, [15, 15, 15])


def check_replica_report(tmp_path: Path, urls: list[str], requests: list[int]) -> None:
    """``gymbench report`` on the record: the title says how many replicas, the answer names the
    straggler, and a Replicas section has a figure and the table with each replica's requests."""
    record = next((tmp_path / "r").glob("*/*_collect.json"))
    report = tmp_path / "report.html"
    assert main(["report", str(record), "-o", str(report)]) == 0
    text = report.read_text()
    title, answer = opening(text)
    assert f"over {len(urls)} replicas at parallelism" in title
    assert f"{len(urls)} replicas (sticky): imbalance 1.00" in answer and f"straggler {urls[2]}: p50" in answer
    section = text[text.index("<h2>Replicas</h2>") : text.index("<h2>", text.index("<h2>Replicas</h2>") + 1)]
    assert section.count("<img") == 1 and len(image_sizes(section)) == 1
    found = re.findall(r"<tr><td>(http[^<]*)</td><td>(\d+)</td>", section)
    assert found == [(url, str(n)) for url, n in zip(urls, requests, strict=True)], section[-2000:]


def test_one_replica_is_as_today(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    with running_sim_replicas(replicas=1, **SIM) as servers:
        done = gymbench(
            "collect", f"+input_jsonl_fpath={EXAMPLES}", f"+output_jsonl_fpath={out}",
            f"+base_url=[{servers[0].base_url}]", "+model=m", "+limit=5", "+save_results=false",
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "replicas (" not in done.stderr
    assert "replicas" not in json.loads(out.with_name("out.jsonl.metrics.json").read_text())["summary"]


def test_a_bad_routing_policy_is_one_line(tmp_path: Path) -> None:
    done = gymbench(
        "collect", f"+input_jsonl_fpath={EXAMPLES}", f"+output_jsonl_fpath={tmp_path / 'o.jsonl'}",
        "+base_url=[http://127.0.0.1:9/v1, http://127.0.0.1:10/v1]", "+model=m", "+routing=random",
    )  # fmt: skip
    assert done.returncode != 0
    assert "routing" in done.stderr and "one of sticky, round-robin, least-in-flight" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_settings_file_lists_the_replicas_and_the_policy(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    with running_sim_replicas(replicas=2, **SIM) as servers:
        settings = tmp_path / "settings.yaml"
        listed = "".join(f"  - {server.base_url}\n" for server in servers)
        settings.write_text(f"base_url:\n{listed}routing: round-robin\nmodel: m\n")
        done = gymbench(
            "collect", "--config", str(settings), f"+input_jsonl_fpath={EXAMPLES}", f"+output_jsonl_fpath={out}",
            "+num_samples_in_parallel=1", "+limit=8", "+save_results=false",
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    replicas = json.loads(out.with_name("out.jsonl.metrics.json").read_text())["summary"]["replicas"]
    assert replicas["policy"] == "round-robin" and [r["requests"] for r in replicas["replicas"]] == [4, 4]


def collect_over_replicas(
    tmp_path: Path, *settings: str, slow: float = 1.0
) -> tuple[subprocess.CompletedProcess[str], list[str], list[int]]:
    """``gymbench collect`` over three simulated replicas (the last ``slow`` times slower) into
    ``tmp_path/out.jsonl``, results under ``tmp_path/r``: the run, the URLs, and the requests each
    replica finished by its own /metrics."""
    with running_sim_replicas(replicas=3, slow_replica_factor=slow, **SIM) as servers:
        urls = [server.base_url for server in servers]
        done = gymbench(
            "collect", f"+input_jsonl_fpath={EXAMPLES}", f"+output_jsonl_fpath={tmp_path / 'out.jsonl'}",
            f"+base_url={json.dumps(urls)}", "+model=m", "+progress=false", f"+results_dir={tmp_path / 'r'}", *settings,
        )  # fmt: skip
        finished = [
            int(sum(v for k, v in s.metrics().items() if k.startswith("vllm:request_success"))) for s in servers
        ]
    assert done.returncode == 0, done.stderr
    return done, urls, finished


def test_sharded_workers_each_route_over_the_whole_list_and_the_record_adds_them_up(tmp_path: Path) -> None:
    """Two worker processes, several shards: every worker's router sends to all three replicas, and
    the one merged record's per-replica requests are the workers' added up (each replica's own
    /metrics agrees), with the straggler named from the pooled latencies."""
    done, urls, finished = collect_over_replicas(
        tmp_path, "+num_samples_in_parallel=6", "+limit=60", "+num_workers=2", "+routing=round-robin", slow=4.0
    )
    assert len(rows(tmp_path / "out.jsonl")) == 60
    (bench,) = load_record(next((tmp_path / "r").glob("*/*_collect.json"))).benchmarks
    replicas = bench.extra["summary"]["replicas"]
    assert [r["url"] for r in replicas["replicas"]] == urls
    assert [r["completed"] for r in replicas["replicas"]] == finished and sum(finished) == 60
    assert all(r["requests"] > 0 for r in replicas["replicas"]) and replicas["straggler"] == urls[2]
    assert "replica_imbalance" in bench.metrics
    assert f"straggler {urls[2]}" in done.stderr


def test_by_shard_gives_each_shard_its_part_of_the_list(tmp_path: Path) -> None:
    """Two workers, three replicas, ``+replica_subset=by_shard``: even shards over replicas 0 and 2,
    odd shards over replica 1 alone (a list of one: its figures come from the shard's rollouts).
    Each replica's own /metrics says it served exactly its shards' rollouts."""
    _, urls, counted = collect_over_replicas(
        tmp_path, "+num_samples_in_parallel=3", "+limit=45", "+num_workers=2", "+replica_subset=by_shard"
    )
    assert len(rows(tmp_path / "out.jsonl")) == 45
    plan = json.loads((tmp_path / "out.jsonl.shards" / "plan.json").read_text())["shards"]
    odd = sum(end - start for index, (start, end) in enumerate(plan) if index % 2)
    assert 0 < odd < 45 and counted[1] == odd
    assert counted[0] + counted[2] == 45 - odd and counted[0] > 0 and counted[2] > 0
    (bench,) = load_record(next((tmp_path / "r").glob("*/*_collect.json"))).benchmarks
    replicas = bench.extra["summary"]["replicas"]["replicas"]
    assert [r["url"] for r in replicas] == urls
    assert [r["requests"] for r in replicas] == counted and [r["errors"] for r in replicas] == [0, 0, 0]
    assert all(r["latency_p50_s"] is not None for r in replicas)


def test_by_shard_parts_cover_every_replica() -> None:
    urls = [f"http://h{i}:8000/v1" for i in range(5)]
    assert [shard_replicas(urls, shard, workers=2) for shard in range(3)] == [urls[0::2], urls[1::2], urls[0::2]]
    assert [shard_replicas(urls, shard, workers=8) for shard in range(6)] == [[u] for u in urls] + [[urls[0]]]
    assert shard_replicas(urls[:1], 3, workers=4) == urls[:1]


def test_a_bad_replica_subset_is_one_line(tmp_path: Path) -> None:
    done = gymbench(
        "collect", f"+input_jsonl_fpath={EXAMPLES}", f"+output_jsonl_fpath={tmp_path / 'o.jsonl'}",
        "+replica_subset=by_node", "+progress=false",
    )  # fmt: skip
    assert done.returncode != 0 and "replica_subset" in done.stderr and "by_shard" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "o.jsonl").exists()


def test_merged_counts_add_up_and_pool_the_latencies_by_what_each_served() -> None:
    """Counts add; out in any part is out; p50 comes from the pooled latencies (10 tries at 1 s, 30 at
    3 s: 3 s), not the mean of the parts' p50s (2 s); the configured order is kept."""
    a, b = "http://a/v1", "http://b/v1"
    first = RoutingCounts(
        "sticky", (ReplicaCounts(b, 5, 5, 0, 2, False, (2.0,) * 5), ReplicaCounts(a, 11, 10, 1, 4, False, (1.0,) * 10))
    )
    second = RoutingCounts(
        "sticky", (ReplicaCounts(a, 30, 30, 0, 3, True, (3.0,) * 30), ReplicaCounts(b, 5, 5, 0, 1, False, (2.0,) * 5))
    )
    merged = merged_counts([first, second], [a, b])
    assert merged is not None and merged.policy == "sticky"
    (ra, rb) = merged.replicas
    assert (ra.url, ra.requests, ra.completed, ra.errors, ra.peak_in_flight, ra.out) == (a, 41, 40, 1, 7, True)
    assert (rb.url, rb.requests, rb.completed, rb.out) == (b, 10, 10, False)
    assert replica_summary(merged, 10.0)["replicas"][0]["latency_p50_s"] == 3.0
    assert merged_counts([]) is None


def test_a_thinned_sample_weighs_as_the_tries_it_stands_for() -> None:
    """One worker answered 40,960 tries and kept a sample of 4,096; another answered 4,096 and kept
    all: the merged sample (4,096) takes about ten of the first's for one of the second's."""
    url = "http://a/v1"
    many = RoutingCounts("sticky", (ReplicaCounts(url, 40960, 40960, 0, 8, False, (1.0,) * LATENCY_SAMPLE),))
    few = RoutingCounts("sticky", (ReplicaCounts(url, 4096, 4096, 0, 8, False, (9.0,) * 4096),))
    merged = merged_counts([many, few])
    assert merged is not None
    (replica,) = merged.replicas
    assert len(replica.latencies_s) == LATENCY_SAMPLE
    assert replica.latencies_s.count(9.0) == round(LATENCY_SAMPLE * 4096 / (40960 + 4096))


def test_counts_since_an_earlier_read_are_one_probes_figures() -> None:
    """diagnose's high probe out of the router's counts kept from the start: differences of the
    counts, the latencies added since (the sample still had room), the later peak and state."""
    a, b = "http://a/v1", "http://b/v1"
    before = RoutingCounts("sticky", (ReplicaCounts(a, 10, 9, 1, 2, False, (0.1,) * 9),
                                      ReplicaCounts(b, 10, 10, 0, 2, False, (0.1,) * 10)))  # fmt: skip
    after = RoutingCounts("sticky", (ReplicaCounts(a, 50, 48, 2, 9, False, (0.1,) * 9 + (0.5,) * 39),
                                     ReplicaCounts(b, 40, 30, 10, 8, True, (0.1,) * 10 + (2.0,) * 20)))  # fmt: skip
    high = after.since(before)
    assert [(r.requests, r.completed, r.errors, r.peak_in_flight, r.out) for r in high.replicas] == [
        (40, 39, 1, 9, False), (30, 20, 10, 8, True)]  # fmt: skip
    assert high.replicas[0].latencies_s == (0.5,) * 39 and high.replicas[1].latencies_s == (2.0,) * 20
    kept = (0.3,) * LATENCY_SAMPLE
    full = RoutingCounts("sticky", (ReplicaCounts(a, 9000, 9000, 0, 9, False, kept),))
    earlier = RoutingCounts("sticky", (ReplicaCounts(a, 5000, 5000, 0, 9, False, kept),))
    assert full.since(earlier).replicas[0].latencies_s == kept  # a full sample: the run's, as kept
