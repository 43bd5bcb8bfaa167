"""Settings, parsed one way everywhere: commands, component options, the pytest API, files.

NeMo Gym's tools take Hydra-style ``+key=value`` overrides; OmegaConf (Hydra's own config
library) merges them onto a typed dataclass, so a wrong type or an unknown key is an error that
names the key, and nested keys (``+responses_create_params.temperature=0.7``) work. Every command
also accepts each scalar setting as a ``--flag`` and a YAML/JSON file with ``--config FILE``; a
plugin component (backend, verifier, strategy) declares a dataclass of its options and gets them
checked the same way. Range checks live in each schema's ``__post_init__`` and raise
:class:`~gymbench.errors.GymbenchError`.

Values are literal: ``${...}`` is not interpolated (a prompt or a URL may contain it).

OmegaConf is imported only when settings are actually built, so registering a command costs
nothing at start-up.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import re
import reprlib
import sys
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from gymbench.errors import GymbenchError

if TYPE_CHECKING:
    import yaml

T = TypeVar("T")
OVERRIDE = re.compile(r"^\+{0,2}[A-Za-z_][\w.\-]*=")
TRUE_WORDS = ("true", "yes", "on", "1")


# --------------------------------------------------------------------------- declaring


def doc(
    text: str,
    *,
    path: bool = False,
    run_neutral: bool = False,
    flags: Sequence[str] = (),
    metavar: str | None = None,
    positional: bool = False,
    was: str | None = None,
    alias: str | None = None,
    entry_flags: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A setting's field metadata: its help (``--help`` shows it) and, with ``path``, that its value is a
    file or folder path (made absolute where the working directory changes: shard workers, pyproject).

    ``flags`` spells the setting's command-line flags where ``--key`` is not the spelling a command has
    always had (``("-o", "--output")``, ``("--from",)``, ``("--metric",)`` for a list given once per
    item); ``+key=value`` and ``--config`` still use the setting's name. ``positional`` takes the
    setting from the words of the command line that are not ``key=value`` (``compare BASE CAND``),
    in declaration order; a list setting takes the rest.

    ``run_neutral`` says the setting does not change what a collection's rows contain (progress, where
    the record goes, how many rollouts run at once): a resume may change it. Every other setting of a
    collection defines the run and is in its fingerprint (:func:`run_defining_settings`). Defining is
    the default because a setting forgotten there costs a refused resume (``+resume_force=true`` goes
    on), while a setting wrongly left out would mix two runs in one file without a word.

    ``was`` is the setting's former name, kept working as a deprecated alias (``--old-name``,
    ``+old_name=`` and an ``old_name`` key in ``--config`` or pyproject), each use noted with one line
    on stderr naming the new one: a rename that makes a name say what it is breaks no script.

    ``alias`` is another tool's name for the same setting (NeMo Gym's ``resume_from_cache`` for
    ``resume``), accepted as ``+alias=`` and in ``--config`` without a word: a user of that tool types
    what they know. ``entry_flags`` gives a mapping setting flags for single entries (``{"--temperature":
    "temperature"}`` on ``responses_create_params``: ``--temperature 0.7`` is
    ``+responses_create_params.temperature=0.7``), as the tool it stands in for spells them.
    """
    metadata: dict[str, Any] = {"help": text}
    if was:
        metadata["was"] = was
    if alias:
        metadata["alias"] = alias
    if entry_flags:
        metadata["entry_flags"] = dict(entry_flags)
    if path:
        metadata["path"] = True
    if run_neutral:
        metadata["run_neutral"] = True
    if flags:
        metadata["flags"] = tuple(flags)
    if metavar:
        metadata["metavar"] = metavar
    if positional:
        metadata["positional"] = True
    return metadata


def _renamed(schema: type[Any], key: str = "was") -> dict[str, str]:
    """``{former name: name}`` of the schema's settings that were renamed (``doc(was=...)``); with
    ``key="alias"``, ``{other tool's name: name}`` (``doc(alias=...)``)."""
    if not dataclasses.is_dataclass(schema):
        return {}
    return {f.metadata[key]: f.name for f in dataclasses.fields(schema) if f.metadata.get(key)}


def _current_name(schema: type[Any], key: str) -> str:
    """``key`` with a renamed setting's former name (its first part) replaced by the new one, noted on
    stderr; another tool's name for a setting (``doc(alias=...)``) replaced without a word. A setting
    of that tool that gymbench does not offer (the schema's ``NOT_OFFERED``) is one line saying so."""
    top, dot, rest = key.partition(".")
    if top in known_fields(schema):
        return key
    if (aliased := _renamed(schema, "alias").get(top)) is not None:
        return aliased + dot + rest
    new = _renamed(schema).get(top)
    if new is None:
        foreign = not_offered(schema).get(top)
        if foreign is not None and foreign.why:
            raise GymbenchError(f"setting {top!r} is NeMo Gym's and gymbench does not offer it: {foreign.why}")
        return key
    print(f"gymbench: setting {top!r} is now called {new!r}; the old name will go", file=sys.stderr)
    return new + dot + rest


class Foreign(typing.NamedTuple):
    """A setting or flag of the tool a schema stands in for (NeMo Gym's) that gymbench does not offer."""

    why: str
    """Why, and what to do instead; empty: the flag is accepted and has nothing to do here
    (``--no-serve``: gymbench never starts the servers)."""
    takes_value: bool = True
    """Whether its flag takes a value (``--prompt-config FILE``) or is a switch (``--no-serve``)."""


def not_offered(schema: type[Any]) -> dict[str, Foreign]:
    """The settings of the tool ``schema`` stands in for that it does not offer (its ``NOT_OFFERED``
    class attribute): ``+name=`` and ``--name`` are each refused with one line saying why."""
    return dict(getattr(schema, "NOT_OFFERED", {}) or {})


def run_defining_settings(settings: Any) -> dict[str, Any]:
    """The values of ``settings`` (a settings object) that define a run's rows: every field not declared
    ``doc(..., run_neutral=True)``, by name, in declaration order."""
    return {
        field.name: getattr(settings, field.name)
        for field in dataclasses.fields(settings)
        if not field.metadata.get("run_neutral")
    }


def path_settings(*schemas: type[Any]) -> tuple[str, ...]:
    """The settings of ``schemas`` declared with ``doc(..., path=True)``, in declaration order."""
    names = [field.name for schema in schemas for field in dataclasses.fields(schema) if field.metadata.get("path")]
    return tuple(dict.fromkeys(names))


class Checked:
    """The root of settings groups that schemas combine (a schema inherits the groups it offers).

    Each group's ``__post_init__`` calls ``super().__post_init__()`` and then checks its own fields,
    so a schema made of several groups runs each group's checks exactly once; this class ends the
    chain.
    """

    def __post_init__(self) -> None:
        return None


# --------------------------------------------------------------------------- groups several jobs share
#
# A setting that means the same in two jobs is declared once, in a group both schemas inherit. The
# groups are plain (not frozen) dataclasses: a frozen and a non-frozen dataclass cannot inherit one
# base, and the schemas that share them (collection's, training's, the store commands') are plain.


@dataclasses.dataclass
class ResultsStore(Checked):
    """Where results records go and are read from: every command that saves or compares runs."""

    results_dir: str = dataclasses.field(
        default="results",
        metadata=doc(
            "where results records go, the store (default: results/)", path=True, run_neutral=True, metavar="DIR"
        ),
    )


@dataclasses.dataclass
class SaveRecord(Checked):
    """Save a results record under a name (``gymbench train``, ``pytest --gymbench-save``)."""

    save: str | None = dataclasses.field(
        default=None,
        metadata=doc("save a results record as results/<machine>/<time>_NAME.json", run_neutral=True, metavar="NAME"),
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.save is not None:
            safe_name("save", self.save)


@dataclasses.dataclass
class Progress(Checked):
    progress: bool = dataclasses.field(default=True, metadata=doc("show a progress bar", run_neutral=True))


@dataclasses.dataclass
class RayCluster(Checked):
    """The Ray cluster a job spreads over (collection's shards, training's ranks)."""

    ray_address: str | None = dataclasses.field(
        default=None,
        metadata=doc(
            "with launcher ray: auto or HOST:PORT of a Ray cluster (NeMo Gym's ray_head_node_address); unset: "
            "start one",
            run_neutral=True,
        ),
    )


@dataclasses.dataclass(frozen=True)
class ServerAddress(Checked):
    """Where a server gymbench starts listens (the simulator, llama.cpp's ``llama-server``); the port's
    default differs by server (:func:`with_defaults`): the simulator keeps 8000, where the README's
    commands expect it, llama.cpp's takes any free port."""

    host: str = dataclasses.field(default="127.0.0.1", metadata=doc("address to bind"))
    port: int = dataclasses.field(default=0, metadata=doc("port (0: any free port)"))

    def __post_init__(self) -> None:
        super().__post_init__()
        check_listen(self.host, self.port)


@dataclasses.dataclass(frozen=True)
class ServedReplicas(ServerAddress):
    """Several servers started as replicas of one (the simulator's, llama.cpp's): one setting for both."""

    replicas: int = dataclasses.field(
        default=1,
        metadata=doc("servers to start, on port, port+1, ... (free ports with port 0); +base_url takes the list"),
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        at_least("replicas", self.replicas, 1, 64)


@dataclasses.dataclass(frozen=True)
class JsonOutput(Checked):
    json: bool = dataclasses.field(default=False, metadata=doc("print machine-readable JSON"))


@dataclasses.dataclass
class InputFile(Checked):
    """The file a command reads, named first on its command line (``show``, ``export``, ``timings``)."""

    path: str | None = dataclasses.field(default=None, metadata=doc("the file to read", path=True, positional=True))

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.path is not None, "path", None, "the file to read, as the first word after the command")


@dataclasses.dataclass
class OutputFile(Checked):
    """The file a command writes (``-o``)."""

    output: str | None = dataclasses.field(
        default=None, metadata=doc("the file to write", path=True, flags=("-o", "--output"), metavar="FILE")
    )


def with_defaults(
    schema: type[T],
    helps: Mapping[str, str] | None = None,
    *,
    flags: Mapping[str, Sequence[str]] | None = None,
    **defaults: Any,
) -> type[T]:
    """``schema`` with other defaults for some of its settings: where a command's default differs from
    another's, the setting is still declared once (type, help, checks) and only the default is given
    again (and, in ``helps``, what the setting means to this command, where a shared group's help is
    too general: ``-o`` of ``report`` is "the HTML file to write"; in ``flags``, the command-line flag
    a command has always spelt it with: ``--name`` for the ``save`` of ``calibrate``). The result is a
    subclass with the same name, so it reads (and pickles) as ``schema`` would.
    """
    helps, flags = helps or {}, flags or {}
    unknown = (set(defaults) | set(helps) | set(flags)) - known_fields(schema)
    if unknown:
        raise TypeError(f"{schema.__name__} has no settings {sorted(unknown)}")
    hints = typing.get_type_hints(schema)
    changes: dict[str, dict[str, Any]] = {name: {"help": text} for name, text in helps.items()}
    for name, spelt in flags.items():
        changes.setdefault(name, {})["flags"] = tuple(spelt)
    fields = [
        (
            field.name,
            hints[field.name],
            _redeclared(field, defaults.get(field.name, field.default), changes.get(field.name, {})),
        )
        for field in dataclasses.fields(schema)  # type: ignore[arg-type]
        if field.name in defaults or field.name in changes
    ]
    namespace = {"__module__": schema.__module__, "__qualname__": schema.__qualname__, "__doc__": schema.__doc__}
    params = schema.__dataclass_params__  # type: ignore[attr-defined]
    derived = dataclasses.make_dataclass(
        schema.__name__, fields, bases=(schema,), namespace=namespace, frozen=params.frozen
    )
    return derived


def _redeclared(field: dataclasses.Field[Any], default: Any, metadata_changes: Mapping[str, Any]) -> Any:
    metadata = {**field.metadata, **metadata_changes}
    if default is dataclasses.MISSING:  # a new help only: the default as it was
        return dataclasses.field(default_factory=field.default_factory, metadata=metadata, kw_only=field.kw_only)
    return dataclasses.field(default=default, metadata=metadata, kw_only=field.kw_only)


# --------------------------------------------------------------------------- command line


def add_settings_arguments(
    parser: argparse.ArgumentParser,
    schema: type[Any],
    *,
    title: str = "settings (also accepted as +key=value)",
    switches: bool = False,
    skip: Sequence[str] = (),
) -> None:
    """``+key=value`` positionals, ``--config FILE``, and a ``--key`` flag per scalar field.

    A boolean field also gets ``--no-key``; ``--key`` alone means true (with ``switches``, ``--key``
    takes no value, so ``--verbose BASE`` leaves ``BASE`` a positional). The schema's positional
    settings (``doc(..., positional=True)``) are read from the same words as ``+key=value``.
    """
    named = positional_settings(schema)
    words = " ".join(f"[{field.name.upper()} ...]" if _is_list(field) else field.name.upper() for field in named)
    helps = "; ".join(f"{field.name.upper()}: {field.metadata.get('help', '')}" for field in named)
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar=f"{words} +key=value" if words else "+key=value",
        help=(f"{helps}; then " if helps else "")
        + f"settings as NeMo Gym spells them, e.g. {example_setting(schema)} (the + is optional)".replace("%", "%%"),
    )
    parser.add_argument("--config", dest="settings_file", metavar="FILE", help="a YAML or JSON file of settings")
    add_settings_flags(parser.add_argument_group(title), schema, skip, switches=switches)


def settings_parser(
    schema_path: str, *, switches: bool = True, skip: Sequence[str] = ()
) -> typing.Callable[[argparse.ArgumentParser], None]:
    """A command's ``configure``: its parser generated from its settings schema (``"module:Class"``),
    imported only when that command is the one run (a command's schemas cost milliseconds to make,
    and ``gymbench --help`` makes none)."""

    def configure(parser: argparse.ArgumentParser) -> None:
        from importlib import import_module

        module, name = schema_path.split(":")
        add_settings_arguments(parser, getattr(import_module(module), name), switches=switches, skip=skip)

    return configure


def positional_settings(schema: type[Any]) -> list[dataclasses.Field[object]]:
    """The settings a command takes as plain words (``doc(..., positional=True)``), in order."""
    return [field for field in dataclasses.fields(schema) if field.metadata.get("positional")]


def _is_list(field: dataclasses.Field[Any]) -> bool:
    return typing.get_origin(field.type if not isinstance(field.type, str) else None) in (list, tuple) or str(
        field.type
    ).startswith(("list[", "tuple["))


def example_setting(schema: type[Any]) -> str:
    """``+key=value`` of this command's own settings for its help (its first whole-number one)."""
    fields = dataclasses.fields(schema)
    if any(field.name == "num_samples_in_parallel" for field in fields):
        return "+num_samples_in_parallel=32"
    for field in fields:
        if type(field.default) is int and field.default > 0 and not field.name.startswith("_"):
            return f"+{field.name}={field.default * 2}"
    return f"+{fields[0].name}=VALUE" if fields else "+key=value"


def add_settings_flags(
    group: Any,
    schema: type[Any],
    skip: Sequence[str] = (),
    *,
    switches: bool = False,
    prefix: str = "--",
    dest_prefix: str = "setting_",
    add: str = "add_argument",
) -> None:
    """Only the ``--key`` flags, for a command whose positionals are something else.

    Every value is kept as text (``None``: not given) for :func:`settings_from_args` to type and check,
    so a flag, ``+key=value`` and a settings file are read by one set of rules. A list of words gets a
    flag given once per item. ``prefix``, ``dest_prefix`` and ``add`` serve pytest's options
    (``--gymbench-key``, ``group.addoption``), generated from a schema the same way.
    """
    hints = typing.get_type_hints(schema)  # once: evaluating them per field costs a quadratic ~15 ms at start-up
    add_flag = getattr(group, add)
    for field in dataclasses.fields(schema):
        if field.name in skip or field.metadata.get("positional"):
            continue
        for flag, entry in (field.metadata.get("entry_flags") or {}).items():
            add_flag(prefix + flag.removeprefix("--"), dest=f"{dest_prefix}{field.name}.{entry}", default=None,
                     metavar="VALUE", help=f"+{field.name}.{entry}=VALUE")  # fmt: skip
        kind = scalar_kind(hints[field.name])
        words = kind is None and _word_list(hints[field.name])
        if kind is None and not words:
            continue
        flags = field.metadata.get("flags") or (prefix + field.name.replace("_", "-"),)
        dest = dest_prefix + field.name
        help_text = _help(field)
        metavar = field.metadata.get("metavar")
        was = field.metadata.get("was")
        if was and not field.metadata.get("flags"):  # the former spelling, hidden from --help
            old_flag = prefix + was.replace("_", "-")
            if kind is bool:
                add_bool_flag(add_flag, [old_flag], dest_prefix + was, argparse.SUPPRESS, switches=switches)
            else:
                add_flag(old_flag, dest=dest_prefix + was, default=None, help=argparse.SUPPRESS)
        if kind is bool:
            add_bool_flag(add_flag, flags, dest, help_text, switches=switches)
        elif words:
            add_flag(*flags, dest=dest, action="append", default=None, metavar=metavar or "VALUE", help=help_text)
        else:
            add_flag(*flags, dest=dest, default=None, metavar=metavar or "VALUE", help=help_text)
    for name, foreign in not_offered(schema).items():  # another tool's flags: refused with its reason, or no-ops
        shape: dict[str, Any] = (
            {"metavar": "VALUE"} if foreign.takes_value else {"action": "store_const", "const": "true"}
        )
        add_flag(prefix + name.replace("_", "-"), dest=f"{dest_prefix}not_offered.{name}", default=None,
                 help=argparse.SUPPRESS, **shape)  # fmt: skip


def add_bool_flag(add_flag: Any, flags: Sequence[str], dest: str, help_text: str, *, switches: bool) -> None:
    """``--key`` (true) and the hidden ``--no-key`` (false) of a boolean setting."""
    if switches:
        add_flag(*flags, dest=dest, action="store_const", const="true", default=None, help=help_text)
    else:
        add_flag(*flags, dest=dest, nargs="?", const="true", default=None, metavar="BOOL", help=help_text)
    negatives = ["--no-" + flag.removeprefix("--") for flag in flags if flag.startswith("--")]
    add_flag(*negatives, dest=dest, action="store_const", const="false", help=argparse.SUPPRESS)


def _help(field: dataclasses.Field[Any]) -> str:
    """A field's help as argparse prints it (``%`` doubled: argparse formats help)."""
    return str(field.metadata.get("help", "")).replace("%", "%%")


def _refuse_non_words(schema: type[Any], built: Any) -> None:
    """A list of words holds words only: OmegaConf turns ``1`` into ``"1"`` but lets a nested list
    or mapping through (``+files=[1, [2]]`` reached ``os.path`` as a list, a ``TypeError``)."""
    hints = typing.get_type_hints(schema)
    for field in dataclasses.fields(schema):
        value = getattr(built, field.name, None)
        if isinstance(value, (list, tuple)) and _word_list(hints.get(field.name)):
            bad = next((item for item in value if not isinstance(item, str)), None)
            if bad is not None:
                raise GymbenchError(
                    f"setting {field.name!r}: every item must be a word, got {type(bad).__name__} "
                    f"{reprlib.repr(bad)}; "
                    "give a list of words, e.g. [a.jsonl, b.jsonl]"
                )


def _word_list(hint: Any) -> bool:
    """A list or tuple of words (``tuple[str, ...]``, ``list[str]``): a flag given once per item."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        hint = args[0] if len(args) == 1 else None
    return typing.get_origin(hint) in (list, tuple) and set(typing.get_args(hint)) - {Ellipsis} == {str}


def scalar_kind(hint: Any) -> type | None:
    """A field's scalar type (``Optional`` unwrapped), or ``None`` for dicts, lists and nested settings."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        hint = args[0] if len(args) == 1 else None
    return hint if hint in (bool, int, float, str) else None


def settings_from_args(
    schema: type[T], args: Any, *, base: Mapping[str, Any] | None = None, dest_prefix: str = "setting_"
) -> T:
    """Merge defaults ← ``base`` ← ``--config`` file ← ``+key=value`` ← ``--key value`` into ``schema``.

    Words that are not ``key=value`` go to the schema's positional settings, in order.
    """
    dotlist, words = [], []
    takes_words = bool(positional_settings(schema))
    for token in [*(getattr(args, "overrides", None) or []), *(getattr(args, "extra_overrides", None) or [])]:
        if OVERRIDE.match(token) or ("=" in token and not takes_words):
            dotlist.append(token.lstrip("+"))
        elif takes_words:
            words.append(token)
        else:
            raise GymbenchError(f"cannot read setting {token!r}: expected +key=value")
    layers: list[Mapping[str, Any]] = [base or {}]
    settings_file = getattr(args, "settings_file", None)
    if settings_file:
        layers.append(load_settings_file(Path(settings_file)))
    layers.append(_positional_values(schema, words))
    for name, foreign in not_offered(schema).items():
        if foreign.why and getattr(args, f"{dest_prefix}not_offered.{name}", None) is not None:
            flag = "--" + name.replace("_", "-")
            raise GymbenchError(f"{flag} is NeMo Gym's and gymbench does not offer it: {foreign.why}")
    for field in dataclasses.fields(schema):  # type: ignore[arg-type]
        for entry in field.metadata.get("entry_flags", {}).values():
            if (value := getattr(args, f"{dest_prefix}{field.name}.{entry}", None)) is not None:
                dotlist.append(f"{field.name}.{entry}={value}")
        value = getattr(args, dest_prefix + field.name, None)
        was = field.metadata.get("was")
        if value is None and was and getattr(args, dest_prefix + was, None) is not None:
            value = getattr(args, dest_prefix + was)
            _say_renamed_flag(was, field.name)
        flag = (field.metadata.get("flags") or ("--" + field.name.replace("_", "-"),))[-1]
        if value == "" and field.metadata.get("path"):  # as a value, "" would read as "not set"
            raise GymbenchError(f"{flag} '': an empty path; pass {flag} PATH, or leave {flag} out")
        if isinstance(value, list):  # a flag given once per item: the items as quoted text
            dotlist.append(f"{field.name}=[{', '.join(_quoted(item) for item in value)}]")
        elif isinstance(value, str) and _takes_text(schema, field.name):
            dotlist.append(f"{field.name}={_quoted(value)}")  # a flag's text is the text, never YAML
        elif value is not None:
            dotlist.append(f"{field.name}={value}")
    return build_settings(schema, dotlist, *layers)


def _say_renamed_flag(was: str, name: str) -> None:
    """The one stderr line for a renamed setting's former flag."""
    old, new = (word.replace("_", "-") for word in (was, name))
    print(f"gymbench: --{old} is now --{new}; the old flag will go", file=sys.stderr)


def _takes_text(schema: type[Any], name: str) -> bool:
    """Whether a setting is text (``str`` or ``str | None``): a flag's value for it is taken as
    written (``--from '['`` is a glob, not a YAML flow sequence)."""
    hint = typing.get_type_hints(schema).get(name)
    return hint is str or (typing.get_origin(hint) in (typing.Union, types.UnionType) and str in typing.get_args(hint))


def settings_from_flags(schema: type[T], args: Any, *, dest_prefix: str = "setting_") -> T:
    """``schema`` from its ``--key`` flags alone, without OmegaConf (a tenth of a second to import):
    for a command line that gymbench writes for a child process (the simulator's), where start-up
    time counts. Scalar settings only; the schema's own checks run as always."""
    hints = typing.get_type_hints(schema)
    values: dict[str, Any] = {}
    for field in dataclasses.fields(schema):  # type: ignore[arg-type]
        text = getattr(args, dest_prefix + field.name, None)
        was = field.metadata.get("was")
        if text is None and was and getattr(args, dest_prefix + was, None) is not None:
            text = getattr(args, dest_prefix + was)
            _say_renamed_flag(was, field.name)
        kind = scalar_kind(hints[field.name])
        if text is None or kind is None:
            continue
        try:
            values[field.name] = text.lower() in TRUE_WORDS if kind is bool else kind(text)
        except ValueError:
            raise GymbenchError(f"setting {field.name!r}: got {text!r}, expected a {kind.__name__}") from None
    return schema(**values)


def _quoted(text: str) -> str:
    import json

    return json.dumps(text)


def _positional_values(schema: type[Any], words: Sequence[str]) -> dict[str, object]:
    """The plain words of a command line as the schema's positional settings (a list takes the rest)."""
    named = positional_settings(schema)
    values: dict[str, object] = {}
    rest = list(words)
    for field in named:
        if not rest:
            break
        if _is_list(field):
            values[field.name], rest = rest, []
        else:
            values[field.name] = rest.pop(0)
    if rest:
        expected = " ".join(field.name.upper() for field in named)
        raise GymbenchError(f"unexpected {' '.join(rest)!r}: expected {expected}, then +key=value settings")
    return values


def split_overrides(extras: Sequence[str]) -> tuple[list[str], list[str]]:
    """Left-over command-line tokens: ``key=value`` overrides, and the rest (unrecognised)."""
    overrides = [token for token in extras if OVERRIDE.match(token)]
    return overrides, [token for token in extras if not OVERRIDE.match(token)]


# --------------------------------------------------------------------------- building


def build_settings(schema: type[T], dotlist: Sequence[str] = (), *layers: Mapping[str, Any], where: str = "") -> T:
    """Defaults of ``schema`` ← each mapping in ``layers`` ← ``dotlist``, validated.

    Every number must be finite (a ``nan`` timeout or an ``inf`` limit is never what was meant,
    and would reach a server as invalid JSON). A problem is a one-line error naming the setting.

    :param where: names the thing being configured in messages (``"verifier 'regex'"``).
    """
    from omegaconf import OmegaConf

    prefix = f"{where}: " if where else ""
    sources: dict[str, str] = {}
    try:
        merged = _merged(schema, dotlist, layers, sources)
        _refuse_non_finite(OmegaConf.to_container(merged))
        built = OmegaConf.to_object(merged)
        _refuse_non_words(schema, built)
        return built  # type: ignore[return-value]
    except GymbenchError as exc:  # a schema's own check (__post_init__), or _merged's
        raise GymbenchError(f"{prefix}{_from(sources, getattr(exc, 'setting', None))}{exc}") from None
    except Exception as exc:  # noqa: BLE001 - OmegaConf, YAML and conversion errors alike
        key = getattr(exc, "full_key", None)
        raise GymbenchError(f"{prefix}{_from(sources, key)}{_settings_error(schema, exc, None)}") from None


def _merged(
    schema: type[Any], dotlist: Sequence[str], layers: Sequence[Mapping[str, Any]], sources: dict[str, str]
) -> Any:
    """Merge one setting at a time, so an error can name the setting and the file it came from.

    ``sources`` records, for each top-level setting, the file that gave its value last.
    """
    from omegaconf import OmegaConf

    merged = OmegaConf.structured(schema)
    OmegaConf.set_readonly(merged, False)
    items: list[tuple[str, Any, str | None]] = [
        (str(key), {key: value}, getattr(layer, "source", None)) for layer in layers for key, value in layer.items()
    ]
    items += [(token.partition("=")[0], token, None) for token in dotlist]
    for key, item, source in items:
        new_key = _current_name(schema, key)
        if new_key != key:
            item = {new_key: item[key]} if isinstance(item, Mapping) else new_key + "=" + item.partition("=")[2]
            key = new_key
        if isinstance(item, str) and not _is_utf8(item):
            raise GymbenchError(
                f"setting {key!r}: {item.partition('=')[2]!r} is not UTF-8 text (a file name in another "
                "encoding?); rename the file, or point a UTF-8 named symlink at it"
            )
        try:
            if isinstance(item, str):
                item = {key: read_value(item.partition("=")[2])}
            merged.merge_with(OmegaConf.create(_escape(_nested(_typed_layer(schema, item)))))
        except Exception as exc:  # noqa: BLE001 - see build_settings
            raise GymbenchError(f"{source}: " * bool(source) + _settings_error(schema, exc, key)) from None
        top = key.split(".")[0]
        if source:
            sources[top] = source
        else:
            sources.pop(top, None)
    return merged


def _is_utf8(text: str) -> bool:
    """False for command-line bytes that were not UTF-8 (Python keeps them as lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _from(sources: Mapping[str, str], key: str | None) -> str:
    """``FILE: `` when the setting ``key`` came from a settings file."""
    source = sources.get(str(key).split(".")[0].split("[")[0]) if key else None
    return f"{source}: " if source else ""


def _settings_error(schema: type[Any], exc: Exception, key: str | None) -> str:
    from omegaconf.errors import ConfigKeyError, ValidationError

    if isinstance(exc, ConfigKeyError):
        known = ", ".join(f.name for f in dataclasses.fields(schema))
        return f"unknown setting {exc.full_key or exc.key!r}; known settings: {known}"
    if isinstance(exc, RecursionError):
        reason = "nested too deeply"
    else:
        reason = _first_line(exc.msg if isinstance(exc, ValidationError) else str(exc)) or type(exc).__name__  # type: ignore[arg-type]
    reason = re.sub(r"^While dereferencing interpolation '.*?': ", "", reason)
    reason = _CONVERSION.sub(_conversion_reason, reason)
    name = getattr(exc, "full_key", None) or key
    return f"setting {name!r}: {reason}" if name else f"cannot read the settings: {reason}"


_CONVERSION = re.compile(r"^Value '(?P<value>.*)' of type '(?P<kind>[\w.]+)' could not be converted to (?P<to>\w+)$")
_KINDS = {
    "DictConfig": "a mapping",
    "ListConfig": "a list",
    "str": "text",
    "int": "a whole number",
    "float": "a number",
    "bool": "a boolean",
}
_TARGETS = {"Integer": "a whole number", "Float": "a number", "Boolean": "true or false", "String": "text"}


def _conversion_reason(match: re.Match[str]) -> str:
    """OmegaConf's "Value '{'a': 2}' of type 'DictConfig' could not be converted to Integer" as
    people say it: "got a mapping ({'a': 2}), expected a whole number"."""
    kind = _KINDS.get(match["kind"], match["kind"])
    to = _TARGETS.get(match["to"], match["to"])
    return f"got {kind} ({reprlib.repr(match['value'])[1:-1]}), expected {to}"


class NonFiniteSetting(GymbenchError):
    def __init__(self, setting: str, value: float) -> None:
        super().__init__(f"setting {setting!r}: got {value}, expected a finite number")
        self.setting = setting


def _refuse_non_finite(value: Any, key: str = "") -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise NonFiniteSetting(key, value)
    if isinstance(value, Mapping):
        for name, item in value.items():
            _refuse_non_finite(item, f"{key}.{name}" if key else str(name))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _refuse_non_finite(item, f"{key}[{index}]")


def settings_dict(settings: Any) -> dict[str, Any]:
    """A settings object as plain JSON-able data (for records and fingerprints)."""
    return dataclasses.asdict(settings) if dataclasses.is_dataclass(settings) else dict(settings)  # type: ignore[arg-type]


def known_fields(schema: type[Any]) -> set[str]:
    return {field.name for field in dataclasses.fields(schema)}


class SettingsFile(dict[str, Any]):
    """Settings read from a file: an error in one of them names the file."""

    def __init__(self, settings: Mapping[str, Any], source: str) -> None:
        super().__init__(settings)
        self.source = source


MAX_SETTINGS_BYTES = 1024 * 1024
"""A settings file is a page of YAML; a larger one (a 50 MB scalar) would take minutes to parse."""


def load_settings_file(path: Path) -> SettingsFile:
    """A YAML (or JSON, which YAML reads) mapping of settings, of at most :data:`MAX_SETTINGS_BYTES`."""
    import yaml

    from gymbench.jsonio import read_capped

    try:
        text = read_capped(path, "settings", MAX_SETTINGS_BYTES).decode("utf-8")
        loaded = load_yaml(text)
    except FileNotFoundError:
        raise GymbenchError(f"{path}: no such settings file") from None
    except (OSError, ValueError) as exc:  # ValueError: not UTF-8, or a NUL byte in the name
        raise GymbenchError(f"{path}: cannot read settings file ({exc})") from None
    except yaml.YAMLError as exc:
        raise GymbenchError(f"{path}: not valid YAML/JSON: {_first_line(str(exc))}") from None
    except RecursionError:
        raise GymbenchError(f"{path}: settings nested too deeply") from None
    if loaded is None:
        return SettingsFile({}, str(path))
    if not isinstance(loaded, dict):
        raise GymbenchError(f"{path}: expected a mapping of setting: value, got {type(loaded).__name__}")
    return SettingsFile({str(_typed(key, None)): value for key, value in loaded.items()}, str(path))


def pyproject_table(path: Path, *keys: str) -> dict[str, Any]:
    """``[tool.gymbench.<keys...>]`` of a ``pyproject.toml`` (empty when the file or table is absent)."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib

    if not path.is_file():
        return {}
    try:
        table: Any = tomllib.loads(path.read_text(encoding="utf-8")).get("tool", {}).get("gymbench", {})
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise GymbenchError(f"{path}: cannot read [tool.gymbench] ({exc})") from None
    for key in keys:
        table = table.get(key, {}) if isinstance(table, dict) else {}
    if not isinstance(table, dict):
        raise GymbenchError(f"{path}: [tool.gymbench.{'.'.join(keys)}] must be a table")
    return dict(table)


def project_settings(
    pyproject: Path, job: str, schema: type[Any], built_on: tuple[str, type[Any]] | None = None
) -> SettingsFile:
    """A job's defaults from a project's pyproject.toml: ``[tool.gymbench.<job>]`` over the settings
    it shares with the job it is built on (``tune`` on ``collect``: the task file and verifier are
    written once, in ``[tool.gymbench.collect]``).

    The command and the pytest API read the same tables this way, so ``gymbench tune`` in a
    project's folder and ``gymbench.tune()`` in its benches run the same settings. Paths are
    relative to the pyproject.toml; an error in a setting names the file.
    """
    settings: dict[str, Any] = {}
    schemas = [schema]
    if built_on is not None:
        base_job, base_schema = built_on
        shared = {f.name for f in dataclasses.fields(schema)} & {f.name for f in dataclasses.fields(base_schema)}
        settings = {key: value for key, value in pyproject_table(pyproject, base_job).items() if key in shared}
        schemas.append(base_schema)
    settings.update(pyproject_table(pyproject, job))
    for key in path_settings(*schemas):
        if isinstance(settings.get(key), str) and settings[key]:
            settings[key] = str(pyproject.parent / settings[key])
    return SettingsFile(settings, f"{pyproject} [tool.gymbench.{job}]")


def project_defaults(job: str, schema: type[Any], built_on: tuple[str, type[Any]] | None = None) -> SettingsFile:
    """A command's defaults: :func:`project_settings` of the working directory's pyproject.toml."""
    return project_settings(Path.cwd() / "pyproject.toml", job, schema, built_on)


# --------------------------------------------------------------------------- checks used by schemas


_SHOWN = reprlib.Repr()
_SHOWN.maxstring, _SHOWN.maxlong, _SHOWN.maxother = 80, 40, 80


def check_listen(host: str, port: int) -> None:
    """The checks of :class:`ServerAddress`, one line each when wrong."""
    require(bool(host.strip()), "host", host, "an address to bind, e.g. 127.0.0.1")
    at_least("port", port, 0, 65535)


def require(condition: bool, setting: str, value: Any, expected: str) -> None:
    """Raise a one-line error naming the setting, the value (shortened) and what is allowed."""
    if not condition:
        raise GymbenchError(f"setting {setting!r}: got {_SHOWN.repr(value)}, expected {expected}")


def positive_finite(setting: str, value: float | None) -> None:
    if value is not None:
        require(math.isfinite(value) and value > 0, setting, value, "a finite number of seconds above 0")


def at_least(setting: str, value: int | float | None, minimum: int | float, most: int | float | None = None) -> None:
    if value is None:
        return
    bound = f"a number from {minimum} to {most}" if most is not None else f"a number of at least {minimum}"
    finite = not isinstance(value, float) or math.isfinite(value)  # ints past 1e308 have no float
    require(finite and value >= minimum and (most is None or value <= most), setting, value, bound)


def one_of(setting: str, value: Any, choices: Sequence[Any]) -> None:
    require(value in choices, setting, value, "one of " + ", ".join(str(c) for c in choices))


SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,100}$")


def safe_name(setting: str, value: str) -> None:
    """Names that become file names: no path separators, no leading dot."""
    require(bool(SAFE_NAME.match(value)), setting, value, "letters, digits, '.', '_' or '-' (it becomes a file name)")


# --------------------------------------------------------------------------- internals


# --------------------------------------------------------------------------- YAML 1.2 values
#
# OmegaConf's dotlist and PyYAML's safe_load read YAML 1.1: ``010`` is 8, ``1:30`` is 90, ``on`` is
# True. Values here are read as YAML 1.2 (core schema) instead, and by the type of the setting they
# go to: a str setting keeps the text as typed (``010`` stays "010"), a bool setting keeps today's
# words (true/false, yes/no, on/off, 1/0), every other setting gets the YAML 1.2 core value (``010``
# is 10, ``0x10`` 16, ``0o10`` 8, ``1:30`` and ``yes`` are text). Quoted values are text always.


class _Plain(str):
    """An unquoted scalar as written; made typed by :func:`_typed` once its setting's type is known."""


NULL_WORDS = frozenset({"", "~", "null", "Null", "NULL"})
_YAML12: list[tuple[re.Pattern[str], typing.Callable[[str], Any]]] = [
    (re.compile(r"^(true|True|TRUE)$"), lambda text: True),
    (re.compile(r"^(false|False|FALSE)$"), lambda text: False),
    (re.compile(r"^[-+]?[0-9]+$"), lambda text: int(text, 10)),
    (re.compile(r"^0o[0-7]+$"), lambda text: int(text[2:], 8)),
    (re.compile(r"^0x[0-9a-fA-F]+$"), lambda text: int(text[2:], 16)),
    (re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$"), float),
    (re.compile(r"^[-+]?\.(inf|Inf|INF)$"), lambda text: -math.inf if text.startswith("-") else math.inf),
    (re.compile(r"^\.(nan|NaN|NAN)$"), lambda text: math.nan),
]


def yaml12_scalar(text: str) -> Any:
    """A plain scalar's value under the YAML 1.2 core schema."""
    if text in NULL_WORDS:
        return None
    for pattern, convert in _YAML12:
        if pattern.match(text):
            return convert(text)
    return text


MAX_YAML_NODES = 1_000_000
"""The most nodes a YAML document may stand for once its aliases are expanded: ten times what a
settings file's 1 MiB can spell out. Nine anchors of nine aliases each (a "billion laughs") stand
for 3.5 billion; loading them is cheap, but the first walk over the value (an error message's
``repr``, a copy) never ended: ``sim-server --describe`` hung on such a profile."""


def load_yaml(text: str, *, yaml12: bool = True) -> Any:
    """Every YAML gymbench reads goes through here: safe, its alias expansion bounded
    (:data:`MAX_YAML_NODES`), and with ``yaml12`` every unquoted scalar kept as text for the
    settings' own typing (no YAML 1.1 octal, base 60, yes/no, dates). ``yaml12=False`` reads YAML
    1.1 as its writer meant it (NeMo Gym's configs). Raises ``yaml.YAMLError``."""
    import yaml

    return yaml.load(text, Loader=_yaml12_loader() if yaml12 else _bounded_loader())  # noqa: S506 - SafeLoader


def _expanded_nodes(root: Any) -> int:
    """How many nodes ``root`` stands for with its aliases expanded, counted without expanding
    them (a shared node's size is counted once and reused); a recursive alias is refused."""
    import yaml

    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in sizes:
            continue
        children = _children(node)
        if children_done or not children:
            open_nodes.discard(id(node))
            sizes[id(node)] = total = 1 + sum(sizes[id(child)] for child in children)
            if total > MAX_YAML_NODES:
                raise yaml.YAMLError(
                    f"its aliases stand for more than {MAX_YAML_NODES:,} values (an alias bomb?); "
                    "write the values out, or use fewer aliases"
                )
            continue
        if id(node) in open_nodes:
            raise yaml.YAMLError("an alias refers to a value that contains it; write the value out instead")
        open_nodes.add(id(node))
        stack.append((node, True))
        stack.extend((child, False) for child in children if id(child) not in sizes)
    return sizes[id(root)]


def _children(node: Any) -> list[Any]:
    import yaml

    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


@functools.cache
def _bounded_loader() -> type[yaml.SafeLoader]:
    """PyYAML's safe loader, its documents checked by :func:`_expanded_nodes` before they are built."""
    import yaml

    class Bounded(yaml.SafeLoader):
        def get_single_data(self) -> object:
            node = self.get_single_node()
            if node is None:
                return None
            _expanded_nodes(node)
            return self.construct_document(node)

    return Bounded


@functools.cache
def _yaml12_loader() -> type[yaml.SafeLoader]:
    """The bounded safe loader, leaving every unquoted scalar as :class:`_Plain` text (no YAML 1.1
    resolution: no octal, base 60, yes/no, dates)."""

    class Loader(_bounded_loader()):  # type: ignore[misc]
        yaml_implicit_resolvers: dict[Any, Any] = {}  # noqa: RUF012 - replaces the YAML 1.1 ones

    Loader.add_implicit_resolver("!gymbench-plain", re.compile(r".*", re.S), None)

    def plain(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> _Plain:
        return _Plain(loader.construct_scalar(node))

    Loader.add_constructor("!gymbench-plain", plain)
    return Loader


def read_value(text: str) -> Any:
    """A ``+key=value`` value as YAML 1.2 flow text; unquoted scalars stay :class:`_Plain`."""
    return load_yaml(text)


def _typed(value: Any, hint: Any) -> Any:
    """``value`` with its unquoted scalars made typed for a setting declared as ``hint``."""
    if isinstance(value, _Plain):
        text = str(value)
        kind = scalar_kind(hint)
        if text in NULL_WORDS:
            return None
        if kind is str or kind is bool:  # str: as typed; bool: OmegaConf reads today's words
            return text
        return yaml12_scalar(text)
    if isinstance(value, Mapping):
        if typing.get_origin(hint) is dict:  # a mapping setting: its keys are typed too ({1: 0.5})
            key_hint, value_hint = typing.get_args(hint) or (None, None)
            return {_typed(key, key_hint): _typed(item, value_hint) for key, item in value.items()}
        return {key: _typed(item, _field_hint(hint, str(key))) for key, item in value.items()}
    if isinstance(value, list):
        return [_typed(item, None) for item in value]
    return value


def _field_hint(schema: Any, name: str) -> Any:
    """The declared type of ``schema``'s field ``name`` (``None``: any value)."""
    if typing.get_origin(schema) in (typing.Union, types.UnionType):
        inner = [arg for arg in typing.get_args(schema) if arg is not type(None)]
        schema = inner[0] if len(inner) == 1 else None
    if not (isinstance(schema, type) and dataclasses.is_dataclass(schema)):
        return None
    try:
        return typing.get_type_hints(schema).get(name)
    except Exception:  # noqa: BLE001 - an unresolvable annotation: read the value as any value
        return None


def _typed_layer(schema: type[Any], layer: Mapping[str, Any]) -> dict[str, Any]:
    """One layer ``{dotted.key: value}`` made typed by the settings the keys name."""
    typed: dict[str, Any] = {}
    for key, value in layer.items():
        hint: Any = schema
        for part in str(key).split("."):
            hint = _field_hint(hint, part)
        typed[key] = _typed(value, hint)
    return typed


def _nested(layer: Mapping[str, Any]) -> dict[str, Any]:
    """``{"a.b": 1}`` as ``{"a": {"b": 1}}``, as OmegaConf's dotlist reads a dotted key."""
    nested: dict[str, Any] = {}
    for key, value in layer.items():
        *parents, last = str(key).split(".")
        target = nested
        for part in parents:
            target = target.setdefault(part, {})
        target[last] = value
    return nested


def _escape(value: Any) -> Any:
    """Make ``${`` literal in every string of a mapping, so OmegaConf does not interpolate it."""
    if isinstance(value, str):
        return value.replace("${", "\\${")
    if isinstance(value, Mapping):
        return {key: _escape(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_escape(item) for item in value]
    return value


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""
