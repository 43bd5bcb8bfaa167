"""The plugin's ``--gymbench-*`` options are generated from settings: a setting added to a schema
becomes an option, with the schema's type and help, and the schema's checks judge its value."""

from __future__ import annotations

import dataclasses

import pytest
from _pytest.config.argparsing import Parser

from gymbench.pytest import options


def _parsed(*args: str) -> object:
    parser = Parser(_ispytest=True)
    options.add_options(parser)
    return parser.parse(list(args))


def test_a_new_session_setting_becomes_an_option(monkeypatch: pytest.MonkeyPatch) -> None:
    @dataclasses.dataclass
    class More(options.SessionOptions):
        warm_rounds: int = dataclasses.field(default=2, metadata={"help": "rounds before measuring"})

    monkeypatch.setattr(options, "SessionOptions", More)
    assert _parsed().gymbench_warm_rounds == 2  # type: ignore[attr-defined]
    assert _parsed("--gymbench-warm-rounds", "7").gymbench_warm_rounds == 7  # type: ignore[attr-defined]


def test_shared_options_take_their_type_and_help_from_the_schema_that_declares_them() -> None:
    parser = Parser(_ispytest=True)
    options.add_options(parser)
    declared = {
        option: next(f for f in dataclasses.fields(schema) if f.name == name)
        for schema, name, option, _ in options.SHARED
    }
    found = {opt.names()[0].removeprefix("--gymbench-"): opt for opt in parser.getgroup("gymbench").options}
    for option, field in declared.items():
        help_text = options.HELP.get(field.name) or field.metadata["help"]
        assert found[option].attrs()["help"] == help_text.replace("%", "%%")
    parsed = _parsed("--gymbench-min-effect", "0.1", "--gymbench-ab-repeats", "5", "--gymbench-quick")
    assert (parsed.gymbench_min_effect, parsed.gymbench_ab_repeats, parsed.gymbench_quick) == (0.1, 5, True)  # type: ignore[attr-defined]
    defaults = _parsed()
    assert (defaults.gymbench_fail_on, defaults.gymbench_min_effect, defaults.gymbench_results_dir) == (  # type: ignore[attr-defined]
        "none",  # a session reports only unless told to fail
        None,  # not given: [tool.gymbench.compare]'s, else the comparison's default
        None,  # not given: results/ under the rootdir
    )


pytest_plugins = ["pytester"]


def test_a_bad_value_is_a_usage_error_naming_the_option(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = pytester.runpytest("--gymbench-fail-on", "sometimes")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--gymbench-fail-on sometimes: setting 'fail_on': got 'sometimes', expected one of*"])
    result = pytester.runpytest("--gymbench-ab-repeats", "0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--gymbench-ab-repeats 0: setting 'repeats': got 0*"])
