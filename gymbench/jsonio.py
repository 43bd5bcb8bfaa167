"""JSON in and out, one way for all of gymbench: exact reading, safe writing, clear errors.

Real datasets carry things a fast JSON library mishandles: 20-digit ids (orjson reads them as
floats, silently changing the value, and refuses to write them), lone surrogate escapes (orjson
refuses both ways), nesting deep enough to exhaust Python's recursion limit, integers past
Python's 4300-digit conversion limit. Rows are therefore *read* with the standard library (exact
integers) and *written* with orjson, falling back to the standard library for the rows orjson
cannot encode, so nothing is lost and nothing crashes. Every failure to read becomes a
:class:`JSONReadError` whose message says what is wrong; callers prefix the file and line.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import glob
import json
import math
import os
import stat
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import orjson

from gymbench.errors import GymbenchError, ResultsFileError
from gymbench.secrets import redact_output

if TYPE_CHECKING:
    from gymbench.types import JSONObject, JSONValue


class JSONReadError(GymbenchError):
    """A JSON text that cannot be read; the message says why, without the file's name."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None) -> None:
        super().__init__(message)
        self.line = line
        self.column = column


def _reject_constant(name: str) -> Any:
    raise JSONReadError(f"{name} is not valid JSON; write null (or a number) instead")


def _finite_float(text: str) -> float:
    """A number past a double's range (``1e400``) would silently become infinity, then null."""
    value = float(text)
    if math.isinf(value):
        shown = text if len(text) <= 40 else f"{text[:20]}...{text[-10:]}"
        raise JSONReadError(f"the number {shown} is beyond a 64-bit float's range; write it as a string")
    return value


_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float)
"""Made once: ``json.loads`` with any option builds a decoder per call, which costs more than the parse."""
_NAN_DECODER = json.JSONDecoder(parse_float=_finite_float)


def loads(text: str | bytes, *, allow_nan: bool = False) -> Any:
    """Parse exactly (big integers stay integers, no number turns into infinity); every failure is
    a :class:`JSONReadError`.

    :param allow_nan: accept the ``NaN``/``Infinity`` that Python's own writer emits (files of
        other tools); gymbench never writes them.
    """
    try:
        if isinstance(text, (bytes, bytearray)):
            text = text.decode(json.detect_encoding(text), "surrogatepass")  # as json.loads does
        return (_NAN_DECODER if allow_nan else _DECODER).decode(text)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} column {exc.colno}" if exc.lineno > 1 else f"column {exc.colno}"
        raise JSONReadError(f"malformed JSON ({exc.msg} at {where})", exc.lineno, exc.colno) from None
    except RecursionError:
        raise JSONReadError("JSON nested too deeply to read (more levels than Python's reader allows)") from None
    except UnicodeDecodeError as exc:
        raise JSONReadError(f"not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start})") from None
    except ValueError as exc:  # e.g. an integer longer than Python's int_max_str_digits
        raise JSONReadError(f"cannot read a value: {exc}") from None


_DIGITS_ONLY = bytes(0x30 if 0x30 <= byte <= 0x39 else 0x20 for byte in range(256))
"""A ``bytes.translate`` table: every digit a 0, every other byte a space (one C pass per row)."""
_LONG_DIGIT_RUN = b"0" * 19
"""Every integer of 18 digits or fewer fits orjson's 64 bits; one of 19 or more may not."""


def quick_loads(raw: bytes) -> Any:
    """One UTF-8 line parsed by orjson when that gives exactly what :func:`loads` gives (in a
    third of the time); ``None`` when it may not: then read the line the exact way.

    orjson reads integers past 64 bits as floats, so a line with a run of 19 or more digits
    anywhere (a 20-digit id; in a string too, which costs only the slower read) is left to the
    standard library, and so is every line orjson refuses (NaN, ``1e400``, lone surrogates, bad
    UTF-8, a byte-order mark, nesting past 1,024 levels), so the error, or the value, is exactly
    the standard library's. Floats are the same either way: both read the nearest double. A line
    that is ``null`` also comes back ``None``, and reads as null the exact way.
    """
    if _LONG_DIGIT_RUN in raw.translate(_DIGITS_ONLY):
        return None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None


def decode_line(raw: bytes, first: bool = False) -> str:
    """One line of a UTF-8 file as text; a byte-order mark on the first line is dropped."""
    try:
        return raw.decode("utf-8-sig" if first else "utf-8")
    except UnicodeDecodeError as exc:
        raise JSONReadError(
            f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at column {exc.start + 1}); re-encode the file as UTF-8"
        ) from None


def dumps(obj: Any, *, newline: bool = False, indent: bool = False) -> bytes:
    """Compact JSON bytes (with ``indent``, indented by two): orjson when it can, the standard
    library for what orjson refuses.

    orjson refuses integers beyond 64 bits and strings with lone surrogates; the fallback writes
    both exactly (surrogates as ``\\udXXX`` escapes, so the output stays valid UTF-8). orjson writes
    a NaN as ``null``: callers whose floats may not be finite use :func:`write_json_atomic`.
    """
    option = (orjson.OPT_APPEND_NEWLINE if newline else 0) | (orjson.OPT_INDENT_2 if indent else 0)
    try:
        return orjson.dumps(obj, default=str, option=option)
    except TypeError:
        separators = (",", ": ") if indent else (",", ":")
        text = json.dumps(obj, default=str, ensure_ascii=True, separators=separators, indent=2 if indent else None)
        return (text + "\n" if newline else text).encode("ascii")


class AtomicFile:
    """A file that appears whole or not at all: every atomic write in gymbench goes through here.

    Bytes (or text, with ``text=True``) go to a temporary file with a unique name beside ``path``;
    :meth:`commit` flushes it to disk (fsync) and renames it over ``path``, :meth:`discard` removes
    it. As a context manager it commits when the block ends normally and discards on any error,
    so a reader (or a crash) never sees half a file and no temporary file is left behind. Rows can
    be streamed in (a merge, a resume's rewrite, an export) without holding them in memory; the
    object lives across calls where the rows arrive in pieces (a shard streamed back by Ray).

    Failing to create, write or rename is a :class:`GymbenchError` naming ``path``, ending with
    ``then`` (what to do); an error raised by the block itself passes through unchanged. ``inputs``
    are the files the command reads: a ``path`` that is one of them is refused (:func:`refuse_inputs`).

    A ``path`` that exists and is neither a file nor a folder (``/dev/null``, a FIFO, a terminal) is
    written through instead: renaming over it would replace the device node with a regular file
    (as root), which is never what was meant. Such a write is not atomic, and cannot be taken back.

    Every write is redacted (:mod:`gymbench.secrets`): a key a server echoed cannot reach a file
    written here. Write whole records (a line, a document) so no key is split across two writes.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        text: bool = False,
        then: str = "; choose another path",
        inputs: Iterable[str | os.PathLike[str] | None] = (),
    ) -> None:
        refuse_inputs(path, inputs)
        self.path = Path(path)
        self.then = then
        self.existed = self.path.is_file()
        """A file was there to keep (a failure leaves it unchanged), or this writes a new one."""
        self.through = special_file(self.path)
        """Written straight to ``path`` (a device, a FIFO), not to a temporary file renamed over it."""
        self.made: list[Path] = []
        """Folders made to hold the file: removed again when nothing is written (deepest first)."""
        try:
            if self.through:
                fd, name = _open_through(self.path), os.fspath(self.path)
            else:
                self.made = [folder for folder in (self.path.parent, *self.path.parent.parents) if not folder.exists()]
                self.path.parent.mkdir(parents=True, exist_ok=True)
                remove_abandoned(self.path)
                with _signals_held():
                    fd, name = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".tmp")
                    _LIVE_TEMPORARIES[name] = os.getpid()
                _hold(fd)
        except OSError as exc:
            raise self._error("cannot write here", exc) from None
        self.temporary = Path(name)
        self._handle: IO[Any] = (
            os.fdopen(fd, "w", encoding="utf-8", newline="") if text else os.fdopen(fd, "wb")  # noqa: SIM115
        )

    def _error(self, what: str, exc: OSError) -> GymbenchError:
        kept = ""
        if exc.errno in (errno.ENOSPC, errno.EDQUOT) and not self.through:
            what_now = "was not changed" if self.existed else "was not written"
            kept = f"; {self.path.name} {what_now} and no partial copy is left (free space first)"
        return GymbenchError(f"{self.path}: {what} ({exc.strerror or exc}){kept}{self.then}")

    def write(self, data: Any) -> int:
        try:
            return self._handle.write(redact_output(data))
        except OSError as exc:
            self.discard()
            raise self._error("cannot write", exc) from None

    def commit(self) -> Path:
        """Make the written content the file at ``path`` (durably), and return ``path``."""
        try:
            self._handle.flush()
            if self.through:
                self._handle.close()
                return self.path
            os.fsync(self._handle.fileno())
            self._handle.close()
            os.replace(self.temporary, self.path)
            _LIVE_TEMPORARIES.pop(os.fspath(self.temporary), None)
        except OSError as exc:
            self.discard()
            raise self._error("cannot write", exc) from None
        return self.path

    def commit_new(self, names: Iterable[str | os.PathLike[str]]) -> Path:
        """Make the written content the first of ``names`` that does not exist yet, and return it.

        A file already there is never replaced: the temporary file is hard-linked to the name (which
        fails when it exists, as ``O_EXCL`` does) where :meth:`commit` would rename over it. Where
        the file system has no hard links, the name is created with ``O_EXCL`` and the bytes copied.
        """
        try:
            self._handle.flush()
            os.fsync(self._handle.fileno())
            self._handle.close()
            for name in names:
                if self._linked(Path(name)):
                    self.path = Path(name)
                    return self.path
            raise FileExistsError(errno.EEXIST, "every name for it is taken")
        except OSError as exc:
            raise self._error("cannot write", exc) from None
        finally:
            self.discard()

    def _linked(self, name: Path) -> bool:
        try:
            os.link(self.temporary, name)
        except FileExistsError:
            return False
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
                raise
            try:
                fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            except FileExistsError:
                return False
            with os.fdopen(fd, "wb") as target:
                target.write(self.temporary.read_bytes())
        return True

    def discard(self) -> None:
        """Forget what was written; ``path`` is left as it was. Never raises."""
        with contextlib.suppress(OSError):
            self._handle.close()
        if self.through:
            return
        with contextlib.suppress(OSError):
            self.temporary.unlink(missing_ok=True)
        _LIVE_TEMPORARIES.pop(os.fspath(self.temporary), None)
        for folder in self.made:  # a failed write leaves no empty folders behind (timings -o DIR/new/x.csv)
            with contextlib.suppress(OSError):
                folder.rmdir()

    def __enter__(self) -> AtomicFile:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, traceback: object) -> None:
        if kind is None:
            self.commit()
        else:
            self.discard()


_LIVE_TEMPORARIES: dict[str, int] = {}
"""Temporary files neither committed nor discarded, with the process that made each: removed when
the interpreter exits. A SIGTERM turned into ``SystemExit`` may land after ``mkstemp`` and before
the ``with`` block that would discard the file (seen in CI: a terminated merge left its
``.merged.jsonl.*.tmp``); the exit still removes it. A forked child inherits the table but never
removes its parent's files."""


@atexit.register
def _remove_live_temporaries() -> None:
    for name, pid in list(_LIVE_TEMPORARIES.items()):
        if pid == os.getpid():
            with contextlib.suppress(OSError):
                os.unlink(name)


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """SIGTERM and SIGINT wait while a temporary file is created and listed, so no handler's
    exception falls between the two (Python runs handlers in the main thread, between bytecodes)."""
    import signal
    import threading

    if not hasattr(signal, "pthread_sigmask") or threading.current_thread() is not threading.main_thread():
        yield
        return
    held = {signal.SIGTERM, signal.SIGINT}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _hold(fd: int) -> None:
    """Lock a temporary file for as long as its writer lives: the lock goes with the process (a
    SIGKILL included), so a temporary file nobody holds was abandoned, and the next writer of the
    same path removes it (:func:`remove_abandoned`) without touching one another live run is writing."""
    with contextlib.suppress(ImportError, OSError):  # no fcntl (Windows) or no locks here: never cleaned
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)


def remove_abandoned(path: str | os.PathLike[str]) -> list[Path]:
    """Remove the hidden ``.NAME.*.tmp`` files beside ``path`` that a killed writer (SIGKILL,
    SIGTERM, a power cut) left behind, and return them; those a live writer holds are left."""
    try:
        import fcntl
    except ImportError:
        return []
    target = Path(path)
    removed = []
    for candidate in target.parent.glob(f".{glob.escape(target.name)}.*.tmp"):
        try:
            fd = os.open(candidate, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if stat.S_ISREG(os.fstat(fd).st_mode):
                candidate.unlink()
                removed.append(candidate)
        except OSError:
            pass  # held: a writer is alive
        finally:
            os.close(fd)
    return removed


def special_file(path: str | os.PathLike[str]) -> bool:
    """An existing ``path`` that is not a regular file or a folder: a device, a FIFO, a socket."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def _open_through(path: Path) -> int:
    """Open a device or FIFO for writing; a FIFO without a reader is an error, not a hang."""
    if stat.S_ISFIFO(os.stat(path).st_mode):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            if exc.errno == errno.ENXIO:
                raise OSError(errno.ENXIO, "a FIFO that nothing reads; start its reader first") from None
            raise
        os.set_blocking(fd, True)
        return fd
    if stat.S_ISSOCK(os.stat(path).st_mode):
        raise OSError(errno.EINVAL, "a socket, which cannot be written as a file")
    return os.open(path, os.O_WRONLY | os.O_CLOEXEC)


def same_file(first: str | os.PathLike[str], second: str | os.PathLike[str]) -> bool:
    """The same file, also through a symlink or a hard link (same device and inode), or the same
    path once resolved where one of them does not exist yet."""
    try:
        if os.path.samefile(first, second):
            return True
    except (OSError, ValueError):  # one of them does not exist (yet), or a NUL in a name
        pass
    try:
        return os.path.realpath(first) == os.path.realpath(second)
    except (OSError, ValueError):
        return False


def refuse_inputs(
    output: str | os.PathLike[str], inputs: Iterable[str | os.PathLike[str] | None], setting: str = "-o"
) -> None:
    """Every command that writes calls this first: ``output`` must not be (or link to) any of its
    ``inputs``, or writing would destroy what it reads. ``None`` inputs (not given) are skipped."""
    for source in inputs:
        if source is not None and same_file(output, source):
            raise GymbenchError(f"{output}: is also an input of this command ({source}); choose another {setting}")


MiB = 1024 * 1024
MAX_LINE_BYTES = 64 * MiB
"""The longest line of a JSONL file read (a task with its prompt, a rollout with its answer): real
rows are kilobytes, a long multimodal one megabytes. A file without newlines (``/dev/zero``, a
sparse file of NULs) is then one error line instead of a ``MemoryError``."""
MAX_JSON_FILE_BYTES = 256 * MiB
"""The largest whole JSON file read into memory (a results record, a shard plan, a metrics file)."""


_NOT_A_FILE = {
    stat.S_IFDIR: "a directory",
    stat.S_IFIFO: "a FIFO (a named pipe, or <(...))",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a device",
    stat.S_IFBLK: "a device",
}


def refuse_irregular_file(path: str | os.PathLike[str], what: str) -> None:
    """Anything but a regular file where a ``what`` file is expected is refused in one line, before
    it is opened: a FIFO nobody writes to blocked ``gymbench compare`` (it reads a record whole, and
    a gymbench record twice, which a pipe cannot give); a socket or a device is no record either.
    A missing path passes: the caller's open says so in its own words."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):  # ValueError: a NUL in the name
        return
    if stat.S_ISREG(mode):
        return
    kind = _NOT_A_FILE.get(stat.S_IFMT(mode), "not a regular file")
    raise ResultsFileError(
        f"{path}: is {kind}, not a {what} file; pass a regular file (save what a pipe writes to a file first)"
    )


def refuse_device(path: str | os.PathLike[str], what: str) -> None:
    """A device that never ends (``/dev/zero``, ``/dev/urandom``, a disk) where a file of ``what``
    is expected is refused with one line. Pipes and FIFOs pass (``<(...)``), and so do the devices
    that end: ``/dev/null`` and a terminal (``/dev/stdin`` typed into, ended by Ctrl-D)."""
    if endless_device(path):
        raise GymbenchError(f"{path}: is a device, not a {what} file; pass a regular file (or a pipe)")


def endless_device(path: str | os.PathLike[str]) -> bool:
    """A block device, or a character device other than ``/dev/null`` and a terminal."""
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return False  # the caller's open says what is wrong
    if stat.S_ISBLK(info.st_mode):
        return True
    if not stat.S_ISCHR(info.st_mode):
        return False
    with contextlib.suppress(OSError):
        if info.st_rdev == os.stat(os.devnull).st_rdev:
            return False
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return False  # unreadable: the caller's open says so
    try:
        return not os.isatty(fd)
    finally:
        os.close(fd)


def capped_lines(handle: IO[bytes], path: str | os.PathLike[str], max_bytes: int = MAX_LINE_BYTES) -> Iterator[bytes]:
    """``handle``'s lines, each read only up to ``max_bytes``: a longer one is an error naming its line."""
    number = 0
    while raw := handle.readline(max_bytes + 1):
        number += 1
        if len(raw) > max_bytes:
            raise GymbenchError(
                f"{path}:{number}: a line longer than {max_bytes // MiB} MiB, so not a JSON Lines file "
                "(a file of NUL bytes, or binary data?); check the path"
            )
        yield raw


def read_capped(path: str | os.PathLike[str], what: str, max_bytes: int = MAX_JSON_FILE_BYTES) -> bytes:
    """A whole file of ``what`` if it is at most ``max_bytes``; a device or a larger file is a
    :class:`GymbenchError` (so a 2 GB file of NULs is refused before it is read, not a ``MemoryError``).
    ``OSError`` from opening or reading passes to the caller, which names the file its own way."""
    refuse_device(path, what)
    if _is_fifo(path):
        data, size = _read_fifo(path, what, max_bytes), 0
    else:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            data = handle.read(max_bytes + 1) if size <= max_bytes else b""
    if size > max_bytes or len(data) > max_bytes:
        shown = f"{size / MiB:,.0f} MiB" if size > max_bytes else f"more than {max_bytes // MiB} MiB"
        raise GymbenchError(
            f"{path}: {shown}, larger than any {what} file gymbench reads (at most {max_bytes // MiB} MiB); "
            "check the path"
        )
    return data


FIFO_IDLE_S = 30.0
"""How long a FIFO (``<(...)``, ``mkfifo``) may stay silent, before its first byte or between two,
before the read gives up: a FIFO nobody writes to blocked ``gymbench compare`` forever."""


def _is_fifo(path: str | os.PathLike[str]) -> bool:
    try:
        return stat.S_ISFIFO(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def _read_fifo(path: str | os.PathLike[str], what: str, max_bytes: int) -> bytes:
    """A FIFO's bytes up to its end, waiting at most :data:`FIFO_IDLE_S` for each chunk. Opened
    without blocking (a plain open waits for a writer with no deadline); Linux's poll reports
    neither data nor a hang-up until a writer has come, so the wait covers a writer that never does."""
    import select

    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    chunks: list[bytes] = []
    read = 0
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLHUP)
        while read <= max_bytes:
            if not poller.poll(FIFO_IDLE_S * 1000):
                state = "nothing was written to it" if not read else f"its writer stopped after {read:,} bytes"
                raise GymbenchError(
                    f"{path}: a FIFO where a {what} file was expected, and {state} for {FIFO_IDLE_S:g} s; "
                    "pass a regular file, or write the whole file into the FIFO"
                )
            try:
                chunk = os.read(fd, 1 << 20)
            except BlockingIOError:
                continue
            if not chunk:
                break
            chunks.append(chunk)
            read += len(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks)


def write_json_atomic(path: str | os.PathLike[str], data: Any, *, indent: int | None = 1) -> Path:
    """Write JSON so that a reader (or a crash) never sees half a file (see :class:`AtomicFile`).

    Non-finite floats are refused (they are not JSON); raise :class:`GymbenchError` naming the
    path when the directory cannot be created or written.
    """
    with AtomicFile(path, text=True) as target:
        target.write(json.dumps(data, indent=indent, allow_nan=False, ensure_ascii=False) + "\n")
    return target.path


def read_json_file(path: str | os.PathLike[str], what: str) -> Any:
    """Read a whole JSON file; any problem is a :class:`GymbenchError` naming the file and ``what`` it is."""
    source = Path(path)
    try:
        raw = read_capped(source, what)
    except FileNotFoundError:
        raise GymbenchError(f"{source}: no such {what} file") from None
    except IsADirectoryError:
        raise GymbenchError(f"{source}: is a directory, not a {what} file") from None
    except OSError as exc:
        raise GymbenchError(f"{source}: cannot read {what} file ({exc.strerror or exc})") from None
    try:
        return loads(raw.removeprefix(b"\xef\xbb\xbf"))
    except JSONReadError as exc:
        raise GymbenchError(f"{source}: cannot read {what} file: {exc}") from None


def check_writable_dir(path: str | os.PathLike[str], what: str) -> Path:
    """Create ``path`` if needed and prove a file can be written there, before a long run starts."""
    target = Path(path)
    try:
        target.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=target, prefix=".gymbench-write-check-"):
            pass
    except OSError as exc:
        raise GymbenchError(
            f"{target}: cannot write the {what} there ({exc.strerror or exc}); choose another directory"
        ) from None
    return target


PROBE_ATTEMPTS = 3
"""Tries of :func:`check_writable_file`'s probe when its folder vanished between made and used."""


def _probe_file(target: Path) -> None:
    """Open ``target`` for appending (creating it and its folders), then leave things as they were.

    A folder that another process's probe made can be removed by that probe between this one's
    ``mkdir`` and ``open`` (two Ray shards checking their metrics files in one node-local folder
    did, in CI): the open then fails with ``FileNotFoundError``, which the caller retries."""
    existed = target.exists()
    made = [folder for folder in (target.parent, *target.parent.parents) if not folder.exists()]
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NONBLOCK, 0o666))
        if not existed:
            target.unlink()
    finally:
        for folder in made:  # deepest first: the folders appear with the file, at the end of the run
            with contextlib.suppress(OSError):
                folder.rmdir()


def check_writable_file(path: str | os.PathLike[str], what: str, setting: str) -> Path:
    """Prove that ``path`` can be written before a long run ends by writing there.

    Refuses a directory, a parent that cannot be created, a name the file system rejects. Nothing
    is left behind: an existing file is opened for appending and left as it was; a new one is
    removed again, and so are the folders made to hold it (a run that fails later left
    ``/nonexistent/dir`` behind). ``setting`` names what to change in the message.
    """
    target = Path(path)
    try:
        if target.is_dir():
            raise GymbenchError(f"{target}: is a directory, but the {what} is written there; choose another {setting}")
        for attempt in range(PROBE_ATTEMPTS):
            try:
                _probe_file(target)
                break
            except FileNotFoundError:
                if attempt == PROBE_ATTEMPTS - 1:
                    raise
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the name
        reason = getattr(exc, "strerror", None) or exc
        raise GymbenchError(f"{target}: cannot write the {what} there ({reason}); choose another {setting}") from None
    return target


def object_list(value: JSONValue, what: str) -> list[JSONObject]:
    """``value`` as the list of JSON objects it must be (a worker's answer, a stored list of records):
    the type checker learns the shape, and anything else is an error that names ``what``."""
    if not isinstance(value, list):
        raise GymbenchError(f"{what}: expected a list of objects, got {type(value).__name__}")
    objects = [item for item in value if isinstance(item, dict)]
    if len(objects) != len(value):
        raise GymbenchError(f"{what}: expected a list of objects, found a non-object item")
    return objects
