"""A job's pyproject table layers over the collection settings it is built on."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from gymbench.pytest.servers import job_defaults

PYPROJECT = """
[tool.gymbench.collect]
input_jsonl_fpath = "data/tasks.jsonl"
verifier = "math"
num_samples_in_parallel = 64
output_jsonl_fpath = "out.jsonl"

[tool.gymbench.tune]
verifier = "exact-match"
max_parallelism = 32
"""


def defaults(tmp_path: Path, job: str) -> dict[str, Any]:
    (tmp_path / "pyproject.toml").write_text(PYPROJECT, encoding="utf-8")
    config = SimpleNamespace(rootpath=tmp_path, getoption=lambda name: None)
    return job_defaults(config, job)  # type: ignore[arg-type]


def test_tune_starts_from_the_collection_settings_it_shares(tmp_path: Path) -> None:
    tune = defaults(tmp_path, "tune")
    assert tune["input_jsonl_fpath"] == str(tmp_path / "data/tasks.jsonl")  # from collect, made absolute
    assert tune["verifier"] == "exact-match"  # the job's own table wins
    assert tune["max_parallelism"] == 32
    assert "output_jsonl_fpath" not in tune and "num_samples_in_parallel" not in tune  # collection's own


def test_collect_and_train_are_unchanged(tmp_path: Path) -> None:
    assert defaults(tmp_path, "collect")["num_samples_in_parallel"] == 64
    assert defaults(tmp_path, "train") == {}
