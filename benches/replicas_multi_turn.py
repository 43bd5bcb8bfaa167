"""Multi-turn rollouts over real replicas: does ``sticky`` keep every turn of a rollout on one server?

Run by hand against llama.cpp replicas (docs/replicas.md, "Three llama.cpp replicas")::

    gymbench engine llama-cpp --replicas 3 --slow-replica-slots 1
    python benches/replicas_multi_turn.py URL1 URL2 URL3 --routing sticky

Each rollout is a conversation of ``--turns`` requests through one ``openai`` backend: turn 1 a
prompt unique to the rollout, each later turn the conversation so far (the replies included) and
one more question. The check is the servers' own, not the client's:

- **Tokens each server generated** (``llamacpp:tokens_predicted_total`` on its ``/metrics``):
  rollout ``r`` asks ``BASE_TOKENS + r`` tokens on every turn (``ignore_eos``), so a server that
  served exactly the rollouts sticky routing gives it, every turn of each, generated exactly
  ``turns * sum(BASE_TOKENS + r)`` over those ``r``; a turn served elsewhere changes two servers'
  sums.
- **The prompt cache** (each answer's ``timings.cache_n``, the prompt tokens the server reused):
  a later turn sent to the server that answered the earlier ones finds the conversation cached;
  one sent elsewhere finds at most the chat template's first tokens.

Prints one JSON object. ``--routing round-robin`` is the control.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import secrets
import statistics
import urllib.request
from typing import Any

from gymbench import GenerationRequest
from gymbench.builtin.backend_settings import OpenAISettings
from gymbench.builtin.openai_backend import OpenAIBackend

BASE_TOKENS = 4
WORDS = "apple river stone cloud seven garden paper window silver orange".split()


def predicted_tokens(base_url: str) -> float:
    root = base_url.removesuffix("/v1")
    with urllib.request.urlopen(root + "/metrics", timeout=30) as answer:
        text = answer.read().decode()
    found = re.search(r"^llamacpp:tokens_predicted_total (\S+)$", text, re.MULTILINE)
    assert found, f"{root}/metrics has no llamacpp:tokens_predicted_total"
    return float(found.group(1))


def opening(rollout: int, tag: str) -> str:
    """A first question no other rollout shares beyond its first words (``tag``: nor another run's)."""
    words = " ".join(WORDS[(rollout * 7 + i) % len(WORDS)] for i in range(12))
    return f"Run {tag}, rollout {rollout}: {words}. Say more about rollout {rollout}."


async def converse(
    client: OpenAIBackend, rollout: int, turns: int, gate: asyncio.Semaphore, tag: str
) -> list[dict[str, Any]]:
    messages: list[dict[str, str]] = [{"role": "user", "content": opening(rollout, tag)}]
    seen = []
    for turn in range(turns):
        async with gate:
            params = {"input": messages, "max_output_tokens": BASE_TOKENS + rollout}
            answer = await client.generate(GenerationRequest(rollout, 0, params))
        timings = answer.server_timings or {}
        seen.append({"turn": turn, "prompt_tokens": answer.usage.prompt_tokens, "cache_n": timings.get("cache_n"),
                     "retries": answer.retries})  # fmt: skip
        messages = [*messages, {"role": "assistant", "content": answer.text},
                    {"role": "user", "content": f"And then, turn {turn + 2}?"}]  # fmt: skip
    return seen


async def run(urls: list[str], routing: str, rollouts: int, turns: int, parallel: int) -> dict[str, Any]:
    settings = OpenAISettings(base_url=urls, model="gymbench-tiny", api="chat", routing=routing,
                              extra_body={"ignore_eos": True})  # fmt: skip
    before = [predicted_tokens(url) for url in urls]
    gate = asyncio.Semaphore(parallel)
    async with OpenAIBackend(settings) as client:
        tag = secrets.token_hex(4)
        conversations = await asyncio.gather(*(converse(client, r, turns, gate, tag) for r in range(rollouts)))
        counts = client.replica_counts()
    generated = [predicted_tokens(url) - was for url, was in zip(urls, before, strict=True)]
    sticky = [turns * sum(BASE_TOKENS + r for r in range(rollouts) if r % len(urls) == i) for i in range(len(urls))]
    later = [(conv[t]["cache_n"], conv[t - 1]["prompt_tokens"]) for conv in conversations for t in range(1, turns)]
    reused = [cache / previous for cache, previous in later if cache is not None and previous]
    return {
        "routing": routing,
        "rollouts": rollouts,
        "turns": turns,
        "parallel": parallel,
        "server_generated_tokens": generated,
        "expected_if_every_turn_stayed": sticky,
        "every_turn_stayed": generated == sticky,
        "client_requests_per_replica": [r.requests for r in counts.replicas] if counts else None,
        "later_turns": len(later),
        "later_turns_reusing_the_whole_previous_prompt": sum(1 for c, p in later if c is not None and c >= p),
        "cache_n_over_previous_prompt_median": statistics.median(reused) if reused else None,
        "first_turn_cache_n_median": statistics.median(conv[0]["cache_n"] or 0 for conv in conversations),
        "retries": sum(turn["retries"] for conv in conversations for turn in conv),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("urls", nargs="+")
    parser.add_argument("--routing", default="sticky")
    parser.add_argument("--rollouts", type=int, default=24)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--parallel", type=int, default=6)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args.urls, args.routing, args.rollouts, args.turns, args.parallel)), indent=1))


if __name__ == "__main__":
    main()
