"""Sequence lengths: the distributions, and rollouts files in gymbench's and NeMo Gym's formats."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from gymbench import GymbenchError
from gymbench.train.config import TrainConfig, length_source, trial_config, worst_case
from gymbench.train.lengths import Distribution, Sample, read_rollout_lengths, split_prompt


def write_rows(path: Path, rows: list[object]) -> Path:
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows))
    return path


def gymbench_row(prompt: int, completion: int, reward: float | None = 1.0) -> dict:
    return {
        "task_index": 0,
        "status": "ok",
        "reward": reward,
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion},
    }


def nemo_gym_row(prompt: int, completion: int) -> dict:
    return {"reward": 0.0, "response": {"usage": {"input_tokens": prompt, "output_tokens": completion}}}


@pytest.mark.parametrize("name", ["fixed", "uniform", "skewed"])
def test_distributions_stay_in_bounds_and_repeat_with_the_seed(name: str) -> None:
    source = Distribution(name, max_len=256, min_len=16)
    first = source.draw(400, np.random.default_rng(3))
    again = source.draw(400, np.random.default_rng(3))
    lengths = np.array([sample.length for sample in first])
    assert first == again and source.longest == 256
    assert lengths.min() >= (256 if name == "fixed" else 16) and lengths.max() <= 256
    assert all(sample.prompt >= 1 and sample.completion >= 1 for sample in first)


def test_skewed_lengths_have_a_long_tail_that_reaches_the_cap() -> None:
    lengths = Distribution("skewed", max_len=512, min_len=8).lengths(20_000, np.random.default_rng(0))
    assert np.median(lengths) == pytest.approx(128, rel=0.05)
    assert 0.02 < np.mean(lengths == 512) < 0.08  # truncated at the generation limit
    assert np.mean(lengths) < 0.4 * 512


def test_the_prompt_share_splits_each_sequence() -> None:
    assert split_prompt(100, 0.25) == Sample(25, 75)
    assert split_prompt(2, 0.9) == Sample(1, 1)
    assert split_prompt(10, 0.0) == Sample(1, 9)


def test_both_rollout_formats_are_read_failed_rows_skipped_long_rows_cut(tmp_path: Path) -> None:
    rows = [gymbench_row(10, 20), nemo_gym_row(30, 5), {"status": "failed", "response": None}, "", gymbench_row(60, 90)]
    source = read_rollout_lengths(write_rows(tmp_path / "r.jsonl", rows), max_len=100)
    assert source.samples == (Sample(10, 20, 1.0), Sample(30, 5, 0.0), Sample(60, 40, 1.0))
    assert (source.skipped, source.truncated, source.longest) == (1, 1, 100)
    assert "3 rollouts" in source.describe() and "1 cut to the limit" in source.describe()


def test_rollouts_replay_consecutive_rows_from_a_random_start(tmp_path: Path) -> None:
    rows = [gymbench_row(1, n) for n in range(1, 11)]
    source = read_rollout_lengths(write_rows(tmp_path / "r.jsonl", rows), max_len=100)
    drawn = [sample.completion for sample in source.draw(15, np.random.default_rng(1))]
    assert all((b - a) % 10 == 1 for a, b in zip(drawn, drawn[1:], strict=False))


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"usage": {"prompt_tokens": 3}', "r.jsonl:2: not a rollout row (malformed JSON"),
        ("[1, 2]", "r.jsonl:2: not a rollout row (a JSON list, not an object"),
        ('{"reward": 1}', "r.jsonl:2: no token counts; expected usage.prompt_tokens"),
        ('{"usage": {"prompt_tokens": 3, "completion_tokens": -1}}', "usage.completion_tokens is -1"),
        ('{"usage": {"prompt_tokens": 3, "completion_tokens": "4"}}', "usage.completion_tokens is '4'"),
        ('{"response": {"usage": {"input_tokens": 1, "output_tokens": 0}}}', "1 + 0 tokens"),
        ('{"reward": "yes", "usage": {"prompt_tokens": 3, "completion_tokens": 4}}', "reward is 'yes'"),
    ],
)
def test_a_bad_rollouts_line_is_named(tmp_path: Path, line: str, message: str) -> None:
    path = write_rows(tmp_path / "r.jsonl", [gymbench_row(3, 4), line])
    with pytest.raises(GymbenchError, match=message.replace("(", r"\(").replace("+", r"\+")):
        read_rollout_lengths(path, max_len=100)


def test_an_empty_or_missing_rollouts_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(GymbenchError, match="no rollouts with token counts"):
        read_rollout_lengths(write_rows(tmp_path / "r.jsonl", [{"status": "failed"}]), max_len=100)
    with pytest.raises(GymbenchError, match="cannot read the rollouts file"):
        read_rollout_lengths(tmp_path / "missing.jsonl", max_len=100)


def test_the_batch_search_runs_the_longest_sequences(tmp_path: Path) -> None:
    path = write_rows(tmp_path / "r.jsonl", [gymbench_row(10, 20), gymbench_row(5, 70)])
    config = TrainConfig(seq_len=512, step="rl", rollouts=str(path), batch=8, packing=True)
    worst = worst_case(config)
    assert (worst.seq_len, worst.rollouts, worst.lengths, worst.packing) == (75, None, "fixed", True)
    assert worst_case(replace(config, rollouts=None, lengths="skewed")).seq_len == 512
    assert isinstance(length_source(worst), Distribution)
    trial = trial_config(worst, 3)
    assert (trial.batch, trial.accumulation, trial.group_size) == (3, 1, 1)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"step": "ppo"}, "unknown step 'ppo'"),
        ({"lengths": "normal"}, "unknown lengths 'normal'"),
        ({"lengths": "uniform", "min_len": 1}, "min_len must lie in"),
        ({"lengths": "skewed", "rollouts": "r.jsonl"}, "the file's token counts are the lengths"),
        ({"step": "rl", "batch": 6}, "not a whole number of GRPO groups of 4"),
        ({"step": "rl", "ratio_clip": 1.5}, "0 < ratio_clip < 1"),
        ({"prompt_share": 1.0}, "prompt_share must lie in"),
    ],
)
def test_bad_sequence_settings_are_refused(changes: dict, message: str) -> None:
    with pytest.raises(GymbenchError, match=message):
        TrainConfig(**{"batch": 8, **changes})
