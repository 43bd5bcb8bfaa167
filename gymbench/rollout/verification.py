"""Running the verifier off the event loop, with a cache and an optional fast mode.

A CPU-heavy verifier called on the event loop stalls every rollout in flight, so verifiers run in
a thread or process pool sized by configuration. Cheap verifiers (those whose object says
``cost = "cheap"``, like exact-match) run inline under ``pool="auto"``, because handing a 5 µs
check to a thread costs more than the check. Fast mode judges only a sample (a fraction, chosen
by a hash of the rollout so it is stable across resumes; or the first N rollouts of each task) or
only cheap verifiers; every skipped row says so.
"""

from __future__ import annotations

import asyncio
import hashlib
import multiprocessing
from collections.abc import Mapping
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from gymbench.errors import GymbenchError
from gymbench.rollout.verify_cache import VerdictCache, cache_key
from gymbench.types import Verdict, Verifier, stored_by_slot

POOLS = ("auto", "inline", "thread", "process")


@dataclass(frozen=True)
class VerifySettings:
    name: str = ""
    config: Mapping[str, Any] = field(default_factory=dict)
    pool: str = "auto"
    workers: int = 4
    cache_size: int | None = None
    """In-memory entries; ``None``: 10,000 for expensive verifiers, off for cheap ones."""
    cache_path: str | None = None
    fraction: float = 1.0
    first_n: int | None = None
    only_cheap: bool = False

    def __post_init__(self) -> None:
        if self.pool not in POOLS:
            raise GymbenchError(f"verifier_pool must be one of {', '.join(POOLS)}, got {self.pool!r}")
        if self.workers < 1:
            raise GymbenchError(f"verifier_workers must be at least 1, got {self.workers}")
        if not 0 <= self.fraction <= 1:
            raise GymbenchError(f"verify_fraction must be between 0 and 1, got {self.fraction}")
        if self.first_n is not None and self.first_n < 0:
            raise GymbenchError(f"verify_first_n must be 0 or more, got {self.first_n}")


@stored_by_slot
@dataclass(frozen=True, slots=True)
class Judgement:
    verdict: Verdict | None
    """``None`` when fast mode skipped the row."""
    skipped_reason: str | None = None
    cached: bool = False


def is_cheap(verifier: Verifier) -> bool:
    return getattr(verifier, "cost", "expensive") == "cheap"


_WORKER_VERIFIER: Verifier | None = None


def _install_worker_verifier(verifier: Verifier) -> None:
    """Process-pool initializer: the verifier is sent to each worker once, not with every call."""
    global _WORKER_VERIFIER
    _WORKER_VERIFIER = verifier


def _verify_in_worker(row: Mapping[str, Any], text: str) -> Verdict:
    assert _WORKER_VERIFIER is not None
    return _safe_verify(_WORKER_VERIFIER, row, text)


def _safe_verify(verifier: Verifier, row: Mapping[str, Any], text: str) -> Verdict:
    try:
        return verifier.verify(row, text)
    except Exception as exc:
        return Verdict(0.0, {"error": f"{type(exc).__name__}: {exc}"}, failure_kind="verifier_error")


class VerificationRunner:
    def __init__(self, verifier: Verifier, settings: VerifySettings | None = None) -> None:
        self.verifier = verifier
        self.settings = settings or VerifySettings()
        self.cheap = is_cheap(verifier)
        pool = self.settings.pool
        self.mode = ("inline" if self.cheap else "thread") if pool == "auto" else pool
        size = self.settings.cache_size
        if size is None:
            size = 0 if self.cheap else 10_000
        use_cache = size > 0 or self.settings.cache_path is not None
        self.cache = VerdictCache(size, self.settings.cache_path) if use_cache else None
        self.skipped = 0
        self._executor: Executor | None = None

    def start(self) -> None:
        if self.mode == "thread":
            self._executor = ThreadPoolExecutor(self.settings.workers, thread_name_prefix="gymbench-verify")
        elif self.mode == "process":
            self._executor = ProcessPoolExecutor(
                self.settings.workers,
                mp_context=multiprocessing.get_context("forkserver"),
                initializer=_install_worker_verifier,
                initargs=(self.verifier,),
            )

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
        if self.cache is not None:
            self.cache.close()

    def skip_reason(self, task_index: int, rollout_index: int) -> str | None:
        cfg = self.settings
        if cfg.only_cheap and not self.cheap:
            return f"fast mode: only cheap verifiers run, and {cfg.name or 'this verifier'} is not cheap"
        if cfg.first_n is not None and rollout_index >= cfg.first_n:
            return f"fast mode: only the first {cfg.first_n} rollouts of each task are verified"
        if cfg.fraction < 1 and _unit_hash(task_index, rollout_index) >= cfg.fraction:
            return f"fast mode: a {cfg.fraction:g} sample of rollouts is verified"
        return None

    async def judge(self, task_index: int, rollout_index: int, row: Mapping[str, Any], text: str) -> Judgement:
        reason = self.skip_reason(task_index, rollout_index)
        if reason is not None:
            self.skipped += 1
            return Judgement(None, reason)
        key = cache_key(self.settings.name, self.settings.config, row, text) if self.cache is not None else None
        if key is not None:
            cached = self.cache.get(key)  # type: ignore[union-attr]
            if cached is not None:
                return Judgement(cached, cached=True)
        verdict = await self._run(row, text)
        if key is not None:
            self.cache.put(key, verdict)  # type: ignore[union-attr]
        return Judgement(verdict)

    async def _run(self, row: Mapping[str, Any], text: str) -> Verdict:
        if self._executor is None:
            return _safe_verify(self.verifier, row, text)
        loop = asyncio.get_running_loop()
        if self.mode == "process":
            return await loop.run_in_executor(self._executor, _verify_in_worker, dict(row), text)
        return await loop.run_in_executor(self._executor, _safe_verify, self.verifier, row, text)


def _unit_hash(task_index: int, rollout_index: int) -> float:
    digest = hashlib.blake2b(f"{task_index}:{rollout_index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64
