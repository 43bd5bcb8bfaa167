"""The endpoints the simulator serves, and the request NeMo Gym's rows make of them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gymbench.sim.chat_api import ChatCompletions
from gymbench.sim.completions_api import Completions
from gymbench.sim.openai_format import Endpoint
from gymbench.sim.request import ParsedRequest
from gymbench.sim.responses_api import Responses

CHAT = ChatCompletions()
COMPLETIONS = Completions()
RESPONSES = Responses()
ENDPOINTS: tuple[Endpoint, ...] = (CHAT, COMPLETIONS, RESPONSES)


def responses_request(model: str, params: Mapping[str, Any]) -> ParsedRequest:
    """A NeMo Gym row's ``responses_create_params`` as a non-streamed Responses API request to
    ``model`` (the row's own ``model``, if any, gives way, as the HTTP backends send their own)."""
    return RESPONSES.parse({**params, "model": model, "stream": False})
