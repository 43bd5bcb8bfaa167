"""Figures about gymbench's own structure, so that a redesign can be judged by numbers anyone can rerun.

``python -m gymbench.devtools.structure`` prints:

- the import cycles between files (strongly connected groups of modules), counting imports at a
  module's top level and, separately, every import including the deferred ones inside functions;
- ``Any`` in function signatures per 1,000 lines of code (parameters and return annotations), and
  the functions whose return annotation is ``Any``;
- the settings declared in more than one schema (a field name that several settings dataclasses
  declare is a setting written twice unless one schema nests the other);
- the places that replace a file atomically (temp file + rename) and the places that parse
  rollouts-file lines, which should each be one owner;
- the places that build an HTTP client session, and the plugin managers built below the entry
  points (one load path: one client, one plugin manager handed down);
- the command-line flags and pytest options written by hand instead of generated from the
  settings dataclasses (outside the generator itself, ``cli.py`` and ``devtools/``).

``--check`` compares the figures with the limits in ``pyproject.toml`` (``[tool.gymbench.structure]``)
and fails when one rose: a ratchet, lowered by hand when the code gets better.

It reads source text with :mod:`ast`; it imports nothing from gymbench, so it also runs on a tree
that does not import.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent


@dataclass
class Module:
    name: str
    path: Path
    tree: ast.Module
    lines: int
    top_imports: set[str] = field(default_factory=set)
    all_imports: set[str] = field(default_factory=set)


def load_modules(package: Path = PACKAGE) -> dict[str, Module]:
    modules: dict[str, Module] = {}
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package.parent).with_suffix("")
        parts = list(relative.parts)
        if parts[-1] == "__init__":
            parts.pop()
        name = ".".join(parts)
        text = path.read_text(encoding="utf-8")
        modules[name] = Module(name, path, ast.parse(text), len(text.splitlines()))
    for module in modules.values():
        _collect_imports(module, modules)
    return modules


def _resolve(module: Module, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.name.split(".")
    if module.path.name != "__init__.py":
        base = base[:-1]
    base = base[: len(base) - node.level + 1]
    return ".".join([*base, node.module] if node.module else base)


def _targets(module: Module, node: ast.Import | ast.ImportFrom, known: dict[str, Module]) -> Iterator[str]:
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield from _nearest(alias.name, known)
        return
    source = _resolve(module, node)
    for alias in node.names:
        full = f"{source}.{alias.name}"
        yield from _nearest(full if full in known else source, known)


def _nearest(name: str, known: dict[str, Module]) -> Iterator[str]:
    while name and name not in known:
        name = name.rpartition(".")[0]
    if name.startswith("gymbench"):
        yield name


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _collect_imports(module: Module, known: dict[str, Module]) -> None:
    def visit(nodes: list[ast.stmt] | list[ast.stmt | ast.ExceptHandler], top: bool) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and _is_type_checking(node):
                continue  # typing-only imports run nothing
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in _targets(module, node, known):
                    if target != module.name:
                        module.all_imports.add(target)
                        if top:
                            module.top_imports.add(target)
                continue
            deeper = top and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            for child_field in ("body", "orelse", "finalbody", "handlers"):
                children = getattr(node, child_field, None)
                if isinstance(children, list):
                    visit([c for c in children if isinstance(c, ast.stmt) or isinstance(c, ast.ExceptHandler)], deeper)
            if isinstance(node, ast.ExceptHandler):
                visit(node.body, top)

    visit(module.tree.body, True)


def cycles(modules: dict[str, Module], *, deferred: bool) -> list[list[str]]:
    """Strongly connected groups of two or more modules (Tarjan's algorithm).

    An import of a package's ``__init__`` counts as an edge to that file, as Python runs it.
    """
    graph = {name: sorted(m.all_imports if deferred else m.top_imports) for name, m in modules.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    counter = [0]

    def strongconnect(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, []):
            if target not in index:
                strongconnect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                item = stack.pop()
                on_stack.discard(item)
                group.append(item)
                if item == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for name in graph:
        if name not in index:
            strongconnect(name)
    return sorted(groups, key=len, reverse=True)


ANY_NAMES = {"Any"}
"""``Any`` and every alias of it found in the package (``JSONValue: TypeAlias = Any`` hides an ``Any``
from a plain text count; :func:`collect_any_aliases` adds such names)."""


def collect_any_aliases(modules: dict[str, Module]) -> set[str]:
    """Module-level aliases whose value mentions ``Any`` (or another such alias), to a fixed point."""
    assignments: list[tuple[str, ast.expr]] = []
    for module in modules.values():
        for node in module.tree.body:
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                if "TypeAlias" in ast.unparse(node.annotation):
                    assignments.append((node.target.id, node.value))
            elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                if isinstance(node.value, ast.Subscript):  # Name = dict[str, Any] and the like
                    assignments.append((node.targets[0].id, node.value))
    names = set(ANY_NAMES)
    while True:
        found = {name for name, value in assignments if name not in names and _mentions_any(value, names)}
        if not found:
            return names
        names |= found


def _mentions_any(annotation: ast.expr | None, names: set[str] | None = None) -> bool:
    if annotation is None:
        return False
    names = names or ANY_NAMES
    for node in ast.walk(annotation):
        if isinstance(node, ast.Name) and node.id in names:
            return True
        if isinstance(node, ast.Attribute) and node.attr in names:
            return True
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if any(re.search(rf"\\b{re.escape(name)}\\b", node.value) for name in names):
                return True
    return False


@dataclass
class AnyFigures:
    lines: int
    in_signatures: int
    returning_any: list[str]

    @property
    def per_kloc(self) -> float:
        return 1000 * self.in_signatures / max(self.lines, 1)

    @property
    def returning_per_kloc(self) -> float:
        return 1000 * len(self.returning_any) / max(self.lines, 1)


def any_figures(modules: dict[str, Module], only: tuple[str, ...] = (), names: set[str] | None = None) -> AnyFigures:
    """Counts ``Any`` in parameter and return annotations; ``names`` adds aliases of ``Any``."""
    names = names or ANY_NAMES
    lines = 0
    count = 0
    returning: list[str] = []
    for module in modules.values():
        if only and not module.name.startswith(only):
            continue
        lines += module.lines
        for node in ast.walk(module.tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            arguments = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
            arguments += [a for a in (node.args.vararg, node.args.kwarg) if a is not None]
            count += sum(_mentions_any(a.annotation, names) for a in arguments)
            if _mentions_any(node.returns, names):
                count += 1
                returning.append(f"{module.name}.{node.name}")
    return AnyFigures(lines, count, returning)


def _dataclass_names(tree: ast.Module) -> Iterator[ast.ClassDef]:
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for decorator in node.decorator_list:
                target = decorator.func if isinstance(decorator, ast.Call) else decorator
                name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
                if name == "dataclass":
                    yield node
                    break


def _is_settings_schema(node: ast.ClassDef) -> bool:
    """A settings schema: a dataclass named like one, or one whose fields carry ``help`` metadata."""
    if node.name.endswith(("Settings", "Config", "Options")):
        return True
    return "help" in ast.unparse(node) and "metadata" in ast.unparse(node)


def settings_declarations(modules: dict[str, Module]) -> dict[str, list[str]]:
    """Each setting name and the schemas that declare it."""
    declared: dict[str, list[str]] = defaultdict(list)
    for module in modules.values():
        for node in _dataclass_names(module.tree):
            if not _is_settings_schema(node):
                continue
            for statement in node.body:
                if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
                    name = statement.target.id
                    if name.isupper() or "ClassVar" in ast.unparse(statement.annotation):
                        continue
                    declared[name].append(f"{module.name}.{node.name}")
    return dict(declared)


def copied_schemas(declared: dict[str, list[str]], least: int = 3) -> list[str]:
    """Pairs of settings schemas that declare ``least`` or more of the same names: a schema copied
    instead of nested (two unrelated schemas rarely share three names)."""
    shared: dict[tuple[str, str], int] = defaultdict(int)
    for places in declared.values():
        for index, first in enumerate(sorted(set(places))):
            for second in sorted(set(places))[index + 1 :]:
                shared[(first, second)] += 1
    return [f"{a} ~ {b}: {n}" for (a, b), n in sorted(shared.items(), key=lambda kv: -kv[1]) if n >= least]


def _calls(tree: ast.AST) -> Iterator[tuple[ast.Call, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute):
                yield node, func.attr
            elif isinstance(func, ast.Name):
                yield node, func.id


def _functions(tree: ast.AST) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def atomic_writers(modules: dict[str, Module]) -> list[str]:
    """Functions that rename a file over another (``os.replace``, ``os.rename``, ``Path.replace/rename``).

    ``str.replace`` and ``dataclasses.replace`` are told apart by their arguments: a rename has one
    positional argument that is not a string literal and no keywords.
    """
    found: list[str] = []
    for module in modules.values():
        if module.name.startswith("gymbench.devtools"):
            continue
        for function in _functions(module.tree):
            for call, name in _calls(function):
                func = call.func
                is_os = isinstance(func, ast.Attribute) and ast.unparse(func.value) == "os"
                if name in ("replace", "rename") and is_os:
                    found.append(f"{module.name}.{function.name}")
                    break
                if (
                    name in ("replace", "rename")
                    and not is_os
                    and len(call.args) == 1
                    and not call.keywords
                    and not isinstance(call.args[0], ast.Constant)
                    and ast.unparse(func.value if isinstance(func, ast.Attribute) else func) not in ("dataclasses",)
                ):
                    found.append(f"{module.name}.{function.name}")
                    break
    return sorted(set(found))


def rollouts_readers(modules: dict[str, Module]) -> list[str]:
    """Functions that parse a file line by line as JSON (``for ... in`` a handle, then ``loads``)."""
    found: list[str] = []
    for module in modules.values():
        if module.name.startswith(("gymbench.devtools", "gymbench.sim")):
            continue
        for function in _functions(module.tree):
            for loop in ast.walk(function):
                if not isinstance(loop, (ast.For, ast.AsyncFor)):
                    continue
                if any(name in ("loads", "read_row", "parse_row") for _, name in _calls(loop)):
                    found.append(f"{module.name}.{function.name}")
                    break
    return sorted(set(found))


def _call_sites(modules: dict[str, Module], names: tuple[str, ...], skip: tuple[str, ...] = ()) -> list[str]:
    """``module.function`` (or ``module`` at top level) of every call to one of ``names``."""
    found: list[str] = []
    for module in modules.values():
        if module.name.startswith(skip) or module.name in skip:
            continue
        owners = {id(call): function.name for function in _functions(module.tree) for call, _ in _calls(function)}
        for call, name in _calls(module.tree):
            if name in names:
                owner = owners.get(id(call))
                found.append(f"{module.name}.{owner}" if owner else module.name)
    return sorted(found)


GENERATOR = ("gymbench.settings", "gymbench.cli", "gymbench.devtools")
"""Where flags may be written by hand: the generator itself, the entry point, the dev tools."""


def client_sessions(modules: dict[str, Module]) -> list[str]:
    """Where an ``aiohttp.ClientSession`` is built: the one load path has one such place."""
    return _call_sites(modules, ("ClientSession",))


def plugin_managers(modules: dict[str, Module]) -> list[str]:
    """``Plugins()`` built below the entry points (the CLI and the pytest plugin build it once and
    hand it down; a module that builds its own loads every plugin again)."""
    return _call_sites(modules, ("Plugins",), skip=PROCESS_ENTRY_POINTS)


PROCESS_ENTRY_POINTS = (
    "gymbench.cli",
    "gymbench.pytest.plugin",
    "gymbench.plugins",
    "gymbench.testing",
    "gymbench.collect.shard_worker",
    "gymbench.train.ddp",
)
"""Modules that start a process's work and so build its plugin manager: the CLI, the pytest plugin,
the plugin-author test kit (a fresh manager per test), a shard worker and a torchrun rank (each a
process of its own)."""


def hand_written_flags(modules: dict[str, Module]) -> list[str]:
    """argparse flags written by hand outside :data:`GENERATOR`."""
    return _call_sites(modules, ("add_argument",), skip=GENERATOR)


def hand_written_pytest_options(modules: dict[str, Module]) -> list[str]:
    """pytest options written by hand (``addoption``) instead of generated from a settings dataclass."""
    return _call_sites(modules, ("addoption",), skip=GENERATOR)


RATCHET = (
    "import_cycles_all_imports",
    "functions_returning_any_per_kloc",
    "settings_declared_more_than_once",
    "schema_pairs_sharing_3_or_more_settings",
    "atomic_file_writers",
    "line_by_line_json_readers",
    "client_sessions",
    "plugin_managers_built_below_entry_points",
    "hand_written_flags",
    "hand_written_pytest_options",
)
"""The figures the ratchet holds: each may fall, none may rise above its limit in pyproject.toml."""


def measured(value: object) -> float:
    """A figure as one number: a list or mapping by its length."""
    if isinstance(value, (list, dict)):
        return float(len(value))
    assert isinstance(value, (int, float)), value
    return float(value)


def limits(pyproject: Path) -> dict[str, float]:
    import tomllib

    table = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("tool", {}).get("gymbench", {})
    found = table.get("structure", {})
    return {str(key): float(value) for key, value in found.items()}


def over_limits(result: dict[str, object], allowed: dict[str, float]) -> list[str]:
    """One line per ratcheted figure above its limit (or with no limit written down)."""
    lines: list[str] = []
    for key in RATCHET:
        value = measured(result[key])
        if key not in allowed:
            lines.append(f"{key}: {value:g}, and pyproject.toml's [tool.gymbench.structure] sets no limit for it")
        elif value > allowed[key]:
            lines.append(
                f"{key}: {value:g}, above its limit {allowed[key]:g} in pyproject.toml's [tool.gymbench.structure]"
                " (a new copy? use the one that exists)"
            )
    return lines


def figures(package: Path = PACKAGE) -> dict[str, object]:
    modules = load_modules(package)
    code = {name: m for name, m in modules.items() if not name.startswith("gymbench.devtools")}
    anys = any_figures(code)
    aliases = collect_any_aliases(code)
    honest = any_figures(code, names=aliases)
    declared = settings_declarations(code)
    repeated = {name: places for name, places in declared.items() if len(places) > 1}
    return {
        "schema_pairs_sharing_3_or_more_settings": copied_schemas(declared),
        "modules": len(code),
        "lines_of_code": anys.lines,
        "import_cycles_top_level": cycles(code, deferred=False),
        "import_cycles_all_imports": cycles(code, deferred=True),
        "any_in_signatures": anys.in_signatures,
        "any_in_signatures_per_kloc": round(anys.per_kloc, 2),
        "functions_returning_any": len(anys.returning_any),
        "functions_returning_any_per_kloc": round(anys.returning_per_kloc, 2),
        "aliases_of_any": sorted(aliases - ANY_NAMES),
        "any_in_signatures_counting_aliases": honest.in_signatures,
        "any_in_signatures_counting_aliases_per_kloc": round(honest.per_kloc, 2),
        "functions_returning_any_counting_aliases": len(honest.returning_any),
        "functions_returning_any_counting_aliases_per_kloc": round(honest.returning_per_kloc, 2),
        "settings_declared": len(declared),
        "settings_declared_more_than_once": repeated,
        "atomic_file_writers": atomic_writers(code),
        "line_by_line_json_readers": rollouts_readers(code),
        "client_sessions": client_sessions(code),
        "plugin_managers_built_below_entry_points": plugin_managers(code),
        "hand_written_flags": hand_written_flags(code),
        "hand_written_pytest_options": hand_written_pytest_options(code),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gymbench.devtools.structure", description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--package", type=Path, default=PACKAGE, help="the package folder to read")
    parser.add_argument("--check", action="store_true", help="fail when a figure rose above its limit")
    args = parser.parse_args(argv)
    result = figures(args.package)
    if args.check:
        problems = over_limits(result, limits(args.package.resolve().parent / "pyproject.toml"))
        for line in problems:
            print(f"structure: {line}")
        return 1 if problems else 0
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    top, every = result["import_cycles_top_level"], result["import_cycles_all_imports"]
    assert isinstance(top, list) and isinstance(every, list)
    print(f"modules: {result['modules']}, lines of code: {result['lines_of_code']}")
    print(f"import cycles between files: {len(top)} at top level, {len(every)} counting deferred imports")
    for group in every:
        print("  - " + " <-> ".join(group))
    print(
        f"Any in signatures: {result['any_in_signatures']} ({result['any_in_signatures_per_kloc']} per 1,000 lines); "
        f"functions returning Any: {result['functions_returning_any']} "
        f"({result['functions_returning_any_per_kloc']} per 1,000 lines)"
    )
    print(
        f"  counting aliases of Any ({', '.join(map(str, result['aliases_of_any'])) or 'none'}) as Any: "  # type: ignore[call-overload]
        f"{result['any_in_signatures_counting_aliases']} ({result['any_in_signatures_counting_aliases_per_kloc']} "
        f"per 1,000 lines); functions returning Any: {result['functions_returning_any_counting_aliases']} "
        f"({result['functions_returning_any_counting_aliases_per_kloc']} per 1,000 lines)"
    )
    repeated = result["settings_declared_more_than_once"]
    assert isinstance(repeated, dict)
    pairs = result["schema_pairs_sharing_3_or_more_settings"]
    assert isinstance(pairs, list)
    print(f"settings declared: {result['settings_declared']}; declared in more than one schema: {len(repeated)}")
    print(f"pairs of schemas sharing 3 or more settings (copies, not nesting): {len(pairs)}")
    for pair in pairs:
        print(f"  - {pair}")
    for name, places in sorted(repeated.items()):
        print(f"  - {name}: {len(places)} ({', '.join(places)})")
    for key, title in (
        ("atomic_file_writers", "atomic file writers"),
        ("line_by_line_json_readers", "JSON-lines readers"),
        ("client_sessions", "HTTP client sessions built"),
        ("plugin_managers_built_below_entry_points", "plugin managers built below the entry points"),
        ("hand_written_flags", "command-line flags written by hand"),
        ("hand_written_pytest_options", "pytest options written by hand"),
    ):
        places = result[key]
        assert isinstance(places, list)
        print(f"{title}: {len(places)}")
        for place in places:
            print(f"  - {place}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
