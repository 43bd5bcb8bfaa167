"""The run fingerprint covers every setting that changes rows, derived from the settings' declarations,
and merge-rollouts compares how its parts were made (issue 24)."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path
from typing import Any

import pytest

from gymbench.cli import main
from gymbench.collect.collection import collect_settings, run_identity
from gymbench.collect.config import CollectConfig
from gymbench.collect.merge import SPLIT_SETTINGS, check_parts_alike
from gymbench.errors import GymbenchError
from gymbench.rollout.identity import FORMAT, FORMAT_V1, check_run_fingerprint, run_fingerprint_path
from gymbench.settings import build_settings, run_defining_settings

from ..rollout.test_dataset import write_tasks
from .test_collect_cli import FAST_SIM, rows

pytestmark = pytest.mark.hostile  # a case of the adversarial sweep (issue 24): benches/hostile_count.sh

CHANGED_ROWS = {
    "sim_preset": "+sim_preset=zero-latency",
    "sim": "+sim.seed=7",
    "sim_profile": "+sim_profile=engine.yaml",
    "verify_fraction": "+verify_fraction=0.5",
    "verify_first_n": "+verify_first_n=1",
    "verify_only_cheap": "+verify_only_cheap=true",
    "verifier": "+verifier=none",
    "verifier_options": "+verifier_options.field=answer",
    "model": "+model=other",
    "api": "+api=chat",
    "stream": "+stream=true",
    "extra_body": "+extra_body.top_k=5",
    "responses_create_params": "+responses_create_params.temperature=0.1",
    "backend": "+backend=openai",
    "backend_options": "+backend_options.x=1",
    "num_repeats": "+num_repeats=2",
    "limit": "+limit=1",
    "start_idx": "+start_idx=1",
    "end_idx": "+end_idx=2",
    "agent_url": "+agent_url=http://127.0.0.1:9",
    "agent_name": "+agent_name=a",
    "environment_routing_mode": "+environment_routing_mode=legacy +environment_server_name=e",
    "environment_server_name": "+environment_server_name=e",
}
"""A change of each setting that changes what a row holds (the value only has to differ; a change
that needs another setting beside it gives both, separated by a space)."""

NEUTRAL = [
    "+num_samples_in_parallel=3", "+progress=false", "+run_name=other", "+results_dir=elsewhere",
    "+save_results=false", "+request_timeout_s=9", "+max_retries=1", "+strategy=semaphore",
    "+verifier_workers=2", "+verifier_pool=thread", "+verify_cache_size=0", "+base_url=http://127.0.0.1:1/v1",
    "+num_workers=3", "+shard_attempts=5", "+max_attempts=4", "+stop_after_failures=0", "+scrape_metrics=false",
    "+disable_aggregation=true", "+resume_force=true", "+global_aiohttp_connector_limit=10",
    "+head_server.port=1234", "+slo_e2e_ms=100", "+sim_per_worker=true", "+launcher=local", "+num_shards=2",
    "+api_key_env=KEY", "+warmup_rollouts=1", "+cooldown_s=1", "+stop_after_errors=3", "+slo_itl_ms=5",
]  # fmt: skip


def config_of(tasks: Path, output: Path, *settings: str) -> CollectConfig:
    changes = (part.lstrip("+") for setting in settings for part in setting.split(" "))
    overrides = [f"input_jsonl_fpath={tasks}", f"output_jsonl_fpath={output}", *changes]
    return build_settings(CollectConfig, overrides)


def identity(config: CollectConfig) -> dict[str, Any]:
    return run_identity(config, collect_settings(config), regular_input=True)


def test_every_setting_either_defines_the_run_or_is_declared_neutral() -> None:
    defining = set(run_defining_settings(CollectConfig()))
    assert defining == set(CHANGED_ROWS), "a setting's declaration changed: update CHANGED_ROWS (or declare it)"
    neutral = {f.name for f in dataclasses.fields(CollectConfig) if f.metadata.get("run_neutral")}
    assert not defining & neutral and defining | neutral == {f.name for f in dataclasses.fields(CollectConfig)}


@pytest.mark.parametrize("name", sorted(CHANGED_ROWS))
def test_a_resume_with_a_setting_that_changes_rows_is_refused(name: str, tmp_path: Path) -> None:
    tasks, output = write_tasks(tmp_path / "t.jsonl", 4), tmp_path / "o.jsonl"
    first = identity(config_of(tasks, output))
    changed = identity(config_of(tasks, output, CHANGED_ROWS[name]))
    check_run_fingerprint(output, first, force=False)
    with pytest.raises(GymbenchError, match=rf"settings\.{name}\b.*was .*now"):
        check_run_fingerprint(output, changed, force=False)


@pytest.mark.parametrize("setting", NEUTRAL)
def test_a_resume_may_change_a_setting_declared_neutral(setting: str, tmp_path: Path) -> None:
    tasks, output = write_tasks(tmp_path / "t.jsonl", 4), tmp_path / "o.jsonl"
    check_run_fingerprint(output, identity(config_of(tasks, output)), force=False)
    assert check_run_fingerprint(output, identity(config_of(tasks, output, setting)), force=False) == []


@pytest.mark.parametrize("changed", ["+sim.seed=5", "+sim_preset=zero-latency", "+verify_fraction=0.5"])
def test_collect_resume_with_other_simulator_or_verification_settings_is_refused(changed: str, tmp_path: Path,
                                                                                  capsys) -> None:  # fmt: skip
    tasks, output = write_tasks(tmp_path / "t.jsonl", 3), tmp_path / "o.jsonl"
    base = ["collect", f"+input_jsonl_fpath={tasks}", f"+output_jsonl_fpath={output}", "+save_results=false",
            "+progress=false", *FAST_SIM]  # fmt: skip
    assert main([*base, "+limit=2"]) == 0
    capsys.readouterr()
    assert main([*base, "+resume=true", changed]) == 2
    assert "this resume differs from the run that wrote the file" in capsys.readouterr().err
    assert len(rows(output)) == 2


def v1_sidecar(output: Path, tasks_identity: dict[str, Any], **request: Any) -> None:
    """What gymbench wrote before the fingerprint came from the declarations."""
    fingerprint = {
        "input": tasks_identity,
        "selection": {"start_idx": 0, "end_idx": None, "limit": None, "num_repeats": 1},
        "verifier": {"name": "exact-match", "options": {}},
        "request": {"backend": None, "model": None, "api": "responses", "agent_url": None,
                    "responses_create_params": {}, "extra_body": {}, **request},
    }  # fmt: skip
    content = {"format": FORMAT_V1, "gymbench": "0.0", "fingerprint": fingerprint}
    run_fingerprint_path(output).write_text(json.dumps(content))


@pytest.mark.parametrize(("change", "refused"), [(None, False), ("+num_repeats=2", True), ("+model=m2", True),
                                                 ("+sim.seed=3", False), ("+verifier=none", True)])  # fmt: skip
def test_a_fingerprint_of_the_previous_format_is_still_read(change: str | None, refused: bool, tmp_path: Path) -> None:
    tasks, output = write_tasks(tmp_path / "t.jsonl", 4), tmp_path / "o.jsonl"
    output.write_text("")
    now = identity(config_of(tasks, output, *([change] if change else [])))
    v1_sidecar(output, identity(config_of(tasks, output))["input"])
    if refused:
        with pytest.raises(GymbenchError, match="this resume differs"):
            check_run_fingerprint(output, now, force=False)
        return
    warnings = check_run_fingerprint(output, now, force=False)  # what it did not record cannot differ
    assert len(warnings) == 1 and "older gymbench" in warnings[0]
    assert json.loads(run_fingerprint_path(output).read_text())["format"] == FORMAT  # rewritten


# --- merge-rollouts: parts made differently


def collect_part(tmp_path: Path, tasks: Path, name: str, start: int, end: int, *settings: str) -> Path:
    output = tmp_path / name
    assert main(["collect", f"+input_jsonl_fpath={tasks}", f"+output_jsonl_fpath={output}", "+save_results=false",
                 "+progress=false", f"+start_idx={start}", f"+end_idx={end}", *FAST_SIM, *settings]) == 0  # fmt: skip
    return output


def test_merge_refuses_a_part_from_another_tasks_file_or_other_settings(tmp_path: Path, capsys) -> None:
    tasks = write_tasks(tmp_path / "tasks.jsonl", 6)
    other_tasks = tmp_path / "other.jsonl"
    other_tasks.write_text(tasks.read_text().replace('"q', '"other q'))
    first = collect_part(tmp_path, tasks, "a.jsonl", 0, 3)
    alike = collect_part(tmp_path, tasks, "b.jsonl", 3, 6)
    foreign = collect_part(tmp_path, other_tasks, "c.jsonl", 3, 6)
    hotter = collect_part(tmp_path, tasks, "d.jsonl", 3, 6, "+responses_create_params.temperature=0.9")
    capsys.readouterr()
    merge = ["-o", str(tmp_path / "all.jsonl"), "--input", str(tasks), "--overwrite=true"]
    assert main(["merge-rollouts", str(first), str(alike), *merge]) == 0
    assert "none missing" in capsys.readouterr().err
    assert main(["merge-rollouts", str(first), str(foreign), *merge]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and f"{foreign} was collected from other tasks than {tasks}" in error[0]
    assert main(["merge-rollouts", str(first), str(hotter), *merge]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and f"{first} and {hotter} differ in responses_create_params" in error[0]
    assert main(["merge-rollouts", str(first), str(hotter), *merge, "--force=true"]) == 0
    assert "merging anyway (--force)" in capsys.readouterr().err


def sidecar(path: Path, settings: dict[str, Any], input_: dict[str, Any] | None = None) -> Path:
    path.write_text("")
    base = run_defining_settings(CollectConfig())
    content = {"format": FORMAT, "fingerprint": {"input": input_ or {}, "settings": {**base, **settings}}}
    run_fingerprint_path(path).write_text(json.dumps(content))
    return path


@pytest.mark.parametrize("name", sorted(set(CHANGED_ROWS) - set(SPLIT_SETTINGS)))
def test_merge_refuses_parts_that_differ_in_any_defining_setting(name: str, tmp_path: Path) -> None:
    changed = config_of(tmp_path / "t", tmp_path / "o", CHANGED_ROWS[name])
    first = sidecar(tmp_path / "a.jsonl", {"start_idx": 0, "end_idx": 3})
    second = sidecar(tmp_path / "b.jsonl", {"start_idx": 3, "end_idx": 6, name: getattr(changed, name)})
    with pytest.raises(GymbenchError, match=rf"{first} and {second} differ in {name}"):
        check_parts_alike([first, second], None, force=False)
    assert "merging anyway" in check_parts_alike([first, second], None, force=True)[0]


@pytest.mark.parametrize("split", [{"start_idx": 3}, {"end_idx": 9}, {"limit": 2}, {}])
def test_parts_may_differ_in_their_range(split: dict[str, Any], tmp_path: Path) -> None:
    first = sidecar(tmp_path / "a.jsonl", {})
    second = sidecar(tmp_path / "b.jsonl", split)
    assert check_parts_alike([first, second], None, force=False) == []


def test_a_part_without_a_fingerprint_is_merged_with_a_note(tmp_path: Path) -> None:
    first = sidecar(tmp_path / "a.jsonl", {})
    bare = tmp_path / "b.jsonl"
    bare.write_text("")
    notes = check_parts_alike([first, bare], None, force=False)
    assert notes == [f"{bare}: no b.jsonl.run.json beside it, so how it was collected cannot be checked"]


# --- seeded hostile mixes: any set of changes is refused exactly when one of them changes rows


def _mixes(count: int, seed: int) -> list[tuple[list[str], bool]]:
    chooser = random.Random(seed)
    defining, neutral = sorted(CHANGED_ROWS), list(NEUTRAL)
    cases = []
    for _ in range(count):
        changes = chooser.sample(neutral, chooser.randint(0, 4))
        refused = chooser.random() < 0.6
        if refused:
            changes += [CHANGED_ROWS[name] for name in chooser.sample(defining, chooser.randint(1, 3))]
        chooser.shuffle(changes)
        cases.append((changes, refused))
    return cases


@pytest.mark.parametrize(
    ("changes", "refused"), _mixes(120, seed=24), ids=lambda v: ",".join(v) if isinstance(v, list) else str(v)
)
def test_a_resume_is_refused_exactly_when_a_change_defines_the_run(changes: list[str], refused: bool,
                                                                   tmp_path: Path) -> None:  # fmt: skip
    tasks, output = write_tasks(tmp_path / "t.jsonl", 4), tmp_path / "o.jsonl"
    check_run_fingerprint(output, identity(config_of(tasks, output)), force=False)
    later = identity(config_of(tasks, output, *changes))
    if not refused:
        assert check_run_fingerprint(output, later, force=False) == []
        return
    with pytest.raises(GymbenchError) as caught:
        check_run_fingerprint(output, later, force=False)
    named = {line.split(":")[0].strip() for line in str(caught.value).splitlines()[1:-1]}
    expected = {part.lstrip("+").split("=")[0].split(".")[0] for change in changes for part in change.split(" ")}
    settings = {name.split(".")[1] for name in named if name.startswith("settings.")}
    assert settings and settings <= expected  # the selected tasks (input.*) change with the range too
    forced = check_run_fingerprint(output, later, force=True)
    assert forced and all("resuming a different run" in line for line in forced)


def _part_mixes(count: int, seed: int) -> list[tuple[list[str], list[str], bool]]:
    chooser = random.Random(seed)
    names = sorted(set(CHANGED_ROWS) - set(SPLIT_SETTINGS))
    cases = []
    for _ in range(count):
        ranges = [f"+start_idx={chooser.randint(0, 5)}", f"+limit={chooser.randint(1, 9)}"][: chooser.randint(0, 2)]
        differs = chooser.random() < 0.5
        changes = [CHANGED_ROWS[name] for name in chooser.sample(names, chooser.randint(1, 3))] if differs else []
        cases.append((ranges, changes, differs))
    return cases


@pytest.mark.parametrize(("ranges", "changes", "differs"), _part_mixes(60, seed=2424))
def test_merge_refuses_parts_exactly_when_they_differ_beyond_their_range(
    ranges: list[str], changes: list[str], differs: bool, tmp_path: Path
) -> None:
    def part(name: str, *settings: str) -> Path:
        config = config_of(tmp_path / "t", tmp_path / "o", *settings)
        return sidecar(tmp_path / name, run_defining_settings(config))

    first, second = part("a.jsonl"), part("b.jsonl", *ranges, *changes)
    if not differs:
        assert check_parts_alike([first, second], None, force=False) == []
        return
    with pytest.raises(GymbenchError, match=rf"^cannot merge parts made differently: {first} and {second} differ"):
        check_parts_alike([first, second], None, force=False)
