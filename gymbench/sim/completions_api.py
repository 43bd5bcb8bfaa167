"""``/v1/completions``: a prompt in, ``text_completion`` (or its chunks) out."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

from gymbench.sim.logprobs import completion_logprobs
from gymbench.sim.openai_format import Reply, chat_usage, chunked_stream_end, sse
from gymbench.sim.request import COMPLETIONS_FIELDS, BadRequest, ParsedRequest, build_request, check_fields, require

DEFAULT_MAX_TOKENS = 16
"""OpenAI's default ``max_tokens`` for this endpoint."""


class Completions:
    path = "/v1/completions"
    prefix = "cmpl-"

    def parse(self, body: Mapping[str, Any]) -> ParsedRequest:
        require(body, "model", str, "a model name")
        prompt = require(body, "prompt", (str, list), "a string or a list of one string")
        if not isinstance(prompt, str):  # a list: require() lets nothing else through
            if len(prompt) != 1 or not isinstance(prompt[0], str):
                raise BadRequest("'prompt' as a list must hold exactly one string", "prompt")
            prompt = prompt[0]
        check_fields(body, COMPLETIONS_FIELDS)
        logprobs = body.get("logprobs")
        return build_request(
            body,
            prompt=prompt,
            question=prompt,
            max_tokens=body.get("max_tokens") or DEFAULT_MAX_TOKENS,
            logprobs=logprobs is not None,
            top_logprobs=logprobs or 0,
            n=body.get("n") or 1,
        )

    def full(self, reply: Reply) -> dict[str, object]:
        choices = [
            {
                "index": index,
                "text": output.text,
                "logprobs": completion_logprobs(reply.logprobs(index)) if reply.request.logprobs else None,
                "finish_reason": output.finish_reason,
            }
            for index, output in enumerate(reply.choices)
        ]
        return {
            "id": reply.request_id,
            "object": "text_completion",
            "created": reply.created,
            "model": reply.model,
            "choices": choices,
            "usage": chat_usage(reply),
        }

    def streamer(self, reply: Reply) -> CompletionsStreamer:
        return CompletionsStreamer(reply)


class CompletionsStreamer:
    def __init__(self, reply: Reply) -> None:
        self.reply = reply
        self.head = {"id": reply.request_id, "object": "text_completion", "created": reply.created}
        self.head["model"] = reply.model
        self.offsets: dict[int, list[int]] = {}

    def start(self) -> bytes:
        return b""

    def token(self, choice: int, index: int) -> bytes:
        output = self.reply.choices[choice]
        logprobs = None
        if self.reply.request.logprobs:
            offset = self._offsets(choice)[index]
            logprobs = completion_logprobs(self.reply.logprobs(choice)[index : index + 1], offset)
        piece = self._chunk(choice, output.tokens[index], logprobs)
        if index + 1 < len(output.tokens):
            return piece
        return piece + self._chunk(choice, "", None, output.finish_reason)

    def end(self) -> bytes:
        return chunked_stream_end({**self.head, "choices": []}, self.reply)

    def _offsets(self, choice: int) -> list[int]:
        """Where each of the choice's tokens starts in its text."""
        if choice not in self.offsets:
            lengths = (len(token) for token in self.reply.choices[choice].tokens)
            self.offsets[choice] = [0, *itertools.accumulate(lengths)]
        return self.offsets[choice]

    def _chunk(self, choice: int, text: str, logprobs: dict[str, Any] | None, finish: str | None = None) -> bytes:
        return sse(
            {**self.head, "choices": [{"index": choice, "text": text, "logprobs": logprobs, "finish_reason": finish}]}
        )
