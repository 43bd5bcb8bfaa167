"""Each choice's output planned before it is generated: its tokens, why it ends, any tool call.

A reply is reasoning filler and then the answer line. Its length is drawn from the configured
distribution, and is at least what the answer takes (a model does not stop mid-answer of its own
accord); ``max_tokens`` then cuts it, and a cut reply is a ``length`` finish whose answer is cut
too. A tool call is one token that opens it (and carries the function's name, as a tool-call
special token does) followed by the arguments' JSON at four bytes a token.

Which random stream a request draws from: a request with a ``seed``, or at ``temperature`` 0, is
repeatable (the same request gets the same reply); any other request draws anew each time the
same prompt is seen, as sampling does, and the same run repeats exactly under the same server
seed. Choice ``i`` of ``n`` draws from its own stream, except greedy choices, which are alike.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass

from gymbench.sim.config import SimConfig
from gymbench.sim.request import ParsedRequest
from gymbench.sim.schema_values import schema_value
from gymbench.sim.text import FILLER, answer_for, count_tokens, split_tokens


@dataclass(frozen=True)
class ToolCall:
    call_id: str
    name: str
    arguments: str
    """The arguments' JSON; cut short (and so not valid JSON) when the reply was cut."""


@dataclass(frozen=True)
class PlannedOutput:
    tokens: tuple[str, ...]
    """Every generated token's text: the reply's, or the tool call's (name, then arguments)."""
    finish_reason: str
    """``stop``, ``length`` or ``tool_calls``."""
    tool_call: ToolCall | None = None
    logprob_seed: int = 0

    @property
    def text(self) -> str:
        """The reply's text (empty for a tool call)."""
        return "" if self.tool_call is not None else "".join(self.tokens)

    @property
    def cut(self) -> bool:
        return self.finish_reason == "length"


class Planner:
    """Plans the outputs of each request from (server seed, request seed, prompt, repeats)."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self._seen: dict[str, int] = {}

    def plan(self, parsed: ParsedRequest) -> tuple[PlannedOutput, ...]:
        tag = self._tag(parsed)
        greedy = parsed.temperature == 0
        return tuple(
            self._plan_one(parsed, _rng(tag if index == 0 or greedy else f"{tag}|choice {index}"))
            for index in range(parsed.n)
        )

    def _tag(self, parsed: ParsedRequest) -> str:
        if parsed.repeatable:
            return f"{self.config.seed}|{parsed.seed}|repeatable|{parsed.prompt}"
        occurrence = self._seen.get(parsed.prompt, 0)
        self._seen[parsed.prompt] = occurrence + 1
        return f"{self.config.seed}|{parsed.seed}|{occurrence}|{parsed.prompt}"

    def _plan_one(self, parsed: ParsedRequest, rng: random.Random) -> PlannedOutput:
        cap = parsed.max_tokens if parsed.max_tokens is not None else self.config.max_output_tokens
        tool = parsed.tools.pick(rng, self.config.tool_call_rate) if parsed.tools.tools else None
        if tool is not None:
            arguments = json.dumps(schema_value(tool.parameters, rng))
            call = ToolCall(f"call_{rng.getrandbits(96):024x}", tool.name, arguments)
            tokens = [tool.name, *split_tokens(arguments)]
            finish = "tool_calls"
        else:
            wanted = self._length(parsed.max_tokens, rng)
            tokens = self._reply_tokens(answer_for(parsed.question, rng, self.config.answer_accuracy), wanted, rng)
            call, finish = None, "stop"
        seed = rng.getrandbits(64)
        if len(tokens) > cap:
            tokens, finish = tokens[:cap], "length"
            if call is not None:
                call = ToolCall(call.call_id, call.name, "".join(tokens[1:]))
        return PlannedOutput(tuple(tokens), finish, call, seed)

    @staticmethod
    def _reply_tokens(answer: str, wanted: int, rng: random.Random) -> list[str]:
        """Filler, then the answer on its own line: ``wanted`` tokens, or what the answer takes."""
        line = "\n" + answer
        filler = wanted - count_tokens(line)
        if filler <= 0:
            return split_tokens(answer)
        return [rng.choice(FILLER) for _ in range(filler)] + split_tokens(line)

    def _length(self, max_tokens: int | None, rng: random.Random) -> int:
        mean = self.config.output_tokens_mean
        dist = self.config.output_tokens_dist
        if dist == "max_tokens":
            return max_tokens if max_tokens is not None else mean
        if dist == "uniform":
            return rng.randint(1, 2 * mean - 1)
        if dist == "exponential":
            return max(1, round(rng.expovariate(1 / mean)))
        return mean


def _rng(tag: str) -> random.Random:
    return random.Random(int.from_bytes(hashlib.blake2b(tag.encode(), digest_size=8).digest(), "big"))
