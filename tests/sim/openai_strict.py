"""Strict validation of raw OpenAI JSON against the official ``openai`` SDK's own types.

The SDK parses responses leniently by default (``construct``: missing fields are left unset, a
wrong type goes through). Here each raw JSON text goes through pydantic's strict mode,
``Type.model_validate_json(raw, strict=True)``: every required field must be there, with its
exact JSON type (no ``"1"`` for ``1``, no ``1`` for ``true``), every literal must match. On top,
a field the SDK's type does not declare is refused at every level (the SDK's models allow
extras, so a misspelt field would otherwise pass unseen).

One deliberate exception: the SDK reads completions stream chunks as ``Completion``, whose
``finish_reason`` may not be null, while OpenAI's own API sends null in every chunk but the last
(openai/openai-openapi#100). Those chunks are validated as :class:`CompletionChunk`, the SDK's
``Completion`` with that one field widened to allow null.

:class:`RecordingTransport` (and its async twin) let a test use the real SDK client and still
validate the raw bytes of every answer it got.
"""

from __future__ import annotations

import collections
import typing
from typing import Any

import httpx2
import orjson
import pydantic
from openai.types import Completion, Model
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.completion_choice import CompletionChoice
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


class StreamedCompletionChoice(CompletionChoice):
    finish_reason: typing.Optional[typing.Literal["stop", "length", "content_filter"]]  # type: ignore[assignment] # noqa: UP045


class CompletionChunk(Completion):
    """A completions stream chunk: the SDK's ``Completion``, ``finish_reason`` nullable."""

    choices: list[StreamedCompletionChoice]  # type: ignore[assignment]


STREAM_CHUNKS = {"chat": ChatCompletionChunk, "completions": CompletionChunk}
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
    outer = orjson.loads(raw)
    assert list(outer) == ["error"], outer
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
        kind = orjson.loads(data)["type"]
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


def strict_models(raw: bytes) -> list[pydantic.BaseModel]:
    """``GET /v1/models``: a list object of the SDK's ``Model``."""
    outer = orjson.loads(raw)
    assert sorted(outer) == ["data", "object"] and outer["object"] == "list", outer
    return [strict(Model, orjson.dumps(model)) for model in outer["data"]]


# --------------------------------------------------------------------------- the SDK's raw bytes

API_OF_PATH = {"/chat/completions": "chat", "/completions": "completions", "/responses": "responses"}


class Exchange:
    """One request the SDK made and the raw bytes of its answer."""

    def __init__(self, path: str, status: int, content_type: str) -> None:
        self.path = path
        self.status = status
        self.content_type = content_type
        self.body = bytearray()

    def check(self) -> list[pydantic.BaseModel]:
        """Validate the answer strictly as what its path and status say it is."""
        raw = bytes(self.body)
        if self.status >= 400:
            return [strict_error(raw)]
        if self.path.endswith("/models"):
            return strict_models(raw)
        api = next(api for suffix, api in API_OF_PATH.items() if self.path.endswith(suffix))
        if self.content_type.startswith("text/event-stream"):
            return strict_stream(api, raw)
        return [strict(OBJECTS[api], raw)]


def check_all(exchanges: list[Exchange]) -> int:
    """Validate every answer recorded; the number of objects and events validated."""
    assert exchanges, "the SDK made no request"
    return sum(len(exchange.check()) for exchange in exchanges)


class _Tee(httpx2.SyncByteStream):
    def __init__(self, inner: Any, exchange: Exchange) -> None:
        self.inner, self.exchange = inner, exchange

    def __iter__(self) -> typing.Iterator[bytes]:
        for chunk in self.inner:
            self.exchange.body += chunk
            yield chunk

    def close(self) -> None:
        self.inner.close()


class _AsyncTee(httpx2.AsyncByteStream):
    def __init__(self, inner: Any, exchange: Exchange) -> None:
        self.inner, self.exchange = inner, exchange

    async def __aiter__(self) -> typing.AsyncIterator[bytes]:
        async for chunk in self.inner:
            self.exchange.body += chunk
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


def _recorded(request: httpx2.Request, response: httpx2.Response, exchanges: list[Exchange], tee: type) -> Any:
    exchange = Exchange(request.url.path, response.status_code, response.headers.get("content-type", ""))
    exchanges.append(exchange)
    stream = tee(response.stream, exchange)
    return httpx2.Response(
        response.status_code, headers=response.headers, stream=stream, request=request, extensions=response.extensions
    )


class RecordingTransport(httpx2.HTTPTransport):
    """The SDK's usual transport, keeping a copy of every answer's bytes in ``exchanges``."""

    def __init__(self, exchanges: list[Exchange]) -> None:
        super().__init__()
        self.exchanges = exchanges

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        return _recorded(request, super().handle_request(request), self.exchanges, _Tee)


class AsyncRecordingTransport(httpx2.AsyncHTTPTransport):
    def __init__(self, exchanges: list[Exchange]) -> None:
        super().__init__()
        self.exchanges = exchanges

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        return _recorded(request, await super().handle_async_request(request), self.exchanges, _AsyncTee)
