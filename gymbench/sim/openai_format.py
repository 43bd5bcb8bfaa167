"""What the three OpenAI endpoints' renderings share: the finished reply, usage, server-sent events.

Each endpoint (:mod:`~gymbench.sim.chat_api`, :mod:`~gymbench.sim.completions_api`,
:mod:`~gymbench.sim.responses_api`) reads its request into a
:class:`~gymbench.sim.request.ParsedRequest`, renders a :class:`Reply` whole, and renders it as a
stream token by token through a :class:`Streamer`, in OpenAI's format for that endpoint: chat
and completions chunks ending in ``data: [DONE]``, the Responses API's numbered typed events.
Every object and event validates strictly against the official ``openai`` SDK's types
(``tests/sim/test_openai_conformance.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from gymbench.sim.logprobs import TokenLogprob, token_logprobs
from gymbench.sim.planner import PlannedOutput
from gymbench.sim.request import ParsedRequest


@dataclass(eq=False)
class Reply:
    """A request's planned choices with the ids and counts every response shape needs."""

    request_id: str
    model: str
    created: int
    prompt_tokens: int
    choices: tuple[PlannedOutput, ...]
    request: ParsedRequest
    _logprobs: dict[int, list[TokenLogprob]] = field(default_factory=dict, repr=False)

    @property
    def output(self) -> PlannedOutput:
        """The first (usually only) choice."""
        return self.choices[0]

    @property
    def completion_tokens(self) -> int:
        return sum(len(choice.tokens) for choice in self.choices)

    @property
    def key(self) -> str:
        """The id without its endpoint prefix, shared by the ids of the reply's items."""
        return self.request_id.rsplit("-", 1)[-1].rsplit("_", 1)[-1]

    def logprobs(self, choice: int) -> list[TokenLogprob]:
        """The choice's token logprobs, computed once, when the request asked for them."""
        if choice not in self._logprobs:
            self._logprobs[choice] = token_logprobs(self.choices[choice], self.request.top_logprobs)
        return self._logprobs[choice]


class Streamer(Protocol):
    """Renders one reply as a stream: the opening, each token as the engine makes it, the end."""

    def start(self) -> bytes: ...

    def token(self, choice: int, index: int) -> bytes: ...

    def end(self) -> bytes: ...


class Endpoint(Protocol):
    path: str
    prefix: str

    def parse(self, body: Mapping[str, Any]) -> ParsedRequest: ...

    def full(self, reply: Reply) -> dict[str, object]: ...

    def streamer(self, reply: Reply) -> Streamer: ...


def sse(data: Mapping[str, Any] | str, event: str | None = None) -> bytes:
    payload = data.encode() if isinstance(data, str) else orjson.dumps(data)
    head = f"event: {event}\n".encode() if event else b""
    return b"".join((head, b"data: ", payload, b"\n\n"))


def dumps(data: Mapping[str, Any]) -> bytes:
    return orjson.dumps(data)


def chat_usage(reply: Reply) -> dict[str, object]:
    """Chat and completions usage: the prompt once, every choice's tokens."""
    return {
        "prompt_tokens": reply.prompt_tokens,
        "completion_tokens": reply.completion_tokens,
        "total_tokens": reply.prompt_tokens + reply.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }


def chunked_stream_end(final_chunk: Mapping[str, Any], reply: Reply) -> bytes:
    """The end of a chat or completions stream: the usage chunk when asked (no choices, as
    OpenAI sends it), then ``[DONE]``."""
    if not reply.request.include_usage:
        return sse("[DONE]")
    return sse({**final_chunk, "choices": [], "usage": chat_usage(reply)}) + sse("[DONE]")


def render_stream(endpoint: Endpoint, reply: Reply) -> bytes:
    """The whole stream of ``reply``, choices one after another (what tests compare against)."""
    streamer = endpoint.streamer(reply)
    tokens = [streamer.token(c, i) for c, choice in enumerate(reply.choices) for i in range(len(choice.tokens))]
    return streamer.start() + b"".join(tokens) + streamer.end()
