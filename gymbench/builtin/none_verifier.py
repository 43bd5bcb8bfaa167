"""The ``none`` verifier: collect rollouts without judging them.

Every response gets the same reward (``0.0`` unless configured) and ``details`` saying that
verification was skipped. It sets no failure kind, because skipping was asked for: a run that only
collects rollouts (to judge them later, or to measure the model server) should not count every row
as a failure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gymbench.types import Verdict

NAME = "none"


class NoneVerifier:
    cost = "cheap"  # runs inline on the event loop; counts as cheap for fast mode

    def __init__(self, reward: float = 0.0) -> None:
        self.reward = reward

    def verify(self, row: Mapping[str, Any], response_text: str) -> Verdict:
        return Verdict(
            reward=self.reward, details={"skipped": True, "reason": "verification skipped (verifier 'none')"}
        )
