"""The built-in backends' plugin: ``openai`` and ``nemo-gym``.

Registration is all this module does, so it imports nothing heavy: the backends themselves (and
aiohttp with them) are imported when a run creates one, and their settings
(:mod:`gymbench.builtin.backend_settings`) when options are checked. Each factory gets its
backend's checked settings object and hands it on as it is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gymbench.hookspecs import hookimpl
from gymbench.types import Backend, Component

if TYPE_CHECKING:
    from gymbench.builtin.backend_settings import NemoGymSettings, OpenAISettings

SETTINGS = "gymbench.builtin.backend_settings"


def make_openai(settings: OpenAISettings) -> Backend:
    from gymbench.builtin.openai_backend import OpenAIBackend

    return OpenAIBackend(settings)


def make_nemo_gym(settings: NemoGymSettings) -> Backend:
    from gymbench.builtin.nemo_gym_backend import NemoGymBackend

    return NemoGymBackend(settings)


@hookimpl
def gymbench_register_backends() -> list[Component]:
    return [
        Component(
            "openai",
            make_openai,
            "OpenAI-compatible HTTP server (vLLM, SGLang, OpenAI): Responses API or chat completions",
            settings=f"{SETTINGS}:OpenAISettings",
        ),
        Component(
            "nemo-gym",
            make_nemo_gym,
            "NeMo Gym agent servers' /run, by +agent_name (through the head server) or +agent_url; the agent verifies",
            settings=f"{SETTINGS}:NemoGymSettings",
        ),
    ]
