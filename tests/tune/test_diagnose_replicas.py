"""``gymbench diagnose`` over several model replicas: which one is the limit (issue 43).

The replicas are simulated servers on 127.0.0.1 (``running_sim_replicas``), one of them slower
where the case needs a straggler; the verdicts are judged from the router's own per-replica counts.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from gymbench.cli import main
from gymbench.record import ResultsRecord, save_record
from gymbench.replica_figures import ReplicaFigures, ReplicaSummary
from gymbench.settings import build_settings
from gymbench.sim import running_sim_replicas
from gymbench.testing import make_plugins
from gymbench.tune.command import diagnose_run
from gymbench.tune.config import DiagnoseConfig
from gymbench.tune.diagnose import IMBALANCE_LIMIT, replica_verdict
from gymbench.tune.report import diagnose_result, diagnosis_text
from tests.gate.synthetic import fingerprint
from tests.report.test_run_report import image_sizes, opening

TASKS = Path(__file__).resolve().parents[2] / "gymbench" / "data" / "example_tasks.jsonl"
SIM = {"model": "m", "max_num_seqs": 2, "step_base_s": 0.01, "step_per_seq_s": 0.0, "output_tokens_mean": 8}


def diagnose_replicas(urls: list[str], *settings: str) -> Any:
    """Low 6 (each of the three replicas' two slots busy), high 24: the model is saturated at both."""
    given = [f"input_jsonl_fpath={TASKS}", "save_results=false", "max_batches=6", "progress=false", "low=6",
             "high=24", f"base_url={json.dumps(urls)}", "model=m", *settings]  # fmt: skip
    return diagnose_run(build_settings(DiagnoseConfig, given), make_plugins())


def test_one_slow_replica_is_named_by_its_url() -> None:
    with running_sim_replicas(replicas=3, slow_replica_factor=4.0, **SIM) as servers:
        urls = [server.base_url for server in servers]
        found = diagnose_replicas(urls, "routing=round-robin")
    assert found.verdict == "slow replica", diagnosis_text(found)
    assert found.replicas is not None and found.replicas["straggler"] == urls[2]
    said = diagnosis_text(found)
    assert said.startswith(f"verdict: slow replica: {urls[2]} (p50 latency ")
    assert "+routing=least-in-flight sends it less" in said
    record = diagnose_result(found, {}).extra
    assert record["verdict"] == "slow replica" and record["replicas"]["straggler"] == urls[2]
    assert [replica["url"] for replica in record["replicas"]["replicas"]] == urls
    table = said[said.index("    replica ") : said.index("symptoms:")].splitlines()  # a table, not bullets
    assert table[0].startswith("    replica ") and [line.split()[0] for line in table[1:]] == urls


def test_the_report_of_a_slow_replica_names_it_first_and_shows_the_table(tmp_path: Path) -> None:
    with running_sim_replicas(replicas=3, slow_replica_factor=4.0, **SIM) as servers:
        urls = [server.base_url for server in servers]
        found = diagnose_replicas(urls, "routing=round-robin")
    path = save_record(
        ResultsRecord("d", [diagnose_result(found, {})], fingerprint(), kind="diagnose"), tmp_path / "d.json"
    )
    assert main(["report", str(path), "-o", str(tmp_path / "d.html")]) == 0
    text = (tmp_path / "d.html").read_text()
    title, answer = opening(text)
    assert title.endswith("over 3 replicas") and f"Bottleneck: slow replica: {urls[2]} (p50 latency" in answer
    section = text[text.index("<h2>Replicas</h2>") :]
    assert len(image_sizes(section[: section.index("<h2>", 5)])) == 1
    assert [url for url in re.findall(r"<tr><td>(http[^<]*)</td>", section)] == urls


def test_equal_replicas_all_saturated_are_full() -> None:
    with running_sim_replicas(replicas=3, **SIM) as servers:
        urls = [server.base_url for server in servers]
        found = diagnose_replicas(urls, "routing=round-robin")
    assert found.verdict == "replicas full", diagnosis_text(found)
    assert found.replicas is not None and found.replicas["straggler"] is None
    assert found.replicas["imbalance"] is not None and found.replicas["imbalance"] <= IMBALANCE_LIMIT
    assert "every model replica is saturated evenly" in diagnosis_text(found)


def _replica(url: str, requests: int) -> ReplicaFigures:
    return {"url": url, "requests": requests, "completed": requests, "errors": 0, "peak_in_flight": 4,
            "out": False, "latency_p50_s": 0.1, "latency_p99_s": 0.2, "completed_per_s": requests / 10.0,
            "share": None}  # fmt: skip


def test_requests_piled_on_replicas_that_answer_alike_are_unbalanced_routing() -> None:
    """Sticky routing with a few long rollouts: the replicas' latencies agree, their loads do not."""
    even: ReplicaSummary = {"policy": "sticky", "replicas": [_replica("a", 100), _replica("b", 100)],
                            "imbalance": 1.0, "straggler": None, "straggler_reason": None}  # fmt: skip
    piled: ReplicaSummary = {**even, "replicas": [_replica("a", 160), _replica("b", 40)], "imbalance": 1.6}
    assert replica_verdict(even) == "replicas full" and replica_verdict(piled) == "unbalanced routing"
    assert replica_verdict({**piled, "straggler": "b", "straggler_reason": "slow"}) == "slow replica"
