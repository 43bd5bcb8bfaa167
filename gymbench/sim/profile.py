"""A simulator profile: the engine settings a calibration fitted, and the evidence for them.

``gymbench calibrate-sim`` measures a real engine once (on the machine with the GPU) and writes a
profile; CI then runs the simulator from the committed file (``gymbench sim-server
+profile=engine.yaml``, or ``+sim_profile=engine.yaml`` for the simulator that ``collect``,
``tune`` and ``diagnose`` start when no server is named). A profile is YAML::

    format: gymbench-sim-profile/1
    sim:            # SimConfig settings, laid over the preset; explicit settings still win
      max_num_seqs: 4
      step_base_s: 0.004
      ...
    calibration:    # where the numbers came from: engine, date, machine, measurements, fit

Only ``sim`` changes the simulator; ``calibration`` is the record a reviewer reads (and what a
later calibration is compared with). Its settings are checked as every simulator setting is, and a
bad one is one error naming the file and the key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from gymbench.errors import GymbenchError

FORMAT = "gymbench-sim-profile/1"
SECTIONS = ("format", "sim", "calibration")


def read_profile(path: str | Path) -> dict[str, Any]:
    """The profile's ``sim`` section, its shape checked (the settings themselves are checked by
    :func:`gymbench.sim.config.load_profile`, which the simulator's commands call).

    The returned mapping is a :class:`~gymbench.settings.SettingsFile`, so an error found when it
    is merged with other settings still names the file.
    """
    from gymbench.settings import SettingsFile, load_settings_file

    where = Path(path)
    document = load_settings_file(where)
    unknown = sorted(set(document) - set(SECTIONS))
    if unknown:
        raise GymbenchError(
            f"{where}: unknown key {unknown[0]!r} in a simulator profile; keys are {', '.join(SECTIONS)}"
        )
    if document.get("format", FORMAT) != FORMAT:
        raise GymbenchError(f"{where}: format: expected {FORMAT!r}, got {document['format']!r}")
    settings = document.get("sim")
    if not isinstance(settings, dict) or not settings:
        raise GymbenchError(f"{where}: sim: expected a mapping of simulator settings (e.g. step_base_s: 0.01)")
    return SettingsFile(settings, str(where))


def write_profile(path: str | Path, sim: dict[str, Any], calibration: dict[str, Any]) -> Path:
    """Write the profile whole or not at all (it is meant to be committed)."""
    import yaml

    from gymbench.jsonio import AtomicFile

    document = {"format": FORMAT, "sim": sim, "calibration": calibration}
    header = "# gymbench simulator profile: `gymbench sim-server +profile=THIS` (see docs/engine.md)\n"
    with AtomicFile(path, text=True, then="; choose another +output and run calibrate-sim again") as out:
        out.write(header + yaml.safe_dump(document, sort_keys=False, width=110))
    return Path(path)


def public_url(url: str) -> str:
    """``url`` without credentials, query or fragment: what may be written into a committed file."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


LENGTH_RATIO = 2.0
"""Tasks asking for more than this many times the calibrated output length (or less than its
inverse) are another workload: the fitted step costs are extrapolated to them."""


def workload_note(path: str | Path, asked: list[int | None]) -> str | None:
    """Whether ``asked`` (the output tokens each of the run's first tasks asks for, None where it
    sets no ``max_output_tokens``) is the workload the profile at ``path`` was calibrated on, in
    one warning line when it is not (None when it is, or when the profile records no workload).

    A profile fitted with ``max_tokens`` 64 on every request gives tasks that set none 64 tokens,
    where the engine gives them its own default (128 for the tasks in issue 39): the simulator then
    reported twice the engine's rollouts/s, silently."""
    from gymbench.settings import load_settings_file

    workload = (load_settings_file(Path(path)).get("calibration") or {}).get("workload") or {}
    calibrated, sent = _count(workload.get("max_tokens")), _count(workload.get("max_tokens_sent"))
    if calibrated is None or not asked:
        return None
    unset = sum(1 for tokens in asked if tokens is None)
    if unset and sent is not None:
        return (
            f"{path}: calibrated with max_output_tokens {sent} on every request, but {unset} of the first "
            f"{len(asked)} tasks set none: the simulator gives them {calibrated} tokens, the engine its own "
            f"default; set +responses_create_params.max_output_tokens={sent}, or calibrate without "
            "+output_tokens (the engine's default length)"
        )
    given = sorted(tokens for tokens in asked if tokens is not None)
    if given:
        median = given[len(given) // 2]
        if not 1 / LENGTH_RATIO <= median / calibrated <= LENGTH_RATIO:
            return (
                f"{path}: calibrated on {calibrated} output tokens per request, but the tasks ask for "
                f"{median} (median of the first {len(asked)}): the fitted step costs are extrapolated; "
                f"calibrate again with +output_tokens={median}"
            )
    return None


def _count(value: object) -> int | None:
    """A whole number from the settings file (which keeps scalars as their text), else None."""
    try:
        return int(str(value)) if value is not None else None
    except ValueError:
        return None
