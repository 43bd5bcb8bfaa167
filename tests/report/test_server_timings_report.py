"""The HTML report of a collection shows the server's timings against the client's, and the finding."""

from __future__ import annotations

from pathlib import Path

from gymbench.cli import main
from gymbench.record import BenchmarkResult, Metric, ResultsRecord, save_record
from gymbench.rollout.server_timings import ServerTimingsStats
from tests.gate.synthetic import fingerprint


def test_a_collection_report_has_the_server_timings_section(tmp_path: Path) -> None:
    stats = ServerTimingsStats()
    for _ in range(3):
        stats.add({"prompt_ms": 30.0, "predicted_ms": 40.0, "predicted_per_token_ms": 4.0},
                  {"ttft": 0.12, "itl": 0.005, "e2e": 0.2})  # fmt: skip
    bench = BenchmarkResult("collect", {}, {"rollouts_per_s": Metric(1.0, "rollouts/s", "higher")},
                            extra={"summary": {"server_timings": stats.summary()}})  # fmt: skip
    path = save_record(ResultsRecord("run", [bench], fingerprint(), kind="collect"), tmp_path / "c.json")
    assert main(["report", str(path), "-o", str(tmp_path / "c.html")]) == 0
    text = (tmp_path / "c.html").read_text()
    assert "<h2>Server timings against the client's</h2>" in text and "3 rollouts carried" in text
    assert "<td>TTFT vs prompt_ms</td><td>120 ms / 120 ms</td><td>30 ms / 30 ms</td><td>90 ms / 90 ms</td>" in text
    assert '<p class="warn">most of TTFT (75%, median 90 ms)' in text


def test_a_report_without_server_timings_has_no_such_section(tmp_path: Path) -> None:
    bench = BenchmarkResult("collect", {}, {"rollouts_per_s": Metric(1.0, "rollouts/s", "higher")},
                            extra={"summary": {}})  # fmt: skip
    path = save_record(ResultsRecord("run", [bench], fingerprint(), kind="collect"), tmp_path / "c.json")
    assert main(["report", str(path), "-o", str(tmp_path / "c.html")]) == 0
    assert "Server timings" not in (tmp_path / "c.html").read_text()
