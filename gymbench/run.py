"""The life of one run, the same for every command and for the pytest plugin.

A run is announced to plugins (``gymbench_run_start``), produces benchmark results, gets one
fingerprint (gymbench's own, amended by every ``gymbench_update_fingerprint`` implementation),
becomes one results record written by one atomic writer, and is announced as finished
(``gymbench_run_finish``). Where the record goes is checked when the run starts, so a long run
never ends in "cannot write the results".

As pytest's ``wrap_session`` does for a session, ``with Run(...) as run:`` is the one skeleton:
finish always fires, with the error that ended the run when one did. Every command says where its
record went the same way (:func:`say_saved`).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from gymbench.jsonio import check_writable_dir
from gymbench.plugins import Plugins
from gymbench.record import BenchmarkResult, ResultsRecord, save_to_store, utc_now
from gymbench.settings import safe_name
from gymbench.types import RunInfo


def saved_message(path: str | os.PathLike[str]) -> str:
    """The one line that says where a run's record was saved."""
    return f"results record: {path}"


def say_saved(path: str | os.PathLike[str]) -> None:
    print(saved_message(path), file=sys.stderr)


class Run:
    """One run: ``with Run(...) as run:`` starts it, and ``run.finish(benchmarks)`` once inside.

    Leaving the block without finishing (an error, an interrupt, a return) still announces the end:
    ``gymbench_run_finish`` with the error and a record of no benchmarks, never saved.
    """

    def __init__(
        self,
        plugins: Plugins,
        kind: str,
        name: str,
        options: Mapping[str, Any] | None = None,
        *,
        results_dir: str | os.PathLike[str] | None = None,
        save: bool = True,
        cwd: str | os.PathLike[str] | None = None,
    ) -> None:
        safe_name("run_name", name)
        self.plugins = plugins
        self.save = save and results_dir is not None
        self.results_dir = Path(results_dir) if results_dir is not None else None
        self.cwd = cwd
        self.info = RunInfo(kind=kind, name=name, started_at=utc_now(), options=dict(options or {}))
        self.saved_path: Path | None = None
        self.record: ResultsRecord | None = None
        self.started = False
        self.finished = False
        self.made: list[Path] = []
        """Folders the writability check created: removed again, if still empty, when the run fails."""

    def start(self) -> Run:
        """Check that the record can be written, then announce the run."""
        if self.save and self.results_dir is not None:
            self.made = [folder for folder in (self.results_dir, *self.results_dir.parents) if not folder.exists()]
            check_writable_dir(self.results_dir, "results record")
        self.plugins.hook.gymbench_run_start(run=self.info)
        self.started = True
        return self

    def __enter__(self) -> Run:
        """Start the run, unless it already has (the pytest plugin starts it at the first benchmark)."""
        return self if self.started else self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.close(error)

    def close(self, error: BaseException | None = None) -> None:
        """Announce the end of a started run that did not finish; nothing once it has."""
        if self.started and not self.finished:
            self._announce(self.make_record([]), error)
        if error is not None and self.saved_path is None:  # a refused run leaves no empty ./results behind
            for folder in self.made:
                with contextlib.suppress(OSError):
                    folder.rmdir()

    def fingerprint(self) -> dict[str, dict[str, Any]]:
        from gymbench.fingerprint import collect_fingerprint

        fingerprint = collect_fingerprint(self.cwd)
        self.plugins.hook.gymbench_update_fingerprint(fingerprint=fingerprint)
        return fingerprint

    def make_record(self, benchmarks: Sequence[BenchmarkResult]) -> ResultsRecord:
        return ResultsRecord(
            name=self.info.name, benchmarks=list(benchmarks), fingerprint=self.fingerprint(), kind=self.info.kind
        )

    def finish(
        self,
        benchmarks: Sequence[BenchmarkResult] | ResultsRecord,
        *,
        save: bool | None = None,
        say: bool = True,
    ) -> ResultsRecord:
        """Fingerprint, save (unless told not to), say where (:func:`say_saved`, unless ``say`` is
        false: the pytest plugin says it in its summary) and announce the record of this run.

        Given a record already made (:meth:`make_record`: the pytest plugin compares it with a
        baseline before it is saved, so that ``latest`` means the run before this one), that one.
        """
        record = benchmarks if isinstance(benchmarks, ResultsRecord) else self.make_record(benchmarks)
        if (self.save if save is None else save) and self.results_dir is not None:
            self.saved_path = save_to_store(record, self.results_dir)
            if say:
                say_saved(self.saved_path)
        self.record = record
        self._announce(record, None)
        return record

    def _announce(self, record: ResultsRecord, error: BaseException | None) -> None:
        self.finished = True  # once, even when an implementation raises
        self.plugins.hook.gymbench_run_finish(run=self.info, record=record, error=error)
