"""Where benchmarks' servers come from: pytest options, ``[tool.gymbench]`` and the session simulator.

The same suite runs against the embedded simulator in CI and against a real vLLM, SGLang or NeMo
Gym agent on a GPU box: ``pytest benches/ --gymbench-backend openai --gymbench-base-url
http://gpu-box:8000/v1 --gymbench-model NAME``. Defaults for every ``gymbench.collect(...)`` can
live in ``[tool.gymbench.collect]`` of pyproject.toml (the options win over it), and the session
simulator's settings in ``[tool.gymbench.sim]``. API keys come only from the environment
(``api_key_env``). Loaded by :mod:`gymbench.pytest.plugin`; imports nothing heavy.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

SERVER_OPTIONS = {
    "backend": "the backend plugin for gymbench.collect (openai, nemo-gym; unset: the session simulator)",
    "base_url": "OpenAI-compatible base URL, e.g. http://HOST:PORT/v1",
    "model": "model name sent with each request",
    "agent_url": "NeMo Gym agent server, e.g. http://HOST:PORT",
    "api": "responses or chat",
    "api_key_env": "environment variable holding the API key",
}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gymbench", "gymbench benchmarks")
    for key, help_text in SERVER_OPTIONS.items():
        group.addoption("--gymbench-" + key.replace("_", "-"), dest=f"gymbench_{key}", default=None, help=help_text)
    group.addoption(
        "--gymbench-sim-preset", default=None, help="preset of the session simulator (default: [tool.gymbench.sim])"
    )


def _schema_of(job: str) -> tuple[type | None, tuple[str, type] | None]:
    """A job's schema and the job it is built on (imported when a job runs, not when pytest starts)."""
    from gymbench.collect.config import CollectConfig
    from gymbench.train.settings import TrainSettings
    from gymbench.tune.config import DiagnoseConfig, TuneConfig

    schemas = {"collect": CollectConfig, "tune": TuneConfig, "diagnose": DiagnoseConfig, "train": TrainSettings}
    return schemas.get(job), ("collect", CollectConfig) if job in ("tune", "diagnose") else None


def job_defaults(config: pytest.Config, job: str) -> dict[str, Any]:
    """``[tool.gymbench.<job>]`` of the rootdir's pyproject.toml, then the server options given.

    A job built on collection (``tune``) starts from the settings it shares with
    ``[tool.gymbench.collect]``, so the task file and verifier are written once.

    Paths there are relative to the pyproject.toml, wherever pytest is run from."""
    from gymbench.settings import project_settings, pyproject_table

    pyproject = config.rootpath / "pyproject.toml"
    schema, built_on = _schema_of(job)
    if schema is None:  # the simulator's table: no paths, built on nothing
        defaults = pyproject_table(pyproject, job)
    else:
        defaults = dict(project_settings(pyproject, job, schema, built_on))
    if job in ("collect", "tune"):
        for key in SERVER_OPTIONS:
            value = config.getoption(f"gymbench_{key}")
            if value is not None:
                defaults[key] = value
    return defaults


@pytest.fixture(scope="session")
def gymbench_sim_factory() -> Iterator[Callable[..., Any]]:
    """Start simulated servers for the session: ``gymbench_sim_factory(preset, **settings)``.

    The same preset and settings give the same running server; all stop when the session ends.
    """
    from gymbench.sim import start_sim_server

    started: dict[str, Any] = {}

    def start(preset: str | None = None, **settings: Any) -> Any:
        key = json.dumps([preset, settings], sort_keys=True, default=str)
        if key not in started:
            started[key] = start_sim_server(preset=preset, **settings)
        return started[key]

    yield start
    for handle in started.values():
        handle.stop()


@pytest.fixture(scope="session")
def gymbench_sim(request: pytest.FixtureRequest, gymbench_sim_factory: Callable[..., Any]) -> Any:
    """The session's simulated server (``.base_url``, ``.config``, ``.capacity``, ``.metrics()``).

    ``gymbench.collect(...)`` uses it when no server is named.
    """
    settings: Mapping[str, Any] = job_defaults(request.config, "sim")
    settings = dict(settings)
    preset = request.config.getoption("--gymbench-sim-preset") or settings.pop("preset", None)
    return gymbench_sim_factory(preset, **settings)
