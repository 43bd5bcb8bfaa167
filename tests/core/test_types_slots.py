"""The per-rollout types are frozen, slotted dataclasses: cheap to build, still pickled (Ray shards)."""

from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest

from gymbench.types import Generation, GenerationRequest, RequestOutcome, TokenUsage, Verdict


@pytest.mark.parametrize(
    "value",
    [
        Generation("4", {"id": "r"}, TokenUsage(3, 1), {"ttft": 0.1}, None, 1, {"x": 1}, {"prompt_n": 3.0}, {}),
        GenerationRequest(1, 2, {"input": "hi"}, {"id": 12345678901234567890}),
        Verdict(1.0, {"why": "same"}),
        RequestOutcome(0.1, True, 200, 5),
    ],
)
def test_per_rollout_types_pickle_copy_and_stay_frozen(value: object) -> None:
    assert pickle.loads(pickle.dumps(value)) == value
    assert copy.deepcopy(value) == value
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(value, dataclasses.fields(value)[0].name, None)  # type: ignore[arg-type]
    assert not hasattr(value, "__dict__")


def test_stored_by_slot_keeps_the_dataclasss_parameters_defaults_and_freezing() -> None:
    """The per-rollout types' ``__init__`` stores through the slots (issue 38's hot path); what a
    caller sees is the dataclass's: the same signature, a fresh default per instance, keywords,
    ``replace``, and no assignment once built."""
    import inspect

    from gymbench.rollout.verification import Judgement

    assert str(inspect.signature(Generation)) == (
        "(text, response=<factory>, usage=<factory>, timings=<factory>, reward=None, retries=0, extra=<factory>, "
        "server_timings=None, client_delay=<factory>)"
    )
    one, two = Generation("a"), Generation("b")
    assert one.response == {} and one.response is not two.response and one.usage == TokenUsage(0, 0)
    assert one.usage is not two.usage and one.reward is None and one.retries == 0
    built = Generation(text="x", retries=2, usage=TokenUsage(completion_tokens=5))
    assert (built.text, built.retries, built.usage.completion_tokens, built.usage.prompt_tokens) == ("x", 2, 5, 0)
    assert dataclasses.replace(built, retries=3) == Generation("x", retries=3, usage=TokenUsage(0, 5))
    with pytest.raises(TypeError):
        Generation()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Verdict(1.0, nonsense=1)  # type: ignore[call-arg]
    judgement = Judgement(Verdict(1.0))
    assert (judgement.skipped_reason, judgement.cached) == (None, False) and not hasattr(judgement, "__dict__")
    for value in (built, judgement, GenerationRequest(0, 0, {})):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(value, dataclasses.fields(value)[-1].name, None)
    assert GenerationRequest(0, 0, {}).row == {} and Verdict(0.5).details == {}
