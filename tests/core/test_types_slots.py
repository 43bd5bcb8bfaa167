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
