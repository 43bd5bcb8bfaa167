"""The collect record keeps the server-timings comparison, and two of its figures as metrics."""

from __future__ import annotations

import pytest

from gymbench.collect.collection import collect_result
from gymbench.collect.config import CollectConfig
from gymbench.rollout.stats import CollectStats


def test_the_record_holds_the_comparison_and_its_medians_as_metrics() -> None:
    stats = CollectStats()
    for ttft in (0.1, 0.2, 0.3):
        stats.server.add({"prompt_ms": 50.0, "predicted_ms": 20.0}, {"ttft": ttft, "e2e": ttft + 0.05})
    result = collect_result(CollectConfig(), "openai", stats)
    assert result.extra["summary"]["server_timings"]["rows"] == 3
    assert result.metrics["server_prompt_p50"].value == pytest.approx(0.05)
    assert result.metrics["ttft_before_prompt_share_p50"].value == pytest.approx(0.75)  # (0.2 - 0.05) / 0.2


def test_without_server_timings_the_record_has_no_such_metrics() -> None:
    result = collect_result(CollectConfig(), "openai", CollectStats())
    assert "server_timings" not in result.extra["summary"]
    assert not any(name.startswith(("server_prompt", "ttft_before")) for name in result.metrics)
