"""Reading a rollouts file (JSON lines, one rollout per line): one reader for every tool.

Resume, ``merge-rollouts``, NeMo Gym's aggregate metrics, ``gymbench timings``, the training
step's replayed lengths and the pytest API all read rollouts files. They read them through
:class:`RolloutsFile`, so a line is decoded one way everywhere (exactly, through
:func:`gymbench.jsonio.loads`; a blank line is no row) and a bad one is named one way
(``FILE:LINE: not a rollout row (why)``, then the caller's advice). What a caller chooses is
only what a bad line does (``on_bad``: an error, or skipped and counted) and what a last line cut
short by a kill does (``on_cut``: read like any other, skipped, or an error).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, NamedTuple

from gymbench.console import printable
from gymbench.errors import GymbenchError
from gymbench.jsonio import JSONReadError, capped_lines, loads, refuse_device

OnBad = Literal["raise", "skip"]
"""A line that is not a JSON object: an error naming it, or passed over and counted in ``skipped``."""
OnCut = Literal["read", "skip", "raise"]
"""A last line without its newline (a kill landed mid-write): read as it is, dropped, or an error."""


class RolloutLine(NamedTuple):
    number: int
    """1-based, counting blank lines, as an editor shows it."""
    raw: bytes
    """The line's bytes as written, newline included (a merge or a rewrite copies them unchanged)."""
    row: dict[str, Any]


class RolloutsFile:
    """A rollouts file, read line by line (streamed: a million rows need no more memory than ten).

    :param then: what to do about a bad line, appended to its error (``"; fix or remove the line"``).
    :param what: what a line should be, for the errors (``"rollout row"``).
    :param if_unreadable: appended when the file cannot be opened or read.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, then: str = "", what: str = "rollout row", if_unreadable: str = ""
    ) -> None:
        self.path = Path(path)
        self.then = then
        self.what = what
        self.if_unreadable = if_unreadable
        self.skipped = 0
        """Bad lines passed over by the last read (``on_bad="skip"``)."""
        self.first_skipped: str | None = None
        """The first skipped line's error, to show with the count."""
        self.cut = False
        """Whether the last read dropped a last line cut short (``on_cut="skip"``)."""

    def rows(self, on_bad: OnBad = "raise", on_cut: OnCut = "read") -> Iterator[dict[str, Any]]:
        """Each row as a JSON object."""
        for line in self.lines(on_bad, on_cut):
            yield line.row

    def lines(self, on_bad: OnBad = "raise", on_cut: OnCut = "read") -> Iterator[RolloutLine]:
        """Each non-blank line with its number and bytes."""
        self.skipped, self.first_skipped, self.cut = 0, None, False
        if "\0" in str(self.path):  # open() would raise ValueError, past the OSError below
            name = printable(str(self.path))
            raise GymbenchError(f"{name}: not a file name (it holds a NUL byte){self.if_unreadable}")
        try:
            refuse_device(self.path, "rollouts")
            with open(self.path, "rb") as handle:
                yield from self._decode(capped_lines(handle, self.path), on_bad, on_cut)
        except OSError as exc:
            raise GymbenchError(
                f"{self.path}: cannot read the rollouts file ({exc.strerror or exc}){self.if_unreadable}"
            ) from None

    def _decode(self, handle: Iterator[bytes], on_bad: OnBad, on_cut: OnCut) -> Iterator[RolloutLine]:
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            if on_cut != "read" and not raw.endswith(b"\n"):  # only the last line can lack its newline
                if on_cut == "skip":
                    self.cut = True
                    continue
                raise GymbenchError(
                    f"{self.path}:{number}: the last row is cut short (a run was killed while writing it); "
                    "resume that run to redo it, or delete the line"
                )
            try:
                row = loads(raw)
            except JSONReadError as exc:
                problem = str(exc)
            else:
                if isinstance(row, dict):
                    yield RolloutLine(number, raw, row)
                    continue
                problem = f"a JSON {type(row).__name__}, not an object"
            message = f"{self.path}:{number}: not a {self.what} ({problem}){self.then}"
            if on_bad == "raise":
                raise GymbenchError(message)
            self.skipped += 1
            self.first_skipped = self.first_skipped or message

    def skipped_note(self) -> str | None:
        """How many bad lines the last read passed over, and the first of them; ``None`` if none."""
        if not self.skipped:
            return None
        lines = "line that is not a" if self.skipped == 1 else "lines that are not a"
        return f"{self.path}: skipped {self.skipped} {lines} {self.what} (the first: {self.first_skipped})"
