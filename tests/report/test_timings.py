"""``gymbench timings``: per-rollout timings as CSV or JSON, the same figures the summary is made of."""

from __future__ import annotations

import asyncio
import csv
import json
from pathlib import Path

import numpy as np
import pytest

from gymbench.builtin.exact_match import ExactMatchVerifier
from gymbench.builtin.semaphore import SemaphoreStrategy
from gymbench.cli import main
from gymbench.rollout.engine import Collector, CollectSettings
from gymbench.rollout.stats import CollectStats
from gymbench.sim import InProcessBackend, SimConfig, run_in_simulated_time
from tests.rollout.test_latency_percentiles import write_tasks


@pytest.fixture(scope="module")
def collected(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, CollectStats]:
    folder = tmp_path_factory.mktemp("timings")

    async def main_() -> CollectStats:
        async with InProcessBackend(SimConfig(step_base_s=0.01, output_tokens_mean=10)) as backend:
            settings = CollectSettings(write_tasks(folder / "t.jsonl", 30), folder / "o.jsonl", overwrite=True)
            clock = asyncio.get_running_loop().time
            return await Collector(settings, backend, ExactMatchVerifier(), SemaphoreStrategy(4), clock=clock).run()  # type: ignore[arg-type]

    return folder / "o.jsonl", run_in_simulated_time(main_())


def test_csv_rows_are_what_the_percentiles_are_made_of(collected: tuple[Path, CollectStats], tmp_path: Path) -> None:
    rollouts, stats = collected
    out = tmp_path / "timings.csv"
    assert main(["timings", str(rollouts), "-o", str(out)]) == 0
    rows = list(csv.DictReader(out.read_text().splitlines()))
    assert len(rows) == 30 and len(rows[0]) == len(set(rows[0]))
    e2e = [float(r["e2e_s"]) for r in rows]
    table = stats.summary()["latency_percentiles_s"]["e2e"]
    assert float(np.quantile(e2e, 0.9)) == pytest.approx(table["p90"]["value"])
    assert {r["status"] for r in rows} == {"ok"} and all(float(r["ttft_s"]) > 0 for r in rows)


def test_json_holds_the_same_rows(collected: tuple[Path, CollectStats], capsys: pytest.CaptureFixture[str]) -> None:
    rollouts, _ = collected
    assert main(["timings", str(rollouts), "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 30 and rows[0]["completion_tokens"] > 0 and rows[0]["itl_s"] is None  # not streamed over HTTP


def test_a_wrong_file_is_one_line_naming_the_line_and_writes_nothing(
    collected: tuple[Path, CollectStats], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rollouts, _ = collected
    broken = tmp_path / "broken.jsonl"
    broken.write_text(rollouts.read_text().splitlines()[0] + "\n{not json\n")
    out = tmp_path / "t.csv"
    assert main(["timings", str(broken), "-o", str(out)]) == 2
    assert "broken.jsonl:2: not a rollout row (malformed JSON" in capsys.readouterr().err
    assert not out.exists() and not list(tmp_path.glob(".t.csv.*"))
    assert main(["timings", str(tmp_path / "missing.jsonl")]) == 2
    assert "missing.jsonl: cannot read the rollouts file" in capsys.readouterr().err
