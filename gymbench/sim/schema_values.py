"""A value that validates against a JSON schema, drawn from a seeded generator.

This is how the simulated model fills in a tool call's arguments: every draw comes from the
request's random stream, so the same seed gives the same arguments. The keywords tool schemas
use are honoured: ``type`` (one or a list), ``properties``/``required``, ``items``/``prefixItems``,
``minItems``/``maxItems``/``uniqueItems``, ``enum``, ``const``, ``anyOf``/``oneOf``/``allOf``,
``$ref`` into ``$defs``/``definitions``, string lengths and formats (date, date-time, email,
uri, uuid), and numeric bounds with ``multipleOf``. ``pattern`` is not: a string with a pattern
is still a few words. Optional properties appear half the time; recursive schemas are cut off
after :data:`MAX_DEPTH` levels (only what is required is generated below it).
"""

from __future__ import annotations

import math
import random
import uuid
from collections.abc import Mapping
from typing import Any

from gymbench.types import JSONObject, JSONValue

MAX_DEPTH = 6
HARD_DEPTH = 32
MAX_ITEMS = 64
MAX_LENGTH = 4096
"""Caps on what a schema can make the simulator build (``minItems: 10**9`` is not honoured)."""
WORDS = ("alpha", "bravo", "delta", "echo", "kilo", "lima", "nova", "oscar", "sierra", "tango", "zulu", "atlas")
TYPE_ORDER = ("object", "array", "string", "integer", "number", "boolean", "null")


def schema_value(schema: Any, rng: random.Random) -> JSONValue:
    """A value valid against ``schema`` (a JSON-schema mapping; ``None`` or ``{}`` allow anything).

    A schema too malformed to follow (``properties`` that are not an object, a bound that is not
    a number) gets the empty object, as a model given nonsense still answers something.
    """
    root = schema if isinstance(schema, Mapping) else {}
    try:
        return _value(root or {"type": "object", "properties": {}}, rng, root, 0)
    except (TypeError, ValueError, AttributeError, KeyError, IndexError, RecursionError):
        return {}


def _value(schema: Any, rng: random.Random, root: Mapping[str, Any], depth: int) -> JSONValue:
    if depth > HARD_DEPTH:  # a schema that requires itself: no finite value exists
        return None
    if schema is True or not isinstance(schema, Mapping):
        return rng.choice(WORDS)
    schema = _schema(_resolved(schema, root))
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return rng.choice(list(schema["enum"]))
    for combinator in ("anyOf", "oneOf"):
        if schema.get(combinator):
            branch = _schema(_resolved(rng.choice(list(schema[combinator])), root))
            merged = {key: value for key, value in schema.items() if key != combinator}
            return _value({**merged, **branch}, rng, root, depth)
    if schema.get("allOf"):
        merged = {key: value for key, value in schema.items() if key != "allOf"}
        for part in schema["allOf"]:
            merged = _merge(merged, _schema(_resolved(part, root)))
        return _value(merged, rng, root, depth)
    return GENERATORS[_type_of(schema, rng)](schema, rng, root, depth)


def _resolved(schema: object, root: Mapping[str, Any]) -> object:
    """Follow local ``$ref`` pointers (``#/$defs/Name``, ``#/definitions/Name``, ``#``)."""
    seen = 0
    while isinstance(schema, Mapping) and isinstance(schema.get("$ref"), str) and seen < 32:
        target: Any = root
        for part in schema["$ref"].lstrip("#").strip("/").split("/"):
            if part:
                target = (
                    target.get(part.replace("~1", "/").replace("~0", "~"), {}) if isinstance(target, Mapping) else {}
                )
        rest = {key: value for key, value in schema.items() if key != "$ref"}
        schema = {**target, **rest} if isinstance(target, Mapping) else rest
        seen += 1
    return schema


def _schema(value: object) -> Mapping[str, Any]:
    """A schema part where an object must be: anything else is malformed, a TypeError as unpacking
    it would raise (:func:`schema_value` answers the empty object)."""
    if not isinstance(value, Mapping):
        raise TypeError(f"a schema object was expected, got {value!r}")
    return value


def _merge(left: Mapping[str, Any], right: Mapping[str, Any]) -> JSONObject:
    merged = {**left, **right}
    if "properties" in left and "properties" in right:
        merged["properties"] = {**left["properties"], **right["properties"]}
    if "required" in left and "required" in right:
        merged["required"] = sorted({*left["required"], *right["required"]})
    return merged


def _type_of(schema: Mapping[str, Any], rng: random.Random) -> str:
    kind = schema.get("type")
    if isinstance(kind, list):
        real = [k for k in kind if k in TYPE_ORDER and k != "null"] or [k for k in kind if k in TYPE_ORDER]
        return rng.choice(real) if real else "string"
    if kind in TYPE_ORDER:
        return str(kind)
    if "properties" in schema or "required" in schema:
        return "object"
    if "items" in schema or "prefixItems" in schema:
        return "array"
    if any(key in schema for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")):
        return "number"
    return "string"


def _object(schema: Mapping[str, Any], rng: random.Random, root: Mapping[str, Any], depth: int) -> JSONObject:
    properties = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    value: dict[str, Any] = {}
    for name, sub in properties.items():
        wanted = name in required or depth < MAX_DEPTH and rng.random() < 0.5
        if wanted:
            value[name] = _value(sub, rng, root, depth + 1)
    for name in sorted(required - set(properties)):
        value[name] = rng.choice(WORDS)
    return value


def _array(schema: Mapping[str, Any], rng: random.Random, root: Mapping[str, Any], depth: int) -> list[JSONValue]:
    prefix = list(schema.get("prefixItems") or [])
    low = min(int(schema.get("minItems", 0)), MAX_ITEMS)
    high = int(schema.get("maxItems", low + 3))
    count = low if depth >= MAX_DEPTH else min(MAX_ITEMS, rng.randint(low, max(low, min(high, low + 3))))
    items = schema.get("items", True)
    value: list[Any] = []
    attempts = 0
    while len(value) < count and attempts < 8 * count + 8:
        attempts += 1
        sub = prefix[len(value)] if len(value) < len(prefix) else items
        item = _value(sub, rng, root, depth + 1)
        if not schema.get("uniqueItems") or item not in value:
            value.append(item)
    return value


def _string(schema: Mapping[str, Any], rng: random.Random, root: Mapping[str, Any], depth: int) -> str:
    special = _formatted(schema.get("format"), rng)
    if special is not None:
        return special
    low = min(int(schema.get("minLength", 1)), MAX_LENGTH)
    high = int(schema.get("maxLength", max(low, 24)))
    text = rng.choice(WORDS)
    while len(text) < low:
        text += " " + rng.choice(WORDS)
    return text[: max(low, min(high, len(text)))]


def _formatted(name: Any, rng: random.Random) -> str | None:
    day = f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    if name == "date":
        return day
    if name == "date-time":
        return f"{day}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:00Z"
    if name == "email":
        return f"{rng.choice(WORDS)}@example.com"
    if name in ("uri", "url"):
        return f"https://example.com/{rng.choice(WORDS)}"
    if name == "uuid":
        return str(uuid.UUID(int=rng.getrandbits(128)))
    return None


def _number(schema: Mapping[str, Any], rng: random.Random, root: Mapping[str, Any], depth: int) -> float:
    low, high = _bounds(schema, 0.0, 100.0)
    step = schema.get("multipleOf")
    if step:
        return _multiple(step, low, high, rng)
    return round(rng.uniform(low, high), 2) if high - low >= 0.02 else (low + high) / 2


def _integer(schema: Mapping[str, Any], rng: random.Random, root: Mapping[str, Any], depth: int) -> int:
    low, high = _bounds(schema, 0, 100)
    first, last = math.ceil(low), math.floor(high)
    step = schema.get("multipleOf")
    if step:
        return int(_multiple(step, first, last, rng))
    return rng.randint(first, max(first, last))


def _bounds(schema: Mapping[str, Any], low: float, high: float) -> tuple[float, float]:
    """The closed interval a number must lie in; an exclusive bound moves in by a little.

    With one bound given, the other is put 100 away from it.
    """
    given_low = given_high = None
    if "minimum" in schema:
        given_low = float(schema["minimum"])
    if "exclusiveMinimum" in schema and not isinstance(schema["exclusiveMinimum"], bool):
        given_low = max(given_low if given_low is not None else -math.inf, float(schema["exclusiveMinimum"]) + 0.01)
    if "maximum" in schema:
        given_high = float(schema["maximum"])
    if "exclusiveMaximum" in schema and not isinstance(schema["exclusiveMaximum"], bool):
        given_high = min(given_high if given_high is not None else math.inf, float(schema["exclusiveMaximum"]) - 0.01)
    if given_low is not None and given_high is not None:
        return given_low, max(given_low, given_high)
    if given_low is not None:
        return given_low, max(given_low + high - low, high)
    if given_high is not None:
        return min(given_high - (high - low), low), given_high
    return low, high


def _multiple(step: float, low: float, high: float, rng: random.Random) -> float:
    """A multiple of ``step`` in [low, high] whose quotient is whole in floating point too
    (``0.3 / 0.1`` is not, which is how validators test ``multipleOf``)."""
    first, last = math.ceil(low / step), math.floor(high / step)
    for _ in range(16):
        value = rng.randint(first, max(first, last)) * step
        if isinstance(step, int) or (value / step).is_integer():
            return value
    return 0 if first <= 0 <= last else first * step


GENERATORS = {
    "object": _object,
    "array": _array,
    "string": _string,
    "integer": _integer,
    "number": _number,
    "boolean": lambda schema, rng, root, depth: rng.random() < 0.5,
    "null": lambda schema, rng, root, depth: None,
}
