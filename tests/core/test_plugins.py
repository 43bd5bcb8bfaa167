from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gymbench import Component, GymbenchError, PluginError, UnknownComponentError, hookimpl
from gymbench.builtin.semaphore import SemaphoreStrategy
from gymbench.plugins import BUILTIN_PLUGINS, Plugins, get_plugin_manager, lazy
from gymbench.testing import FakeBackend, install_entry_point_plugin, make_plugins


class FakeBackendPlugin:
    @hookimpl
    def gymbench_register_backends(self) -> list[Component]:
        return [Component("fake", lambda config: FakeBackend(), "test backend")]


def test_builtins_are_registered_under_their_module_names() -> None:
    plugins = make_plugins()
    assert "exact-match" in plugins.names("verifier")
    assert "semaphore" in plugins.names("strategy")
    assert plugins.components["verifier"]["exact-match"].plugin == "gymbench.builtin.verifiers"
    for name in BUILTIN_PLUGINS:
        assert plugins.pm.get_plugin(name) is not None


def test_in_test_plugin_is_picked_up_and_builds_components() -> None:
    plugins = make_plugins(FakeBackendPlugin())
    assert "fake" in plugins.names("backend")
    assert isinstance(plugins.backend("fake"), FakeBackend)


def test_duplicate_name_names_both_plugins() -> None:
    class Again:
        @hookimpl
        def gymbench_register_verifiers(self) -> list[Component]:
            return [Component("exact-match", lambda config: None)]

    pm = get_plugin_manager([Again()], load_entry_points=False)
    with pytest.raises(PluginError) as info:
        Plugins(pm)
    message = str(info.value)
    assert "exact-match" in message
    assert "gymbench.builtin.verifiers" in message
    assert "test_duplicate_name_names_both_plugins.<locals>.Again" in message
    assert message.index("gymbench.builtin.verifiers") < message.index("Again")
    assert "GYMBENCH_BLOCK_PLUGINS" in message


def test_wrong_return_type_is_a_clear_error() -> None:
    class Broken:
        @hookimpl
        def gymbench_register_backends(self) -> list[str]:
            return ["not a component"]

    with pytest.raises(PluginError, match="expected gymbench.types.Component"):
        make_plugins(Broken())


def test_misspelt_hook_fails_at_start_up() -> None:
    class Misspelt:
        @hookimpl
        def gymbench_register_backend(self) -> list[Component]:
            return []

    with pytest.raises(Exception, match="unknown hook"):
        get_plugin_manager([Misspelt()], load_entry_points=False)


def test_unknown_component_lists_known_names() -> None:
    plugins = make_plugins()
    with pytest.raises(UnknownComponentError, match="known verifiers: code, exact-match, math, none, regex"):
        plugins.verifier("no-such-verifier")


def test_block_by_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GYMBENCH_BLOCK_PLUGINS", "verifier:exact-match, gymbench.builtin.strategies, other")
    plugins = Plugins(get_plugin_manager(load_entry_points=False))
    assert "exact-match" not in plugins.names("verifier") and "regex" in plugins.names("verifier")
    assert plugins.names("strategy") == ["adaptive"]  # tune's, registered by gymbench.tune.plugin
    with pytest.raises(UnknownComponentError, match="unknown strategy 'semaphore'"):
        plugins.strategy("semaphore", {"num_samples_in_parallel": 4})


PLUGIN_SOURCE = """
from gymbench import Component, hookimpl
from gymbench.testing import FakeBackend

@hookimpl
def gymbench_register_backends():
    return [Component("throwaway", lambda config: FakeBackend(), "from an entry point")]
"""


@pytest.fixture
def throwaway_dist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    module = "gymbench_throwaway_plugin"
    install_entry_point_plugin(tmp_path, module, PLUGIN_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield module
    sys.modules.pop(module, None)


def test_entry_point_plugin_is_loaded(throwaway_dist: str) -> None:
    plugins = Plugins(get_plugin_manager())
    registered = plugins.components["backend"]["throwaway"]
    assert registered.plugin == throwaway_dist
    assert isinstance(plugins.backend("throwaway"), FakeBackend)


def test_entry_point_plugin_can_be_blocked(throwaway_dist: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GYMBENCH_BLOCK_PLUGINS", throwaway_dist)
    assert "throwaway" not in Plugins(get_plugin_manager()).names("backend")


def test_component_factory_receives_config() -> None:
    seen: list[Mapping[str, Any]] = []

    def factory(config: Mapping[str, Any]) -> SemaphoreStrategy:
        seen.append(config)
        return SemaphoreStrategy(int(config["limit"]))

    class Recording:
        @hookimpl
        def gymbench_register_strategies(self) -> list[Component]:
            return [Component("recording", factory)]

    assert make_plugins(Recording()).strategy("recording", {"limit": 3}).limit == 3
    assert seen == [{"limit": 3}]


@dataclass
class WidgetSettings:
    size: int = 1
    label: str = "w"

    def __post_init__(self) -> None:
        if self.size < 1:
            raise GymbenchError(f"setting 'size': got {self.size}, expected at least 1")


class WidgetPlugin:
    @hookimpl
    def gymbench_register_strategies(self) -> list[Component]:
        return [Component("widget", lambda s: SemaphoreStrategy(s.size), settings=WidgetSettings)]


def test_a_settings_schema_checks_options_and_the_factory_gets_the_typed_object() -> None:
    plugins = make_plugins(WidgetPlugin())
    assert plugins.strategy("widget", {"size": "4"}).limit == 4
    assert plugins.options("strategy", "widget") == {"size", "label"}
    with pytest.raises(GymbenchError, match=r"strategy 'widget': unknown setting 'colour'; known settings: size"):
        plugins.strategy("widget", {"colour": "red"})
    with pytest.raises(GymbenchError, match=r"strategy 'widget': setting 'size'"):
        plugins.strategy("widget", {"size": "big"})
    with pytest.raises(GymbenchError, match=r"strategy 'widget': setting 'size': got 0"):
        plugins.strategy("widget", {"size": 0})


@pytest.mark.parametrize(
    ("kind", "name", "options", "message"),
    [
        ("verifier", "exact-match", {"feild": "x"}, "verifier 'exact-match': unknown setting 'feild'"),
        ("strategy", "semaphore", {"num_samples_in_parallel": 0}, "strategy 'semaphore': setting"),
        ("strategy", "adaptive", {"start": 8, "max_limit": 4}, "strategy 'adaptive': setting 'max_limit'"),
        ("backend", "openai", {"request_timeout_s": 0}, "backend 'openai': setting 'request_timeout_s'"),
        ("backend", "openai", {"request_timeout_s": "nan"}, "backend 'openai': setting 'request_timeout_s'"),
        ("backend", "openai", {"max_retries": -1}, "backend 'openai': setting 'max_retries'"),
        ("backend", "openai", {"global_aiohttp_connector_limit": -1}, "global_aiohttp_connector_limit"),
        ("backend", "openai", {"api": "completions"}, "backend 'openai': setting 'api'"),
        ("backend", "nemo-gym", {"base_ur": "http://x"}, "backend 'nemo-gym': unknown setting 'base_ur'"),
    ],
)
def test_every_builtin_refuses_bad_options_by_name(kind: str, name: str, options: dict, message: str) -> None:
    with pytest.raises(GymbenchError, match=re.escape(message)):
        make_plugins().create(kind, name, options)


def test_a_factory_that_builds_the_wrong_thing_is_named() -> None:
    class Wrong:
        @hookimpl
        def gymbench_register_verifiers(self) -> list[Component]:
            return [Component("wrong", lambda config: object())]

    with pytest.raises(PluginError, match=r"verifier 'wrong' from plugin .*Wrong.* is not a gymbench.types.Verifier"):
        make_plugins(Wrong()).verifier("wrong")


def test_lazy_factory_imports_its_target_only_when_called() -> None:
    factory = lazy("gymbench.builtin.semaphore:SemaphoreStrategy")
    assert "lazy('gymbench.builtin.semaphore:SemaphoreStrategy')" in repr(factory)
    assert factory(3).limit == 3


def test_registering_every_builtin_imports_nothing_heavy() -> None:
    code = (
        "import sys; from gymbench.plugins import Plugins; p = Plugins(); "
        "from gymbench.cli import build_parser; build_parser(p); "
        "heavy = ('aiohttp', 'numpy', 'scipy', 'sympy', 'math_verify', 'torch', 'omegaconf', 'matplotlib'); "
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_collect_with_exact_match_does_not_import_scipy_or_sympy(tmp_path: Path) -> None:
    code = (
        "import sys; from gymbench.plugins import Plugins; from gymbench.collect.command import run_collect; "
        "from gymbench.collect.config import CollectConfig; p = Plugins(); "
        "p.verifier('exact-match', {}); p.strategy('semaphore', {'num_samples_in_parallel': 2}); "
        "p.backend('openai', {'base_url': 'http://127.0.0.1:1/v1', 'model': 'm'}); "
        "print(sorted(m for m in ('scipy', 'sympy', 'math_verify', 'torch') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path)
    assert done.stdout.strip() == "[]"
