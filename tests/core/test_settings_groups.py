"""Settings declared once: groups schemas inherit, per-command defaults, path settings, checked options."""

from __future__ import annotations

import pickle

import pytest

from gymbench.errors import GymbenchError
from gymbench.settings import build_settings, path_settings, with_defaults
from gymbench.testing import make_plugins


def test_a_group_is_checked_once_in_every_schema_that_inherits_it() -> None:
    from gymbench.builtin.strategy_settings import SemaphoreSettings
    from gymbench.collect.config import CollectConfig

    for schema in (CollectConfig, SemaphoreSettings):
        with pytest.raises(GymbenchError, match="setting 'num_samples_in_parallel': got 0"):
            build_settings(schema, ["num_samples_in_parallel=0"])


def test_each_command_keeps_its_own_defaults() -> None:
    from gymbench.rollout.engine import CollectSettings
    from gymbench.train.config import TrainConfig
    from gymbench.train.settings import TrainSettings
    from gymbench.tune.config import DiagnoseConfig, TuneConfig
    from gymbench.tune.search_settings import AdaptiveSettings

    assert (AdaptiveSettings().start, AdaptiveSettings().max_error_rate, AdaptiveSettings().min_batches) == (4, 0.02, 3)
    assert (TuneConfig().start, TuneConfig().max_error_rate, TuneConfig().min_batches) == (5, 0.01, 6)
    assert (TuneConfig().run_name, DiagnoseConfig().run_name) == ("tune", "diagnose")
    assert (TrainConfig().device, TrainSettings().device) == ("cpu", "auto")
    assert CollectSettings.__dataclass_fields__["stop_after_failures"].default == 0
    assert TuneConfig.__name__ == "TuneConfig" and pickle.loads(pickle.dumps(TrainConfig(batch=4))).batch == 4


def test_with_defaults_refuses_a_setting_the_schema_lacks() -> None:
    from gymbench.tune.config import TuneConfig

    with pytest.raises(TypeError, match="nope"):
        with_defaults(TuneConfig, nope=1)


def test_path_settings_come_from_the_schema() -> None:
    from gymbench.collect.config import CollectConfig
    from gymbench.train.settings import TrainSettings

    collect_paths = {"input_jsonl_fpath", "output_jsonl_fpath", "verify_cache_path", "results_dir", "sim_profile"}
    assert set(path_settings(CollectConfig)) == collect_paths
    assert {"rollouts", "profile_trace", "results_dir"} <= set(path_settings(TrainSettings))


def test_a_settings_object_is_not_built_again() -> None:
    """A mapping is checked into the schema's object once; the object is then handed on as it is."""
    from gymbench.builtin.backend_settings import OpenAISettings

    plugins = make_plugins()
    settings = plugins.check("backend", "openai", {"base_url": "http://127.0.0.1:9/v1", "model": "m"})
    assert isinstance(settings, OpenAISettings) and settings.base_url == "http://127.0.0.1:9/v1"
    assert plugins.check("backend", "openai", settings) is settings


def test_registration_names_schemas_lazily() -> None:
    plugins = make_plugins()
    assert isinstance(plugins.component("backend", "openai").settings, str)
    assert "max_retries" in (plugins.options("backend", "openai") or set())
