"""Streamed answers put back together into the object a non-streamed call would have returned.

The response is the product of a rollout: training and analysis read ``choices[0].message`` (or
the Responses API's ``output``) from the row, whether or not the run streamed. So the chunks of a
streamed chat completion are assembled into a ``chat.completion`` (text fields concatenated, tool
calls gathered by index), and a Responses API stream whose final ``response.completed`` event is
missing is assembled from its item and delta events.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any, Protocol, cast

import aiohttp
import orjson

from gymbench.builtin.openai_shapes import read_responses
from gymbench.types import GenerationFailed, JSONObject, TokenUsage

DONE = b"[DONE]"


class StreamAssembler(Protocol):
    """Takes a stream's events one by one; then says what the whole answer was."""

    def add(self, event: Mapping[str, Any]) -> bool:
        """Take one event; true when it carried generated tokens (for time to first token)."""
        ...

    @property
    def text(self) -> str: ...

    def response(self) -> JSONObject: ...

    def usage(self) -> TokenUsage: ...


async def sse_events(content: aiohttp.StreamReader) -> AsyncIterator[JSONObject]:
    """The JSON ``data:`` events of a server-sent-event stream, up to ``data: [DONE]``."""
    async for events in sse_event_batches(content):
        for event in events:
            yield event


async def sse_event_batches(content: aiohttp.StreamReader) -> AsyncIterator[list[JSONObject]]:
    """:func:`sse_events` a socket read at a time: the events each read completed, in order.

    The reader handles one read's events in one step (an async generator's step per event cost
    a measurable share of a streamed rollout's CPU); a read that completes none yields nothing.
    Lines are split here rather than by aiohttp's line reader, which refuses lines over 128 KiB:
    a Responses API ``response.completed`` event carries the whole output on one line.
    """
    pending: list[bytes] = []
    async for chunk in content.iter_any():
        *complete, rest = chunk.split(b"\n")
        if complete:
            complete[0] = b"".join([*pending, complete[0]])
            pending = []
            events: list[JSONObject] = []
            for line in complete:
                payload = _data(line)
                if payload == DONE:
                    if events:
                        yield events
                    return
                if payload is not None:
                    events.append(_event(payload))
            if events:
                yield events
        if rest:
            pending.append(rest)
    payload = _data(b"".join(pending))
    if payload is not None and payload != DONE:
        yield [_event(payload)]


def _data(line: bytes) -> bytes | None:
    line = line.strip()
    return line[5:].strip() if line.startswith(b"data:") else None


def _event(payload: bytes) -> JSONObject:
    try:
        event = orjson.loads(payload)
    except ValueError:
        event = None
    if not isinstance(event, dict):
        raise GenerationFailed("invalid_response", f"bad stream event: {payload!r}")
    return event


# --------------------------------------------------------------------------- chat completions


class ChatStream:
    """Assembles ``chat.completion.chunk`` events into the ``chat.completion`` they stand for."""

    def __init__(self) -> None:
        self._top: dict[str, Any] = {}
        self._choices: dict[int, _ChoiceParts] = {}
        self._usage: dict[str, Any] | None = None

    def add(self, event: Mapping[str, Any]) -> bool:
        for key, value in event.items():
            if key not in ("choices", "object", "usage"):
                _remember(self._top, key, value)
        if event.get("usage"):
            self._usage = dict(event["usage"])
        produced = False
        for position, choice in enumerate(event.get("choices") or []):
            index = choice.get("index", position)
            produced |= self._choices.setdefault(index, _ChoiceParts(index)).add(choice)
        return produced

    @property
    def text(self) -> str:
        first = self._choices.get(min(self._choices, default=0))
        return first.text if first else ""

    def response(self) -> JSONObject:
        head = {"id": None, "object": "chat.completion", "created": None, "model": None}
        choices = [self._choices[index].choice() for index in sorted(self._choices)]
        return {**head, **self._top, "object": "chat.completion", "choices": choices, "usage": self._usage}

    def usage(self) -> TokenUsage:
        usage = self._usage or {}
        return TokenUsage(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0))


class _ChoiceParts:
    """One choice's deltas: text fields (content, reasoning, refusal) are concatenated; tool calls
    are gathered by their ``index`` (id, type and name taken once, arguments concatenated)."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.role = "assistant"
        self.texts: dict[str, list[str]] = {}
        self.others: dict[str, Any] = {}
        self.tool_calls: dict[int, dict[str, Any]] | None = None
        self.logprobs: dict[str, Any] | None = None
        self.has_logprobs = False
        self.ends: dict[str, Any] = {"finish_reason": None}

    @property
    def text(self) -> str:
        return "".join(self.texts.get("content", []))

    def add(self, choice: Mapping[str, Any]) -> bool:
        produced = False
        for key, value in (choice.get("delta") or {}).items():
            produced |= self._add_delta(key, value)
        if "logprobs" in choice:
            self._add_logprobs(choice["logprobs"])
        for key, value in choice.items():
            if key not in ("index", "delta", "logprobs"):
                _remember(self.ends, key, value)
        return produced

    def _add_delta(self, key: str, value: Any) -> bool:
        if key == "role":
            self.role = value or self.role
        elif key == "tool_calls":
            return self._add_tool_calls(value or [])
        elif isinstance(value, str):
            self.texts.setdefault(key, []).append(value)
            return bool(value)
        elif value is not None or key not in self.texts:
            self.others[key] = value
        return False

    def _add_tool_calls(self, deltas: list[Mapping[str, Any]]) -> bool:
        calls = self.tool_calls = self.tool_calls if self.tool_calls is not None else {}
        produced = False
        for position, delta in enumerate(deltas):
            call = calls.setdefault(delta.get("index", position), _new_tool_call())
            call["id"] = call["id"] or delta.get("id")
            call["type"] = delta.get("type") or call["type"]
            function = delta.get("function") or {}
            call["function"]["name"] = call["function"]["name"] or function.get("name") or ""
            call["function"]["arguments"] += function.get("arguments") or ""
            produced |= bool(function.get("name") or function.get("arguments"))
        return produced

    def _add_logprobs(self, logprobs: Mapping[str, Any] | None) -> None:
        """Token lists (``content``, ``refusal``) are concatenated; other keys (a ``refusal``
        that stays null) are kept as a non-streamed choice has them."""
        self.has_logprobs = True
        if not logprobs:
            return
        gathered = self.logprobs = self.logprobs if self.logprobs is not None else {}
        for key, value in logprobs.items():
            if isinstance(value, list):
                if not isinstance(gathered.get(key), list):
                    gathered[key] = []
                gathered[key].extend(value)
            else:
                _remember(gathered, key, value)

    def choice(self) -> JSONObject:
        message: dict[str, Any] = {"role": self.role, "content": None, **self.others}
        message.update({key: "".join(pieces) for key, pieces in self.texts.items()})
        if self.tool_calls is not None:
            message["tool_calls"] = [self.tool_calls[index] for index in sorted(self.tool_calls)]
        choice: dict[str, Any] = {"index": self.index, "message": message}
        if self.has_logprobs:
            choice["logprobs"] = self.logprobs
        return {**choice, **self.ends}


def _new_tool_call() -> JSONObject:
    return {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}


def _remember(fields: dict[str, Any], key: str, value: Any) -> None:
    """Keep every key the chunks name (a non-streamed answer has it too, if only as null), with
    its latest non-null value (``finish_reason`` is null until the last chunk)."""
    if value is not None or key not in fields:
        fields[key] = value


# --------------------------------------------------------------------------- Responses API

RESPONSE_SKELETON: dict[str, Any] = {
    "id": None,
    "object": "response",
    "created_at": None,
    "status": "completed",
    "incomplete_details": None,
    "model": None,
    "output": [],
    "usage": None,
}
FINAL_EVENTS = ("response.completed", "response.incomplete", "response.failed")
TEXT_DELTAS: dict[str, tuple[str, str, str, str]] = {
    # event type prefix: (item list, index field, part type, text field)
    "response.output_text": ("content", "content_index", "output_text", "text"),
    "response.refusal": ("content", "content_index", "refusal", "refusal"),
    "response.reasoning_text": ("content", "content_index", "reasoning_text", "text"),
    "response.reasoning_summary_text": ("summary", "summary_index", "summary_text", "text"),
}


class ResponsesStream:
    """Keeps the final event's response; without one, builds the response from the stream."""

    def __init__(self) -> None:
        self._final: dict[str, Any] | None = None
        self._base: dict[str, Any] = {}
        self._items: dict[int, dict[str, Any]] = {}
        self._pieces: list[str] = []

    def add(self, event: Mapping[str, Any]) -> bool:
        kind = str(event.get("type", ""))
        if kind == "response.output_text.delta":  # most events of a stream: straight to the text
            self._add_text(kind, event)
            return bool(event.get("delta"))
        if kind in FINAL_EVENTS:
            self._final = dict(event.get("response") or {})
        elif kind in ("response.created", "response.in_progress"):
            self._base = dict(event.get("response") or {})
        elif kind in ("response.output_item.added", "response.output_item.done"):
            self._items[int(event.get("output_index", len(self._items)))] = dict(event.get("item") or {})
        elif kind in ("response.content_part.added", "response.content_part.done"):
            self._set_part(event, "content", "content_index", dict(event.get("part") or {}))
        elif kind.startswith("response.function_call_arguments."):
            self._add_arguments(kind, event)
        elif kind.rpartition(".")[0] in TEXT_DELTAS:
            self._add_text(kind, event)
        return kind.endswith(".delta") and bool(event.get("delta"))

    @property
    def text(self) -> str:
        if self._pieces:
            return "".join(self._pieces)
        return read_responses(self.response())[0] if self._final is not None else ""

    def response(self) -> JSONObject:
        if self._final is not None:
            return self._final
        output = [self._items[index] for index in sorted(self._items)]
        for item in output:
            if item.get("status") == "in_progress":
                item["status"] = "completed"  # the stream ended: nothing more is coming
        return {**RESPONSE_SKELETON, **self._base, "status": "completed", "output": output}

    def usage(self) -> TokenUsage:
        usage = (self._final if self._final is not None else self._base).get("usage") or {}
        return TokenUsage(int(usage.get("input_tokens") or 0), int(usage.get("output_tokens") or 0))

    def _item(self, event: Mapping[str, Any]) -> JSONObject:
        index = int(event.get("output_index", 0))
        item = self._items.get(index)
        if item is None:  # built only when missing: this runs for every delta
            item = {"type": "message", "id": event.get("item_id"), "status": "in_progress", "role": "assistant",
                    "content": []}  # fmt: skip
            self._items[index] = item
        return item

    def _parts(self, event: Mapping[str, Any], field: str) -> list[dict[str, object]]:
        """The item's list of parts. A server's own item may hold anything under ``field``; what is not
        a list fails where it is used, as it always has (the cast only tells the checker)."""
        return cast("list[dict[str, object]]", self._item(event).setdefault(field, []))

    def _set_part(self, event: Mapping[str, Any], field: str, index_field: str, part: dict[str, Any]) -> None:
        parts = self._parts(event, field)
        index = int(event.get(index_field, 0))
        parts.extend({} for _ in range(index + 1 - len(parts)))
        parts[index] = part

    def _add_text(self, kind: str, event: Mapping[str, Any]) -> None:
        prefix, _, step = kind.rpartition(".")
        field, index_field, part_type, text_field = TEXT_DELTAS[prefix]
        parts = self._parts(event, field)
        index = int(event.get(index_field, 0))
        if index >= len(parts) or not parts[index]:
            self._set_part(event, field, index_field, {"type": part_type, text_field: ""})
        part = parts[index]
        if step == "delta":
            delta = str(event.get("delta") or "")
            part[text_field] = str(part.get(text_field) or "") + delta
            if prefix == "response.output_text":
                self._pieces.append(delta)
        elif step == "done" and text_field in event:
            part[text_field] = event[text_field]

    def _add_arguments(self, kind: str, event: Mapping[str, Any]) -> None:
        item = self._item(event)
        if kind.endswith(".delta"):
            item["arguments"] = str(item.get("arguments") or "") + str(event.get("delta") or "")
        elif "arguments" in event:
            item["arguments"] = event["arguments"]
