"""What makes the pytest API cost the command's CPU: gymbench's own modules are not assert-rewritten,
and a collection runs with what existed before it frozen out of the garbage collector's reach."""

from __future__ import annotations

import gc

import pytest

from gymbench.collect.driver import _freeze_what_exists

SUITE = """
import sys

from _pytest.assertion.rewrite import AssertionRewritingHook


def test_library_modules_load_plainly():
    assert "gymbench.report.html" not in sys.modules
    import gymbench.report.html as imported

    assert not isinstance(imported.__loader__, AssertionRewritingHook)


def test_the_test_kit_and_tests_are_still_rewritten():
    assert isinstance(__loader__, AssertionRewritingHook)
"""


def test_pytest_leaves_gymbench_modules_alone(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_loaders=SUITE)
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=2)


def test_a_collection_freezes_only_when_nobody_else_did() -> None:
    assert gc.get_freeze_count() == 0
    assert _freeze_what_exists() is True
    try:
        assert gc.get_freeze_count() > 0
        assert _freeze_what_exists() is False  # the caller's own freeze is left as it is
    finally:
        gc.unfreeze()
