"""What a ``gymbench train`` record is called, and the digest of everything that defines its work.

A baseline is only worth comparing with a run of the same work. The record id names the settings a
reader looks for (model, size, step, precision, checkpointing as actually applied, accumulation,
batch, sequence length and lengths, packing) and ends in ``work=<digest>``: a hash of every setting
that changes what a step computes or how the search or the ranks run it. Every setting counts unless
it is declared ``doc(..., run_neutral=True)`` (how many steps are measured, where the record goes,
the learning rate, progress), so a setting added later is in the digest unless said otherwise. Two
runs that differ in any of them get different ids, and the comparison lists them as unmatched
instead of comparing them; the full definition is kept in the record's ``extra["work"]``.

No torch here: the id is built from the settings and the checked configuration.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

from gymbench.settings import run_defining_settings
from gymbench.train.config import StepSettings, TrainConfig
from gymbench.train.settings import DP_SETTINGS, SEARCH_SETTINGS, TrainSettings

READABLE = ("model", "size", "step", "precision", "checkpointing", "accumulation", "batch", "seq_len", "lengths",
            "packing")  # fmt: skip
"""The settings the id spells out; the others are in the digest only."""
DIGEST_CHARS = 12


def work_definition(settings: TrainSettings, config: TrainConfig, device: str) -> dict[str, Any]:
    """Every setting that defines the run's work, with the configuration's effective values (fp16's
    shrunk shapes, the model options merged into the preset) and the device as resolved."""
    defining = run_defining_settings(settings)
    effective = config.to_dict()
    for name in StepSettings.__dataclass_fields__:
        if name in defining:
            defining[name] = effective[name]
    defining.pop("size", None)
    defining.pop("model_options", None)
    defining["model_config"] = dict(config.model_config)
    defining["device"] = device
    if config.rollouts is not None:
        defining["rollouts"] = _file_digest(config.rollouts)  # the lengths it holds, not where it lies
    if settings.find_batch is None:
        for name in SEARCH_SETTINGS:
            defining.pop(name, None)
    if settings.dp == 1:
        for name in DP_SETTINGS:
            defining.pop(name, None)
    return {key: asdict(value) if is_dataclass(value) and not isinstance(value, type) else value
            for key, value in defining.items()}  # fmt: skip


def work_digest(definition: dict[str, Any]) -> str:
    text = json.dumps(definition, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:DIGEST_CHARS]


def applied_checkpointing(config: TrainConfig) -> str:
    """What the run checkpoints: ``checkpoint_ratio`` replaces ``checkpointing`` when it is set."""
    if config.checkpoint_ratio is not None:
        return f"ratio-{config.checkpoint_ratio:g}"
    return config.checkpointing


def record_params(settings: TrainSettings, config: TrainConfig, definition: dict[str, Any]) -> dict[str, Any]:
    """The record's parameters (its id): the readable settings, then the digest of all of them."""
    effective = config.to_dict()
    params = {name: effective[name] for name in READABLE if name in effective}
    params["size"] = config.model_config.get("size")
    params["checkpointing"] = applied_checkpointing(config)
    if settings.dp > 1:
        params.update(dp=settings.dp, launcher=settings.launcher)
    params["work"] = work_digest(definition)
    return params


def _file_digest(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:DIGEST_CHARS]
