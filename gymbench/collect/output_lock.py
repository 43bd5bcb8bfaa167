"""One run per output: an exclusive lock on ``OUT.lock`` for as long as a run writes ``OUT``.

Two runs on one output would interleave their rows (and a sharded one would share ``OUT.shards/``),
so every command that writes a rollouts file (``collect`` in one process or in shards, a resume,
``merge-rollouts``) holds the lock of ``OUT`` while it does; a second one is refused with the
first one's PID. The lock is ``flock``: the kernel releases it when its holder dies, however it
dies, so a lock file left by a killed run never blocks the next one. What ``OUT`` is made of
(``OUT.shards/``, ``OUT.run.json``, ``OUT.metrics.json``, NeMo Gym's ``OUT_failures.jsonl``
and aggregate metrics) is covered by the same lock, and
:func:`remove_earlier_run` clears it for ``+overwrite=true``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

from gymbench.errors import GymbenchError


def lock_path(output: str | os.PathLike[str]) -> Path:
    output = Path(output)
    return output.with_name(output.name + ".lock")


@contextlib.contextmanager
def output_lock(output: str | os.PathLike[str], setting: str = "+output_jsonl_fpath") -> Iterator[Path]:
    """Hold ``OUT.lock`` (created if needed, holding this PID) while the block runs.

    Raise :class:`GymbenchError` naming the holder's PID when another process holds it. A file
    that cannot be created there (a missing folder is made; a read-only one is not) is the same
    error the output itself would give, said before anything starts.
    """
    path = lock_path(output)
    if _special(output):  # /dev/null, a FIFO: nothing there to mix, and no lock file beside a device
        yield path
        return
    fd = _locked(path, Path(output), setting)
    try:
        with contextlib.suppress(OSError):  # the PID only names the holder; a full disk is said by the run's writes
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        yield path
    finally:
        with contextlib.suppress(OSError):
            path.unlink()  # while still held: a run waiting on this inode then sees it is gone
        os.close(fd)


def _locked(path: Path, output: Path, setting: str) -> int:
    """An fd holding the lock of ``path``; retried when the file was removed while we waited for it."""
    while True:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except (OSError, ValueError) as exc:
            reason = getattr(exc, "strerror", None) or exc
            raise GymbenchError(
                f"{path}: cannot create the run's lock file ({reason}); choose another {setting}"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise GymbenchError(
                f"{output}: another gymbench run "
                f"(PID {holder}) is writing it; wait for that run to end, or choose another {setting}"
            ) from None
        except OSError as exc:  # a file system without locks: say so rather than run unguarded
            os.close(fd)
            raise GymbenchError(
                f"{path}: cannot lock the run's output ({exc.strerror or exc}); choose another {setting}"
            ) from None
        if _same_file(fd, path):
            return fd
        os.close(fd)  # the holder removed it as it finished: lock the new one


def _special(output: str | os.PathLike[str]) -> bool:
    """An existing output that is not a file or folder (a device, a FIFO): written through, not replaced."""
    try:
        mode = os.stat(output).st_mode
    except (OSError, ValueError):
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def _same_file(fd: int, path: Path) -> bool:
    try:
        here, there = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def _holder(fd: int) -> str:
    with contextlib.suppress(OSError, ValueError):
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        if text.isdigit():
            return text
    return "unknown"


def remove_earlier_run(output: str | os.PathLike[str]) -> list[Path]:
    """For ``+overwrite=true``: remove what an earlier run wrote for ``output`` besides the rows
    (its shards, fingerprint, metrics, NeMo Gym's aggregate metrics and failures sidecar), so that nothing of it is
    merged into or mistaken for the new run. Returns what was removed."""
    from gymbench.collect.collection import metrics_path
    from gymbench.collect.shards import shards_dir
    from gymbench.rollout.agent_metrics import aggregate_metrics_path, failures_path
    from gymbench.rollout.identity import run_fingerprint_path

    output = Path(output)
    removed = []
    try:
        shards = shards_dir(output)
        if shards.is_dir() and not shards.is_symlink():
            shutil.rmtree(shards)
            removed.append(shards)
        owned = (
            run_fingerprint_path(output),
            metrics_path(output),
            aggregate_metrics_path(output),
            failures_path(output),
        )
        for path in (shards, *owned):
            if path.is_symlink() or path.is_file():
                path.unlink()
                removed.append(path)
    except OSError as exc:
        raise GymbenchError(
            f"{exc.filename}: cannot remove the earlier run's file for +overwrite=true ({exc.strerror or exc}); "
            "remove it by hand or choose another +output_jsonl_fpath"
        ) from None
    return removed
