"""Hosted-API rate limits and fault injection, decided per request from the seed."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from gymbench.sim.config import SimConfig


@dataclass
class Bucket:
    """A token bucket holding at most one minute's allowance, refilled continuously."""

    per_minute: float
    level: float
    updated: float

    def refill(self, now: float) -> None:
        self.level = min(self.per_minute, self.level + (now - self.updated) * self.per_minute / 60)
        self.updated = now

    def wait_for(self, amount: float) -> float:
        """Seconds until ``amount`` is available (0 when it is now, or short of it by a rounding
        error: a wait of 1e-17 s cannot move a clock at 20 s, and a simulated clock would stall)."""
        missing = amount - self.level
        return missing * 60 / self.per_minute if missing > 1e-9 * max(1.0, amount) else 0.0


@dataclass(frozen=True)
class RateDecision:
    allowed: bool
    retry_after_s: float = 0.0
    limit: str = ""
    headers: tuple[tuple[str, str], ...] = ()


class RateLimiter:
    """Requests-per-minute and tokens-per-minute limits, as the OpenAI API enforces them.

    A request is charged its prompt tokens plus its ``max_tokens`` up front, as OpenAI does.
    """

    def __init__(self, config: SimConfig, now: float) -> None:
        self.requests = Bucket(config.rpm_limit, config.rpm_limit, now) if config.rpm_limit else None
        self.tokens = Bucket(config.tpm_limit, config.tpm_limit, now) if config.tpm_limit else None

    @property
    def active(self) -> bool:
        return self.requests is not None or self.tokens is not None

    def check(self, tokens: int, now: float) -> RateDecision:
        waits = {}
        for name, bucket, amount in (("requests", self.requests, 1), ("tokens", self.tokens, tokens)):
            if bucket is not None:
                bucket.refill(now)
                waits[name] = bucket.wait_for(amount)
        limit, wait = max(waits.items(), key=lambda item: item[1], default=("", 0.0))
        if wait > 0:
            return RateDecision(False, wait, limit, self._headers())
        if self.requests is not None:
            self.requests.level -= 1
        if self.tokens is not None:
            self.tokens.level -= tokens
        return RateDecision(True, headers=self._headers())

    def _headers(self) -> tuple[tuple[str, str], ...]:
        headers = []
        for name, bucket in (("requests", self.requests), ("tokens", self.tokens)):
            if bucket is not None:
                headers.append((f"x-ratelimit-limit-{name}", str(int(bucket.per_minute))))
                headers.append((f"x-ratelimit-remaining-{name}", str(max(0, math.floor(bucket.level)))))
        return tuple(headers)


FAULT_KINDS = ("error", "hang", "reset")


class FaultPlan:
    """Draws each request's fault (or none) from a seeded stream, in arrival order."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self._rng = random.Random(config.seed * 7919 + 17)
        self.counts = dict.fromkeys(FAULT_KINDS, 0)

    def draw(self) -> str | None:
        cfg = self.config
        if not (cfg.error_rate or cfg.hang_rate or cfg.reset_rate):
            return None
        roll = self._rng.random()
        for kind, rate in (("error", cfg.error_rate), ("hang", cfg.hang_rate), ("reset", cfg.reset_rate)):
            if roll < rate:
                self.counts[kind] += 1
                return kind
            roll -= rate
        return None
