"""Issue 24: an ``async def`` benchmark that no async plugin runs fails with one line saying what to add."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

ASYNC_BENCH = """
import asyncio
import pytest

{marker}
async def test_wait(gymbench):
    await gymbench.ameasure(asyncio.sleep, 0)
"""
PLAIN_ASYNC = """
async def test_not_a_benchmark():
    pass
"""
WITH_ASYNCIO = "[pytest]\nasyncio_default_fixture_loop_scope = function\n"
QUICK = ("--gymbench-quick", "-p", "no:cacheprovider")


def _run(pytester: pytest.Pytester, ini: str, marker: str, *args: str) -> pytest.RunResult:
    pytester.makeini(ini)
    pytester.makepyfile(test_async=ASYNC_BENCH.format(marker=marker))
    return pytester.runpytest(*QUICK, *args)


@pytest.mark.hostile
@pytest.mark.parametrize("mode", ["", "asyncio_mode = strict\n"])
def test_pytest_asyncio_in_strict_mode_unmarked_says_what_to_add(pytester: pytest.Pytester, mode: str) -> None:
    result = _run(pytester, WITH_ASYNCIO + mode, "")
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    (line,) = [x for x in text.splitlines() if x.startswith("gymbench: ")]
    assert "@pytest.mark.asyncio" in line and 'asyncio_mode = "auto" under [tool.pytest.ini_options]' in line
    assert "pip install" not in line
    assert "not natively supported" not in text and "Traceback" not in text


@pytest.mark.hostile
def test_without_pytest_asyncio_it_says_to_install_it(pytester: pytest.Pytester) -> None:
    unknown_mark = ("-W", "ignore::pytest.PytestUnknownMarkWarning")
    result = _run(pytester, "[pytest]\n", "@pytest.mark.asyncio", "-p", "no:asyncio", *unknown_mark)
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    (line,) = [x for x in text.splitlines() if x.startswith("gymbench: ")]
    assert "pip install 'gymbench[asyncio]'" in line and "@pytest.mark.asyncio" in line
    assert "not natively supported" not in text and "Traceback" not in text


@pytest.mark.hostile
@pytest.mark.parametrize(
    ("ini", "marker"),
    [
        (WITH_ASYNCIO, "@pytest.mark.asyncio"),
        (WITH_ASYNCIO + "asyncio_mode = auto\n", ""),
        (WITH_ASYNCIO + "asyncio_mode = auto\n", "@pytest.mark.asyncio"),
    ],
    ids=["marked", "auto", "auto-and-marked"],
)
def test_a_marked_or_auto_mode_benchmark_runs(pytester: pytest.Pytester, ini: str, marker: str) -> None:
    result = _run(pytester, ini, marker)
    result.assert_outcomes(passed=1)


def test_an_anyio_marked_benchmark_is_left_to_anyio(pytester: pytest.Pytester) -> None:
    pytest.importorskip("anyio")
    pytester.makeconftest("import pytest\n\n@pytest.fixture\ndef anyio_backend():\n    return 'asyncio'\n")
    _run(pytester, WITH_ASYNCIO, "@pytest.mark.anyio").assert_outcomes(passed=1)


def test_auto_mode_from_the_command_line_runs_it(pytester: pytest.Pytester) -> None:
    _run(pytester, WITH_ASYNCIO, "", "--asyncio-mode=auto").assert_outcomes(passed=1)


def test_an_async_test_without_the_fixture_is_left_to_pytest(pytester: pytest.Pytester) -> None:
    """The plugin loads in every pytest run: other suites' async tests keep pytest's own behaviour."""
    pytester.makeini(WITH_ASYNCIO)
    pytester.makepyfile(test_other=PLAIN_ASYNC)
    result = pytester.runpytest(*QUICK)
    assert "gymbench: " not in result.stdout.str()
