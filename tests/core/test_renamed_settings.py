"""A renamed setting keeps its former name working (flag, ``+key=value``, ``--config``, pyproject), with one
line on stderr naming the new one: the renames that made names say what they are break no script."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gymbench.settings import Checked, add_settings_flags, build_settings, doc, settings_from_args


@dataclass
class Search(Checked):
    max_error_rate: float = field(default=0.01, metadata=doc("stop growing above this error rate", was="error_rate"))
    strict: bool = field(default=False, metadata=doc("a switch", was="picky"))


def _parsed(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_settings_flags(parser, Search)
    parser.add_argument("--config", dest="settings_file")
    parser.add_argument("overrides", nargs="*")
    return parser.parse_args(list(argv))


def test_the_old_flag_still_sets_the_setting_and_says_the_new_name(capsys: pytest.CaptureFixture[str]) -> None:
    settings = settings_from_args(Search, _parsed("--error-rate", "0.2", "--picky"))
    assert (settings.max_error_rate, settings.strict) == (0.2, True)
    err = capsys.readouterr().err
    assert "--error-rate is now --max-error-rate" in err
    assert "--picky is now --strict" in err


def test_the_old_flag_is_not_in_help() -> None:
    parser = argparse.ArgumentParser()
    add_settings_flags(parser, Search)
    assert "--error-rate" not in parser.format_help()
    assert "--max-error-rate" in parser.format_help()


def test_the_old_key_in_an_override_still_works(capsys: pytest.CaptureFixture[str]) -> None:
    assert settings_from_args(Search, _parsed("+error_rate=0.3")).max_error_rate == 0.3
    assert capsys.readouterr().err.count("'error_rate' is now called 'max_error_rate'") == 1


def test_the_old_key_in_a_config_file_still_works(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "tune.yaml"
    config.write_text("error_rate: 0.4\n")
    assert settings_from_args(Search, _parsed("--config", str(config))).max_error_rate == 0.4
    assert "is now called 'max_error_rate'" in capsys.readouterr().err


def test_the_new_name_wins_and_says_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    assert build_settings(Search, ["error_rate=0.3", "max_error_rate=0.5"]).max_error_rate == 0.5
    assert build_settings(Search, ["max_error_rate=0.6"]).max_error_rate == 0.6
    assert capsys.readouterr().err.count("now called") == 1


def test_the_old_name_is_checked_as_the_new_one() -> None:
    from gymbench.errors import GymbenchError
    from gymbench.tune.search_settings import AdaptiveSettings

    with pytest.raises(GymbenchError, match="max_error_rate"):
        build_settings(AdaptiveSettings, ["error_rate=2"])


def test_the_tune_renames_keep_their_old_keys(capsys: pytest.CaptureFixture[str]) -> None:
    from gymbench.tune.search_settings import AdaptiveSettings

    settings = build_settings(AdaptiveSettings, ["precision=0.1", "error_rate=0.2"])
    assert (settings.target_precision, settings.max_error_rate) == (0.1, 0.2)
    assert "now called 'target_precision'" in capsys.readouterr().err


def test_the_old_flag_works_without_omegaconf_too(capsys: pytest.CaptureFixture[str]) -> None:
    from gymbench.settings import settings_from_flags

    assert settings_from_flags(Search, _parsed("--error-rate", "0.2")).max_error_rate == 0.2
    assert "--error-rate is now --max-error-rate" in capsys.readouterr().err


def test_the_renamed_command_settings_keep_their_old_keys(capsys: pytest.CaptureFixture[str]) -> None:
    from gymbench.calibrate.command import CalibrateSettings
    from gymbench.sim.command import SimServeSettings
    from gymbench.train.settings import TrainSettings

    calibrate = build_settings(
        CalibrateSettings, ["base_url=http://127.0.0.1:9/v1", "slots=3", "max_tokens=8", "warmup_s=0.5"]
    )
    assert (calibrate.engine_slots, calibrate.output_tokens, calibrate.load_warmup_s) == (3, 8, 0.5)
    assert build_settings(SimServeSettings, ["max_tokens=64"]).describe_max_tokens == 64
    train = build_settings(TrainSettings, ["verify=1", "profile=trace.json"])
    assert (train.verify_runs, train.profile_trace is not None) == (1, True)
    assert capsys.readouterr().err.count("now called") == 6
