"""Log-probabilities of the generated tokens, and the most likely alternatives, per seed.

Each token's log-probability is drawn from the reply's own stream (so a request asking for
logprobs gets the same reply as one that does not). The token heads its ``top_logprobs``; the
alternatives follow, each half as likely as the one before, all within what the token leaves.
Every generated token has an entry, a tool call's included, as vLLM reports them.
"""

from __future__ import annotations

import functools
import math
import random
from dataclasses import dataclass

from gymbench.sim.planner import PlannedOutput
from gymbench.sim.text import FILLER

ALTERNATIVES = tuple(word.strip() for word in FILLER) + tuple(FILLER)
"""Tokens offered as alternatives: more than the 20 ``top_logprobs`` can ask for."""
ALTERNATIVES_TWICE = ALTERNATIVES * 2
LN2 = math.log(2)


@dataclass(frozen=True)
class TokenLogprob:
    token: str
    logprob: float
    top: tuple[tuple[str, float], ...]
    """The ``top_logprobs`` asked for: (token, logprob), most likely first."""


def token_logprobs(output: PlannedOutput, top: int) -> list[TokenLogprob]:
    """One entry per token, from one draw each: the token's logprob (exponential, mean -0.25)
    and where its alternatives start in :data:`ALTERNATIVES`, whatever ``top`` is."""
    draw = random.Random(output.logprob_seed).random
    entries = []
    for token in output.tokens:
        uniform = draw()
        logprob = -0.0001 + math.log1p(-uniform) / 4
        entries.append(TokenLogprob(token, logprob, _alternatives(token, logprob, top, int(uniform * 2**20))))
    return entries


def _alternatives(token: str, logprob: float, top: int, start: int) -> tuple[tuple[str, float], ...]:
    if top == 0:
        return ()
    chosen = math.exp(logprob)
    share = math.log(min(chosen, 1.0 - chosen))  # each below the token, all within what it leaves
    begin = start % len(ALTERNATIVES)
    ranked = [(token, logprob)]
    for alternative in [alt for alt in ALTERNATIVES_TWICE[begin : begin + top] if alt != token][: top - 1]:
        share -= LN2
        ranked.append((alternative, share))
    return tuple(ranked)


@functools.lru_cache(maxsize=4096)
def utf8(token: str) -> tuple[int, ...]:
    return tuple(token.encode("utf-8"))


def chat_logprobs(entries: list[TokenLogprob]) -> dict[str, object]:
    """Chat completions' ``logprobs`` of a choice (or of one chunk's tokens)."""
    content = [
        {
            "token": entry.token,
            "logprob": entry.logprob,
            "bytes": utf8(entry.token),
            "top_logprobs": [{"token": t, "logprob": lp, "bytes": utf8(t)} for t, lp in entry.top],
        }
        for entry in entries
    ]
    return {"content": content, "refusal": None}


def completion_logprobs(entries: list[TokenLogprob], offset: int = 0) -> dict[str, object]:
    """The completions API's column-wise ``logprobs``; ``offset`` is where the first token starts."""
    offsets = []
    for entry in entries:
        offsets.append(offset)
        offset += len(entry.token)
    return {
        "tokens": [entry.token for entry in entries],
        "token_logprobs": [entry.logprob for entry in entries],
        "top_logprobs": [dict(entry.top) or {entry.token: entry.logprob} for entry in entries],
        "text_offset": offsets,
    }


def responses_logprobs(entries: list[TokenLogprob], with_bytes: bool) -> list[dict[str, object]]:
    """The Responses API's logprobs: with ``bytes`` in output items, without in stream events."""

    def entry_of(token: str, logprob: float) -> dict[str, object]:
        return (
            {"token": token, "bytes": utf8(token), "logprob": logprob}
            if with_bytes
            else {
                "token": token,
                "logprob": logprob,
            }
        )

    return [
        {**entry_of(entry.token, entry.logprob), "top_logprobs": [entry_of(t, lp) for t, lp in entry.top]}
        for entry in entries
    ]
