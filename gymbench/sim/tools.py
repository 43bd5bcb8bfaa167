"""Function tools as a request offers them, and whether (and which) the simulated model calls.

Both APIs' spellings are read: chat completions nest the function (``{"type": "function",
"function": {"name", "parameters"}}``), the Responses API flattens it (``{"type": "function",
"name", "parameters"}``). Only function tools are served; another kind is a 400, not a silent no-op.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

CHOICES = ("none", "auto", "required")


class ToolError(ValueError):
    """A malformed ``tools`` or ``tool_choice``; ``param`` names the field as OpenAI does."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class ToolSpec:
    name: str
    parameters: Mapping[str, Any] | None
    description: str | None = None
    strict: bool | None = None

    def as_responses_tool(self) -> dict[str, object]:
        """The tool as a Response object echoes it."""
        return {
            "type": "function",
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters,
            "strict": self.strict,
        }


@dataclass(frozen=True)
class ToolUse:
    """The tools offered, ``tool_choice``, and whether the last turn was a tool's result."""

    tools: tuple[ToolSpec, ...] = ()
    choice: str = "auto"
    forced: str | None = None
    """The function ``tool_choice`` names, if it names one."""
    parallel: bool = True
    after_result: bool = False

    def pick(self, rng: random.Random, call_rate: float) -> ToolSpec | None:
        """The tool to call this turn, or ``None`` for a text answer.

        Always a call when ``tool_choice`` is ``required`` or names a function; never with
        ``none``; with ``auto``, a call with probability ``call_rate``, except right after a tool's
        result, which gets the final answer.
        """
        if not self.tools or self.choice == "none":
            return None
        if self.forced is not None:
            return next(tool for tool in self.tools if tool.name == self.forced)
        if self.choice == "auto" and (self.after_result or rng.random() >= call_rate):
            return None
        return self.tools[rng.randrange(len(self.tools))]

    def prompt_text(self) -> str:
        """The tool definitions as a chat template renders them into the prompt (they cost tokens)."""
        if not self.tools:
            return ""
        return json.dumps([tool.as_responses_tool() for tool in self.tools], separators=(",", ":"))

    def echoed_choice(self) -> str | dict[str, object]:
        return {"type": "function", "name": self.forced} if self.forced is not None else self.choice


NO_TOOLS = ToolUse()


def read_tool_use(body: Mapping[str, Any], nested: bool, after_result: bool) -> ToolUse:
    """``tools``, ``tool_choice`` and ``parallel_tool_calls`` of a request (types already checked)."""
    raw_tools = body.get("tools") or []
    tools = tuple(_read_tool(tool, index, nested) for index, tool in enumerate(raw_tools))
    names = [tool.name for tool in tools]
    if len(set(names)) != len(names):
        raise ToolError("'tools' must not name a function twice", "tools")
    choice, forced = _read_choice(body.get("tool_choice"), names, nested)
    if choice == "required" and not tools:
        raise ToolError("'tool_choice' is 'required' but no 'tools' are given", "tool_choice")
    parallel = body.get("parallel_tool_calls")
    return ToolUse(tools, choice, forced, True if parallel is None else parallel, after_result)


def _read_tool(tool: Any, index: int, nested: bool) -> ToolSpec:
    where = f"tools[{index}]"
    if not isinstance(tool, Mapping) or tool.get("type") != "function":
        raise ToolError(f'\'{where}\' must be a function tool ({{"type": "function", ...}})', where)
    spec = tool.get("function") if nested else tool
    if nested and not isinstance(spec, Mapping):
        raise ToolError(f"'{where}.function' must be an object", f"{where}.function")
    where = f"{where}.function" if nested else where
    assert isinstance(spec, Mapping)
    name = spec.get("name")
    if not isinstance(name, str) or not name:
        raise ToolError(f"'{where}.name' must be a non-empty string", f"{where}.name")
    parameters = spec.get("parameters")
    if parameters is not None and not isinstance(parameters, Mapping):
        raise ToolError(f"'{where}.parameters' must be a JSON schema object", f"{where}.parameters")
    description = spec.get("description")
    strict = spec.get("strict")
    if description is not None and not isinstance(description, str):
        raise ToolError(f"'{where}.description' must be a string", f"{where}.description")
    if strict is not None and not isinstance(strict, bool):
        raise ToolError(f"'{where}.strict' must be true or false", f"{where}.strict")
    return ToolSpec(name, parameters, description, strict)


def _read_choice(value: Any, names: Sequence[str], nested: bool) -> tuple[str, str | None]:
    if value is None:
        return "auto", None
    if isinstance(value, str):
        if value not in CHOICES:
            raise ToolError(f"'tool_choice' must be one of {', '.join(CHOICES)} or name a function", "tool_choice")
        return value, None
    function = value.get("function") if nested else value
    name = function.get("name") if isinstance(function, Mapping) else None
    if value.get("type") != "function" or not isinstance(name, str):
        spelling = '{"type": "function", "function": {"name": ...}}' if nested else '{"type": "function", "name": ...}'
        raise ToolError(f"'tool_choice' as an object must be {spelling}", "tool_choice")
    if name not in names:
        raise ToolError(f"'tool_choice' names {name!r}, which is not among the 'tools'", "tool_choice")
    return "required", name
