"""What the simulator "says": token counts, tokens and answers, all deterministic per seed.

Token counts use a fixed rule (one token per four UTF-8 bytes, at least one) instead of a real
tokenizer: the simulator needs counts that are cheap and repeatable, not a model's vocabulary.
Generated text follows the same rule: it is cut into tokens of four bytes (the last may be
shorter), so the tokens a response reports are always ``count_tokens`` of its text.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from typing import Any

FILLER = tuple(
    word + " "
    for word in (
        "let", "the", "sum", "now", "add", "one", "two", "see", "yes", "and", "but", "not", "all",
        "say", "try", "use", "get", "set", "how", "may", "can", "was", "are", "its", "our", "new",
        "odd", "end", "ask", "why",
    )
)  # fmt: skip
"""Reasoning filler: words of exactly one token (four bytes) each."""
ARITHMETIC = re.compile(r"(-?\d+)\s*([+\-*/×x÷])\s*(-?\d+)")
CODE_TASK = re.compile(r"prints? (?:their|the) (sum|product|maximum|minimum)", re.IGNORECASE)
PROGRAMS = {
    "sum": "nums = list(map(int, open(0).read().split()))\nprint(sum(nums){bug})",
    "product": "import math\nnums = list(map(int, open(0).read().split()))\nprint(math.prod(nums){bug})",
    "maximum": "nums = list(map(int, open(0).read().split()))\nprint(max(nums){bug})",
    "minimum": "nums = list(map(int, open(0).read().split()))\nprint(min(nums){bug})",
}


def count_tokens(text: str) -> int:
    return max(1, (len(text.encode("utf-8")) + 3) // 4)


def split_tokens(text: str) -> list[str]:
    """``text`` in tokens of four bytes (a character is never split, so a piece may be shorter)."""
    if text.isascii():
        return [text[i : i + 4] for i in range(0, len(text), 4)]
    pieces, current, size = [], "", 0
    for char in text:
        width = len(char.encode("utf-8"))
        if current and size + width > 4:
            pieces.append(current)
            current, size = "", 0
        current += char
        size += width
    return [*pieces, current] if current else pieces


def message_text(content: Any) -> str:
    """Text of an OpenAI message content: a string, or a list of parts with ``text``."""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
    return ""


def last_user_text(messages: Sequence[Mapping[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role", "user") == "user":
            return message_text(message.get("content", ""))
    return ""


def solve(question: str) -> int | None:
    """The true answer of the last integer arithmetic expression in ``question``, if any."""
    matches = ARITHMETIC.findall(question)
    if not matches:
        return None
    left, op, right = matches[-1]
    a, b = int(left), int(right)
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op in "*×x":
        return a * b
    if b == 0 or a % b:
        return None
    return a // b


def answer_for(question: str, rng: random.Random, accuracy: float) -> str:
    """The answer line: right with probability ``accuracy`` when the question has an answer."""
    code_task = CODE_TASK.search(question)
    if code_task is not None:
        correct = rng.random() < accuracy
        program = PROGRAMS[code_task.group(1).lower()].format(bug="" if correct else " + 1")
        return f"```python\n{program}\n```"
    truth = solve(question)
    if truth is None:
        return "I cannot tell."
    if rng.random() < accuracy:
        return str(truth)
    return str(truth + rng.choice((-1, 1)) * rng.randint(1, 9))
