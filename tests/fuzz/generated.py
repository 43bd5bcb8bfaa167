"""The contract cases generated from :mod:`.reach`: every setting of every command with every
hostile value of its kind, every file reader with every hostile file. Seeded: the same cases every
run; :func:`sample` picks a seeded share of them for the default suite."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

from .cases import Env
from .contract import ContractCase
from .reach import (
    EXCUSED,
    HOSTILE_FILES,
    LEFT_OUT,
    OTHER_INPUTS,
    READERS,
    STOPPERS,
    VALUES,
    WRONG_TYPE,
    FileMaker,
    ReaderArgv,
    Setting,
    Value,
    all_settings,
)

SEED = 41


def _setting_case(setting: Setting, name: str, value: Value) -> ContractCase:
    stopper, extra = STOPPERS[setting.command]

    def build(root: Path, env: Env) -> list[str]:
        made = value(root) if callable(value) else value
        return [*stopper(root, env, setting), f"+{setting.key}={made}"]

    wrong = name in WRONG_TYPE.get(setting.kind, set())
    statuses = (2,) if wrong else (2, *extra)
    mention = setting.key.rsplit(".", 1)[-1] if wrong else None
    return ContractCase(f"setting/{setting.command}:{setting.key}:{name}", build, statuses, mention)


def setting_contract_cases() -> Iterator[ContractCase]:
    for setting in all_settings():
        if f"{setting.command}:{setting.key}" in LEFT_OUT or setting.command not in STOPPERS:
            continue
        for name, value in VALUES[setting.kind].items():
            yield _setting_case(setting, name, value)


def _reader_case(reader: str, argv: ReaderArgv, name: str, make: FileMaker) -> ContractCase:
    def build(root: Path, env: Env) -> list[str]:
        return argv(root, env, make)

    outputs = ("o.jsonl", "o.jsonl.run.json", "o.jsonl.metrics.json", "merged.jsonl", "results")
    return ContractCase(f"reader/{reader}:{name}", build, (0, 1, 2, 3), outputs=outputs)


def reader_contract_cases() -> Iterator[ContractCase]:
    for reader, (_, argv) in {**READERS, **OTHER_INPUTS}.items():
        for name, make in HOSTILE_FILES.items():
            yield _reader_case(reader, argv, name, make)


def all_contract_cases() -> list[ContractCase]:
    return [*setting_contract_cases(), *reader_contract_cases()]


def sample(cases: list[ContractCase], seed: int = SEED) -> list[ContractCase]:
    """One seeded case per setting and per reader: every one of them is tried in every run."""
    rng = random.Random(seed)
    groups: dict[str, list[ContractCase]] = {}
    for case in cases:
        groups.setdefault(case.id.rsplit(":", 1)[0], []).append(case)
    return [rng.choice(group) for group in groups.values()]


__all__ = ["EXCUSED", "all_contract_cases", "sample"]
