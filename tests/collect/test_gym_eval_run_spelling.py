"""NeMo Gym 0.7.0's spellings on ``gymbench collect``: ``gym eval run``'s flags, ``resume_from_cache``,
and one clear line for each of its settings gymbench does not offer (issue 40)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gymbench.collect.config import CollectConfig
from gymbench.settings import known_fields, not_offered

from ..rollout.test_dataset import write_tasks
from .test_collect_cli import FAST_SIM, gymbench, rows


def test_gym_eval_run_flags_collect_on_the_embedded_simulator(tmp_path: Path) -> None:
    tasks, out = write_tasks(tmp_path / "tasks.jsonl", 5), tmp_path / "out.jsonl"
    done = gymbench(
        "collect", "--no-serve", "-i", str(tasks), "--output", str(out), "--limit", "2", "--num-repeats", "3",
        "--concurrency", "2", "--temperature", "0.3", "--top-p", "0.9", "--max-output-tokens", "16",
        "--no-health-check", "+save_results=false", *FAST_SIM,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    written = rows(out)
    assert sorted((r["task_index"], r["rollout_index"]) for r in written) == [
        (t, k) for t in range(2) for k in range(3)
    ]
    for row in written:
        params = row["responses_create_params"]
        assert (params["temperature"], params["top_p"], params["max_output_tokens"]) == (0.3, 0.9, 16)


def test_resume_from_cache_is_resume_without_a_word(tmp_path: Path) -> None:
    tasks, out = write_tasks(tmp_path / "tasks.jsonl", 4), tmp_path / "out.jsonl"
    first = gymbench("collect", "-i", str(tasks), "-o", str(out), "--limit", "2", "+save_results=false", *FAST_SIM)
    assert first.returncode == 0, first.stderr
    before = out.read_text()
    again = gymbench(
        "collect", "-i", str(tasks), "-o", str(out), "--limit", "2", "+resume_from_cache=true",
        "+save_results=false", *FAST_SIM,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert out.read_text() == before  # nothing left to run: the rows are the first run's
    assert "is now called" not in again.stderr and "unknown setting" not in again.stderr


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        (
            ["--prompt-config", "p.yaml"],
            "--prompt-config is NeMo Gym's and gymbench does not offer it: write the prompts",
        ),
        (["--interleave-repeats"], "--interleave-repeats is NeMo Gym's and gymbench does not offer it"),
        (["+agent_map={a: b}"], "setting 'agent_map' is NeMo Gym's and gymbench does not offer it: route with"),
        (["+fan_out={a: [b, c]}"], "setting 'fan_out' is NeMo Gym's and gymbench does not offer it"),
        (["+num_repeats={agent: 2}"], "setting 'num_repeats': got a mapping ({'agent': 2}), expected a whole number"),
    ],
)
def test_what_gymbench_does_not_offer_is_one_line_and_nothing_written(
    tmp_path: Path, words: list[str], expected: str
) -> None:
    tasks, out = write_tasks(tmp_path / "tasks.jsonl", 2), tmp_path / "out.jsonl"
    done = gymbench("collect", "-i", str(tasks), "-o", str(out), "+save_results=false", *words)
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"gymbench: error: {expected}")
    assert not out.exists()


def test_settings_not_offered_are_not_settings_gymbench_has() -> None:
    """A name in both would be refused and offered at once (and argparse refuses the flag twice)."""
    assert set(not_offered(CollectConfig)) and not set(not_offered(CollectConfig)) & known_fields(CollectConfig)
    assert json.dumps(sorted(not_offered(CollectConfig)))  # plain names
