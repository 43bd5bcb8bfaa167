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
import re
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from gymbench.errors import GymbenchError

T = TypeVar("T")
OVERRIDE = re.compile(r"^\+{0,2}[A-Za-z_][\w.\-]*=")
TRUE_WORDS = ("true", "yes", "on", "1")


# --------------------------------------------------------------------------- command line


def add_settings_arguments(
    parser: argparse.ArgumentParser, schema: type[Any], *, title: str = "settings (also accepted as +key=value)"
) -> None:
    """``+key=value`` positionals, ``--config FILE``, and a ``--key`` flag per scalar field.

    A boolean field also gets ``--no-key``; ``--key`` alone means true.
    """
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="+key=value",
        help="settings as NeMo Gym spells them, e.g. +num_samples_in_parallel=32 (the + is optional)",
    )
    parser.add_argument("--config", dest="settings_file", metavar="FILE", help="a YAML or JSON file of settings")
    add_settings_flags(parser.add_argument_group(title), schema)


def add_settings_flags(group: Any, schema: type[Any], skip: Sequence[str] = ()) -> None:
    """Only the ``--key`` flags, for a command whose positionals are something else (``compare``)."""
    for field in dataclasses.fields(schema):
        if field.name in skip:
            continue
        kind = scalar_kind(schema, field)
        if kind is None:
            continue
        flag = "--" + field.name.replace("_", "-")
        help_text = str(field.metadata.get("help", "")).replace("%", "%%")  # argparse formats help with %
        if kind is bool:
            group.add_argument(
                flag,
                dest=f"setting_{field.name}",
                nargs="?",
                const="true",
                default=None,
                metavar="BOOL",
                help=help_text,
            )
            group.add_argument(
                "--no-" + field.name.replace("_", "-"),
                dest=f"setting_{field.name}",
                action="store_const",
                const="false",
                help=argparse.SUPPRESS,
            )
        else:
            group.add_argument(flag, dest=f"setting_{field.name}", default=None, metavar="VALUE", help=help_text)


def scalar_kind(schema: type[Any], field: dataclasses.Field[Any]) -> type | None:
    """The field's scalar type (``Optional`` unwrapped), or ``None`` for dicts, lists and nested settings."""
    hint = typing.get_type_hints(schema)[field.name]
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        hint = args[0] if len(args) == 1 else None
    return hint if hint in (bool, int, float, str) else None


def settings_from_args(schema: type[T], args: argparse.Namespace, *, base: Mapping[str, Any] | None = None) -> T:
    """Merge defaults ← ``base`` ← ``--config`` file ← ``+key=value`` ← ``--key value`` into ``schema``."""
    dotlist = []
    for token in [*getattr(args, "overrides", []), *getattr(args, "extra_overrides", [])]:
        if "=" not in token:
            raise GymbenchError(f"cannot read setting {token!r}: expected +key=value")
        dotlist.append(token.lstrip("+"))
    for field in dataclasses.fields(schema):
        value = getattr(args, f"setting_{field.name}", None)
        if value is not None:
            dotlist.append(f"{field.name}={value}")
    layers: list[Mapping[str, Any]] = [base or {}]
    settings_file = getattr(args, "settings_file", None)
    if settings_file:
        layers.append(load_settings_file(Path(settings_file)))
    return build_settings(schema, dotlist, *layers)


def split_overrides(extras: Sequence[str]) -> tuple[list[str], list[str]]:
    """Left-over command-line tokens: ``key=value`` overrides, and the rest (unrecognised)."""
    overrides = [token for token in extras if OVERRIDE.match(token)]
    return overrides, [token for token in extras if not OVERRIDE.match(token)]


# --------------------------------------------------------------------------- building


def build_settings(schema: type[T], dotlist: Sequence[str] = (), *layers: Mapping[str, Any], where: str = "") -> T:
    """Defaults of ``schema`` ← each mapping in ``layers`` ← ``dotlist``, validated.

    :param where: names the thing being configured in messages (``"verifier 'regex'"``).
    """
    from omegaconf import OmegaConf
    from omegaconf.errors import ConfigKeyError, OmegaConfBaseException, ValidationError

    prefix = f"{where}: " if where else ""
    try:
        base = OmegaConf.structured(schema)
        OmegaConf.set_readonly(base, False)
        merged = OmegaConf.merge(
            base,
            *(OmegaConf.create(_escape(dict(layer))) for layer in layers if layer),
            OmegaConf.from_dotlist([_escape_token(token) for token in dotlist]),
        )
        return OmegaConf.to_object(merged)  # type: ignore[return-value]
    except GymbenchError as exc:  # a schema's own check (__post_init__)
        raise GymbenchError(f"{prefix}{exc}") from None
    except ConfigKeyError as exc:
        known = ", ".join(f.name for f in dataclasses.fields(schema))
        raise GymbenchError(f"{prefix}unknown setting {exc.full_key or exc.key!r}; known settings: {known}") from None
    except ValidationError as exc:
        raise GymbenchError(f"{prefix}setting {exc.full_key!r}: {_first_line(exc.msg)}") from None
    except OmegaConfBaseException as exc:
        raise GymbenchError(f"{prefix}cannot read the settings: {_first_line(str(exc))}") from None
    except (TypeError, ValueError, RecursionError) as exc:
        raise GymbenchError(
            f"{prefix}cannot read the settings: {_first_line(str(exc)) or type(exc).__name__}"
        ) from None


def settings_dict(settings: Any) -> dict[str, Any]:
    """A settings object as plain JSON-able data (for records and fingerprints)."""
    return dataclasses.asdict(settings) if dataclasses.is_dataclass(settings) else dict(settings)


def known_fields(schema: type[Any]) -> set[str]:
    return {field.name for field in dataclasses.fields(schema)}


def load_settings_file(path: Path) -> dict[str, Any]:
    """A YAML (or JSON, which YAML reads) mapping of settings."""
    import yaml

    try:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise GymbenchError(f"{path}: no such settings file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise GymbenchError(f"{path}: cannot read settings file ({exc})") from None
    except yaml.YAMLError as exc:
        raise GymbenchError(f"{path}: not valid YAML/JSON: {_first_line(str(exc))}") from None
    except RecursionError:
        raise GymbenchError(f"{path}: settings nested too deeply") from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise GymbenchError(f"{path}: expected a mapping of setting: value, got {type(loaded).__name__}")
    return {str(key): value for key, value in loaded.items()}


# --------------------------------------------------------------------------- checks used by schemas


def require(condition: bool, setting: str, value: Any, expected: str) -> None:
    """Raise a one-line error naming the setting, the value and what is allowed."""
    if not condition:
        raise GymbenchError(f"setting {setting!r}: got {value!r}, expected {expected}")


def positive_finite(setting: str, value: float | None) -> None:
    import math

    if value is not None:
        require(math.isfinite(value) and value > 0, setting, value, "a finite number of seconds above 0")


def at_least(setting: str, value: int | float | None, minimum: int | float, most: int | float | None = None) -> None:
    if value is None:
        return
    bound = f"a number from {minimum} to {most}" if most is not None else f"a number of at least {minimum}"
    require(value >= minimum and (most is None or value <= most), setting, value, bound)


def one_of(setting: str, value: Any, choices: Sequence[Any]) -> None:
    require(value in choices, setting, value, "one of " + ", ".join(str(c) for c in choices))


SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,100}$")


def safe_name(setting: str, value: str) -> None:
    """Names that become file names: no path separators, no leading dot."""
    require(bool(SAFE_NAME.match(value)), setting, value, "letters, digits, '.', '_' or '-' (it becomes a file name)")


# --------------------------------------------------------------------------- internals


def _escape_token(token: str) -> str:
    key, sep, value = token.partition("=")
    return key + sep + value.replace("${", "\\${")


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
