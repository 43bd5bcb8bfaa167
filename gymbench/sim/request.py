"""What a request asks for, read and checked the way an OpenAI-compatible server checks it.

A field of the wrong type or out of range is a 400 that names the field, as vLLM's request
models (and OpenAI) answer; a field the simulator does not know is ignored, as vLLM ignores it.
``null`` means "not set" for every optional field.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from gymbench.sim.tools import NO_TOOLS, ToolError, ToolUse, read_tool_use


class BadRequest(Exception):
    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class ParsedRequest:
    model: str
    prompt: str
    """All prompt text (messages, tool definitions, tool calls and results), for the token count."""
    question: str
    """The last user text: what an answer is computed from."""
    max_tokens: int | None
    stream: bool = False
    include_usage: bool = False
    seed: int | None = None
    temperature: float | None = None
    n: int = 1
    logprobs: bool = False
    top_logprobs: int = 0
    tools: ToolUse = NO_TOOLS
    body: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    """The request as sent, for the fields a response echoes."""

    @property
    def repeatable(self) -> bool:
        """A seeded or greedy request gets the same answer each time it is sent."""
        return self.seed is not None or self.temperature == 0


Check = tuple[Callable[[object], bool], str]
"""A test of a field's value and what it must be, for the 400's message."""


def _number(low: float, high: float) -> Check:
    def ok(value: object) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and low <= value <= high

    return ok, f"a number from {low:g} to {high:g}"


def _integer(low: int, high: float = math.inf) -> Check:
    def ok(value: object) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high

    what = f"an integer from {low} to {high}" if high != math.inf else f"an integer of at least {low}"
    return ok, what


def _kind(kind: type | tuple[type, ...], what: str) -> Check:
    return (lambda value: isinstance(value, kind) and (kind is bool or not isinstance(value, bool))), what


def _string_or_strings(value: object) -> bool:
    return isinstance(value, str) or isinstance(value, list) and all(isinstance(item, str) for item in value)


BOOLEAN = _kind(bool, "true or false")
STRING = _kind(str, "a string")
OBJECT = _kind(dict, "an object")
LIST = _kind(list, "a list")
SEED = _integer(-(2**63), 2**64 - 1)
COMMON: dict[str, Check] = {
    "stream": BOOLEAN,
    "stream_options": OBJECT,
    "seed": SEED,
    "temperature": _number(0, 2),
    "top_p": _number(0, 1),
    "user": STRING,
    "metadata": OBJECT,
    "tools": LIST,
    "tool_choice": _kind((str, dict), "'none', 'auto', 'required' or an object naming a function"),
    "parallel_tool_calls": BOOLEAN,
}
SAMPLING: dict[str, Check] = {
    "n": _integer(1, 128),
    "max_tokens": _integer(1),
    "presence_penalty": _number(-2, 2),
    "frequency_penalty": _number(-2, 2),
    "stop": (_string_or_strings, "a string or a list of strings"),
    "logit_bias": OBJECT,
}
CHAT_FIELDS = {
    **COMMON,
    **SAMPLING,
    "max_completion_tokens": _integer(1),
    "logprobs": BOOLEAN,
    "top_logprobs": _integer(0, 20),
    "response_format": OBJECT,
}
COMPLETIONS_FIELDS = {**COMMON, **SAMPLING, "logprobs": _integer(0, 5), "echo": BOOLEAN, "suffix": STRING}
RESPONSES_FIELDS = {
    **COMMON,
    "max_output_tokens": _integer(1),
    "instructions": STRING,
    "top_logprobs": _integer(0, 20),
    "include": (lambda value: isinstance(value, list) and all(isinstance(v, str) for v in value), "a list of strings"),
    "text": OBJECT,
    "reasoning": OBJECT,
    "store": BOOLEAN,
    "previous_response_id": STRING,
    "truncation": STRING,
}


def check_fields(body: Mapping[str, Any], checks: Mapping[str, Check]) -> None:
    """Raise :class:`BadRequest` naming the first set field whose value is of the wrong kind."""
    for name, (ok, what) in checks.items():
        value = body.get(name)
        if value is not None and not ok(value):
            raise BadRequest(f"'{name}' must be {what}, got {_shown(value)}", name)


T = TypeVar("T")


def require(body: Mapping[str, Any], name: str, kind: type[T] | tuple[type[T], ...], what: str) -> T:
    if name not in body:
        raise BadRequest(f"missing required field '{name}' ({what})", name)
    value = body[name]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise BadRequest(f"'{name}' must be {what}, got {_shown(value)}", name)
    return value


def first_set(body: Mapping[str, Any], *names: str) -> int | None:
    """The value of the first of ``names`` that is set (aliases such as max_completion_tokens/max_tokens,
    integers :func:`check_fields` has checked)."""
    for name in names:
        if body.get(name) is not None:
            return body[name]
    return None


def tool_use(body: Mapping[str, Any], nested: bool, after_result: bool) -> ToolUse:
    """The request's tools and tool choice; a malformed one is a 400 naming the field."""
    plain = body.get("tool_choice") in (None, "none", "auto") and body.get("parallel_tool_calls") is None
    if plain and not body.get("tools"):
        return NO_TOOLS if not after_result else ToolUse(after_result=True)
    try:
        return read_tool_use(body, nested, after_result)
    except ToolError as exc:
        raise BadRequest(str(exc), exc.param) from None


def build_request(
    body: Mapping[str, Any],
    *,
    prompt: str,
    question: str,
    max_tokens: int | None,
    logprobs: bool = False,
    top_logprobs: int = 0,
    tools: ToolUse = NO_TOOLS,
    n: int = 1,
) -> ParsedRequest:
    """The parsed request, from a body whose fields are already checked."""
    options = body.get("stream_options") or {}
    return ParsedRequest(
        model=body["model"],
        prompt=prompt,
        question=question,
        max_tokens=max_tokens,
        stream=bool(body.get("stream")),
        include_usage=bool(options.get("include_usage")),
        seed=body.get("seed"),
        temperature=body.get("temperature"),
        n=n,
        logprobs=logprobs,
        top_logprobs=top_logprobs,
        tools=tools,
        body=body,
    )


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
