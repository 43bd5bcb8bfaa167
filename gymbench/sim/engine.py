"""A continuous-batching scheduler in miniature, in the manner of vLLM's and SGLang's.

One asyncio task runs the engine in steps. Each step admits waiting sequences (FIFO) while fewer
than ``max_num_seqs`` run and the KV cache has room, spends at most ``max_num_batched_tokens`` on
prefill (long prompts are chunked over steps), sleeps for the step's cost, then gives every
prefilled sequence one output token. Steps are scheduled on absolute deadlines so that timer
jitter does not accumulate into lost throughput.
"""

from __future__ import annotations

import asyncio
import collections
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from gymbench.sim.config import SimConfig

MAX_LAG_S = 0.05
"""How far behind its schedule the engine may run before it stops catching up."""


class QueueFull(Exception):
    def __init__(self, retry_after_s: float) -> None:
        super().__init__("waiting queue is full")
        self.retry_after_s = retry_after_s


class TooLarge(Exception):
    """The request can never fit in the KV cache."""


@dataclass(eq=False)
class Sequence:
    prompt_tokens: int
    output_tokens: int
    on_token: Callable[[int], None] | None = None
    """Called with the index of each token as it is produced (streaming)."""
    prefill_left: int = 0
    generated: int = 0
    arrived: float = 0.0
    first_token_at: float | None = None
    done: asyncio.Future[None] = field(default_factory=lambda: asyncio.get_running_loop().create_future())

    @property
    def kv_tokens(self) -> int:
        return self.prompt_tokens + self.output_tokens


@dataclass
class EngineStats:
    prompt_tokens: int = 0
    generation_tokens: int = 0
    finished: int = 0
    steps: int = 0
    peak_running: int = 0
    busy_s: float = 0.0


class Engine:
    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.waiting: collections.deque[Sequence] = collections.deque()
        self.running: list[Sequence] = []
        self.kv_used = 0
        self.stats = EngineStats()
        self.started_at = 0.0
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.started_at = loop.time()
        if not self.config.instant:
            self._task = loop.create_task(self._run(), name="sim-engine")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def submit(self, *seqs: Sequence) -> None:
        """Queue a request's sequences (one per choice), all or none; raise :class:`QueueFull` or
        :class:`TooLarge` when they cannot be."""
        cfg = self.config
        for seq in seqs:
            if cfg.kv_cache_tokens is not None and seq.kv_tokens > cfg.kv_cache_tokens:
                raise TooLarge(f"request needs {seq.kv_tokens} KV tokens, the cache holds {cfg.kv_cache_tokens}")
        free_slots = max(0, cfg.max_num_seqs - len(self.running))
        if cfg.max_waiting is not None and len(self.waiting) + len(seqs) - 1 - free_slots >= cfg.max_waiting:
            raise QueueFull(self._retry_after())
        now = asyncio.get_running_loop().time()
        for seq in seqs:
            seq.prefill_left = seq.prompt_tokens
            seq.arrived = now
            if cfg.instant:
                self._finish_instantly(seq)
            else:
                self.waiting.append(seq)
        self._wake.set()

    def _retry_after(self) -> float:
        """Time until one slot frees, roughly: a request's life divided by the slots."""
        step = self.config.decode_step_s(len(self.running))
        return max(1.0, self.config.output_tokens_mean * step * len(self.waiting) / self.config.max_num_seqs)

    def _finish_instantly(self, seq: Sequence) -> None:
        self.stats.prompt_tokens += seq.prompt_tokens
        self.stats.generation_tokens += seq.output_tokens
        self.stats.finished += 1
        seq.first_token_at = seq.arrived
        if seq.on_token is not None:
            for index in range(seq.output_tokens):
                seq.on_token(index)
        seq.generated = seq.output_tokens
        seq.done.set_result(None)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        step_start = loop.time()
        while True:
            if not self.running and not self.waiting:
                self._wake.clear()
                await self._wake.wait()
                step_start = loop.time()
            step_start = max(step_start, loop.time() - MAX_LAG_S)
            prefilled = self._admit_and_prefill()
            duration = self._step_cost(prefilled, step_start)
            deadline = step_start + duration
            # Every step yields, even one with nothing to wait for (free decode steps, or catching
            # up): a run of them held the loop, so the server answered nothing, /metrics included,
            # and Ctrl-C waited, until the last token of the longest answer.
            await asyncio.sleep(max(0.0, deadline - loop.time()))
            self.stats.busy_s += duration
            self._emit_tokens(loop.time())
            step_start = deadline

    def _admit_and_prefill(self) -> int:
        cfg = self.config
        while self.waiting and len(self.running) < cfg.max_num_seqs:
            head = self.waiting[0]
            if cfg.kv_cache_tokens is not None and self.kv_used + head.kv_tokens > cfg.kv_cache_tokens:
                break
            self.waiting.popleft()
            self.running.append(head)
            self.kv_used += head.kv_tokens
        self.stats.peak_running = max(self.stats.peak_running, len(self.running))
        budget = cfg.max_num_batched_tokens
        prefilled = 0
        for seq in self.running:
            if budget <= 0:
                break
            if seq.prefill_left:
                take = min(seq.prefill_left, budget)
                seq.prefill_left -= take
                budget -= take
                prefilled += take
        self.stats.prompt_tokens += prefilled
        return prefilled

    def _step_cost(self, prefilled: int, now: float) -> float:
        cfg = self.config
        base = cfg.decode_step_s(len(self.running)) + cfg.prefill_per_token_s * prefilled
        return base * self.slowdown(now)

    def slowdown(self, now: float) -> float:
        """Step-time multiplier from slow start, the machine's drift and overload collapse (1 when
        none applies). The drift is what a shared machine does to a real engine between minutes
        (2-8% on this project's VM): a search that measures its levels one after another sees it
        as a slope in the curve."""
        cfg = self.config
        factor = 1.0
        if cfg.speed_drift > 0:
            factor /= 1 + cfg.speed_drift * math.sin(2 * math.pi * (now - self.started_at) / cfg.speed_drift_period_s)
        if cfg.warmup_s > 0:
            remaining = max(0.0, 1 - (now - self.started_at) / cfg.warmup_s)
            factor *= 1 + (cfg.warmup_slowdown - 1) * remaining
        if cfg.collapse_threshold is not None and len(self.waiting) > cfg.collapse_threshold:
            excess = len(self.waiting) - cfg.collapse_threshold
            factor *= 1 + cfg.collapse_slope * excess / cfg.max_num_seqs
        return factor

    def _emit_tokens(self, now: float) -> None:
        still_running = []
        self.stats.steps += 1
        for seq in self.running:
            if seq.prefill_left:
                still_running.append(seq)
                continue
            if seq.first_token_at is None:
                seq.first_token_at = now
            if seq.on_token is not None:
                seq.on_token(seq.generated)
            seq.generated += 1
            self.stats.generation_tokens += 1
            if seq.generated >= seq.output_tokens:
                self.kv_used -= seq.kv_tokens
                self.stats.finished += 1
                if not seq.done.done():
                    seq.done.set_result(None)
            else:
                still_running.append(seq)
        self.running = still_running

    def cancel(self, seq: Sequence) -> None:
        """A client went away: free its slot (as engines abort requests on disconnect)."""
        if seq in self.waiting:
            self.waiting.remove(seq)
        elif seq in self.running:
            self.running.remove(seq)
            self.kv_used -= seq.kv_tokens
