"""The run fingerprint beside the output: what defines a run, so a resume cannot mix two runs.

A resume appends to what an earlier run wrote. If the tasks, the verifier or the sampling settings
changed in between, the file would silently hold two different runs and every statistic over it
would be wrong. So each run writes ``<output>.run.json`` (the caller's mapping of what changes
rows: input identity, verifier, overrides, slice, backend, model...) and a resume compares it.
The file holds ``{"format": "gymbench-run/2", "gymbench": VERSION, "fingerprint": {"input": {...},
"settings": {...}}}``. A file of the first format (grouped ``selection``/``verifier``/``request``
keys, fewer settings) is still read: its settings are renamed to today's and only those are compared.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gymbench.errors import GymbenchError
from gymbench.fingerprint import package_version
from gymbench.jsonio import dumps, loads, read_json_file, write_json_atomic
from gymbench.types import JSONObject, JSONValue

FORMAT = "gymbench-run/2"
FORMAT_V1 = "gymbench-run/1"
_V1_NAMES = {
    "selection": {name: name for name in ("start_idx", "end_idx", "limit", "num_repeats")},
    "verifier": {"name": "verifier", "options": "verifier_options"},
    "request": {
        name: name
        for name in ("backend", "model", "api", "agent_url", "responses_create_params", "extra_body", "agent_name")
    },
}
"""Where each setting of a first-format fingerprint is in today's (``settings.<name>``)."""
_SHOWN_CHARS = 80
_ABSENT = "(absent)"


def run_fingerprint_path(output_path: str | os.PathLike[str]) -> Path:
    output = Path(output_path)
    return output.with_name(output.name + ".run.json")


def write_run_fingerprint(output_path: str | os.PathLike[str], fingerprint: Mapping[str, Any]) -> Path:
    """Write (atomically) the sidecar for a run that starts or restarts ``output_path``."""
    content = {"format": FORMAT, "gymbench": package_version("gymbench"), "fingerprint": _as_json(fingerprint)}
    return write_json_atomic(run_fingerprint_path(output_path), content)


def check_run_fingerprint(
    output_path: str | os.PathLike[str], fingerprint: Mapping[str, Any], force: bool
) -> list[str]:
    """Check that a resume continues the run that wrote ``output_path``; return warnings.

    Raise :class:`GymbenchError` listing every difference unless ``force``; with ``force`` the
    differences come back as warnings and the sidecar is rewritten. A missing sidecar beside
    rollouts is a warning (an older gymbench or another tool wrote them) and is then written.
    """
    sidecar = run_fingerprint_path(output_path)
    if not sidecar.exists():
        write_run_fingerprint(output_path, fingerprint)
        return [_no_sidecar_warning(output_path)] if _has_rows(output_path) else []
    try:
        earlier, older = read_run_fingerprint(sidecar)
    except GymbenchError as exc:
        if not force:
            raise GymbenchError(f"{exc}; delete it, or add +resume_force=true to continue anyway") from None
        write_run_fingerprint(output_path, fingerprint)
        return [f"{exc}; continuing (+resume_force=true) and writing a new one"]
    now = _as_json(fingerprint)
    differences = fingerprint_differences(earlier, now, only_earlier=older)
    warnings = [_older_format_warning(sidecar)] if older else []
    if not differences:
        if older:
            write_run_fingerprint(output_path, fingerprint)
        return warnings
    if not force:
        raise GymbenchError(_mismatch_message(output_path, differences))
    write_run_fingerprint(output_path, fingerprint)
    return warnings + [f"{output_path}: resuming a different run (+resume_force=true): {line}" for line in differences]


def fingerprint_differences(
    earlier: Mapping[str, Any], now: Mapping[str, Any], *, only_earlier: bool = False
) -> list[str]:
    """``key: was X, now Y`` for each differing leaf; nested mappings give dotted keys.

    ``only_earlier`` compares only what ``earlier`` recorded (a fingerprint of an older format,
    which did not record every setting today's does)."""
    was, now_flat = _flatten(earlier), _flatten(now)
    if only_earlier:
        roots = {_root(key) for key in was}
        now_flat = {key: value for key, value in now_flat.items() if _root(key) in roots}
    lines = []
    for key in sorted(was.keys() | now_flat.keys()):
        before, after = was.get(key, _ABSENT), now_flat.get(key, _ABSENT)
        if before != after:
            lines.append(f"{key}: was {_shown(before)}, now {_shown(after)}")
    return lines


def _root(key: str) -> str:
    """``settings.sim.seed`` -> ``settings.sim``: the setting a flattened key belongs to."""
    return ".".join(key.split(".")[:2])


def _flatten(mapping: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Leaves as canonical JSON text, so ``{"a": 1, "b": 2}`` equals ``{"b": 2, "a": 1}``."""
    flat: dict[str, str] = {}
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(_flatten(value, f"{name}."))
        else:
            flat[name] = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return flat


def _shown(text: str) -> str:
    if len(text) <= _SHOWN_CHARS:
        return text
    half = (_SHOWN_CHARS - 3) // 2
    return f"{text[:half]}...{text[-half:]}"


def _as_json(value: Mapping[str, Any]) -> JSONObject:
    """What the sidecar will hold (paths as strings, tuples as lists), so both sides compare alike."""
    return loads(dumps(value))


def read_run_fingerprint(sidecar: str | os.PathLike[str]) -> tuple[Mapping[str, JSONValue], bool]:
    """A sidecar's fingerprint in today's shape, and whether it was of the older format."""
    content = read_json_file(sidecar, "run fingerprint")
    if not isinstance(content, dict) or not isinstance(content.get("fingerprint"), dict):
        raise GymbenchError(f"{sidecar}: not a gymbench run fingerprint (expected format {FORMAT})")
    if content.get("format") == FORMAT:
        return content["fingerprint"], False
    if content.get("format") == FORMAT_V1:
        return _upgraded(content["fingerprint"]), True
    raise GymbenchError(f"{sidecar}: not a gymbench run fingerprint (expected format {FORMAT})")


def _upgraded(old: Mapping[str, Any]) -> JSONObject:
    """A first-format fingerprint in today's shape; a setting it left out when unset (agent_name) is null."""
    settings: JSONObject = {"agent_name": None}
    for group, names in _V1_NAMES.items():
        values = old.get(group)
        if isinstance(values, Mapping):
            settings.update({names[key]: value for key, value in values.items() if key in names})
    upgraded: JSONObject = {"settings": settings}
    if "input" in old:
        upgraded["input"] = old["input"]
    return upgraded


def _older_format_warning(sidecar: Path | str) -> str:
    return (
        f"{sidecar}: written by an older gymbench ({FORMAT_V1}), which recorded fewer settings: only "
        "those were compared; the fingerprint is rewritten in today's format"
    )


def _has_rows(output_path: str | os.PathLike[str]) -> bool:
    try:
        return os.path.getsize(output_path) > 0
    except OSError:
        return False


def _no_sidecar_warning(output_path: str | os.PathLike[str]) -> str:
    return (
        f"no run fingerprint beside {output_path} (written by an older gymbench or another tool): "
        "cannot check that this resume continues the same run"
    )


def _mismatch_message(output_path: str | os.PathLike[str], differences: list[str]) -> str:
    listed = "".join(f"\n  {line}" for line in differences)
    return (
        f"{output_path}: this resume differs from the run that wrote the file:{listed}\n"
        "resuming would mix two runs in one file; use the same settings, choose a new "
        "+output_jsonl_fpath, or add +resume_force=true to continue anyway"
    )
