"""Strict validation of raw OpenAI JSON against the official ``openai`` SDK's own types.

The SDK parses responses leniently by default (``construct``: missing fields are left unset, a
wrong type goes through). Here each raw JSON text goes through pydantic's strict mode,
``Type.model_validate_json(raw, strict=True)``: every required field must be there, with its
exact JSON type (no ``"1"`` for ``1``, no ``1`` for ``true``), every literal must match. On top,
a field the SDK's type does not declare is refused at every level (the SDK's models allow
extras, so a misspelt field would otherwise pass unseen).
"""

from __future__ import annotations

import collections
import typing
from typing import Any

import pydantic
from openai.types import Completion, Model
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response, ResponseStreamEvent
from openai.types.shared import ErrorObject

VALIDATED: collections.Counter[str] = collections.Counter()
"""How many objects of each SDK type passed, across the test session."""


def _members(union: Any) -> list[type[pydantic.BaseModel]]:
    while typing.get_origin(union) is typing.Annotated:
        union = typing.get_args(union)[0]
    return [member for member in typing.get_args(union) if isinstance(member, type)]


RESPONSE_EVENTS: dict[str, type[pydantic.BaseModel]] = {
    member.model_fields["type"].annotation.__args__[0]: member  # type: ignore[union-attr]
    for member in _members(ResponseStreamEvent)
}
"""Each Responses stream event's ``type`` → the SDK class that describes it."""
STREAM_CHUNKS = {"chat": ChatCompletionChunk, "completions": Completion}
OBJECTS = {"chat": ChatCompletion, "completions": Completion, "responses": Response, "model": Model}


def strict(model: type[pydantic.BaseModel], raw: str | bytes) -> pydantic.BaseModel:
    """``raw`` as an instance of ``model``, validated strictly; raises ``AssertionError`` otherwise."""
    try:
        value = model.model_validate_json(raw, strict=True)
    except pydantic.ValidationError as exc:
        raise AssertionError(f"{model.__name__} does not validate strictly:\n{exc}\n{_short(raw)}") from None
    extras = list(_extras(value, model.__name__))
    assert not extras, f"{model.__name__}: fields the SDK does not declare: {extras}\n{_short(raw)}"
    VALIDATED[model.__name__] += 1
    return value


def strict_error(raw: str | bytes) -> ErrorObject:
    """An error body: ``{"error": {...}}`` whose inner object is the SDK's ``ErrorObject``."""
    outer = pydantic.TypeAdapter(dict[str, Any]).validate_json(raw)
    assert list(outer) == ["error"], outer
    import orjson

    error = strict(ErrorObject, orjson.dumps(outer["error"]))
    assert isinstance(error, ErrorObject)
    return error


def sse_data(raw: bytes) -> list[tuple[str | None, str]]:
    """(event name, data) of each server-sent event."""
    events = []
    for block in raw.decode().strip().split("\n\n"):
        name, data = None, ""
        for line in block.splitlines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                data = line[6:]
        events.append((name, data))
    return events


def strict_stream(api: str, raw: bytes) -> list[pydantic.BaseModel]:
    """Every event of a streamed ``api`` response (chat, completions, responses), strictly.

    Chat and completions streams end with ``data: [DONE]``; Responses API events are named by
    their ``event:`` line as by their ``type``, and numbered from 0 without a gap.
    """
    events = sse_data(raw)
    if api != "responses":
        assert events[-1] == (None, "[DONE]"), events[-1]
        return [strict(STREAM_CHUNKS[api], data) for _, data in events[:-1]]
    parsed = []
    for number, (name, data) in enumerate(events):
        kind = pydantic.TypeAdapter(dict[str, Any]).validate_json(data)["type"]
        assert name == kind, (name, kind)
        event = strict(RESPONSE_EVENTS[kind], data)
        assert event.sequence_number == number  # type: ignore[attr-defined]
        parsed.append(event)
    return parsed


def _extras(value: Any, where: str) -> typing.Iterator[str]:
    if isinstance(value, pydantic.BaseModel):
        for name in value.model_extra or {}:
            yield f"{where}.{name}"
        for name in type(value).model_fields:
            yield from _extras(getattr(value, name), f"{where}.{name}")
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from _extras(item, f"{where}[{index}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _extras(item, f"{where}.{key}")


def _short(raw: str | bytes) -> str:
    text = raw.decode() if isinstance(raw, bytes) else raw
    return text if len(text) < 600 else text[:600] + "..."
