"""Where and on what a measurement ran: machine, software, commit.

Figures from different machines or library versions are not comparable, so every results record
carries this; valgrind's version too, since instruction counts move with it and with Python's.
``machine.key`` hashes only fields that do not drift between runs of one machine (no clock speed,
no load), so a baseline store can find "this machine" again. The CPU's instruction-set flags that
decide the speed of a precision (``cpu_flags``: bf16 and fp16 kernels, AVX-512, AVX2, FMA) are in
the key: a bf16 step runs about 9x slower than fp32 on a CPU without avx512_bf16 or amx_bf16, so two
CPUs of one model name with and without those flags (a VM that masks them) are two machines.
``key_without_cpu_flags`` is the key as computed before the flags were added, so records saved
then can still be matched to this machine by hand.

psutil and the valgrind probe are imported when a fingerprint is taken: ``gymbench --version``
reads :func:`package_version` from here and must not pay for them.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import shutil
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

KEY_PACKAGES = ("torch", "numpy", "scipy", "aiohttp", "pluggy", "pytest", "nvidia-ml-py", "uvloop")
CPU_FEATURE_FLAGS = (
    # x86 (/proc/cpuinfo "flags")
    "avx512_bf16",
    "amx_bf16",
    "avx512_fp16",
    "amx_fp16",
    "amx_tile",
    "avx512f",
    "avx512_vnni",
    "avx_vnni",
    "avx2",
    "fma",
    "f16c",
    # arm64 (/proc/cpuinfo "Features")
    "bf16",
    "fphp",
    "asimdhp",
    "sve",
    "sve2",
    "i8mm",
)
"""The CPU features that change how fast torch runs a precision on the CPU (bf16 and fp16 kernels,
vector width, fused multiply-add); other flags do not move the benchmarks and are left out."""


def collect_fingerprint(cwd: str | os.PathLike[str] | None = None) -> dict[str, dict[str, Any]]:
    return {
        "machine": machine_info(),
        "software": software_info(),
        "commit": commit_info(cwd),
    }


def machine_info() -> dict[str, Any]:
    import psutil

    gpus, gpu_note = gpu_info()
    memory_total = int(psutil.virtual_memory().total)
    info: dict[str, Any] = {
        "cpu_model": cpu_model(),
        "cpu_flags": sorted(cpu_flags() & set(CPU_FEATURE_FLAGS)),
        "cpu_count_logical": os.cpu_count(),
        "cpu_count_physical": psutil.cpu_count(logical=False),
        "memory_total_bytes": memory_total,
        "system": platform.system(),
        "release": platform.release(),
        "arch": platform.machine(),
        "hostname": platform.node(),
        "gpus": gpus,
        "gpu_note": gpu_note,
    }
    info["key"] = machine_key(info)
    info["key_without_cpu_flags"] = machine_key({**info, "cpu_flags": None})
    return info


def machine_key(info: dict[str, Any]) -> str:
    """A hash of the fields that stay put; a record without ``cpu_flags`` (saved before they were
    taken) hashes as it did then, so its stored key is still its key."""
    stable: dict[str, Any] = {
        "cpu_model": info.get("cpu_model"),
        "cpu_count_logical": info.get("cpu_count_logical"),
        "memory_total_gib": round((info.get("memory_total_bytes") or 0) / 2**30),
        "system": info.get("system"),
        "arch": info.get("arch"),
        "gpu_names": sorted(gpu.get("name", "") for gpu in info.get("gpus", [])),
    }
    if info.get("cpu_flags") is not None:
        stable["cpu_flags"] = sorted(info["cpu_flags"])
    digest = hashlib.sha256(json.dumps(stable, sort_keys=True).encode()).hexdigest()
    return digest[:12]


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def cpu_flags(cpuinfo: str | None = None) -> set[str]:
    """The ``flags`` (x86) or ``Features`` (arm64) of ``/proc/cpuinfo``; empty where there is none."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return set()
    for line in cpuinfo.splitlines():
        if line.startswith(("flags", "Features")):
            return set(line.split(":", 1)[1].split())
    return set()


def gpu_info() -> tuple[list[dict[str, Any]], str]:
    """GPUs through nvidia-ml-py; on a machine without one, an empty list and the reason."""
    try:
        import pynvml
    except ImportError:
        return [], "none: nvidia-ml-py is not installed"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError subclasses, or OSError when the library is missing
        return [], f"none: NVML could not start ({exc or type(exc).__name__})"
    try:
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            gpus.append(
                {
                    "index": index,
                    "name": _text(pynvml.nvmlDeviceGetName(handle)),
                    "memory_total_bytes": int(memory.total),
                    "driver": driver,
                }
            )
        note = f"{len(gpus)} GPU(s) via NVML" if gpus else "none: NVML reports no devices"
        return gpus, note
    except Exception as exc:
        return [], f"none: NVML query failed ({exc or type(exc).__name__})"
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


@functools.lru_cache(maxsize=1)
def valgrind_version() -> str | None:
    """``3.19.0`` for an installed valgrind, else ``None``; recorded in every fingerprint."""
    executable = shutil.which("valgrind")
    if executable is None:
        return None
    try:
        done = subprocess.run([executable, "--version"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    version = done.stdout.strip().removeprefix("valgrind-")
    return version if done.returncode == 0 and version else None


def software_info() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "gymbench": package_version("gymbench") or "unknown",
        "valgrind": valgrind_version(),
        "packages": {name: package_version(name) for name in KEY_PACKAGES},
    }


def package_version(name: str) -> str | None:
    """The installed version without importing the package (importing torch takes seconds)."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def commit_info(cwd: str | os.PathLike[str] | None = None) -> dict[str, str | bool | None]:
    commit = _git("rev-parse", "HEAD", cwd=cwd)
    if commit is None:
        return {"id": None, "dirty": None, "branch": None}
    status = _git("status", "--porcelain", "--untracked-files=no", cwd=cwd)
    branch = _git("rev-parse", "--abbrev-ref", "HEAD", cwd=cwd)
    return {"id": commit, "dirty": bool(status), "branch": branch}


def _git(*args: str, cwd: str | os.PathLike[str] | None) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value
