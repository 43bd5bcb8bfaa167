"""The ``gymbench_nemo_gym_stack`` fixture: NeMo Gym's own stack, started by its own launcher, with
gymbench's simulator as the model, so a suite tests against the real thing on 127.0.0.1.

NeMo Gym's venv is found or built once per machine (:mod:`gymbench.engine.nemo_gym_venv`, a few
minutes the first time); the stack starts once per session and stops whole at its end, Ray
included. Where there is no venv and no Python 3.13 to build one, the tests that ask for it skip
with the reason, and nothing else does. Loaded by :mod:`gymbench.pytest.plugin`; imports nothing
heavy until a test asks for the fixture.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from gymbench.engine.nemo_gym_stack import NeMoGymStack

MARKER = "real_nemo_gym: needs NeMo Gym's real stack (fixture gymbench_nemo_gym_stack; skipped with the reason "
MARKER += "when no Python >= 3.13 and no cached venv exist)"
StackFactory = Callable[..., "NeMoGymStack"]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER)


@pytest.fixture(scope="session")
def gymbench_nemo_gym_venv(request: pytest.FixtureRequest) -> Any:
    """The NeMo Gym venv's folder (built here the first time, with its output shown)."""
    from gymbench.engine.nemo_gym_venv import NoNeMoGym, find_venv
    from gymbench.pytest.engine import output_shown

    try:
        with output_shown(request.config):
            print("gymbench: finding NeMo Gym's venv (built once, cached)", file=sys.stderr)
            return find_venv()
    except NoNeMoGym as exc:
        pytest.skip(f"no real NeMo Gym: {exc}")


@pytest.fixture(scope="session")
def gymbench_nemo_gym_stack_factory(gymbench_nemo_gym_venv: Any) -> Iterator[StackFactory]:
    """Start NeMo Gym stacks for the session: ``factory(**sim_settings)`` starts a simulator with
    those settings and the example stack in front of it; the same settings give the same stack."""
    from gymbench.engine.nemo_gym_stack import start_nemo_gym_stack
    from gymbench.sim import start_sim_server

    started: dict[str, tuple[Any, NeMoGymStack]] = {}

    def start(**sim_settings: Any) -> NeMoGymStack:
        key = repr(sorted(sim_settings.items()))
        if key not in started:
            sim = start_sim_server(**sim_settings)
            try:
                stack = start_nemo_gym_stack(gymbench_nemo_gym_venv, sim.base_url, sim.config.model)
            except BaseException:
                sim.stop()
                raise
            started[key] = (sim, stack)
        return started[key][1]

    yield start
    for sim, stack in started.values():
        with contextlib.suppress(Exception):
            stack.stop()
        sim.stop()


@pytest.fixture(scope="session")
def gymbench_nemo_gym_stack(gymbench_nemo_gym_stack_factory: StackFactory) -> NeMoGymStack:
    """NeMo Gym's example stack (head server, simple agent, example_single_tool_call resources
    server, openai_model adapter) in front of an instant simulator: ``.head_url``, ``.head_port``,
    ``.agent_name``, ``.model_base_url``, ``.servers`` (name, type, host, port, pid)."""
    return gymbench_nemo_gym_stack_factory(step_base_s=0.0, step_per_seq_s=0.0, prefill_per_token_s=0.0)
