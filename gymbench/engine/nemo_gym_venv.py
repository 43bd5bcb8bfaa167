"""Find or build a virtual environment holding NeMo Gym itself, so tests can start its real stack.

NeMo Gym 0.7.0 wants Python 3.13 or later, and gymbench runs on older ones, so NeMo Gym lives in a
venv of its own, built once per machine under ``<user cache>/gymbench/nemo-gym-<version>`` (beside
the llama.cpp build, with its lock: two processes that find no venv build one between them). In
order:

1. ``GYMBENCH_NEMO_GYM_VENV=/path/to/venv``: use that venv (it must have ``bin/ng_run``);
2. the cache, when finished: ``build.json`` in it, or (a venv made by hand) the installed
   ``nemo-gym`` of the version wanted, after which ``build.json`` is written;
3. build it there with a Python of 3.13 or later: ``python -m venv`` and ``pip install
   --ignore-requires-python nemo-gym==<version>`` (a few minutes, about 1.4 GB). ``build.json`` is
   written last, so a killed build is seen as unfinished and is built again.

No Python 3.13 and no venv: :class:`NoNeMoGym`, whose message the fixture skips with.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

from gymbench.engine.build import build_lock, gymbench_cache
from gymbench.errors import GymbenchError

NEMO_GYM_VERSION = "0.7.0"
VENV_ENV = "GYMBENCH_NEMO_GYM_VENV"
PYTHON_ENV = "GYMBENCH_NEMO_GYM_PYTHON"
MINIMUM_PYTHON = (3, 13)
BUILD_TIMEOUT_S = 1800.0
PYENV_GLOB = "~/.pyenv/versions/3.1[3-9]*/bin/python"


class NoNeMoGym(GymbenchError):
    """No NeMo Gym venv can be had on this machine (the reason says why); tests skip on it."""


def venv_root(version: str = NEMO_GYM_VERSION) -> Path:
    return gymbench_cache() / f"nemo-gym-{version}"


def find_venv(*, build: bool = True, version: str = NEMO_GYM_VERSION, root: Path | None = None) -> Path:
    """The NeMo Gym venv to run: the environment's override, else the finished cache, else a new build."""
    override = os.environ.get(VENV_ENV)
    if override:
        return _checked_override(Path(override).expanduser())
    folder = root or venv_root(version)
    if finished(folder, version):
        return folder
    if not build:
        raise NoNeMoGym(
            f"no NeMo Gym {version} venv in {folder}; build it with a Python >= 3.13 (see docs/nemo-gym.md)"
        )
    return build_venv(folder, version)


def _checked_override(folder: Path) -> Path:
    if not (folder / "bin" / "ng_run").is_file():
        raise GymbenchError(f"{VENV_ENV}={folder}: no bin/ng_run there; point it at a venv with nemo-gym installed")
    return folder


def finished(folder: Path, version: str = NEMO_GYM_VERSION) -> bool:
    """``build.json`` is there, or a venv built by hand holds nemo-gym ``version`` (then it is marked)."""
    if (folder / "build.json").is_file():
        return True
    if not (folder / "bin" / "ng_run").is_file() or installed_version(folder) != version:
        return False
    _write_build_info(folder, version, seconds=None)
    return True


def installed_version(folder: Path) -> str | None:
    probe = "import importlib.metadata as m; print(m.version('nemo-gym'))"
    try:
        done = subprocess.run([str(folder / "bin" / "python"), "-c", probe], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def find_python() -> str:
    """A Python of 3.13 or later: ``GYMBENCH_NEMO_GYM_PYTHON``, then PATH, then pyenv's versions."""
    candidates = [os.environ.get(PYTHON_ENV, "")]
    candidates += [shutil.which(f"python3.{minor}") or "" for minor in range(MINIMUM_PYTHON[1], 20)]
    candidates += sorted(glob.glob(os.path.expanduser(PYENV_GLOB)), reverse=True)
    for candidate in filter(None, candidates):
        if _is_new_enough(candidate):
            return candidate
    raise NoNeMoGym(
        f"NeMo Gym {NEMO_GYM_VERSION} needs Python >= 3.13 and none was found (PATH, ~/.pyenv/versions); "
        f"install one (pyenv install 3.13) or set {PYTHON_ENV}=/path/to/python3.13"
    )


def _is_new_enough(python: str) -> bool:
    probe = "import sys; print(sys.version_info >= (3, 13))"
    try:
        return (
            subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=30).stdout.strip() == "True"
        )
    except (OSError, subprocess.TimeoutExpired):
        return False


def build_venv(folder: Path, version: str = NEMO_GYM_VERSION) -> Path:
    """Build the venv into ``folder`` under the cache's lock (someone else's finished build is taken)."""
    python = find_python()
    folder.parent.mkdir(parents=True, exist_ok=True)
    with build_lock(folder.with_name(folder.name + ".lock")):
        if finished(folder, version):
            return folder
        shutil.rmtree(folder, ignore_errors=True)  # a killed build's leftovers
        started = time.monotonic()
        log = folder.with_name(folder.name + ".build.log")
        _run(f"creating the venv with {python}", [python, "-m", "venv", str(folder)], log)
        pip = [str(folder / "bin" / "python"), "-m", "pip", "install", "--ignore-requires-python"]
        _run(f"installing nemo-gym=={version}", [*pip, f"nemo-gym=={version}"], log)
        _write_build_info(folder, version, seconds=time.monotonic() - started)
    return folder


def _run(what: str, command: list[str], log: Path) -> None:
    from gymbench.engine.server import without_secrets

    with open(log, "ab") as out:
        out.write(f"$ {' '.join(command)}\n".encode())
        out.flush()
        try:
            done = subprocess.run(
                command, stdout=out, stderr=subprocess.STDOUT, env=without_secrets(dict(os.environ)),
                timeout=BUILD_TIMEOUT_S,
            )  # fmt: skip
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise NoNeMoGym(f"building NeMo Gym's venv: {what} failed ({exc}); full log: {log}") from None
    if done.returncode != 0:
        raise NoNeMoGym(
            f"building NeMo Gym's venv failed while {what} (exit {done.returncode}); full log: {log}; "
            "check that the package registry is reachable (pip install), or set "
            f"{VENV_ENV}=/path/to/venv"
        )


def _write_build_info(folder: Path, version: str, *, seconds: float | None) -> None:
    from gymbench.jsonio import AtomicFile

    info = {
        "nemo_gym": version,
        "build_seconds": None if seconds is None else round(seconds, 1),
        "cpus": os.cpu_count(),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }
    with AtomicFile(folder / "build.json", text=True) as out:
        out.write(json.dumps(info, indent=2) + "\n")


def build_info(folder: Path) -> dict[str, object]:
    try:
        data = json.loads((folder / "build.json").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
