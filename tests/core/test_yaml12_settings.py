"""``+key=value`` values and ``--config`` files are read as YAML 1.2 (core schema), by the type of
the setting: never YAML 1.1's octal (``010`` → 8), base 60 (``1:30`` → 90) or dates. A str setting
keeps the text as typed; a bool setting keeps its words (true/false, yes/no, on/off, 1/0)."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gymbench.errors import GymbenchError
from gymbench.settings import build_settings, load_settings_file

pytestmark = pytest.mark.hostile  # a case of the adversarial sweep (issue 24): benches/hostile_count.sh


@dataclass
class Inner:
    port: int = 0
    host: str = ""


@dataclass
class Table:
    count: int = 0
    ratio: float = 0.0
    name: str = ""
    flag: bool = False
    maybe: int | None = None
    label: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    inner: Inner = field(default_factory=Inner)


ERROR = object()

CASES: list[tuple[str, str, Any]] = [
    # int settings: YAML 1.2 core integers, no octal by a leading 0, no base 60
    ("count", "010", 10),
    ("count", "0010", 10),
    ("count", "-010", -10),
    ("count", "+7", 7),
    ("count", "0", 0),
    ("count", "0x10", 16),
    ("count", "0xff", 255),
    ("count", "0o10", 8),
    ("count", "0o777", 511),
    ("count", "1:30", ERROR),
    ("count", "1:30:00", ERROR),
    ("count", "yes", ERROR),
    ("count", "0b101", ERROR),
    ("count", "'12'", 12),
    ("maybe", "010", 10),
    ("maybe", "null", None),
    ("maybe", "~", None),
    ("maybe", "", None),
    # float settings
    ("ratio", "0.5", 0.5),
    ("ratio", ".5", 0.5),
    ("ratio", "1e3", 1000.0),
    ("ratio", "010", 10.0),
    ("ratio", "1:30", ERROR),
    ("ratio", "-2.5E-1", -0.25),
    ("ratio", "3", 3.0),
    # str settings: the text as typed
    ("name", "010", "010"),
    ("name", "1:30", "1:30"),
    ("name", "0x10", "0x10"),
    ("name", "yes", "yes"),
    ("name", "on", "on"),
    ("name", "2024-01-01", "2024-01-01"),
    ("name", "1e3", "1e3"),
    ("name", "true", "true"),
    ("name", "'quoted 010'", "quoted 010"),
    ("name", '"1:30"', "1:30"),
    ("name", "0o10", "0o10"),
    ("label", "010", "010"),
    ("label", "null", None),
    ("label", "abc", "abc"),
    # bool settings keep today's words
    ("flag", "true", True),
    ("flag", "false", False),
    ("flag", "True", True),
    ("flag", "on", True),
    ("flag", "off", False),
    ("flag", "yes", True),
    ("flag", "no", False),
    ("flag", "1", True),
    ("flag", "0", False),
    ("flag", "maybe", ERROR),
    # settings of any type (a dict of options): the YAML 1.2 core value
    ("extra.a", "010", {"a": 10}),
    ("extra.a", "1:30", {"a": "1:30"}),
    ("extra.a", "yes", {"a": "yes"}),
    ("extra.a", "on", {"a": "on"}),
    ("extra.a", "off", {"a": "off"}),
    ("extra.a", "true", {"a": True}),
    ("extra.a", "0x10", {"a": 16}),
    ("extra.a", "0o10", {"a": 8}),
    ("extra.a", "2024-01-01", {"a": "2024-01-01"}),
    ("extra.a", "null", {"a": None}),
    ("extra.a", "1.5", {"a": 1.5}),
    ("extra.a", "'010'", {"a": "010"}),
    ("extra.a", "[010, 1:30]", {"a": [10, "1:30"]}),
    ("extra.a", "{b: 010}", {"a": {"b": 10}}),
    ("extra.a", "1_000", {"a": "1_000"}),
    ("extra.a", "${x}", {"a": "${x}"}),
    # a nested settings group is typed by its own fields
    ("inner.port", "010", 10),
    ("inner.host", "010", "010"),
    ("inner.host", "1:30", "1:30"),
]


def _value(settings: Table, key: str) -> Any:
    top, _, rest = key.partition(".")
    value = getattr(settings, top)
    return value if not rest or top == "extra" else getattr(value, rest)


def _check(built: Any, key: str, expected: Any) -> None:
    got = _value(built, key)
    assert got == expected and type(got) is type(expected), (key, got, expected)


@pytest.mark.parametrize(("key", "text", "expected"), CASES, ids=[f"{k}={t}" for k, t, _ in CASES])
def test_a_command_line_value_is_read_as_yaml_1_2_by_the_settings_type(key: str, text: str, expected: Any) -> None:
    if expected is ERROR:
        with pytest.raises(GymbenchError, match=key.split(".")[0]):
            build_settings(Table, [f"{key}={text}"])
        return
    _check(build_settings(Table, [f"{key}={text}"]), key, expected)


@pytest.mark.parametrize(("key", "text", "expected"), CASES, ids=[f"{k}={t}" for k, t, _ in CASES])
def test_a_settings_file_value_is_read_the_same_way(key: str, text: str, expected: Any, tmp_path: Path) -> None:
    top, _, rest = key.partition(".")
    body = f"{top}:\n  {rest}: {text}\n" if rest else f"{top}: {text}\n"
    path = tmp_path / "settings.yaml"
    path.write_text(body)
    if expected is ERROR:
        with pytest.raises(GymbenchError, match=top):
            build_settings(Table, [], load_settings_file(path))
        return
    _check(build_settings(Table, [], load_settings_file(path)), key, expected)


@pytest.mark.parametrize("seed", range(12))
def test_seeded_zero_padded_and_colon_numbers_never_change_value(seed: int) -> None:
    rng = random.Random(seed)
    number = rng.randrange(0, 10**6)
    padded = "0" * rng.randrange(1, 4) + str(number)
    colon = f"{rng.randrange(0, 60)}:{rng.randrange(0, 60):02d}"
    built = build_settings(Table, [f"count={padded}", f"name={padded}", f"label={colon}", f"extra.c={colon}"])
    assert (built.count, built.name, built.label, built.extra["c"]) == (number, padded, colon, colon)


def test_non_finite_numbers_are_still_refused() -> None:
    for text in (".inf", "-.inf", ".nan"):
        with pytest.raises(GymbenchError, match="ratio"):
            build_settings(Table, [f"ratio={text}"])
    assert math.isinf(float("inf"))
