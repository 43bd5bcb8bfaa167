"""The core readers the fuzz sweep leans on: exact JSON, settings that name their setting and file."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gymbench.errors import GymbenchError
from gymbench.jsonio import JSONReadError, check_writable_file, dumps, loads
from gymbench.settings import build_settings, load_settings_file


def test_numbers_beyond_a_double_are_refused_not_turned_into_infinity() -> None:
    assert loads("[1.5, 1e-400, 1e308]") == [1.5, 0.0, 1e308]
    assert loads("123456789012345678901234567890") == 123456789012345678901234567890
    for text in ("1e400", b"[-2.5E+999]", "[" + "9" * 400 + ".5]"):
        with pytest.raises(JSONReadError, match="beyond a 64-bit float's range"):
            loads(text)


def test_indented_dumps_reads_back_the_same_values_through_orjson_and_its_fallback() -> None:
    """The aggregate-metrics file is written indented by orjson; a 20-digit id or a lone surrogate
    takes the standard library's path, which must indent the same way and lose nothing."""
    for value in ({"a": [1.5, {"b": "é"}], "n": 3}, {"id": 12345678901234567890123, "s": "\udc80"}):
        text = dumps(value, newline=True, indent=True)
        assert text.endswith(b"\n") and b'\n  "' in text
        assert loads(text) == value
    assert dumps({"a": 1}) == b'{"a":1}'


def test_nan_is_refused_unless_another_tool_wrote_the_file() -> None:
    with pytest.raises(JSONReadError, match="NaN is not valid JSON"):
        loads('{"a": NaN}')
    assert math.isnan(loads('{"a": NaN}', allow_nan=True)["a"])
    assert loads(b"\xef\xbb\xbf[1]") == [1]  # bytes: the encoding (and a byte-order mark) as json.loads finds them


def test_a_writable_file_is_proved_without_leaving_anything(tmp_path: Path) -> None:
    existing = tmp_path / "kept.txt"
    existing.write_text("as it was")
    check_writable_file(existing, "plot", "+plot")
    check_writable_file(tmp_path / "new" / "deeper" / "plot.png", "plot", "+plot")
    assert existing.read_text() == "as it was" and not (tmp_path / "new").exists()  # nor the folders made for it
    (tmp_path / "had").mkdir()
    check_writable_file(tmp_path / "had" / "plot.png", "plot", "+plot")
    assert (tmp_path / "had").is_dir()  # a folder that was there stays
    (tmp_path / "file").write_text("x")
    unwritable = [(tmp_path, "is a directory"), (tmp_path / "file" / "p.png", "cannot write the plot"),
                  (tmp_path / ("n" * 300), "File name too long"), (tmp_path / "a\x00b", "cannot write")]  # fmt: skip
    for bad, reason in unwritable:
        with pytest.raises(GymbenchError, match=reason) as error:
            check_writable_file(bad, "plot", "+plot")
        assert "+plot" in str(error.value)


def test_a_folder_another_probe_removes_midway_is_made_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two Ray shards checked their metrics files in one node-local folder: one's probe removed the
    folder it had made between the other's mkdir and open, and the other refused the run (CI)."""
    import os

    real_open, opened = os.open, []
    target = tmp_path / "shards" / "shard-00001.jsonl.metrics.json"
    (tmp_path / "shards").mkdir()

    def racing_open(path: Any, *args: Any) -> int:
        opened.append(path)
        if len(opened) == 1:
            (tmp_path / "shards").rmdir()  # the other shard's probe, cleaning up its folder
        return real_open(path, *args)

    monkeypatch.setattr(os, "open", racing_open)
    assert check_writable_file(target, "run's metrics file", "+output_jsonl_fpath") == target
    assert len(opened) == 2 and not target.exists()


@dataclass
class Schema:
    limit: int = 3
    rate: float = 1.0
    name: str = "x"
    extra: dict[str, Any] = field(default_factory=dict)


@pytest.mark.parametrize(
    ("dotlist", "message"),
    [
        (["rate=nan"], "setting 'rate': got nan, expected a finite number"),
        (["rate=1e400"], "setting 'rate': got inf"),
        (["extra.t=.inf"], "setting 'extra.t': got inf"),
        (["limit=" + "9" * 5000], "setting 'limit': Exceeds the limit"),
        (["extra=[1, 2]"], "setting 'extra'"),
        (["name=a\x00b"], "setting 'name': unacceptable character"),
        (["name=\udcff"], "setting 'name': '\\udcff' is not UTF-8 text"),
        (["limit=${x}"], "setting 'limit': got text (${x})"),
    ],
)
def test_a_bad_value_names_its_setting(dotlist: list[str], message: str) -> None:
    with pytest.raises(GymbenchError) as error:
        build_settings(Schema, dotlist)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_bad_value_from_a_settings_file_names_the_file(tmp_path: Path) -> None:
    settings = tmp_path / "s.yaml"
    for text, setting in [("limit: x\n", "limit"), ("rate: .nan\n", "rate"), ("limit: ${x}\n", "limit"),
                          ("nope: 1\n", "nope")]:  # fmt: skip
        settings.write_text(text)
        with pytest.raises(GymbenchError, match=f"^{settings}: .*'{setting}'"):
            build_settings(Schema, [], load_settings_file(settings))
    settings.write_text("limit: 4\nrate: 2.5\n")
    built = build_settings(Schema, ["limit=5"], load_settings_file(settings))
    assert (built.limit, built.rate) == (5, 2.5)  # the command line wins over the file


@pytest.mark.parametrize(
    "line",
    [
        b'{"id": 123456789012345678901, "x": 0.1}\n',  # a 21-digit id: past orjson's 64 bits
        b'{"id": -9223372036854775809}\n',
        b'{"id": 18446744073709551615, "y": 1e-7, "z": 2.2250738585072011e-308}\n',
        b'{"x": 0.1, "y": 1.7976931348623157e308, "z": 5e-324, "w": -0.0, "v": 123456789.123456789}\n',
        b'{"note": "call 12345678901234567890123 now"}\n',
        b'{"x": NaN}\n',
        b'{"x": 1e400}\n',
        b'{"x": "\\ud800"}\n',
        b'\xef\xbb\xbf{"x": 1}\n',
        b"null\n",
    ],
)
def test_quick_loads_reads_what_the_exact_reader_reads(line: bytes) -> None:
    """orjson's answer is taken only where it is the standard library's, value for value."""
    from gymbench.jsonio import JSONReadError, decode_line, loads, quick_loads

    quick = quick_loads(line)
    try:
        exact = loads(decode_line(line, first=True))
    except JSONReadError:
        assert quick is None  # the exact reader gives the error
        return
    if quick is not None:
        assert quick == exact
        assert repr(quick) == repr(exact)  # 0.1 stays 0.1, an int stays an int
    if b"1234567890123456789" in line or b"9223372036854775809" in line:
        assert quick is None


BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(8)
)


def test_a_yaml_alias_bomb_is_one_line_not_a_hang(tmp_path: Path) -> None:
    """Nine levels of nine aliases stand for 3.5 billion values: sim-server --describe hung on it."""
    profile = tmp_path / "bomb.yaml"
    profile.write_text(
        f"format: gymbench-sim-profile/1\ncalibration:\n{textwrap.indent(BOMB, '  ')}sim:\n  model: *i\n"
    )
    done = subprocess.run([sys.executable, "-m", "gymbench.cli", "sim-server", f"+profile={profile}", "--describe"],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "bomb.yaml: not valid YAML/JSON: its aliases stand for more than 1,000,000 values" in done.stderr


def test_yaml_aliases_that_stay_small_are_read_and_a_recursive_one_is_refused() -> None:
    import yaml

    from gymbench.settings import load_yaml

    assert load_yaml("a: &a [1, 2]\nb: [*a, *a]\n") == {"a": ["1", "2"], "b": [["1", "2"], ["1", "2"]]}
    assert load_yaml("on: yes\n", yaml12=False) == {True: True}  # NeMo Gym's YAML 1.1, as it means it
    with pytest.raises(yaml.YAMLError, match="contains it"):
        load_yaml("a: &a [*a]\n", yaml12=False)
    with pytest.raises(yaml.YAMLError, match="alias bomb"):
        load_yaml(BOMB, yaml12=False)
