"""The load generator reads the server's generated tokens by the recognised engine's names."""

from __future__ import annotations

import aiohttp
import pytest

from gymbench.calibrate.loadgen import generation_tokens, metrics_engine
from gymbench.plugins import Plugins, get_plugin_manager
from tests.engine_metrics_server import recorded, serving_metrics

BUILTINS = Plugins(get_plugin_manager(load_entry_points=False)).engine_metrics()


@pytest.mark.parametrize(("text", "engine", "tokens"), [("vllm_v1", "vllm", 20224.0), ("llamacpp", "llamacpp", 3200.0)])
async def test_generated_tokens_by_each_engines_names(text: str, engine: str, tokens: float) -> None:
    with serving_metrics(recorded(text)) as server:
        async with aiohttp.ClientSession() as session:
            found = await metrics_engine(session, server.metrics_url, BUILTINS)
            assert found.name == engine
            assert await generation_tokens(session, server.metrics_url, found) == tokens


async def test_an_unknown_engine_is_one_clear_error() -> None:
    with serving_metrics(recorded("unknown")) as server:
        async with aiohttp.ClientSession() as session:
            with pytest.raises(ValueError, match=r"/metrics: no known engine's metric names among 3 samples"):
                await metrics_engine(session, server.metrics_url, BUILTINS)
