"""How fast a closed loop gets work done at one parallelism, measured in steady state, with an interval.

A *level* is ``n`` rollouts kept in flight: each one that lands is replaced at once. Its rate is
measured by a :class:`Meter` from the rollouts' holds on their slots:

* **Warm-up.** The first ``2n`` completions (two turnovers) are discarded, and when the server
  starts refusing (429s: a rate limit's allowance ran out) the window restarts there, so that a
  token bucket's first-minute burst is never measured as the sustained rate.
* **Estimator.** Work per second = mean occupancy × Σ work ÷ Σ hold over the rollouts completed
  in the window, where work is a rollout's output tokens (or 1 per successful rollout when the
  backend reports none). Little's law with each hold weighted by its work: a batch engine gives
  every running sequence one token per step, so tokens ÷ hold barely varies between a short and
  a long rollout, and the estimate is steady where counting completions is not (with
  exponential output lengths, completions over a window vary by ±1/√count). Rollouts/s is work/s
  ÷ work per rollout, a figure of the workload that a search pools over all its levels.
  Completions in a window of a stationary loop are a fair sample of the workload, so there is no
  drain to exclude: the window ends at its last completion, with ``n`` still in flight.
* **Server counters.** When the server's cumulative generated-token count is sampled
  (vLLM's ``vllm:generation_tokens_total`` at ``/metrics``), work/s is its increase over the
  window, which needs no estimator at all. It is used when the window spans ``MIN_POLLS``
  samples (decided before any interval is seen, so that choosing does not bias the interval)
  and agrees with the client's figure (else another client may share the server).
* **Interval and stop.** The window's completions form batches of one turnover each; the 95%
  interval is the ratio estimator's (t quantile, batches − 1 degrees of freedom). A level is
  measured until the interval's half-width is within ``precision`` of the rate (or
  ``max_batches`` pass: then it is marked under-measured if the interval is still wider than
  that). If the first and second half of the window differ beyond the noise, the first half is
  dropped as warm-up and measuring goes on.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

CLIENT = "client completions"
SERVER = "server counters"
MIN_BATCH = 4
"""Completions per batch at least (one turnover of a small level is too few to average)."""
FAILING_SHARE = 0.5
MIN_POLLS = 20
"""Counter samples a window must span for the server's counters to be used: with fewer, the
poll's granularity, not the server, would set the interval."""


@dataclass(frozen=True)
class Rate:
    """A rate with its 95% interval (``value ± half_width``) and where it was read."""

    value: float
    half_width: float
    dof: int = 1_000_000
    source: str = CLIENT
    samples: int = 0
    """Completions in the window the rate was measured over."""
    under_measured: bool = False

    @property
    def low(self) -> float:
        return self.value - self.half_width

    @property
    def high(self) -> float:
        return self.value + self.half_width

    @property
    def se(self) -> float:
        return self.half_width / t_quantile(self.dof)

    @property
    def relative(self) -> float:
        return self.half_width / self.value if self.value > 0 else math.inf

    def scaled(self, factor: float) -> Rate:
        return replace(self, value=self.value * factor, half_width=self.half_width * factor)

    def capped(self, ceiling: float) -> Rate:
        return self if self.value <= ceiling else replace(self, value=ceiling)


def t_quantile(dof: int) -> float:
    """The two-sided 95% quantile of Student's t."""
    from scipy.stats import t

    return float(t.ppf(0.975, max(1, dof)))


def pooled(rates: Sequence[Rate]) -> Rate:
    """Independent measurements of one rate combined by inverse variance (a re-probe's merge)."""
    if len(rates) == 1:
        return rates[0]
    weights = [1 / max(r.se, 1e-12 * max(r.value, 1e-12)) ** 2 for r in rates]
    if not sum(weights):  # no measurement has a finite interval (nothing completed): nothing to weigh
        samples = sum(r.samples for r in rates)
        value = sum(r.value * r.samples for r in rates) / samples if samples else rates[-1].value
        return Rate(value, math.inf, sum(r.dof for r in rates), rates[-1].source, samples, True)
    value = sum(w * r.value for w, r in zip(weights, rates, strict=True)) / sum(weights)
    dof = sum(r.dof for r in rates)
    se = math.sqrt(1 / sum(weights))
    return Rate(
        value,
        se * t_quantile(dof),
        dof,
        rates[-1].source,
        sum(r.samples for r in rates),
        all(r.under_measured for r in rates),
    )


def remeasured(readings: Sequence[Rate], drift: float = 0.0) -> Rate:
    """Readings of one level taken at different times, merged allowing that the level itself moved.

    Each reading's interval covers only its own window. When the machine's speed drifts between
    windows (this project's 2-core VM: 2-8% between passes minutes apart), two readings differ by
    more than both intervals allow, and :func:`pooled` would trust the narrower one and report a
    merge narrower still. ``drift`` is the machine's, measured over every level
    (:func:`drift_between_windows`, a relative variance): each reading's variance holds it, so even
    a level read once gets an interval that covers the drift of its window. The spread between
    this level's readings beyond that is estimated too (DerSimonian and Laird's τ², 1986) and added
    to every reading's variance: with readings that agree within their noise the result is
    :func:`pooled`'s (widened by ``drift``); with readings that disagree the merge sits between
    them with an interval that covers the disagreement.
    """
    finite = [r for r in readings if math.isfinite(r.se) and r.se > 0]
    if len(finite) < len(readings) or not finite:
        return pooled(readings)
    variances = [r.se**2 + drift * r.value**2 for r in finite]
    merged = pooled(readings)
    tau2 = between_spread([r.value for r in finite], variances)
    if tau2 == 0 and drift == 0:
        return merged
    weights = [1 / (v + tau2) for v in variances]
    value = sum(w * r.value for w, r in zip(weights, finite, strict=True)) / sum(weights)
    return replace(merged, value=value, half_width=math.sqrt(1 / sum(weights)) * t_quantile(merged.dof))


def drift_between_windows(pairs: Sequence[tuple[Rate, Rate]]) -> float:
    """How far one window's speed moves from another's on this machine: a relative variance, from
    the levels measured in two passes (``(first, second)`` per level).

    One level's two readings give one degree of freedom, too few to tell drift from chance (a
    4-slot llama.cpp tune printed 3.0-4.5 where the truth was 4.7: level 4's passes agreed by
    chance and its interval was ±1.3%). The machine drifts alike at every level, so the log-ratios
    of all levels' second to first readings are pooled: around their weighted mean (a shift common
    to a whole pass moves every level alike and no knee), their spread beyond each pair's own
    noise (DerSimonian and Laird's τ²) is twice one window's drift. Fewer than three levels: 0,
    nothing is said."""
    usable = [(a, b) for a, b in pairs if min(a.value, b.value) > 0 and 0 < a.se < math.inf and 0 < b.se < math.inf]
    if len(usable) < 3:
        return 0.0
    logs = [math.log(b.value / a.value) for a, b in usable]
    variances = [(a.se / a.value) ** 2 + (b.se / b.value) ** 2 for a, b in usable]
    return between_spread(logs, variances) / 2


def between_spread(values: Sequence[float], variances: Sequence[float]) -> float:
    """The variance among ``values`` beyond each one's own ``variances`` (DerSimonian and Laird's
    τ², 1986: Cochran's Q around the inverse-variance mean, its excess over the degrees of freedom
    scaled back to a variance); 0 with fewer than two values or none beyond their noise."""
    if len(values) < 2:
        return 0.0
    weights = [1 / v for v in variances]
    s1 = sum(weights)
    mean = sum(w * x for w, x in zip(weights, values, strict=True)) / s1
    q = sum(w * (x - mean) ** 2 for w, x in zip(weights, values, strict=True))
    return max(0.0, (q - (len(values) - 1)) / (s1 - sum(w * w for w in weights) / s1))


def ratio(numerator: Rate, denominator: Rate) -> tuple[float, float, float]:
    """``numerator ÷ denominator`` with a 95% interval (normal on the log scale)."""
    if numerator.value <= 0 or denominator.value <= 0:
        return 0.0, 0.0, math.inf
    value = numerator.value / denominator.value
    spread = 1.96 * math.hypot(numerator.se / numerator.value, denominator.se / denominator.value)
    return value, value * math.exp(-spread), value * math.exp(spread)


@dataclass(frozen=True)
class Completion:
    """One rollout's hold on its slot, and what it produced."""

    start: float
    end: float
    work: float
    ok: bool
    area: float
    """∫ rollouts in flight dt, from any fixed origin, at ``end``: occupancy between two
    completions is the difference of their areas ÷ the time between them."""
    throttled: bool = False
    """It met a 429 (or was retried): the server was refusing work."""
    rate_limited: bool = False
    """It failed on a rate limit's 429 (its retries used up): a sign of the limit, not a fault."""


@dataclass(frozen=True)
class Precision:
    target: float = 0.02
    """Stop when the 95% interval's half-width is at most this share of the rate."""
    min_batches: int = 6
    max_batches: int = 40


@dataclass
class Meter:
    """Measures one level (``parallelism`` in flight) from the completions it is given."""

    parallelism: int
    precision: Precision = field(default_factory=Precision)
    since: float = -math.inf
    """Rollouts that took their slot before this belong to an earlier level and are ignored."""
    counters: list[tuple[float, float]] | None = None
    """Live samples (time, cumulative work) of the server's own counter, when readable."""
    warmup: float = 2.0
    """Turnovers (``parallelism`` completions each) discarded before the window opens. One is not
    enough with varied lengths: its completions are the short requests, while the long ones sent
    at the start (and in a KV-bound engine, the mix the cache settles to) are still out; with one,
    a KV-bound engine with exponential lengths read up to 7% low at 40 of its 37-knee."""
    settled: bool = True
    """False while rollouts of an earlier level are still out (they sit ahead in the server's
    queue): the window does not open until the owner says the last of them has landed."""
    window: list[Completion] = field(default_factory=list)
    window_start: Completion | None = None
    completions: int = 0
    throttled: int = 0
    failures: int = 0
    restarts: int = 0
    note: str = ""
    _checked: tuple[int, bool] = (-1, False)

    @property
    def batch_size(self) -> int:
        return max(self.parallelism, MIN_BATCH)

    def add(self, done: Completion) -> None:
        if done.start < self.since:
            return
        self.completions += 1
        self.failures += not done.ok and not done.rate_limited
        if done.throttled:
            self.throttled += 1
            if self.throttled == 1:
                self._restart(done, [])  # the allowance ran out: the sustained regime starts here
                return
        if self.window_start is None:
            if self.settled and self.completions >= max(4, math.ceil(self.warmup * self.parallelism)):
                self.window_start = done
            return
        self.window.append(done)

    def _restart(self, at: Completion, window: list[Completion]) -> None:
        self.window_start, self.window = at, window
        self.restarts += 1
        self._checked = (-1, False)

    def batches(self) -> int:
        return len(self.window) // self.batch_size

    def done(self) -> bool:
        """Precise enough, out of batches, or mostly failing; a drifting first half is dropped as warm-up."""
        batches = self.batches()
        if batches == self._checked[0] and not self.failing():
            return self._checked[1]
        verdict = self._judge(batches)
        self._checked = (self.batches(), verdict)
        return verdict

    def failing(self) -> bool:
        """Mostly failures, over enough of them: the level is unhealthy and its rate of no use.

        A rate limit's refusals (429s that used up the retries) do not count: they only say that
        the limit is the ceiling, whose sustained rate this level goes on to measure."""
        return self.completions >= 3 * self.batch_size and self.failures > FAILING_SHARE * self.completions

    def _judge(self, batches: int) -> bool:
        if self.failing():
            return True
        if batches < self.precision.min_batches:
            return False
        if batches >= self.precision.max_batches:
            return True
        if self.restarts < 3 and self._drifting(batches):
            half = (batches // 2) * self.batch_size
            self._restart(self.window[half - 1], self.window[half:])
            return False
        return self.precise()

    def precise(self) -> bool:
        rate = self.estimate()
        return rate is not None and rate.relative <= self.precision.target

    def _groups(self, batches: int) -> list[list[Completion]]:
        size = self.batch_size
        return [self.window[g * size : (g + 1) * size] for g in range(batches)]

    def _drifting(self, batches: int) -> bool:
        """The window's two halves differ beyond their noise and beyond the precision asked."""
        groups = self._groups(batches)
        first, second = _work_per_hold(groups[: batches // 2]), _work_per_hold(groups[batches // 2 :])
        if first is None or second is None or first[0] <= 0:
            return False
        gap = abs(first[0] - second[0])
        return gap > 3 * math.hypot(first[1], second[1]) and gap / first[0] > self.precision.target

    def client_rate(self) -> Rate | None:
        """Occupancy × Σ work ÷ Σ hold over whole batches of the window."""
        batches = self.batches()
        if batches < 2 or self.window_start is None:
            return None
        groups = self._groups(batches)
        last = groups[-1][-1]
        elapsed = last.end - self.window_start.end
        per_hold = _work_per_hold(groups)
        if elapsed <= 0 or per_hold is None:
            return None
        occupancy = (last.area - self.window_start.area) / elapsed
        value, se = per_hold
        dof = batches - 1
        return self._judged(Rate(occupancy * value, occupancy * se * t_quantile(dof), dof, CLIENT,
                                 batches * self.batch_size))  # fmt: skip

    def _judged(self, rate: Rate) -> Rate:
        """``rate`` marked under-measured when its interval is wider than the target (measuring ended
        first: its batches ran out, or a time budget cut it).

        Not merely for running out of batches: a level whose last batch brought it within the target
        is as precise as asked, and was called under-measured (``±1.6% after 40 batches`` where
        ±2% was asked, issue 39)."""
        return replace(rate, under_measured=rate.relative > self.precision.target)

    def server_rate(self) -> Rate | None:
        """The server's counter's increase over the window, in as many batches as the client's."""
        if not self.counters or self.window_start is None or not self.window:
            return None
        begin, end = self.window_start.end, self.window[-1].end
        samples = [s for s in self.counters if begin <= s[0] <= end]
        intervals = len(samples) - 1
        batches = min(max(self.batches(), self.precision.min_batches), intervals // 3)
        if len(samples) < MIN_POLLS or batches < 3:
            return None
        cuts = [round(k * intervals / batches) for k in range(batches + 1)]
        rates = [
            (samples[b][1] - samples[a][1]) / (samples[b][0] - samples[a][0])
            for a, b in zip(cuts[:-1], cuts[1:], strict=True)
            if samples[b][0] > samples[a][0]
        ]
        if len(rates) < 2:
            return None
        value = (samples[-1][1] - samples[0][1]) / (samples[-1][0] - samples[0][0])
        spread = math.sqrt(sum((r - value) ** 2 for r in rates) / (len(rates) - 1) / len(rates))
        spread *= math.sqrt(correlation_factor(rates))
        dof = len(rates) - 1
        return Rate(value, spread * t_quantile(dof), dof, SERVER)

    def estimate(self) -> Rate | None:
        """Work per second: the server's counters when they agree with the client's figure; the
        client's otherwise (``note`` says why)."""
        client = self.client_rate()
        if client is None:
            return None
        server = self.server_rate()
        if server is None:
            return client
        if abs(server.value / client.value - 1) > max(0.1, 3 * client.relative):
            self.note = f"server counters read {server.value:.4g}/s, the client {client.value:.4g}/s: used the client's"
            return client
        return self._judged(replace(server, samples=client.samples))

    def final(self) -> Rate:
        """The estimate, or failing one (too few completions), the plain count over the window."""
        estimate = self.estimate()
        if estimate is not None:
            return estimate
        value = 0.0
        if self.window_start is not None and self.window and self.window[-1].end > self.window_start.end:
            value = sum(c.work for c in self.window) / (self.window[-1].end - self.window_start.end)
        return Rate(value, math.inf, 1, CLIENT, len(self.window), True)

    def batch_rates(self) -> list[float]:
        """Work per second in each batch of the window (for a look at drift within it)."""
        rates = []
        previous = self.window_start
        for group in self._groups(self.batches()):
            last = group[-1]
            hold = sum(c.end - c.start for c in group)
            if previous is not None and last.end > previous.end and hold > 0:
                occupancy = (last.area - previous.area) / (last.end - previous.end)
                rates.append(occupancy * sum(c.work for c in group) / hold)
            previous = last
        return rates


def _work_per_hold(groups: Sequence[Sequence[Completion]]) -> tuple[float, float] | None:
    """Σ work ÷ Σ hold over the groups, and its standard error (ratio estimator, groups as units)."""
    works = [sum(c.work for c in g) for g in groups]
    holds = [sum(c.end - c.start for c in g) for g in groups]
    total_hold = sum(holds)
    if total_hold <= 0 or len(groups) < 2 or min(holds) <= 0:
        return None
    value = sum(works) / total_hold
    residuals = [w - value * h for w, h in zip(works, holds, strict=True)]
    count = len(groups)
    se = math.sqrt(sum(r * r for r in residuals) * count / (count - 1)) / total_hold
    return value, se * math.sqrt(correlation_factor([w / h for w, h in zip(works, holds, strict=True)]))


def correlation_factor(series: Sequence[float]) -> float:
    """How much a mean's variance grows when consecutive batches are correlated: (1 + ρ) ÷ (1 - ρ).

    ρ is the batches' lag-1 autocorrelation, corrected for its small-sample bias (it reads about
    ``(1 + 3ρ) / n`` low) and clipped to [0, 0.8]. A server whose state drifts slowly (a KV cache
    holding a changing mix of long and short requests) has batches one turnover long that are
    still correlated (lag-1 0.3 measured on the simulator): without this, their interval is too
    narrow by a third.
    """
    n = len(series)
    if n < 4:
        return 1.0
    mean = sum(series) / n
    centred = [x - mean for x in series]
    total = sum(x * x for x in centred)
    if total <= 0:
        return 1.0
    lag1 = sum(a * b for a, b in zip(centred[:-1], centred[1:], strict=True)) / total
    rho = min(0.8, max(0.0, (lag1 * n + 1) / (n - 3)))
    return (1 + rho) / (1 - rho)
