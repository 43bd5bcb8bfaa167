"""The plugin manager and a typed facade over its hooks.

Built-in plugins are imported by module name and registered exactly as a third-party plugin is;
then the ``gymbench`` entry-point group is loaded, and ``check_pending()`` catches misspelt hook
names. Plugins named in ``GYMBENCH_BLOCK_PLUGINS`` (comma-separated) are never registered; an
entry of the form ``kind:name`` (``verifier:exact-match``) blocks that one component, so a
third-party plugin can replace a built-in without blocking the built-ins registered beside it.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, cast

import pluggy

from gymbench import hookspecs
from gymbench.engine_metrics import EngineMetrics
from gymbench.errors import PluginError, UnknownComponentError
from gymbench.types import Backend, Command, Component, ComponentFactory, ConcurrencyStrategy, RunInfo, Verifier

if TYPE_CHECKING:
    from gymbench.record import ResultsRecord

ENTRY_POINT_GROUP = "gymbench"
BLOCK_ENV = "GYMBENCH_BLOCK_PLUGINS"

BUILTIN_PLUGINS: tuple[str, ...] = (
    "gymbench.builtin.backends",
    "gymbench.builtin.verifiers",
    "gymbench.builtin.strategies",
    "gymbench.builtin.commands",
    "gymbench.builtin.engines",
    "gymbench.collect.plugin",
    "gymbench.tune.plugin",
    "gymbench.sim.plugin",
    "gymbench.calibrate.plugin",
    "gymbench.engine.plugin",
    "gymbench.train.plugin",
    "gymbench.gate.commands",
    "gymbench.report.commands",
)
"""Built-in plugins, imported by module name exactly as entry points are. Each is registration
only: what it registers imports its implementation when used (``gymbench --version`` stays fast)."""

PLURALS = {"strategy": "strategies"}
PROTOCOLS: dict[str, type] = {"backend": Backend, "verifier": Verifier, "strategy": ConcurrencyStrategy}

COMPONENT_KINDS = {
    "backend": "gymbench_register_backends",
    "verifier": "gymbench_register_verifiers",
    "strategy": "gymbench_register_strategies",
    "model": "gymbench_register_models",
}


def get_plugin_manager(
    extra_plugins: Iterable[object] = (),
    *,
    load_entry_points: bool = True,
    blocked: Iterable[str] | None = None,
) -> pluggy.PluginManager:
    """A fresh plugin manager: built-ins, then ``extra_plugins``, then entry points."""
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    names = _blocked_names(blocked)
    for name in names:
        if ":" not in name:
            pm.set_blocked(name)
    pm.gymbench_blocked_components = frozenset(name for name in names if ":" in name)  # type: ignore[attr-defined]
    for module_name in BUILTIN_PLUGINS:
        if not pm.is_blocked(module_name):
            pm.register(importlib.import_module(module_name), name=module_name)
    for plugin in extra_plugins:
        pm.register(plugin, name=_readable_name(pm, plugin))
    pm.gymbench_entry_points = {}  # type: ignore[attr-defined]
    pm.gymbench_plugin_failures = []  # type: ignore[attr-defined]
    if load_entry_points:
        _load_entry_points(pm)
    pm.check_pending()
    return pm


def _load_entry_points(pm: pluggy.PluginManager) -> None:
    """Load the ``gymbench`` entry points one by one: a plugin that fails to import or register is
    skipped with one line naming it and its distribution (``Plugins`` prints it), and the rest load.
    pluggy's ``load_setuptools_entrypoints`` would stop at the first failure with a traceback."""
    import importlib.metadata

    for dist in list(importlib.metadata.distributions()):
        for entry_point in dist.entry_points:
            if entry_point.group != ENTRY_POINT_GROUP or pm.has_plugin(entry_point.name):
                continue
            if pm.is_blocked(entry_point.name):
                continue
            where = f"{entry_point.name!r} (distribution {dist.metadata['Name']} {dist.version})"
            try:
                plugin = entry_point.load()
                pm.register(plugin, name=entry_point.name)
            except Exception as exc:  # noqa: BLE001 - a broken third-party plugin is skipped, named
                if pm.has_plugin(entry_point.name):
                    pm.unregister(name=entry_point.name)
                pm.gymbench_plugin_failures.append(plugin_failure(where, "failed to load", exc))  # type: ignore[attr-defined]
                continue
            pm.gymbench_entry_points[entry_point.name] = where  # type: ignore[attr-defined]


def plugin_failure(where: str, what: str, exc: BaseException) -> str:
    """One line for a plugin that failed: which one, from which distribution, and the error."""
    message = " ".join(str(exc).split()) or "(no message)"
    return f"plugin {where} {what}: {type(exc).__name__}: {message}; skipped"


_WARNED: set[str] = set()
"""Plugin failures already printed by this process (each ``Plugins()`` would find them again)."""


class _HookFailed(Exception):
    def __init__(self, plugin: str, line: str) -> None:
        super().__init__(line)
        self.plugin, self.line = plugin, line


def _readable_name(pm: pluggy.PluginManager, plugin: object) -> str:
    """Name an object plugin by its module or class, so error messages can say which one."""
    base = getattr(plugin, "__name__", None)
    if not isinstance(base, str):
        base = f"{type(plugin).__module__}.{type(plugin).__qualname__}"
    name, suffix = base, 1
    while pm.has_plugin(name) or pm.is_blocked(name):
        suffix += 1
        name = f"{base}#{suffix}"
    return name


def _blocked_names(blocked: Iterable[str] | None) -> list[str]:
    if blocked is not None:
        return list(blocked)
    raw = os.environ.get(BLOCK_ENV, "")
    return [name.strip() for name in raw.split(",") if name.strip()]


class Named(Protocol):
    @property
    def name(self) -> str: ...


ItemT = TypeVar("ItemT", bound=Named)


@dataclass(frozen=True)
class Registered(Generic[ItemT]):
    """A component or command together with the plugin that registered it."""

    item: ItemT
    plugin: str

    @property
    def name(self) -> str:
        return str(self.item.name)


class Plugins:
    """Typed access to what the plugins registered; collected once, checked for clashes."""

    def __init__(self, pm: pluggy.PluginManager | None = None) -> None:
        self.pm = pm if pm is not None else get_plugin_manager()
        self.blocked_components: frozenset[str] = getattr(self.pm, "gymbench_blocked_components", frozenset())
        self.failures: list[str] = list(getattr(self.pm, "gymbench_plugin_failures", []))
        """One line per third-party plugin skipped because it failed to load or register."""
        while True:  # an entry-point plugin whose registration hook raises is dropped, and the rest collected again
            try:
                self.components: dict[str, dict[str, Registered[Component]]] = {
                    kind: self._collect(hook_name, Component, kind) for kind, hook_name in COMPONENT_KINDS.items()
                }
                self.commands: dict[str, Registered[Command]] = self._collect(
                    "gymbench_register_commands", Command, "command"
                )
                self.engines: dict[str, Registered[EngineMetrics]] = self._collect(
                    "gymbench_register_engine_metrics", EngineMetrics, "engine"
                )
                break
            except _HookFailed as failed:
                self.pm.unregister(name=failed.plugin)
                self.failures.append(failed.line)
        for line in self.failures:
            if line not in _WARNED:
                _WARNED.add(line)
                print(f"gymbench: warning: {line}", file=sys.stderr)

    @property
    def hook(self) -> pluggy.HookRelay:
        """The raw hooks; the methods below call them with their types spelt out."""
        return self.pm.hook

    def engine_metrics(self) -> list[EngineMetrics]:
        """Every engine's metric names, built-ins first (the first registered wins a tie)."""
        return [registered.item for registered in self.engines.values()]

    def add_options(self, parser: argparse.ArgumentParser, command: str) -> None:
        self.pm.hook.gymbench_add_options(parser=parser, command=command)

    def update_fingerprint(self, fingerprint: dict[str, dict[str, Any]]) -> None:
        self.pm.hook.gymbench_update_fingerprint(fingerprint=fingerprint)

    def run_start(self, run: RunInfo) -> None:
        self.pm.hook.gymbench_run_start(run=run)

    def run_finish(self, run: RunInfo, record: ResultsRecord) -> None:
        self.pm.hook.gymbench_run_finish(run=run, record=record)

    def _collect(self, hook_name: str, expected: type[ItemT], kind: str) -> dict[str, Registered[ItemT]]:
        found: dict[str, Registered[ItemT]] = {}
        caller = getattr(self.pm.hook, hook_name)
        for impl in caller.get_hookimpls():  # registration order: built-ins first
            plugin_name = self.pm.get_name(impl.plugin) or repr(impl.plugin)
            for item in self._registered(impl, plugin_name, hook_name):
                if f"{kind}:{getattr(item, 'name', '')}" in self.blocked_components:
                    continue
                if not isinstance(item, expected):
                    raise PluginError(
                        f"plugin {plugin_name!r}: {hook_name} returned {item!r}; expected "
                        f"gymbench.types.{expected.__name__} objects"
                    )
                if item.name in found:
                    raise PluginError(
                        f"{kind} {item.name!r} is registered by both plugin "
                        f"{found[item.name].plugin!r} and plugin {plugin_name!r}; block one of "
                        f"them with {BLOCK_ENV}=<plugin name> or rename the {kind}"
                    )
                found[item.name] = Registered(item, plugin_name)
        return found

    def _registered(self, impl: Any, plugin_name: str, hook_name: str) -> list[Any]:
        """What one plugin's registration hook returns; an entry-point plugin that raises is skipped."""
        entry_points: dict[str, str] = getattr(self.pm, "gymbench_entry_points", {})
        try:
            return list(impl.function() or [])
        except Exception as exc:
            if plugin_name not in entry_points:
                raise  # a built-in or an object registered in code: a bug, with its traceback
            raise _HookFailed(
                plugin_name, plugin_failure(entry_points[plugin_name], f"failed in {hook_name}", exc)
            ) from exc

    def names(self, kind: str) -> list[str]:
        return sorted(self.components[kind])

    def component(self, kind: str, name: str) -> Component:
        """The registered component, or an error listing the names that exist."""
        registered = self.components[kind].get(name)
        if registered is None:
            known = ", ".join(self.names(kind)) or "(none registered)"
            if self.failures:  # it may be the broken plugin's: name the failure, not only "unknown"
                raise UnknownComponentError(
                    f"{kind} {name!r} is not available: {' '.join(self.failures)}. Fix or uninstall that plugin "
                    f"(or block it with {BLOCK_ENV}), then run again; known {PLURALS.get(kind, kind + 's')}: {known}"
                )
            raise UnknownComponentError(
                f"unknown {kind} {name!r}; known {PLURALS.get(kind, kind + 's')}: {known}. "
                "Run `gymbench plugins` to see every plugin and what it registers."
            )
        return registered.item

    def schema(self, kind: str, name: str) -> type | None:
        """The dataclass a component's options are checked against (imported now when registered by
        name), or ``None`` when it takes any mapping."""
        schema = self.component(kind, name).settings
        if isinstance(schema, str):
            module_name, _, attribute = schema.partition(":")
            schema = getattr(importlib.import_module(module_name), attribute)
        return schema

    def options(self, kind: str, name: str) -> set[str] | None:
        """The option names a component declares, or ``None`` when it takes any mapping."""
        from gymbench.settings import known_fields

        schema = self.schema(kind, name)
        return known_fields(schema) if schema is not None else None

    def check(self, kind: str, name: str, config: Mapping[str, Any] | object | None = None) -> object:
        """The component's options, checked against its settings schema (the raw mapping without one).
        An instance of the schema is taken as it is: it was checked when it was built.

        Commands call this before a run starts, so a misspelt option fails at once rather than
        after a server was started.
        """
        schema = self.schema(kind, name)
        if schema is not None and isinstance(config, schema):  # built and checked already
            return config
        options: Any = dict(cast(Mapping[str, Any], config or {}))
        if schema is not None:
            from gymbench.settings import build_settings

            options = build_settings(schema, (), options, where=f"{kind} {name!r}")
        return options

    def create(self, kind: str, name: str, config: Mapping[str, Any] | object | None = None) -> object:
        """Build the named component, its options checked against its settings schema."""
        component = self.component(kind, name)
        made = component.factory(self.check(kind, name, config))
        expected = PROTOCOLS.get(kind)
        if expected is not None and not isinstance(made, expected):
            plugin = self.components[kind][name].plugin
            raise PluginError(
                f"{kind} {name!r} from plugin {plugin!r} built a {type(made).__name__}, which is not a "
                f"gymbench.types.{expected.__name__} (see its methods there)"
            )
        return made

    def backend(self, name: str, config: Mapping[str, Any] | object | None = None) -> Backend:
        return cast(Backend, self.create("backend", name, config))  # create checked the protocol

    def verifier(self, name: str, config: Mapping[str, Any] | None = None) -> Verifier:
        return cast(Verifier, self.create("verifier", name, config))

    def strategy(self, name: str, config: Mapping[str, Any] | object | None = None) -> ConcurrencyStrategy:
        return cast(ConcurrencyStrategy, self.create("strategy", name, config))


def lazy(target: str) -> ComponentFactory:
    """A factory that imports ``"package.module:attribute"`` when first called.

    Plugins register on every ``gymbench`` call, so a registration that imported aiohttp, scipy or
    sympy would make ``gymbench --version`` take seconds; with ``lazy`` the import happens only
    when the component is used.
    """
    module_name, _, attribute = target.partition(":")

    def factory(options: Any) -> object:
        made: object = getattr(importlib.import_module(module_name), attribute)(options)
        return made

    factory.__qualname__ = factory.__name__ = f"lazy({target!r})"
    return factory
