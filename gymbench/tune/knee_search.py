"""Which parallelism to measure next, and when the knee is found: one set of rules for every search.

The doubling sweep (separate probes) and the adaptive strategy (one run that changes its own
limit) ask this the same questions and so decide the same way:

* **Grow** by ``factor`` while the last level is above the one before by more than
  ``plateau_gain`` with 95% confidence. Stop growing when it is clearly not: a *plateau*, or
  *degradation* when the level is below the best so far by more than ``degrade``, beyond its
  noise (a drop inside the noise is not degradation). When the interval straddles the threshold
  the decision is in doubt: the level with the wider interval is measured again, more tightly
  (``reprobes`` times at most, then the point estimate decides).
* Stop growing, too, when errors exceed ``max_error_rate`` (levels above it are not usable), or
  when the server answers 429 for a rate limit: then the limit, not the parallelism, is the
  ceiling, every level's rate is capped at the sustained rate measured there, and the knee is
  the parallelism that reaches it.
* **Refine**: where the curve falls past a peak, bisect (in log space) on both sides of the best
  level until its neighbours are within ``resolution``; then bisect the bracket of the knee
  (:mod:`gymbench.tune.curves`) until it is within ``resolution`` too. When the lowest level already
  reaches the plateau, measure lower.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from gymbench.tune.curves import (
    KNEE_FRACTION,
    Knee,
    Recommendation,
    find_knee,
    known_to_deliver,
    plateau_members,
    plateau_of,
    recommend,
    throughput_at,
    within_the_levels,
)
from gymbench.tune.rates import Rate, drift_between_windows, pooled, ratio, remeasured
from gymbench.tune.search_settings import SearchSettings

HUMP_GAP = 1.5
"""Plateau points this far apart (or more) get a look between them."""


def plateau_threshold(plateau_gain: float, step: float) -> float:
    """The least gain over a step of ``step``× in parallelism that is not a plateau.

    ``plateau_gain`` is per doubling. An engine whose step time grows with the batch (``a + b·n``:
    compute-bound continuous batching) approaches its plateau as ``p / (c + p)``: a step of ``f``×
    that gains ``g`` leaves ``(g - 1) / (f - g)`` of headroom above the level reached. The threshold
    for a step is the gain that leaves the same headroom as ``plateau_gain`` leaves after a doubling,
    so a search growing by √2 (the adaptive one) stops no earlier than one growing by 2."""
    if plateau_gain >= 1:  # no p / (c + p) curve gains that much in a doubling: the gain itself
        return 1 + plateau_gain
    headroom = plateau_gain / (1 - plateau_gain)
    return (1 + step * headroom) / (1 + headroom)


@dataclass(frozen=True)
class Level:
    """One parallelism's measurement: its rate (any unit, the same for every level) and health."""

    parallelism: int
    rate: Rate
    error_rate: float = 0.0
    rate_limited: bool = False
    precise: bool = True
    """Measured to the precision asked (a level may end earlier once its decision is clear)."""
    measurements: int = 1
    readings: tuple[Rate, ...] = ()
    """Every measurement's own rate, in the order taken (``rate`` merges them); empty: just ``rate``."""
    queue: float | None = None
    """The most requests the server said were waiting during the level (its ``/metrics`` queue
    gauge); None: no gauge read."""
    in_server: float | None = None
    """Requests at the server on average (Little's law, :attr:`~gymbench.tune.probe.ProbeResult.in_server`); the
    rest of the parallelism was the clients turning around between an answer and their next
    request. None: no request latency timed."""
    running: float | None = None
    """Requests the server said it was running on average (its own gauge, read inside the level's
    windows; :attr:`~gymbench.tune.probe.ProbeResult.server_running`). None: no such gauge."""


@dataclass(frozen=True)
class Step:
    parallelism: int
    precision_scale: float = 1.0
    """Below 1 for a re-measurement: ask for a tighter interval."""
    why: str = ""
    reaches_slots: bool = False
    """The first level at or past the server's slot count, grown to while slots were free: measured
    whenever the time budget has a level's worth left, and cut at its deadline (:class:`TimeBudget`
    in :mod:`gymbench.tune.sweep`), since a reading there is worth more than any refinement below."""


@dataclass(frozen=True)
class SearchResult:
    curve: dict[int, Rate]
    """The usable levels, capped at a rate limit's sustained rate when there is one."""
    knee: Knee
    recommendation: Recommendation
    stop_reason: str
    ceiling: str
    """What limits throughput at the plateau: ``parallelism``, ``rate limit`` or ``errors``."""


class KneeSearch:
    def __init__(self, settings: SearchSettings | None = None, slots: int | None = None) -> None:
        self.settings = settings or SearchSettings()
        self.slots = slots
        """Sequences the server runs at once, as it says (:mod:`gymbench.tune.capacity`); None: not said."""
        self.flat_stretches: list[tuple[int, int, float]] = []
        """(from, to, most waiting) of each flat stretch grown past because slots were free."""
        self.leaps: list[tuple[int, int]] = []
        """(from, to) of each step grown by ``factor``² because slots were idle (:meth:`_grow_from`)."""
        self.levels: dict[int, Level] = {}
        self.grown: list[int] = []
        self.stop_reason = ""
        self.ceiling = "parallelism"
        self.growing = True
        self.notes: list[str] = []
        self.looked = 0
        """Levels measured past the current plateau so far (see ``lookahead``)."""
        self.confirmed: dict[int, int] = {}
        """Dropped level → the best level measured again to confirm that drop (once per drop)."""

    def record(self, level: Level, apart: bool = False) -> None:
        """A level's measurement; a second one of the same parallelism is merged with the first.

        By inverse variance: re-measurements during the search follow each other closely. With
        ``apart`` (a second pass over the levels, minutes later) by
        :func:`~gymbench.tune.rates.remeasured`, which lets the two readings differ by more than their
        noise, as a drifting machine makes them. Not always: on a steady server it widens a merge
        whose readings differ by chance (a third of pairs), which moved a simulated knee by 50%."""
        old = self.levels.get(level.parallelism)
        if old is not None:
            readings = (*(old.readings or (old.rate,)), level.rate)
            merged = remeasured((old.rate, level.rate)) if apart else pooled(readings)
            errors = (old.error_rate * old.measurements + level.error_rate) / (old.measurements + 1)
            limited = old.rate_limited or level.rate_limited
            queue = max((q for q in (old.queue, level.queue) if q is not None), default=None)
            level = Level(level.parallelism, merged, errors, limited, old.precise or level.precise,
                          old.measurements + 1, readings, queue, _mean_of(old.in_server, level.in_server),
                          _mean_of(old.running, level.running))  # fmt: skip
        self.levels[level.parallelism] = level

    def allow_drift(self, first: dict[int, Rate], second: dict[int, Rate]) -> float:
        """Every level's interval widened by the machine's drift between windows, estimated from the
        levels read in both passes (``first`` and ``second``, by parallelism): the drift each reading's
        own window cannot show (:func:`~gymbench.tune.rates.drift_between_windows`). Returns it (a
        relative variance; 0 where the passes agree within their noise, or too few levels were read
        twice) and says it in a note."""
        drift = drift_between_windows([(first[p], second[p]) for p in second if p in first])
        if drift <= 0:
            return 0.0
        for parallelism, level in self.levels.items():
            both = parallelism in first and parallelism in second
            readings = (first[parallelism], second[parallelism]) if both else (level.rate,)
            self.levels[parallelism] = replace(level, rate=remeasured(readings, drift))
        self.notes.append(
            f"the machine drifted ±{1.96 * math.sqrt(drift):.1%} (95%) from one window to the next, read from "
            f"{len(second)} levels' two passes: every level's interval includes it"
        )
        return drift

    def next_step(self) -> Step | None:
        """What to measure next; ``None`` once the knee is found."""
        if self.growing:
            step = self._grow()
            if step is not None:
                return step
            self.growing = False
        return self._refine()

    # --- growing -------------------------------------------------------------------------------

    def _grow(self) -> Step | None:
        s = self.settings
        if not self.grown:
            return self._visit(s.start, "first level")
        last = self.levels[self.grown[-1]]
        if last.rate_limited:
            self._stop_at_rate_limit(last)
            return None
        if last.error_rate > s.max_error_rate:
            self._stop_on_errors(last)
            return None
        full = self._server_full(last)
        if full is not None:
            self.stop_reason = f"the server was full at {last.parallelism} ({full}): more parallelism only queues"
            return None
        below = [p for p in self.grown[:-1] if p < last.parallelism]
        if not below:
            return self._grow_from(last)
        previous = self.levels[max(below)]
        gain, low, high = ratio(last.rate, previous.rate)
        threshold = plateau_threshold(s.plateau_gain, last.parallelism / previous.parallelism)
        if low > threshold:
            return self._grew(last, gain)
        if high < threshold:
            return self._past_plateau(last, gain)
        doubt = None
        if self._slots_free(last) is None:  # with slots free it grows on either way: nothing to settle
            doubt = self._remeasure(previous, last, f"gain {gain - 1:+.1%} (95% CI {low - 1:+.1%} to {high - 1:+.1%})")
        if doubt is not None:
            return doubt
        return self._grew(last, gain) if gain > threshold else self._past_plateau(last, gain)

    def _grew(self, last: Level, gain: float) -> Step | None:
        self.looked = 0  # a plateau further on gets its own look past it
        return self._grow_from(last, gain)

    def _past_plateau(self, last: Level, gain: float) -> Step | None:
        """No gain: measure ``lookahead`` levels further before believing the plateau (or a drop inside
        the noise; not past a drop beyond it).

        llama.cpp with 64 slots on one thread gains nothing from 5 to 16 sequences and then 15%
        more by 64 (its batched kernels pay off from about 24): a plateau believed at once
        recommended 5, which delivered 87% of the engine's plateau.

        Nor is it a plateau while the server says it has slots free and nothing waits for one
        (:meth:`_slots_free`): then it grows on without spending the lookahead. The same engine
        measured flat from 10 to 20 (15.7, 21.0, 15.1 rollouts/s under noise) in half of ten tunes,
        which believed the plateau after one look and recommended 54% of the plateau, while
        ``/props`` said 64 slots and the queue read 0."""
        s = self.settings
        best = self._best_grown()
        dropped = ratio(last.rate, self._beside(best, last))[2] < 1 - s.degrade  # beyond the noise: degradation
        free = None if dropped else self._slots_free(last)
        if dropped or (free is None and self.looked >= s.lookahead):
            return self._stop_growing(last)
        step = self._grow_from(last)  # by the whole factor, also where the search grows by √factor
        if step is None:
            return None
        if free is not None:
            self._grew_past_flat(last)
            return replace(step, why=f"{free}: not a plateau yet")
        self.looked += 1
        return replace(step, why=f"look past the plateau at {last.parallelism}")

    def _slots_free(self, last: Level) -> str | None:
        """Why ``last`` is not the plateau though its gain says so, or None when it may be.

        The server said it runs ``slots`` sequences at once, more than ``last`` keeps in flight,
        and nothing waited for a slot: throughput has not met the server's capacity. llama.cpp's
        gauge counts only the requests deferred for want of a slot, and reads 0 then. A vLLM-style
        gauge (the simulator's) also counts a request from its arrival to the next step's
        admission: 1-2 at 10-20 in flight on a 64-slot simulator. So a queue shorter than half the
        level and than the free slots is admission, not a full server; one as long means the
        slots are not free (another client holds them, or the server cannot keep its count), and
        the rules are as without a slot count, as they are with no queue gauge."""
        if self.slots is None or last.queue is None or last.parallelism >= self.slots:
            return None
        free = self.slots - last.parallelism
        if last.queue >= min(free, last.parallelism / 2):
            return None
        at = last.parallelism
        queue = "no queue" if last.queue == 0 else f"at most {last.queue:.0f} of {at} waiting (admission)"
        return f"slots free ({at} of {self.slots}) and {queue} at {at}"

    def _server_full(self, last: Level) -> str | None:
        """What says the server was full at ``last``, or None when nothing does.

        Past its slot count with at least half of the excess waiting in its queue, every slot was
        busy: more in flight only waits longer. Any gain measured above such a level is the
        machine's drift, not capacity, and a sweep that believed it climbed with the drift: ten
        tunes of llama.cpp with 4 slots, whose knee is 3, recommended 10 to 28 (docs/tuning.md)."""
        if self.slots is None or last.queue is None or last.parallelism <= self.slots:
            return None
        if last.queue < (last.parallelism - self.slots) / 2:
            return None
        return f"{self.slots} slots, {last.queue:.0f} of {last.parallelism} waiting"

    def _grew_past_flat(self, last: Level) -> None:
        """Keep the flat stretch grown past, joined to the one before when they meet."""
        below = max(p for p in self.grown[:-1] if p < last.parallelism)
        queue = last.queue or 0.0
        if self.flat_stretches and self.flat_stretches[-1][1] == below:
            start, _, most = self.flat_stretches.pop()
            below, queue = start, max(most, queue)
        self.flat_stretches.append((below, last.parallelism, queue))

    def grown_past(self) -> list[str]:
        """What the slot count and the queue changed in the search, a phrase each, for the output:
        the leaps over idle slots, and each flat stretch the free slots kept it growing past."""
        said = []
        if self.leaps:
            steps = ", ".join(f"{low} to {high}" for low, high in self.leaps)
            leap = f"{self.settings.factor**2:g}x"
            said.append(f"grew by {leap} while slots were idle ({self.slots} slots, none waiting): {steps}")
        for low, high, queue in self.flat_stretches:
            waiting = "none waiting" if queue == 0 else f"at most {queue:.0f} waiting"
            said.append(f"grew past a flat stretch at {low}-{high}: {self.slots} slots, {waiting}")
        return said

    def _visit(self, parallelism: int, why: str, reaches_slots: bool = False) -> Step:
        self.grown.append(parallelism)
        return Step(parallelism, why=why, reaches_slots=reaches_slots)

    def _grow_from(self, last: Level, gain: float = math.inf) -> Step | None:
        """The next level up: by ``factor`` (√factor for a fine search on a small gain), or, while the
        server has slots free (:meth:`_slots_free`) and its queue reads 0, by ``factor``² up to the
        slot count. On a loaded 2-core machine a 64-slot llama.cpp took 13-53 s a level, and doubling
        from 5 (10, 20, 40) met the 5-minute budget at 40, short of its knee near 64 (docs/tuning.md).
        Only at an empty queue: one request waiting at 5 may be admission (a vLLM-style gauge) or
        the fifth of four slots free to us (llama.cpp's), and the second is no place to leap from."""
        s = self.settings
        factor = math.sqrt(s.factor) if s.fine_growth and gain < 1.5 else s.factor
        following = max(last.parallelism + 1, math.ceil(last.parallelism * factor))
        leap = self.slots is not None and last.queue == 0 and self._slots_free(last) is not None
        if leap:
            following = max(last.parallelism + 1, min(self.slots or 0, math.ceil(last.parallelism * s.factor**2)))
        if following > s.max_parallelism:
            self.stop_reason = self._at_the_bound(last.parallelism, following)
            return None
        if leap:  # said only when taken: one past max_parallelism is not measured
            self.leaps.append((last.parallelism, following))
        reaches = self.slots is not None and following >= self.slots and self._slots_free(last) is not None
        return self._visit(following, "still growing", reaches)

    def _at_the_bound(self, last: int, following: int) -> str:
        """Why growing stopped at the bound, naming the highest level measured: 80 with a bound of 128
        was reported as "reached max_parallelism 128" (issue 39)."""
        bound = self.settings.max_parallelism
        if last >= bound:
            return f"reached max_parallelism {bound} (still growing there)"
        return f"stopped growing at {last}: the next level, {following}, is above max_parallelism {bound}"

    def _remeasure(self, a: Level, b: Level, what: str) -> Step | None:
        wider = max((a, b), key=lambda level: level.rate.relative)
        if wider.measurements > self.settings.reprobes:
            self.notes.append(f"{what}: still in doubt after re-measuring; the point estimate decided")
            return None
        return Step(wider.parallelism, 0.5, f"re-measure {wider.parallelism}: {what}")

    def _beside(self, best: Level, last: Level) -> Rate:
        """The best level's rate to hold a drop at ``last`` against: its latest reading once it was
        measured again to confirm that drop (taken right after ``last``, so a machine that slowed
        down for both shows no drop), else all its readings merged."""
        return best.readings[-1] if self._measured_beside(best, last) else best.rate

    def _measured_beside(self, best: Level, last: Level) -> bool:
        """Whether ``best`` was measured again right after ``last`` to confirm a drop there."""
        return self.confirmed.get(last.parallelism) == best.parallelism and bool(best.readings)

    def _best_grown(self) -> Level:
        """The fastest level grown before the last one: what a plateau or a drop is held against."""
        return max((self.levels[p] for p in self.grown[:-1]), key=lambda level: level.rate.value)

    def _stop_growing(self, last: Level) -> Step | None:
        """Stop on a plateau or a drop; a drop beyond the noise is confirmed first.

        By measuring the *best* level again, not the dropped one: the dropped level's second
        reading would follow its first in the same minute, so a slow minute on the machine (this
        project's VM drifts 2-8% between minutes) would confirm itself. The best level measured
        right after the drop reads low too when the machine slowed, and the drop goes away. On
        llama.cpp with 64 slots a drop at 8 confirmed the old way ended a search whose knee was 52
        at 4.6 (run 7 in docs/engine.md)."""
        s = self.settings
        best = self._best_grown()
        value, _, high = ratio(last.rate, self._beside(best, last))
        if high < 1 - s.degrade:
            if s.reprobes > 0 and last.parallelism not in self.confirmed:
                self.confirmed[last.parallelism] = best.parallelism
                why = f"confirm the drop at {last.parallelism}: measure {best.parallelism} again right after it"
                return Step(best.parallelism, 0.5, why)
            against = " measured again beside it" if self._measured_beside(best, last) else ""
            self.stop_reason = (
                f"throughput degraded at {last.parallelism}: {value:.0%} of the best so far "
                f"(at {best.parallelism}{against}), 95% CI up to {high:.0%}"
            )
        elif value < 1 - s.degrade:
            self.stop_reason = (
                f"throughput plateaued at {last.parallelism} (a drop to {value:.0%} of the best, inside the noise)"
            )
        else:
            self.stop_reason = (
                f"throughput plateaued at {last.parallelism} (gain below {s.plateau_gain:.0%} per doubling)"
            )
        return None

    def _stop_on_errors(self, last: Level) -> None:
        self.ceiling = "errors"
        self.stop_reason = (
            f"errors appeared at {last.parallelism} ({last.error_rate:.1%} > {self.settings.max_error_rate:.0%})"
        )

    def _stop_at_rate_limit(self, last: Level) -> None:
        self.ceiling = "rate limit"
        self.stop_reason = (
            f"the server's rate limit is the ceiling: 429s at {last.parallelism}, where its sustained rate was "
            "measured; more parallelism only meets more 429s"
        )

    # --- refining ------------------------------------------------------------------------------

    def curve(self) -> dict[int, Rate]:
        """Usable levels: healthy ones (or all, when none is), capped at a rate limit's ceiling."""
        bound = self.settings.max_error_rate
        usable = {p: lv for p, lv in self.levels.items() if lv.error_rate <= bound or lv.rate_limited}
        usable = usable or dict(self.levels)
        limited = [lv.rate for lv in usable.values() if lv.rate_limited]
        if not limited:
            return {p: lv.rate for p, lv in usable.items()}
        ceiling = pooled(limited)
        return {p: ceiling if lv.rate_limited else lv.rate.capped(ceiling.value) for p, lv in usable.items()}

    def _refine(self) -> Step | None:
        step = self._below_errors()
        if step is not None:
            return step
        curve = self.curve()
        for rule in (self._around_peak, self._inside_plateau, self._bracket_knee, self._rests_on):
            step = rule(curve)
            if step is not None:
                return step
        return None

    def _inside_plateau(self, curve: dict[int, Rate]) -> Step | None:
        """Two plateau points far apart may hide a peak between them (16 and 32 alike, 24 far above)."""
        members = sorted(plateau_members(curve))
        if len(members) < 2 or members[1] / members[0] < HUMP_GAP:
            return None
        middle = self._midpoint(members[0], members[1])
        why = f"is the plateau flat between {members[0]} and {members[1]}?"
        return None if middle is None else Step(middle, why=why)

    def _rests_on(self, curve: dict[int, Rate]) -> Step | None:
        """The levels the knee is read from: measured to the precision asked, and again (more
        tightly) while the knee's own interval is wider than ``knee_precision``."""
        plateau, best = plateau_of(curve)
        values = {p: rate.value for p, rate in curve.items() if p <= best}
        target = KNEE_FRACTION * plateau.value
        reached = next(p for p in sorted(values) if values[p] >= target)
        below = [p for p in values if p < reached]
        read_from = [p for p in (max(below, default=None), reached) if p is not None]
        if not any(self.levels[p].precise for p in plateau_members(curve)):
            read_from.append(best)
        for parallelism in read_from:
            level = self.levels[parallelism]
            if not level.precise and level.measurements <= self.settings.reprobes:
                return Step(parallelism, why=f"re-measure {parallelism}: the knee is read from it")
        knee = find_knee(curve, estimator_gap=False)
        width = (knee.high - knee.low) / 2 / knee.parallelism
        if width <= self.settings.knee_precision:
            return None
        wanted = [p for p in read_from if self.levels[p].measurements <= self.settings.reprobes]
        if not wanted:
            self.notes.append(f"the knee's interval is ±{width:.0%} after re-measuring the levels it is read from")
            return None
        widest = max(wanted, key=lambda p: curve[p].relative)
        return Step(widest, 0.5, f"re-measure {widest}: the knee's interval is ±{width:.0%}")

    def decisive(self, level: Level) -> bool:
        """While growing: would this measurement of the last level decide the next step beyond doubt?"""
        if not self.growing or not self.grown or level.parallelism != self.grown[-1]:
            return False
        below = [p for p in self.grown[:-1] if p < level.parallelism]
        if not below or level.rate_limited or level.error_rate > self.settings.max_error_rate:
            return True
        _, low, high = ratio(level.rate, self.levels[max(below)].rate)
        threshold = plateau_threshold(self.settings.plateau_gain, level.parallelism / max(below))
        return low > threshold or high < threshold

    def _below_errors(self) -> Step | None:
        """With errors above some level: find the healthy levels below it (and how close they go)."""
        bound = self.settings.max_error_rate
        failing = [p for p, lv in self.levels.items() if lv.error_rate > bound and not lv.rate_limited]
        if not failing:
            return None
        healthy = [p for p, lv in self.levels.items() if lv.error_rate <= bound and p < min(failing)]
        if healthy:
            middle = self._midpoint(max(healthy), min(failing))
            return None if middle is None else Step(middle, why=f"errors at {min(failing)}: how close can we go")
        if min(failing) > 1:
            return Step(max(1, min(failing) // 2), why=f"errors at {min(failing)} already: measure lower")
        self.stop_reason = (
            f"errors above {bound:.0%} at every parallelism down to 1: not a load problem "
            "(raise +max_error_rate to tune anyway)"
        )
        return None

    def _midpoint(self, a: int, b: int) -> int | None:
        low, high = min(a, b), max(a, b)
        if high / low <= self.settings.resolution or high - low <= 1:
            return None
        middle = min(high - 1, max(low + 1, round(math.sqrt(low * high))))
        return None if middle in self.levels else middle

    def _around_peak(self, curve: dict[int, Rate]) -> Step | None:
        """On a curve that falls past its best level, close in on the peak from both sides."""
        ps = sorted(curve)
        best = max(ps, key=lambda p: curve[p].value)
        index = ps.index(best)
        if index == len(ps) - 1 or ratio(curve[ps[index + 1]], curve[best])[2] >= 1:
            return None  # not falling after the best level (beyond the noise)
        for neighbour in (ps[index + 1], ps[index - 1] if index > 0 else None):
            if neighbour is not None and ratio(curve[neighbour], curve[best])[2] < 1:
                middle = self._midpoint(best, neighbour)
                if middle is not None:
                    return Step(
                        middle, why=f"locate the peak between {min(best, neighbour)} and {max(best, neighbour)}"
                    )
        return None

    def _bracket_knee(self, curve: dict[int, Rate]) -> Step | None:
        plateau, best = plateau_of(curve)
        values = {p: rate.value for p, rate in curve.items() if p <= best}
        target = KNEE_FRACTION * plateau.value
        rising = sorted(values)
        reached = next(p for p in rising if values[p] >= target)
        below = [p for p in rising if p < reached]
        if not below:
            lower = max(1, math.floor(reached / self.settings.factor))
            if reached == 1 or lower in self.levels or len(curve) < 2:
                return None
            return Step(lower, why=f"{reached} already reaches the plateau: measure lower")
        middle = self._midpoint(max(below), reached)
        return None if middle is None else Step(middle, why=f"bracket the knee between {max(below)} and {reached}")

    # --- the answer ----------------------------------------------------------------------------

    def _at_the_slots(self, advice: Recommendation, knee: Knee, curve: dict[int, Rate]) -> Recommendation:
        """The server's slot count instead of a smaller recommendation when the knee's interval holds it.

        Then the measurements cannot tell the levels below the slot count from it, and the server
        says that below it a slot idles. Ten tunes of llama.cpp with 4 slots (truth: 95% of the
        plateau first at 4) recommended 3 in three, where level 3 read high in both passes; their
        knee intervals (2.7-6.8, 1.0-7.4, 2.0-8.0) held 4, and 3 delivered 80% (docs/tuning.md)."""
        slots = self.slots
        if slots is not None and advice.parallelism > slots and knee.plateau > 0:
            return self._not_past_the_slots(advice, knee, curve, slots)
        if slots is None or not advice.parallelism < slots <= knee.high or knee.plateau <= 0:
            return advice
        if advice.parallelism in curve and known_to_deliver(curve[advice.parallelism], knee):
            return advice  # measured tightly enough to be known to deliver: nothing to tell apart
        expected = _expected_at(curve, slots)
        why = (
            f"recommended {slots}, the server's slot count, not {advice.parallelism}: the knee's 95% interval "
            f"({knee.low:.1f}-{knee.high:.1f}) holds it, and below it a slot is idle"
        )
        return Recommendation(slots, expected, expected / knee.plateau, why)

    def _not_past_the_slots(
        self, advice: Recommendation, knee: Knee, curve: dict[int, Rate], slots: int
    ) -> Recommendation:
        """The slot count instead of a larger recommendation when it was measured and the server
        was full at every level measured above it (:meth:`_server_full`).

        There requests waited in the server's own queue: every slot ran a sequence, and what more
        in flight adds is a request ready when a slot frees, ahead of the client's turnaround. That
        gains only where the machine is short of CPU for the client and the server's HTTP work:
        llama.cpp with 64 slots read 25% more at 128 than at 64 in two loaded tunes and the same in
        two idle ones, and its truth (no CPU hog) was flat from 64 to 192. The advice then doubled
        the latency for a gain the next minute may not have; the output says the share the slot
        count measured, so a user who wants that gain sees it."""
        above = self._full_above(slots, curve)
        if slots not in curve or not above:
            return advice
        expected = curve[slots].value
        waiting = max(above, key=lambda level: level.parallelism)
        why = (
            f"recommended {slots}, the server's slot count, not {advice.parallelism}: above it the server queued "
            f"requests ({waiting.queue:.0f} of {waiting.parallelism} waiting at {waiting.parallelism}), so more in "
            f"flight waits for a slot; {slots} measured {expected / knee.plateau:.0%} of the plateau"
        )
        return Recommendation(slots, expected, expected / knee.plateau, why)

    def _full_above(self, slots: int, curve: dict[int, Rate]) -> list[Level]:
        """The levels measured above the slot count when the server was full at every one of them
        (:meth:`_server_full`); empty when none was measured or one was not full."""
        above = [self.levels[p] for p in curve if p > slots and p in self.levels]
        return [] if any(self._server_full(level) is None for level in above) else above

    def _past_the_turnaround(
        self, advice: Recommendation, alone: Recommendation, knee: Knee, curve: dict[int, Rate]
    ) -> Recommendation:
        """The slot count plus what its clients' turnaround needs, instead of the slot count, where
        the server is bound by its slots: measured at the slot count and full at every level
        measured above it. ``alone`` is the curve's own advice, ``advice`` what the slot rules made
        of it.

        At exactly the slot count each slot idles from an answer until that client's next request
        is in and read, and a loaded machine stretches that turnaround; one request waiting per
        client turning around keeps every slot busy: ``p - in_server`` at the slot count (Little's
        law: requests in flight at the server from the client's side, so what it cannot see, the
        HTTP and the engine's own reading of a request, still needs one), at least one. On one day,
        two truths of llama.cpp with 4 slots on a loaded 2-core machine read 4 at 88% of the plateau
        and 5 at 100%, while ten tunes read 4 at 95-100% of theirs and recommended it
        (docs/tuning.md). The cost is the wait of the requests added, whose latency is said."""
        slots = self.slots
        if slots is None or advice.parallelism != slots or slots not in self.levels or knee.plateau <= 0:
            return advice
        at = self.levels[slots]
        above = self._full_above(slots, curve)
        seen = [n for n in (at.in_server, at.running) if n is not None]
        if not seen or not above:
            return advice
        extra = max(1, math.ceil(slots - min(seen) - 1e-9))
        target = min(slots + extra, max(curve))
        expected = _expected_at(curve, target)
        if target == alone.parallelism:
            return Recommendation(target, expected, expected / knee.plateau)
        fullest = max(above, key=lambda level: level.parallelism)
        why = (
            f"recommended {target}, the server's {slots} slots and {extra} waiting, not {alone.parallelism} where "
            f"the curve alone puts it: "
        )
        if alone.parallelism > slots:
            why += (
                f"above {slots} the server queued requests ({fullest.queue:.0f} of {fullest.parallelism} waiting at "
                f"{fullest.parallelism}), so more in flight only waits for a slot; "
            )
        elif alone.parallelism < slots:
            why += (
                f"the knee's 95% interval ({knee.low:.1f}-{knee.high:.1f}) holds {slots}, and below it a slot is idle; "
            )
        cover = "1 waiting covers" if extra == 1 else f"{extra} waiting cover"
        why += (
            f"at exactly {slots} a slot idles between an answer and its client's next request "
            f"({_busy_at(at, slots)}), and {cover} that"
        )
        chosen = self.levels.get(target)
        if chosen is not None and chosen.running is not None:
            why += (
                f"; at {target} the gauge had {chosen.running / slots:.1%} of the slots busy, so {target} gives at "
                f"least that share of what {slots} full slots give (a step with fewer sequences is no slower), "
                "read within one window, which the machine's drift between windows cannot move"
            )
        return Recommendation(target, expected, expected / knee.plateau, why)

    def result(self) -> SearchResult:
        curve = self.curve()
        knee = within_the_levels(find_knee(curve), curve)
        alone = recommend(curve, knee, self.settings.share)
        advice = self._past_the_turnaround(self._at_the_slots(alone, knee, curve), alone, knee, curve)
        reason = self.stop_reason or "knee bracketed"
        ps = sorted(curve)
        best = knee.peak_parallelism
        if best != ps[-1] and "degraded" not in reason and ratio(curve[ps[-1]], curve[best])[2] < 1:
            reason += f"; throughput peaks near {best} and falls beyond it"
        return SearchResult(curve, knee, advice, reason, self.ceiling)


def _busy_at(level: Level, slots: int) -> str:
    """How full the slots were at ``level``, as the clients (Little's law) and the server's gauge read it."""
    said = []
    if level.in_server is not None:
        said.append(f"the clients had {level.in_server:.1f} of {slots} at the server on average")
    if level.running is not None:
        said.append(f"the server's gauge had {level.running:.2f} of {slots} slots busy")
    return "; ".join(said)


def _mean_of(*readings: float | None) -> float | None:
    """The mean of the readings there are (a level measured twice); None without any."""
    present = [n for n in readings if n is not None]
    return sum(present) / len(present) if present else None


def _expected_at(curve: dict[int, Rate], parallelism: int) -> float:
    """The throughput at ``parallelism``: measured there, or interpolated between the levels around it."""
    values = {p: rate.value for p, rate in curve.items()}
    return values[parallelism] if parallelism in values else throughput_at(values, parallelism)
