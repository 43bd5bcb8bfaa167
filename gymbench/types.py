"""Core types shared by every room of gymbench.

The rooms (built-ins, rollout engine, simulator, training bench, baselines) never import each
other; the protocols and records here are how data crosses between them.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeAlias, TypeVar, runtime_checkable

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

    from gymbench.plugins import Plugins

Direction = Literal["higher", "lower"]

# --------------------------------------------------------------------------- JSON data

JSONValue: TypeAlias = None | bool | int | float | str | list["JSONValue"] | dict[str, "JSONValue"]
"""A value as JSON holds it: ``str``, ``int``, ``float``, ``bool``, ``None``, or a list or object of
them. Readers that index into nested data narrow it with ``isinstance`` first; where the data has a
known shape (a rollouts row, a summary) a ``TypedDict`` names its fields instead."""

JSONObject: TypeAlias = dict[str, JSONValue]
"""A JSON object: a results record's, a rollouts row's, a request's or a summary's fields."""


# --------------------------------------------------------------------------- rollouts

_Frozen = TypeVar("_Frozen", bound=type)


class _Factory:
    """The default of a parameter whose field has a default factory, shown as ``dataclass`` shows it."""

    def __repr__(self) -> str:
        return "<factory>"


_FACTORY = _Factory()


def stored_by_slot(cls: _Frozen) -> _Frozen:
    """Give a frozen, slotted dataclass an ``__init__`` that stores each field through its slot's
    own descriptor, for the types built once or more per rollout.

    The ``__init__`` ``dataclass`` writes for a frozen class goes through ``object.__setattr__``
    once per field: about 1.3 k instructions each more than a plain class's, some 20 fields and
    26 k instructions per rollout, 4% of the client's CPU beside a minimal aiohttp loop (issue 38).
    The slot's ``__set__`` does the same store for less than half of that. Everything else stays
    the dataclass's: the same parameters and defaults (a factory called per instance), equality,
    ``replace``, pickling, and a ``FrozenInstanceError`` on any assignment after it is built."""
    names, lines = [], []
    scope: dict[str, object] = {"_FACTORY": _FACTORY}
    for item in fields(cls):
        name = item.name
        scope[f"_set_{name}"] = cls.__dict__[name].__set__
        value = name
        if item.default is not MISSING:
            scope[f"_default_{name}"] = item.default
            names.append(f"{name}=_default_{name}")
        elif item.default_factory is not MISSING:
            scope[f"_factory_{name}"] = item.default_factory
            names.append(f"{name}=_FACTORY")
            value = f"_factory_{name}() if {name} is _FACTORY else {name}"
        else:
            names.append(name)
        lines.append(f"    _set_{name}(self, {value})")
    assert not hasattr(cls, "__post_init__"), f"{cls.__name__}: stored_by_slot does not call __post_init__"
    source = f"def __init__(self, {', '.join(names)}):\n" + "\n".join(lines)
    exec(source, scope)  # noqa: S102  # generated from the class's own fields, as dataclasses does
    init = scope["__init__"]
    assert callable(init)
    init.__qualname__ = f"{cls.__qualname__}.__init__"  # type: ignore[attr-defined]
    setattr(cls, "__init__", init)  # noqa: B010  # replacing a method mypy sees as fixed
    return cls


@stored_by_slot
@stored_by_slot
@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """One rollout to produce: the task row and the request parameters after overrides."""

    task_index: int
    rollout_index: int
    params: Mapping[str, Any]
    """``responses_create_params`` of the row, with the run's overrides merged in."""
    row: Mapping[str, Any] = field(default_factory=dict)
    """The whole input row, so agent backends can forward fields such as ``expected_answer``."""


@stored_by_slot
@dataclass(frozen=True, slots=True)
class TokenUsage:
    prompt_tokens: int = 0
    completion_tokens: int = 0


SERVER_TIMING_FIELDS = ("prompt_n", "prompt_ms", "predicted_n", "predicted_ms", "predicted_per_token_ms", "cache_n")
"""The per-request timings a server may report, as llama.cpp's ``timings`` names them: prompt
tokens processed (``prompt_n``, after ``cache_n`` tokens reused from the prompt cache), the prompt's
time up to the first token (``prompt_ms``), generated tokens (``predicted_n``) and the time from
the first to the last of them (``predicted_ms``, ``predicted_per_token_ms``). A row keeps those the
server gave under ``server_timings``; a server that reports none leaves the key out."""

ServerTimings: TypeAlias = dict[str, float]
"""Some of :data:`SERVER_TIMING_FIELDS`, each a finite number; never empty."""


@stored_by_slot
@dataclass(frozen=True, slots=True)
class Generation:
    """What a backend returns for one request."""

    text: str
    """The final assistant text, which verifiers judge."""
    response: Mapping[str, Any] = field(default_factory=dict)
    """The raw response body (OpenAI- or NeMo-Gym-shaped), written to the output row."""
    usage: TokenUsage = field(default_factory=TokenUsage)
    timings: Mapping[str, float] = field(default_factory=dict)
    """Stage durations in seconds measured by the backend (e.g. ``connection_wait``, ``ttft``)."""
    reward: float | None = None
    """Set by backends whose server already verified (NeMo Gym agents); ``None`` otherwise."""
    retries: int = 0
    """Requests the backend repeated (429, 5xx, resets) before this answer."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Further top-level fields for the output row (a NeMo Gym agent's own verification fields)."""
    server_timings: ServerTimings | None = None
    """The server's own timings of this request (llama.cpp's ``timings``), when it reported them."""
    client_delay: Mapping[str, float] = field(default_factory=dict)
    """The client's own delay inside this request's timings, seconds: ``send_lag_s`` and
    ``receive_lag_s`` (how late the event loop ran a callback scheduled when the request went out
    and while its answer came in) and ``read_to_stamp_s`` (socket read to timestamp); empty when
    the backend does not measure it."""


ENVIRONMENT_SERVER_FIELD = "_ng_environment_server"
RESULT_TYPE_FIELD = "_ng_result_type"
"""NeMo Gym 0.7.0's stamps on a row its environment server ran: the server's name and its
implementation. The ``nemo-gym`` backend sets them; the row builder writes them over a row's own."""


class GenerationFailed(Exception):
    """A backend gave up on a request; the engine writes the kind and reason into the row.

    ``kind`` is one of a small vocabulary so rows can be counted by it: ``timeout``,
    ``connection_error``, ``rate_limited``, ``server_error``, ``bad_request``, ``http_error``,
    ``invalid_response``.
    """

    def __init__(self, kind: str, reason: str, status: int | None = None, retries: int = 0) -> None:
        super().__init__(f"{kind}: {reason}")
        self.kind = kind
        self.reason = reason
        self.status = status
        self.retries = retries
        self.route: dict[str, str] = {}
        """Where the request was sent, as an agent backend stamps its rows (NeMo Gym 0.7.0's
        environment server and its type): a failed row carries them as a scored one does."""

    @property
    def rate_limit(self) -> bool:
        """A rate limit's refusal (a 429 that names one), not a full queue's: a sign of the limit."""
        return self.status == 429 and "rate limit" in self.reason.lower()


@runtime_checkable
class Backend(Protocol):
    """Turns requests into generations. Opened once per run; ``generate`` is called concurrently."""

    async def __aenter__(self) -> Backend: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

    async def generate(self, request: GenerationRequest) -> Generation: ...


@stored_by_slot
@dataclass(frozen=True, slots=True)
class Verdict:
    """A verifier's judgement. ``failure_kind`` is set when it could not judge at all."""

    reward: float
    details: Mapping[str, Any] = field(default_factory=dict)
    failure_kind: str | None = None


@runtime_checkable
class Verifier(Protocol):
    """Scores one response against its task row. Synchronous: the engine runs it off the loop."""

    def verify(self, row: Mapping[str, Any], response_text: str) -> Verdict: ...


# A verifier may also carry ``cost = "cheap"`` (a class attribute): cheap verifiers run inline on
# the event loop and count as cheap for fast mode; any other verifier runs in a worker pool.


class StopDispatch(Exception):
    """Raised by a strategy's ``slot()`` to end a run early (a search that has its answer).

    The engine stops reading tasks, lets the rollouts in flight land, and returns normally.
    """


@stored_by_slot
@dataclass(frozen=True, slots=True)
class RequestOutcome:
    """Feedback a concurrency strategy gets after each rollout (adaptive strategies use it)."""

    latency_s: float
    ok: bool
    status: int | None = None
    output_tokens: int = 0
    """Tokens the answer carried (0 when the backend reports none)."""
    retries: int = 0
    """Requests the backend repeated before this outcome (429s, 5xx, resets)."""
    rate_limited: bool = False
    """It failed on a rate limit's refusal (:attr:`GenerationFailed.rate_limit`)."""


@runtime_checkable
class ConcurrencyStrategy(Protocol):
    """Decides when the next rollout may start.

    A closed-loop strategy starts one when a slot frees (a number in flight); an open-loop one sends
    requests on a schedule whatever is in flight, and says so with a class attribute ``open_loop =
    True`` (:func:`is_open_loop`) on the strategy or on its settings dataclass (then it is known
    before its options are checked), which ``gymbench tune`` and ``diagnose`` refuse: they sweep
    the number in flight, which an open-loop strategy does not hold.
    """

    @property
    def limit(self) -> int | None:
        """The current concurrency limit, ``None`` for unbounded."""
        ...

    def slot(self) -> AbstractAsyncContextManager[None]:
        """An async context manager held for the whole life of one rollout."""
        ...

    def observe(self, outcome: RequestOutcome) -> None: ...


def ignores_outcome(observe: Callable[[Any, RequestOutcome], None]) -> Callable[[Any, RequestOutcome], None]:
    """Marks a strategy's ``observe`` as one that ignores its outcome (a fixed limit): the engine
    then builds no :class:`RequestOutcome` for it and makes no call. Building it (a frozen dataclass
    of six fields) was ~10 k instructions per rollout, 1.5 % of the client's. A subclass that
    overrides ``observe`` is called as before: its own method carries no mark."""
    setattr(observe, "ignores_outcome", True)  # noqa: B010  # a function's attribute, read by observes()
    return observe


def observes(strategy: object) -> bool:
    """Whether the engine must build and hand each rollout's outcome to ``strategy.observe``."""
    return getattr(getattr(strategy, "observe", None), "ignores_outcome", False) is not True


def is_open_loop(strategy: object) -> bool:
    """Whether a strategy (or its class, or its settings dataclass) says it sends on a schedule
    (``open_loop = True``), not when a slot frees."""
    return getattr(strategy, "open_loop", False) is True


# --------------------------------------------------------------------------- registrations

ComponentFactory: TypeAlias = Callable[..., object]
"""Builds a component from its options: an instance of the component's ``settings`` dataclass, or
the raw mapping when it declares none (so each factory names its own parameter type)."""


@dataclass(frozen=True)
class Component:
    """A named factory a plugin registers: a backend, verifier, concurrency strategy or model.

    ``factory`` returns the object (a :class:`Backend`, :class:`Verifier` or
    :class:`ConcurrencyStrategy`). When ``settings`` names a dataclass of the component's options
    (the class, or ``"package.module:Class"`` to import it only when the options are checked),
    gymbench checks the options a user gave against it (unknown keys, wrong types and the
    dataclass's own ``__post_init__`` checks are errors that name the component) and calls
    ``factory`` with the dataclass instance; without ``settings`` the factory gets the raw mapping.

    Registration must be cheap (it happens on every ``gymbench`` call): keep heavy imports inside
    the factory, for example with :func:`gymbench.plugins.lazy`.
    """

    name: str
    factory: ComponentFactory
    description: str = ""
    settings: type | str | None = None


@dataclass(frozen=True)
class Command:
    """A ``gymbench`` subcommand contributed by a plugin (every built-in command is one)."""

    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, Plugins], int]
    """Returns the process exit code."""


@dataclass(frozen=True)
class RunInfo:
    """Announced to plugins when a run starts and finishes."""

    kind: str
    """What runs: ``"pytest"``, ``"collect"``, ``"train"``, ..."""
    name: str
    started_at: str
    """ISO-8601 UTC timestamp."""
    options: Mapping[str, Any] = field(default_factory=dict)
