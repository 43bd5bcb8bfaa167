"""The largest batch that fits, found with real out-of-memory errors.

Grow geometrically until a real OOM, then narrow the gap between the largest size that ran and the
smallest that failed until it is within a few percent. Every answer is bracketed by two real
trials; the memory each successful trial used only chooses where to probe next (a line through
those points predicts where the budget runs out), with plain bisection when predictions miss.
Then a safety margin, and fresh verification runs of the chosen size: Lightning's finder returns
sizes that OOM later (its issues #8028, #9625, #20231), so the pass rate is part of the answer.
Near the boundary the same size can fit in one process and fail in the next (under glibc's
default, dynamic malloc settings a process's footprint varies by a few percent from run to run),
so the margin is one of memory: every verification run of the chosen size must leave
:data:`DEFAULT_MARGIN` of the budget unused (where the trials report their memory), and a run that
fails, or leaves less, backs the size off (to where the trials' memory line leaves the margin, or
by the margin's share of the batch) and verifies again. A batch margin alone is not enough: with a
large fixed footprint (weights, optimizer state, allocator slack) 5% fewer samples can leave well
under 1% of the budget free, which held in 2 of 3 fresh processes on an unseen shape.
"""

from __future__ import annotations

import gc
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np
from tqdm import tqdm

from gymbench.errors import GymbenchError
from gymbench.train.config import DEFAULT_MARGIN
from gymbench.types import JSONObject

OOM_MESSAGES = (
    "out of memory",
    "DefaultCPUAllocator: can't allocate memory",
    # cuBLAS and cuDNN report a failed allocation of their workspace as a status, not as torch's
    # OutOfMemoryError: the same failure, one library down.
    "CUBLAS_STATUS_ALLOC_FAILED",
    "CUDNN_STATUS_ALLOC_FAILED",
    "CUDNN_STATUS_NOT_ENOUGH_WORKSPACE",
    "CUFFT_ALLOC_FAILED",
    # oneDNN (torch's CPU kernels) reports an allocation refused under the trial's address-space
    # cap this way; seen in a CI run of the OOM search, where nothing else was wrong.
    "could not create a primitive",
)


def is_out_of_memory(exc: BaseException) -> bool:
    """By type (``torch.OutOfMemoryError``, ``MemoryError``) or by the allocators' messages."""
    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError":
        return True
    return isinstance(exc, RuntimeError) and any(text in str(exc) for text in OOM_MESSAGES)


def attempt(work: Callable[[], object], release: Callable[[], object] = gc.collect) -> str | None:
    """Run ``work``; ``None`` if it ran, the OOM message if it ran out of memory; else re-raise.

    Recovery happens after the ``except`` block: inside it the traceback's frames still hold the
    step's tensors, so freeing memory there frees nothing.
    """
    message = None
    try:
        work()
    except Exception as exc:
        if not is_out_of_memory(exc):
            raise
        message = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
    if message is not None:
        release()
    return message


@dataclass(frozen=True)
class Trial:
    batch: int
    fits: bool
    used_bytes: int = 0
    """Memory the trial used above its baseline, as the cap counts it (for the next guess; 0 when
    unknown): address space on the CPU, the CUDA allocator's reserve on a GPU."""
    seconds: float = 0.0
    error: str | None = None
    purpose: str = "search"
    rss_bytes: int = 0
    """CPU: this trial's own resident-memory peak above the RSS before it (0 when unknown)."""


@dataclass
class SearchResult:
    trials: list[Trial] = field(default_factory=list)
    largest_fit: int = 0
    first_failure: int | None = None
    chosen: int = 0
    verification: list[Trial] = field(default_factory=list)
    allocator: str = ""
    """The allocator settings the trials and verification ran under, in words."""
    budget_bytes: int = 0
    expected: dict[int, bool] = field(default_factory=dict, repr=False)
    """Whether each predicted probe was expected to fit: a wrong guess turns predictions off."""
    verified_in: str = "fresh processes"
    """Where the verification runs ran, in words (CUDA trials share one process)."""

    @property
    def search_trials(self) -> int:
        return sum(1 for trial in self.trials if trial.purpose == "search")

    @property
    def final_verification(self) -> list[Trial]:
        """The verification runs of the size finally chosen (earlier sizes failed theirs)."""
        return [trial for trial in self.verification if trial.batch == self.chosen]

    @property
    def backoffs(self) -> int:
        return len({trial.batch for trial in self.verification} - {self.chosen})

    @property
    def headroom(self) -> float | None:
        """The budget's share left by the most the chosen size used in verification (None: unknown)."""
        used = [trial.used_bytes for trial in self.final_verification if trial.used_bytes > 0]
        if not used or self.budget_bytes <= 0:
            return None
        return 1 - max(used) / self.budget_bytes

    @property
    def pass_rate(self) -> float:
        final = self.final_verification
        return sum(trial.fits for trial in final) / len(final) if final else float("nan")

    def to_dict(self) -> JSONObject:
        return {
            "largest_fit": self.largest_fit,
            "first_failure": self.first_failure,
            "chosen": self.chosen,
            "search_trials": self.search_trials,
            "verification_pass_rate": self.pass_rate,
            "backoffs": self.backoffs,
            "verification_headroom": self.headroom,
            "allocator": self.allocator,
            "verified_in": self.verified_in,
            "trials": [asdict(trial) for trial in self.trials + self.verification],
        }


TryBatch = Callable[[int, str], Trial]


@dataclass(frozen=True)
class SearchPlan:
    start: int = 1
    max_batch: int = 1 << 16
    growth: float = 8.0
    tolerance: float = 0.03
    """Stop when the largest fit is within this share of the first failure less one."""
    margin: float = DEFAULT_MARGIN
    """The chosen size starts this share below the largest fit, and must leave this share of the
    budget unused in every verification run where the trials report their memory."""
    verify_runs: int = 3
    max_backoffs: int = 4
    """How many times a failed verification may lower the chosen size by another margin."""
    budget_bytes: int = 0
    """The memory cap above baseline; with it, trial memory predicts the next probe."""
    guided: bool = True

    def __post_init__(self) -> None:
        if not 1 <= self.start <= self.max_batch:
            raise GymbenchError(f"need 1 <= start ({self.start}) <= max_batch ({self.max_batch})")
        if self.growth <= 1 or not 0 < self.tolerance < 1 or not 0 <= self.margin < 1 or self.verify_runs < 0:
            raise GymbenchError("need growth > 1, 0 < tolerance < 1, 0 <= margin < 1 and verify_runs >= 0")


def largest_batch_that_fits(try_batch: TryBatch, plan: SearchPlan, progress: bool = False) -> SearchResult:
    result = SearchResult(budget_bytes=plan.budget_bytes)
    bar = tqdm(desc="OOM search trials", unit="trial", disable=not progress)
    batch: int | None = plan.start
    while batch is not None:
        trial = try_batch(batch, "search")
        result.trials.append(trial)
        bar.update(1)
        bar.set_postfix(batch=batch, fits=trial.fits)
        _absorb(result, trial)
        batch = _next_probe(result, plan)
    if result.largest_fit == 0:
        bar.close()
        raise GymbenchError(
            f"even batch {plan.start} does not fit the memory budget ({result.trials[-1].error}); "
            "raise the budget or shrink the model"
        )
    result.chosen = max(1, math.floor(result.largest_fit * (1 - plan.margin)))
    _verify(try_batch, plan, result, bar)
    bar.close()
    return result


def _verify(try_batch: TryBatch, plan: SearchPlan, result: SearchResult, bar: tqdm) -> None:
    """``verify_runs`` fresh runs of the chosen size; when one fails or leaves less than the margin of
    the budget unused, back off and start over."""
    for backoff in range(plan.max_backoffs + 1):
        for _ in range(plan.verify_runs):
            result.verification.append(try_batch(result.chosen, "verify"))
            bar.update(1)
            if not _holds(result.verification[-1], plan):
                break
        if all(_holds(trial, plan) for trial in result.final_verification) or result.chosen == 1:
            return
        if backoff < plan.max_backoffs:
            result.chosen = _backed_off(result, plan)


def _holds(trial: Trial, plan: SearchPlan) -> bool:
    """It ran, and (where its memory is known) left the margin of the budget unused."""
    if not trial.fits:
        return False
    return trial.used_bytes <= 0 or plan.budget_bytes <= 0 or trial.used_bytes <= (1 - plan.margin) * plan.budget_bytes


def _backed_off(result: SearchResult, plan: SearchPlan) -> int:
    """After an OOM, the margin's share of the batch less; after a run that only left too little
    memory, the size the trials' memory line puts at the margin (when it is below the size now)."""
    chosen = result.chosen
    smaller = math.floor(chosen * (1 - plan.margin))
    if all(trial.fits for trial in result.final_verification):
        known = result.trials + result.final_verification
        predicted = _predicted(result, plan, (1 - plan.margin) * plan.budget_bytes, known)
        if predicted is not None and predicted < chosen:
            smaller = max(smaller, predicted)
    return max(1, min(chosen - 1, smaller))


def _absorb(result: SearchResult, trial: Trial) -> None:
    if trial.fits:
        result.largest_fit = max(result.largest_fit, trial.batch)
    elif result.first_failure is None or trial.batch < result.first_failure:
        result.first_failure = trial.batch


def _next_probe(result: SearchResult, plan: SearchPlan) -> int | None:
    fit, fail = result.largest_fit, result.first_failure
    if fit == 0:
        return None  # the first size failed: nothing smaller is tried, the caller says so
    if fail is None:
        if fit >= plan.max_batch:
            return None
        return min(_grow(result, plan, fit), plan.max_batch)
    if fit >= (1 - plan.tolerance) * (fail - 1):
        return None  # the true largest is at most fail - 1, and fit is within tolerance of it
    return _narrow(result, plan, fit, fail)


def _grow(result: SearchResult, plan: SearchPlan, fit: int) -> int:
    """×growth until the first failure; guided, the prediction itself and never past it.

    A prediction at or below ``fit`` says ``fit`` is about the answer: confirm that ``fit + gap``
    fails instead of trying a size the prediction already says is hopeless. Each such confirmation
    that fits after all doubles the gap, so a line that keeps underestimating still gets there.
    """
    step = max(fit + 1, math.ceil(fit * plan.growth))
    guess = _predicted(result, plan)
    if guess is None:
        return step
    misses = sum(1 for t in result.trials if t.batch in result.expected and result.expected[t.batch] != t.fits)
    probe = min(step * 4, max(guess, fit + _gap(fit, plan) * 2**misses))
    result.expected[probe] = probe <= guess
    return probe


def _gap(fit: int, plan: SearchPlan) -> int:
    return max(1, math.floor(fit * plan.tolerance))


def _narrow(result: SearchResult, plan: SearchPlan, fit: int, fail: int) -> int:
    """A predicted probe while predictions hold, else the midpoint."""
    middle = _middle(fit, fail)
    guess = _predicted(result, plan)
    if guess is None or not _predictions_hold(result):
        return middle
    gap, predicted = _gap(fit, plan), guess
    if guess - fit < gap:  # the prediction says fit is about it: confirm that fit + gap fails
        guess = fit + gap
    elif fail - guess < gap:  # the prediction says fail is about it: confirm fail - gap runs
        guess = fail - gap
    if not fit < guess < fail:
        return middle
    result.expected[guess] = guess <= predicted
    return guess


def _middle(fit: int, fail: int) -> int:
    """The geometric mean while the bracket spans more than 2x (halves its log width), else the midpoint."""
    middle = round(math.sqrt(fit * fail)) if fail > 2 * fit else (fit + fail) // 2
    return min(max(middle, fit + 1), fail - 1)


def _predictions_hold(result: SearchResult) -> bool:
    """False once a predicted probe landed on the side the prediction did not expect."""
    return all(result.expected[t.batch] == t.fits for t in result.trials if t.batch in result.expected)


def _predicted(
    result: SearchResult, plan: SearchPlan, budget: float | None = None, trials: list[Trial] | None = None
) -> int | None:
    """Where the line through the two largest successful trials' memory meets the budget (or ``budget``).

    Only the two largest: at small batches a fixed peak (the optimizer's temporaries) hides the
    per-sample cost, so a fit through every point would underestimate the slope.
    """
    if not plan.guided or plan.budget_bytes <= 0:
        return None
    points: dict[int, int] = {}
    for t in result.trials if trials is None else trials:
        if t.fits and t.used_bytes > 0:
            points[t.batch] = max(points.get(t.batch, 0), t.used_bytes)  # the most a size used: conservative
    known = sorted(points.items())[-2:]
    if len(known) < 2:
        return None
    batches, used = zip(*known, strict=True)
    slope, intercept = np.polyfit(batches, used, 1)
    if slope <= 0:
        return None
    limit = plan.budget_bytes if budget is None else budget
    return math.floor((limit - intercept) / slope + 1e-6)  # 8.9999999 from the fit means 9


def halving_sizes(start: int) -> list[int]:
    """The seed's handler: on OOM, halve the batch and retry, down to 1."""
    sizes = []
    while start >= 1:
        sizes.append(start)
        start //= 2
    return sizes
