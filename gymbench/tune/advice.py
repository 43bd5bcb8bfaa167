"""What to do about a bottleneck, for the kind of server the backend drives.

The diagnosis reads the same evidence for every backend, but its advice is only right for a
model server (vLLM, SGLang, an API) when that is what the client talks to. Behind a NeMo Gym
agent's ``/run`` stand the agent server, its resources server (session seeding, tool calls,
``/verify``) and only then the model server, all in one request: when throughput stops growing
there, the Python agent and resources servers (often one process, one core each) are usually
what saturates first, and the agent's verification hides inside that request, so gymbench's own
verification stage measures nothing.
"""

from __future__ import annotations

from collections.abc import Mapping

MODEL_SERVER = "model server"
AGENT_STACK = "agent stack"
BACKEND_KINDS = {"nemo-gym": AGENT_STACK}
"""Built-in backends by what stands behind them; any other backend is taken for a model server."""

AGENT_STACK_STEPS = {
    "model server": (
        "the agent stack behind /run is saturated, not the client: look first at the agent and resources "
        "servers' CPU (one busy core each means add workers or replicas), then at tool-call and /verify latency "
        "in the resources server, and only then at the model server behind the agent (its batching: "
        "max_num_seqs, KV cache); raising parallelism only queues requests"
    ),
    "verification": (
        "the agent verifies inside /run, so this is gymbench's own verifier: remove it (+verifier=none) or "
        "make it cheaper; the agent's /verify time is part of each request's generation time"
    ),
    "too high": (
        "lower num_samples_in_parallel to a stable level: the agent or resources servers refuse or time out "
        "under this load (check their logs, raise their workers, or the model server's capacity)"
    ),
}


def backend_kind(backend_name: str) -> str:
    return BACKEND_KINDS.get(backend_name, MODEL_SERVER)


def next_step(verdict: str, kind: str, model_server_steps: Mapping[str, str]) -> str:
    """The advice for ``verdict``; ``model_server_steps`` is the diagnosis's own (model-server) advice."""
    if kind == AGENT_STACK and verdict in AGENT_STACK_STEPS:
        return AGENT_STACK_STEPS[verdict]
    return model_server_steps[verdict]
