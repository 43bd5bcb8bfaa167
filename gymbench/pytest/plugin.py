"""gymbench's pytest plugin (entry point ``pytest11``): the ``gymbench`` fixture, options, summary.

This module loads in every pytest run of the environment, so it imports nothing heavy: no torch,
no aiohttp. The plugin manager and fingerprint are only built when a benchmark actually records.
"""

from __future__ import annotations

import inspect
import math
import statistics
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from gymbench.errors import GymbenchError
from gymbench.gate.settings import MAX_BRACKETS
from gymbench.measure import MeasureSettings, measure_settings
from gymbench.pytest.api import Benchmark
from gymbench.pytest.jobs import BenchContext
from gymbench.pytest.options import add_options, check_options
from gymbench.record import BenchmarkResult, ResultsRecord
from gymbench.units import BYTE_SCALES, duration_scale, number

if TYPE_CHECKING:
    from gymbench.gate.ab.worker import WorkerLink
    from gymbench.gate.callgrind import InstructionCounter
    from gymbench.gate.gate import GateResult
    from gymbench.plugins import Plugins
    from gymbench.run import Run
pytest_plugins = ["gymbench.pytest.servers", "gymbench.pytest.engine", "gymbench.pytest.nemo_gym"]


@dataclass
class BenchSession:
    """Per-session state, kept under :data:`session_key` in ``config.stash``."""

    settings: MeasureSettings
    results_dir: Path
    save_name: str | None
    rootpath: Path | None = None
    results: list[BenchmarkResult] = field(default_factory=list)
    run: Run | None = None
    """The :class:`gymbench.run.Run`, made when the first benchmark records."""
    saved_path: Path | None = None
    compare: str | None = None
    gate: GateResult | None = None
    """The :class:`gymbench.gate.gate.GateResult` of ``--gymbench-compare`` or ``--gymbench-ab``."""
    gate_error: str | None = None
    instructions: bool = False
    """``--gymbench-instructions``: count instructions of these benchmarks under callgrind afterwards."""
    to_count: list[str] = field(default_factory=list)
    """Node ids of the benchmarks whose calls the callgrind session will count."""
    instructions_note: str | None = None
    counter: InstructionCounter | None = None
    """In the callgrind child session: the :class:`gymbench.gate.callgrind.InstructionCounter`."""
    count_dir: Path | None = None
    counted_code: dict[str, str] | None = None
    """Where the callgrind child imported the checkout's packages from (its ``imported``)."""
    ab_link: WorkerLink | None = None
    """In an A/B worker: the :class:`gymbench.gate.ab.worker.WorkerLink` to the runner."""

    pytest_plugins: pytest.PytestPluginManager | None = None
    """pytest's plugins: a ``conftest.py`` among them may implement gymbench's hooks."""
    _plugins: Plugins | None = None

    def plugins(self) -> Plugins:
        """The session's plugin registry, built once, on first use (after collection, so every
        ``conftest.py`` is loaded): gymbench's plugins and each conftest that implements a hook."""
        if self._plugins is None:
            from gymbench.plugins import Plugins, get_plugin_manager

            self._plugins = Plugins(get_plugin_manager(conftest_plugins(self.pytest_plugins)))
        return self._plugins

    def start_run(self) -> None:
        """Announce the run when the first benchmark records."""
        if self.run is not None:
            return
        from gymbench.run import Run

        self.run = Run(
            self.plugins(), "pytest", self.save_name or "pytest", results_dir=self.results_dir,
            save=self.save_name is not None, cwd=self.rootpath,
        ).start()  # fmt: skip


session_key = pytest.StashKey[BenchSession]()
report_key = pytest.StashKey[dict[str, pytest.TestReport]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    _library_asserts_left_alone(config)
    config.addinivalue_line(
        "markers",
        "gymbench(group=None, **options): options for a gymbench benchmark, "
        "e.g. min_effect=0.1 (the smallest change that matters), instructions=True/False (always/never "
        "count it under callgrind), ab=False (leave it out of interleaved A/B runs)",
    )
    save_name = _save_name(config)
    results_dir = config.getoption("--gymbench-results-dir")
    bench = BenchSession(
        settings=_measure_settings(config),
        results_dir=_results_dir(config, Path(results_dir) if results_dir else config.rootpath / "results"),
        save_name=save_name,
        rootpath=config.rootpath,
        compare=config.getoption("--gymbench-compare"),
        instructions=config.getoption("--gymbench-instructions"),
        pytest_plugins=config.pluginmanager,
    )
    config.stash[session_key] = bench
    if config.getoption("--gymbench-instructions-worker") or config.getoption("--gymbench-ab-worker"):
        from gymbench.pytest.children import become_worker

        become_worker(config, bench)


def conftest_plugins(manager: pytest.PytestPluginManager | None) -> list[object]:
    """The pytest plugins (``conftest.py`` files, ``-p`` modules) with a ``@gymbench.hookimpl``:
    registering a model or verifier needs no package and no entry point, as a fixture would."""
    if manager is None:
        return []
    own = ("gymbench.", "_pytest.", "pytest_")
    return [
        plugin
        for plugin in manager.get_plugins()
        if not getattr(plugin, "__name__", "").startswith(own)
        and any(
            hasattr(getattr(plugin, name, None), "gymbench_impl")
            for name in dir(plugin)
            if name.startswith("gymbench_")
        )
    ]


def _library_asserts_left_alone(config: pytest.Config) -> None:
    """Keep pytest from rewriting the asserts of gymbench's own modules (the test kit excepted).

    pytest marks every module of a ``pytest11`` plugin's distribution for assert rewriting, so each
    gymbench module a job imports went through an extra AST pass (on every run where bytecode is not
    cached) and its asserts in the collection's hot loop ran pytest's slower form: the pytest API
    used more client CPU per rollout than ``gymbench collect`` for the same work. Those asserts
    check gymbench's invariants, not a user's test; pytest's own API has no way to unmark a name,
    hence the guarded attribute access (another pytest just keeps rewriting).
    """
    hook = config.pluginmanager.rewrite_hook
    marked = getattr(hook, "_must_rewrite", None)
    if isinstance(marked, set) and "gymbench" in marked:
        marked.discard("gymbench")
        marked.add("gymbench.testing")
        getattr(hook, "_marked_for_rewrite_cache", {}).clear()


def pytest_collection_finish(session: pytest.Session) -> None:
    listing = session.config.getoption("--gymbench-ab-list")
    if listing:
        from gymbench.gate.ab.worker import write_listing

        write_listing(session.items, Path(listing))


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> bool | None:
    """``--gymbench-ab``: the selected benchmarks run in the A/B runner's workers, not here."""
    ref = session.config.getoption("--gymbench-ab")
    bench = session.config.stash.get(session_key, None)
    if ref is None or bench is None or bench.ab_link is not None or session.config.option.collectonly:
        return None
    from gymbench.errors import GymbenchError
    from gymbench.gate.ab.pytest_side import run_ab_session

    try:
        bench.gate = run_ab_session(session, ref, session.config.getoption("--gymbench-ab-repeats"))
    except GymbenchError as exc:
        bench.gate_error = str(exc)
    return True


def _save_name(config: pytest.Config) -> str | None:
    """``--gymbench-save NAME``, checked now by the rule every record name follows (``+run_name``)."""
    from gymbench.errors import GymbenchError
    from gymbench.settings import safe_name

    save_name: str | None = config.getoption("--gymbench-save")
    if save_name is not None:
        try:
            safe_name("run_name", save_name)
        except GymbenchError:
            raise pytest.UsageError(
                f"--gymbench-save {save_name!r}: use up to 101 letters, digits, '.', '_' or '-', starting "
                "with a letter or digit (the name becomes part of a file name)"
            ) from None
    return save_name


def _measure_settings(config: pytest.Config) -> MeasureSettings:
    """Measurement options, checked now: a bad one is a usage error (exit 4), not a failure later."""
    check_options(config)
    for option in ("--gymbench-min-effect", "--gymbench-max-time", "--gymbench-instructions-timeout"):
        value = config.getoption(option)
        if value is not None and not (math.isfinite(value) and value > 0):
            raise pytest.UsageError(f"{option} {value}: expected a finite number above 0")
    brackets = config.getoption("--gymbench-instructions-brackets")
    if not 1 <= brackets <= MAX_BRACKETS:
        raise pytest.UsageError(f"--gymbench-instructions-brackets {brackets}: give 1 to {MAX_BRACKETS} (default 5)")
    try:
        return measure_settings(
            config.getoption("--gymbench-quick"),
            min_rounds=config.getoption("--gymbench-min-rounds"),
            max_time_s=config.getoption("--gymbench-max-time"),
        )
    except GymbenchError as exc:
        raise pytest.UsageError(f"--gymbench-min-rounds: {exc}") from None


def _results_dir(config: pytest.Config, path: Path) -> Path:
    """Where ``--gymbench-save`` writes must be writable before the suite runs: the record goes to
    ``<results dir>/<machine key>/``, so that folder is the one checked (a file in its place would
    otherwise fail only at save, after the whole session)."""
    if config.getoption("--gymbench-save") is not None:
        from gymbench.errors import GymbenchError
        from gymbench.fingerprint import machine_info
        from gymbench.jsonio import check_writable_dir

        try:
            check_writable_dir(path / str(machine_info()["key"]), "results record")
        except GymbenchError as exc:
            raise pytest.UsageError(f"--gymbench-results-dir: {exc}") from None
    return path


def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """An ``async def`` benchmark that no async plugin took: one line saying what to add.

    pytest-asyncio (0.23+) and anyio hand pytest a synchronous wrapper, or call the test
    themselves first; a coroutine function that reaches this hook would otherwise end in pytest's
    "async def functions are not natively supported", which does not say what is missing.
    """
    if "gymbench" in pyfuncitem.fixturenames and inspect.iscoroutinefunction(pyfuncitem.obj):
        pytest.fail(unrun_async_message(pyfuncitem.config), pytrace=False)
    return None


def unrun_async_message(config: pytest.Config) -> str:
    add = '@pytest.mark.asyncio on the test, or asyncio_mode = "auto" under [tool.pytest.ini_options]'
    if not config.pluginmanager.hasplugin("asyncio"):
        return f"gymbench: an async def benchmark needs pytest-asyncio: pip install 'gymbench[asyncio]', then add {add}"
    return f"gymbench: pytest-asyncio runs an async def benchmark only when asked: add {add}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    item.stash.setdefault(report_key, {})[report.when] = report
    return report


@pytest.fixture
def gymbench(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Benchmark]:
    """Measure a case and record its metrics into the session's results record.

    ``gymbench.measure(fn, *args)`` for sync code, ``await gymbench.ameasure(coro_fn, *args)`` in
    an ``async def`` test, ``gymbench.record(name, value, unit, direction)`` for computed figures,
    and gymbench's own jobs: ``gymbench.collect(...)`` (``await`` it in an async test).
    """
    session = request.config.stash[session_key]
    pacer = session.ab_link.pacer(request.node.nodeid) if session.ab_link is not None else None
    context = bench_context(request, tmp_path_factory, session)
    recorder = Benchmark(session.settings, context, counter=session.counter, pacer=pacer)
    yield recorder
    call_report = request.node.stash.get(report_key, {}).get("call")
    if call_report is None or not call_report.passed or not recorder.metrics:
        return
    marker = request.node.get_closest_marker("gymbench")
    options = dict(marker.kwargs) if marker else {}
    group = options.pop("group", None)
    callspec = getattr(request.node, "callspec", None)
    result = recorder.result(
        name=request.node.nodeid.split("[", 1)[0],
        params=dict(callspec.params) if callspec else {},
        group=group,
        options=options,
    )
    if session.count_dir is not None:
        from gymbench.gate.instructions import write_counts

        write_counts(session.count_dir, result)
        return
    if session.ab_link is not None:
        return
    if recorder.measured_sync and options.get("instructions", session.instructions) is True:
        session.to_count.append(request.node.nodeid)  # the flag, or the marker's instructions=True
    elif session.instructions:
        from gymbench.gate.instructions import COUNTS_EXTRA, not_counted_reason

        why = not_counted_reason(recorder.measured_sync, recorder.measured_async, options.get("instructions"))
        result = replace(result, extra={**result.extra, COUNTS_EXTRA: why})
    session.start_run()
    session.results.append(result)


def bench_context(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, session: BenchSession
) -> BenchContext:
    from gymbench.pytest.servers import job_defaults

    def fail(message: str) -> None:
        pytest.fail(message, pytrace=False)

    return BenchContext(
        plugins=session.plugins,
        defaults=lambda job: job_defaults(request.config, job),
        sim=lambda: request.getfixturevalue("gymbench_sim"),
        workdir=lambda: tmp_path_factory.mktemp("gymbench"),
        fail=fail,
    )


def pytest_sessionfinish(session: pytest.Session) -> None:
    bench = session.config.stash.get(session_key, None)
    if bench is None:
        return
    if bench.ab_link is not None:
        bench.ab_link.close()
    if bench.count_dir is not None:
        from gymbench.gate.instructions import write_code

        write_code(bench.count_dir, session.config.rootpath)  # which code the callgrind child counted
    _gate_exit_status(session, bench)
    if bench.run is None:
        return
    with bench.run:  # started by the first benchmark; finish fires even when counting or comparing fails
        if bench.instructions or bench.to_count:
            from gymbench.pytest.children import count_instructions

            bench.results = count_instructions(session.config, bench)
        record = _with_code(bench.run.make_record(bench.results), session.config.rootpath, bench.counted_code)
        if bench.compare:
            _compare(session, bench, record)
        bench.run.finish(record, say=False)  # said in the terminal summary
    bench.saved_path = bench.run.saved_path


def _with_code(record: ResultsRecord, root: Path, counted: dict[str, str] | None) -> ResultsRecord:
    """The record says which code it measured (:mod:`gymbench.gate.measured_code`), and which code
    the callgrind child counted."""
    from gymbench.gate.measured_code import measured_code

    code = measured_code(root)
    if counted is not None:
        code["counted"] = counted
    return replace(record, fingerprint={**record.fingerprint, "code": code})


def _compare(session: pytest.Session, bench: BenchSession, record: ResultsRecord) -> None:
    """Run the gate (heavy imports happen only here) and turn its outcome into the exit status."""
    from gymbench.errors import GymbenchError
    from gymbench.gate.gate import in_memory, noise_for, run_gate
    from gymbench.gate.guarded import gate_or_explain
    from gymbench.gate.settings import compare_settings
    from gymbench.gate.store import BaselineStore

    config = session.config
    key = record.fingerprint["machine"]["key"]
    try:
        settings = compare_settings(
            config.rootpath / "pyproject.toml", min_effect=config.getoption("--gymbench-min-effect")
        )
        baseline = BaselineStore(bench.results_dir).select(bench.compare or "latest", key, config.rootpath)
        noise = noise_for(bench.results_dir, key, config.getoption("--gymbench-calibration"))
        candidate = in_memory(record)
        fail_on = config.getoption("--gymbench-fail-on")
        bench.gate = gate_or_explain(
            lambda: run_gate(baseline, candidate, settings, noise, fail_on), baseline, candidate
        )
    except GymbenchError as exc:
        bench.gate_error = str(exc)
    _gate_exit_status(session, bench)


def _gate_exit_status(session: pytest.Session, bench: BenchSession) -> None:
    """The gate's verdict (or error) becomes the exit status unless a test already failed."""
    if bench.gate_error is not None:
        session.exitstatus = pytest.ExitCode.USAGE_ERROR
    elif bench.gate is not None and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        from gymbench.gate.markdown import comparison_markdown, write_step_summary

        write_step_summary(comparison_markdown(bench.gate))
        session.exitstatus = bench.gate.enforced.pytest_code


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    bench = terminalreporter.config.stash.get(session_key, None)
    if bench is None:
        return
    if bench.results:
        terminalreporter.section("gymbench")
        for line in summary_lines(bench.results):
            terminalreporter.write_line(line)
    if bench.instructions_note:
        terminalreporter.write_line(f"gymbench: {bench.instructions_note}", yellow=True)
    if not bench.results:
        _comparison_summary(terminalreporter, bench)
        return
    if bench.settings.quick:
        terminalreporter.write_line("quick mode: figures prove the benchmarks run; do not compare them")
    if bench.saved_path is not None:
        from gymbench.run import saved_message

        terminalreporter.write_line(saved_message(bench.saved_path))
    _comparison_summary(terminalreporter, bench)


def _comparison_summary(terminalreporter: pytest.TerminalReporter, bench: BenchSession) -> None:
    if bench.gate_error is not None:
        terminalreporter.section("gymbench comparison", red=True)
        terminalreporter.write_line(f"gymbench: error: {bench.gate_error}", red=True)
        return
    if bench.gate is None:
        return
    from gymbench.gate.terminal import comparison_lines

    terminalreporter.section("gymbench comparison")
    for line in comparison_lines(bench.gate, verbose=terminalreporter.config.option.verbose > 0):
        terminalreporter.write_line(line)
    if bench.settings.quick:
        terminalreporter.write_line("quick mode: this comparison proves the path works, not the figures")


def readable_unit(value: float, unit: str) -> tuple[float, str]:
    """Seconds shown in ms, µs or ns and bytes in KiB to TiB where that is how they read
    (``2.08 µs``, ``394.2 MiB``; not ``2.08e-06 s``, ``4.133e+08 B``)."""
    if not math.isfinite(value) or not value:
        return 1.0, unit
    if unit == "s":
        return duration_scale(value, 4)
    if unit == "B":
        return next(((scale, name) for scale, name in BYTE_SCALES if abs(value) >= scale), (1.0, unit))
    return 1.0, unit


def summary_lines(results: list[BenchmarkResult]) -> list[str]:
    """A plain table: benchmark, metric, median, spread (IQR), unit, samples."""
    rows = [("benchmark", "metric", "median", "IQR", "unit", "n")]
    for result in results:
        for name, metric in result.metrics.items():
            q1, _, q3 = statistics.quantiles(metric.samples, n=4) if len(metric.samples) > 1 else (0, 0, 0)
            scale, unit = readable_unit(metric.value, metric.unit)
            rows.append(
                (result.id, name, number(metric.value / scale), number((q3 - q1) / scale, 3), unit,
                 str(len(metric.samples)))
            )  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)).rstrip() for row in rows]
