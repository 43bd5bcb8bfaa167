"""One output row per rollout, and what it adds to the run's statistics.

The row keeps the input row (so a rollout file can be verified or trained on without the task
file), the request, the indices that make resume exact, and the product itself: the server's
response, the reward and the verifier's judgement, or why it failed.

Rows are NeMo Gym's rows too: its index fields ``_ng_task_index``/``_ng_rollout_index`` sit
beside gymbench's (always equal), an agent backend's ``agent_ref`` is kept, and when an agent
scored the row its ``verifier`` says so (``name: "agent"``). ``responses_create_params`` is what
the agent echoed back when it did (its normalised request, what NeMo Gym writes and trains on),
otherwise the request as gymbench sent it; the run's overrides are in ``<output>.run.json``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gymbench.rollout.dataset import Task
from gymbench.rollout.latency import rollout_latencies
from gymbench.rollout.stats import CollectStats
from gymbench.rollout.verification import Judgement
from gymbench.types import ENVIRONMENT_SERVER_FIELD, RESULT_TYPE_FIELD, Generation, GenerationFailed, JSONObject

AGENT_VERIFIER = "agent"
"""``verifier.name`` of a row the backend's agent scored (gymbench's verifier did not run)."""
ROUTE_FIELDS = ("agent_ref", ENVIRONMENT_SERVER_FIELD, RESULT_TYPE_FIELD)
"""What an agent backend says about where the rollout ran (the agent; NeMo Gym 0.7.0's environment
server and its type): it replaces the input row's own value, as NeMo Gym's stamps do."""


def build_row(
    task: Task,
    attempt: int,
    params: Mapping[str, Any],
    generation: Generation | None,
    failure: GenerationFailed | None,
    judgement: Judgement | None,
    timings: Mapping[str, float],
    verifier_name: str,
) -> JSONObject:
    row = dict(task.row)
    echoed = generation.extra.get("responses_create_params") if generation is not None else None
    row["responses_create_params"] = echoed if isinstance(echoed, Mapping) else params
    row["task_index"] = row["_ng_task_index"] = task.task_index
    row["rollout_index"] = row["_ng_rollout_index"] = task.rollout_index
    row["attempt"] = attempt
    row["retries"] = generation.retries if generation is not None else failure.retries if failure is not None else 0
    if generation is not None and judgement is not None:
        verdict = judgement.verdict
        row["status"] = "ok"
        row["response"] = generation.response
        row["reward"] = verdict.reward if verdict is not None and verdict.failure_kind is None else None
        row["verifier"] = {
            "name": AGENT_VERIFIER if generation.reward is not None else verifier_name,
            "details": verdict.details if verdict is not None else {},
            "failure_kind": verdict.failure_kind if verdict is not None else None,
            "cached": judgement.cached,
            "skipped": judgement.skipped_reason,
        }
        row["usage"] = {
            "prompt_tokens": generation.usage.prompt_tokens,
            "completion_tokens": generation.usage.completion_tokens,
        }
        row["failure"] = None
        if generation.server_timings:
            row["server_timings"] = dict(generation.server_timings)
        if generation.client_delay:
            row["client_delay"] = dict(generation.client_delay)
        for key, value in generation.extra.items():
            row.setdefault(key, value)
        for key in ROUTE_FIELDS:  # the agent that ran it (+agent_name overrides the row's own), its server
            if key in generation.extra:
                row[key] = generation.extra[key]
    else:
        assert failure is not None
        row["status"] = "failed"
        row["response"] = None
        row["reward"] = None
        row["failure"] = {"kind": failure.kind, "reason": failure.reason, "status": failure.status}
        for key in ROUTE_FIELDS:  # where it failed (NeMo Gym 0.7.0's environment server), as a scored row
            if key in failure.route:
                row[key] = failure.route[key]
    row["timings"] = dict(timings)
    return row


def count_row(
    stats: CollectStats,
    generation: Generation | None,
    failure: GenerationFailed | None,
    judgement: Judgement | None,
    timings: Mapping[str, float],
    measured: bool = True,
) -> None:
    """``measured`` false: a warm-up or cool-down rollout, in the counts but not in the latencies."""
    stats.retries += generation.retries if generation is not None else failure.retries if failure is not None else 0
    if generation is not None and judgement is not None:
        verdict = judgement.verdict
        stats.completed += 1
        stats.prompt_tokens += generation.usage.prompt_tokens
        stats.completion_tokens += generation.usage.completion_tokens
        if verdict is not None and verdict.failure_kind is None:
            stats.reward_sum += verdict.reward
            stats.rewarded += 1
        elif verdict is not None:
            stats.verify_failures += 1
        if not measured:
            return
        tokens = generation.usage.completion_tokens
        stats.add_completed(timings, tokens, generation.client_delay)
        if generation.server_timings:
            stats.server.add(generation.server_timings, rollout_latencies(timings, tokens))
    elif failure is not None:
        stats.failed += 1
        stats.failure_kinds[failure.kind] += 1
    if measured:
        stats.add_timings(timings)
