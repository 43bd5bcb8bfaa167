"""Find or build llama.cpp's ``llama-server``: a real engine with no GPU and no model hub.

The llama.cpp source comes from the ``llama-cpp-python`` sdist on the package registry (it vendors
llama.cpp), so a machine that can ``pip install`` can build it. The build takes many minutes on a
small machine, so it is done once and cached under the user's cache directory, keyed by the sdist
version, the cmake flags and the processor (the flags ask for code native to this CPU). In order:

1. ``GYMBENCH_LLAMA_SERVER=/path/to/llama-server``: use that binary;
2. the cache, ``<user cache>/gymbench/llama-cpp/<key>/llama-server``;
3. build it there: download the sdist, cmake with Ninja, the ``llama-server`` target only, one
   static binary, in a temporary folder, under a lock (two builds at once wait for each other);
   the binary is written into the cache whole, last, so a killed build leaves nothing that looks
   finished.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from gymbench.errors import GymbenchError

LLAMA_CPP_PYTHON_VERSION = "0.3.36"
"""The ``llama-cpp-python`` sdist whose vendored llama.cpp is built (llama.cpp at ggml 0.25.3)."""
CMAKE_FLAGS: tuple[str, ...] = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DGGML_NATIVE=ON",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
)
"""No curl or OpenSSL (no downloads, no TLS: it serves 127.0.0.1), no web UI, one static binary
that can be copied into the cache without the shared libraries beside it."""
SERVER_ENV = "GYMBENCH_LLAMA_SERVER"
BINARY = "llama-server"
INSTALL_HINT = "apt-get install -y cmake ninja-build g++ (or: pip install cmake ninja, and a C++ compiler)"

_HINTS = {"downloading the llama-cpp-python sdist": "check that the package registry is reachable (pip download)"}
Progress = Callable[[int, int], None]
"""Called with (steps done, steps in all) as the compile goes."""
_STEP = re.compile(rb"^\[(\d+)/(\d+)\]")


def gymbench_cache() -> Path:
    """``<user cache>/gymbench``: platformdirs' answer where it is installed, else the XDG one; every
    build gymbench caches per machine (llama.cpp, NeMo Gym's venv) lives under it."""
    try:
        from platformdirs import user_cache_dir
    except ImportError:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    else:
        base = Path(user_cache_dir())
    return base / "gymbench"


def cache_root() -> Path:
    """``<user cache>/gymbench/llama-cpp``."""
    return gymbench_cache() / "llama-cpp"


def build_key() -> str:
    """``<sdist version>-<hash>``: the hash covers the flags and the processor the native code is for."""
    spec = " ".join((*CMAKE_FLAGS, platform.machine()))
    return f"{LLAMA_CPP_PYTHON_VERSION}-{hashlib.sha256(spec.encode()).hexdigest()[:10]}"


def cached_server(root: Path | None = None) -> Path:
    return (root or cache_root()) / build_key() / BINARY


def find_server(
    *, build: bool = True, root: Path | None = None, progress: Progress | None = None, binary: str | None = None
) -> Path:
    """The ``llama-server`` to run: ``binary`` (a setting), else the environment's override, else the
    cached one, else (``build``) a new build."""
    if binary:
        return checked_override(binary, "+server_binary")
    override = os.environ.get(SERVER_ENV)
    if override is not None and not override.strip():
        raise GymbenchError(
            f"{SERVER_ENV} is set but empty; name a llama-server binary, or unset it to use the cached build"
        )  # an empty value read as unset started a build of several minutes
    if override:
        return checked_override(override, SERVER_ENV)
    cached = cached_server(root)
    if _runnable(cached):
        return cached
    if not build:
        raise GymbenchError(f"no llama-server in the cache ({cached}); run: gymbench engine llama-cpp --build-only")
    return build_server(root or cache_root(), progress)


def checked_override(value: str, named_by: str = SERVER_ENV) -> Path:
    path = Path(value).expanduser()
    if not _runnable(path):
        state = "is not an executable file" if path.exists() else "does not exist"
        raise GymbenchError(f"{named_by}={value}: {state}; point it at a llama-server binary, or unset it to build one")
    return path.resolve()


def _runnable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def missing_tools() -> list[str]:
    """The build tools not found on PATH or beside this Python (where ``pip install cmake ninja`` puts them)."""
    search = _tool_path()
    wanted = {"cmake": ["cmake"], "ninja": ["ninja"], "a C++ compiler": ["c++", "g++", "clang++"]}
    if os.environ.get("CXX"):
        wanted["a C++ compiler"].insert(0, os.environ["CXX"])
    return [name for name, names in wanted.items() if not any(shutil.which(n, path=search) for n in names)]


def _tool_path() -> str:
    return os.pathsep.join([os.environ.get("PATH", ""), str(Path(sys.executable).parent)])


def build_server(root: Path, progress: Progress | None = None) -> Path:
    """Build ``llama-server`` into ``root/<key>/`` and return its path (someone else's finished build
    is taken if one lands while this waits for the lock)."""
    missing = missing_tools()
    if missing:
        raise GymbenchError(f"cannot build llama.cpp's llama-server: {', '.join(missing)} not found; {INSTALL_HINT}")
    root.mkdir(parents=True, exist_ok=True)
    key = build_key()
    with build_lock(root / f"{key}.lock"):
        if _runnable(root / key / BINARY):
            return root / key / BINARY
        log = root / f"{key}.build.log"
        with tempfile.TemporaryDirectory(dir=root, prefix=f"{key}.building-") as work:
            started = time.monotonic()
            binary = _compile(Path(work), log, progress)
            _check_libraries(binary)
            _install(binary, root / key, time.monotonic() - started)
    return root / key / BINARY


@contextlib.contextmanager
def build_lock(path: Path) -> Iterator[None]:
    """An exclusive ``flock``, waited for: a second build at once waits for the first, then reuses it."""
    try:
        import fcntl
    except ImportError:  # no flock (Windows): builds are not guarded against each other
        yield
        return
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _compile(work: Path, log: Path, progress: Progress | None) -> Path:
    """Download, extract, configure and build in ``work``; every command's output goes to ``log``."""
    from gymbench.engine.server import without_secrets

    env = {**without_secrets(dict(os.environ)), "PATH": _tool_path()}
    with open(log, "wb") as out:
        _step(
            "downloading the llama-cpp-python sdist",
            [sys.executable, "-m", "pip", "download", "--no-binary", "llama-cpp-python", "--no-deps"]
            + [f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}", "-d", str(work / "sdist")],
            out,
            log,
            env,
        )
        source = _extract(work)
        build = work / "build"
        _step("configuring", ["cmake", "-S", str(source), "-B", str(build), "-G", "Ninja", *CMAKE_FLAGS], out, log, env)
        jobs = str(os.cpu_count() or 1)
        command = ["cmake", "--build", str(build), "--target", BINARY, "-j", jobs]
        _step("compiling", command, out, log, env, progress)
    return build / "bin" / BINARY


def _step(
    what: str,
    command: list[str],
    out: BinaryIO,
    log: Path,
    env: dict[str, str],
    progress: Progress | None = None,
) -> None:
    """Run one build step into the log; a failure is one line: the step, its last log line, the log."""
    out.write(f"$ {' '.join(command)}\n".encode())
    out.flush()
    try:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    except OSError as exc:
        raise GymbenchError(
            f"building llama-server: {what} could not start {command[0]} ({exc.strerror or exc})"
        ) from None
    assert process.stdout is not None
    for line in process.stdout:
        out.write(line)
        match = _STEP.match(line)
        if match and progress is not None:
            progress(int(match[1]), int(match[2]))
    if process.wait() != 0:
        out.flush()
        raise GymbenchError(
            f"building llama-server failed while {what} (exit {process.returncode}): {_last_line(log)}; "
            f"full log: {log}; {_HINTS.get(what, INSTALL_HINT)}, or set {SERVER_ENV}=/path/to/llama-server"
        )


def _last_line(log: Path) -> str:
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1][:300] if lines else "(no output)"


def _extract(work: Path) -> Path:
    import tarfile

    archives = sorted((work / "sdist").glob("*.tar.gz"))
    if not archives:
        raise GymbenchError(f"pip download left no llama-cpp-python sdist in {work / 'sdist'}")
    with tarfile.open(archives[0]) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(work / "src", filter="data")
        else:  # Python before 3.10.12/3.11.4: the registry's own archive
            tar.extractall(work / "src")  # noqa: S202
    found = list((work / "src").glob("*/vendor/llama.cpp/CMakeLists.txt"))
    if not found:
        raise GymbenchError(f"{archives[0].name} has no vendor/llama.cpp: not the llama-cpp-python sdist expected")
    return found[0].parent


def _install(binary: Path, folder: Path, seconds: float) -> None:
    """``build.json``, then the binary, each written whole (the binary last: its presence means done)."""
    from gymbench.jsonio import AtomicFile

    folder.mkdir(exist_ok=True)
    info = {
        "llama_cpp_python": LLAMA_CPP_PYTHON_VERSION,
        "cmake_flags": list(CMAKE_FLAGS),
        "machine": platform.machine(),
        "build_seconds": round(seconds, 1),
        "binary_bytes": binary.stat().st_size,
        "cpus": os.cpu_count(),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }
    with AtomicFile(folder / "build.json", text=True) as out:
        out.write(json.dumps(info, indent=2) + "\n")
    with AtomicFile(folder / BINARY) as out:
        shutil.copyfile(binary, out.temporary)  # by path: the bytes pass no output filter
        os.chmod(out.temporary, 0o755)


def _check_libraries(binary: Path) -> None:
    """A library the copied binary needs and cannot find (one left in the build folder) fails here,
    not when the server is first started."""
    if shutil.which("ldd") is None:
        return
    result = subprocess.run(["ldd", str(binary)], capture_output=True, text=True)
    missing = [line.split()[0] for line in result.stdout.splitlines() if "not found" in line]
    if missing:
        raise GymbenchError(f"the built llama-server needs libraries not on this system: {', '.join(missing)}")


def build_info(binary: Path) -> dict[str, object]:
    """The cached build's ``build.json`` (empty for a binary from elsewhere)."""
    path = binary.parent / "build.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
