"""Request bodies and response reading for OpenAI-compatible servers (vLLM, SGLang, OpenAI).

Rows carry NeMo Gym's ``responses_create_params`` (the Responses API's shape). The Responses API
takes them as they are; for servers that only speak chat completions they are translated.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from gymbench.types import SERVER_TIMING_FIELDS, GenerationFailed, JSONObject, ServerTimings, TokenUsage

CHAT_PASSTHROUGH = ("temperature", "top_p", "seed", "stop", "tool_choice", "parallel_tool_calls", "logprobs")


def chat_body(params: Mapping[str, Any]) -> JSONObject:
    """Translate Responses-API parameters into a chat-completions body."""
    messages: list[dict[str, Any]] = []
    instructions = params.get("instructions")
    if isinstance(instructions, str) and instructions:
        messages.append({"role": "system", "content": instructions})
    data = params["input"]
    if isinstance(data, str):
        messages.append({"role": "user", "content": data})
    else:
        messages.extend(_chat_message(item) for item in data if item.get("type", "message") == "message")
    body: dict[str, Any] = {"messages": messages}
    if params.get("max_output_tokens") is not None:
        body["max_tokens"] = params["max_output_tokens"]
    for key in CHAT_PASSTHROUGH:
        if key in params:
            body[key] = params[key]
    if params.get("tools"):
        body["tools"] = [_chat_tool(tool) for tool in params["tools"]]
    return body


def _chat_message(item: Mapping[str, Any]) -> JSONObject:
    content = item.get("content", "")
    if isinstance(content, list):
        content = [
            {"type": "text", "text": part.get("text", "")}
            if part.get("type") in ("input_text", "output_text", "text")
            else part
            for part in content
        ]
    return {"role": item.get("role", "user"), "content": content}


def _chat_tool(tool: Mapping[str, Any]) -> JSONObject:
    if tool.get("type") == "function" and "function" not in tool:
        function = {key: tool[key] for key in ("name", "description", "parameters", "strict") if key in tool}
        return {"type": "function", "function": function}
    return dict(tool)


def read_chat(data: Any) -> tuple[str, TokenUsage]:
    try:
        message = data["choices"][0]["message"]
        usage = data.get("usage") or {}
        text = message.get("content") or ""
        return text, TokenUsage(int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0)))
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
        raise GenerationFailed("invalid_response", f"not a chat completion: {exc!r}") from None


def read_responses(data: Any) -> tuple[str, TokenUsage]:
    try:
        texts = [
            part.get("text", "")
            for item in data["output"]
            if item.get("type") == "message"
            for part in item.get("content", [])
            if part.get("type") == "output_text"
        ]
        usage = data.get("usage") or {}
        return "".join(texts), TokenUsage(int(usage.get("input_tokens", 0)), int(usage.get("output_tokens", 0)))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise GenerationFailed("invalid_response", f"not a Responses API response: {exc!r}") from None


def read_server_timings(timings: Any) -> ServerTimings | None:
    """llama.cpp's per-request ``timings`` object, kept to :data:`~gymbench.types.SERVER_TIMING_FIELDS`.

    A field that is missing, not a number or negative is left out rather than read as 0, and so is
    ``predicted_per_token_ms`` for fewer than two generated tokens (llama.cpp writes 0.0 there,
    meaning "no gap to measure"): a zero would read as an infinitely fast server. ``None`` when
    nothing usable is left (vLLM, SGLang and the OpenAI API report no per-request timings)."""
    if not isinstance(timings, Mapping):
        return None
    kept: ServerTimings = {}
    for name in SERVER_TIMING_FIELDS:
        value = timings.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0:
            kept[name] = value
    if kept.get("predicted_n", 2) < 2:
        kept.pop("predicted_per_token_ms", None)
    return kept or None
