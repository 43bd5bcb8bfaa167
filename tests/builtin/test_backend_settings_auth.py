"""Credentials in the base URL beside an API key: one line, not aiohttp's ValueError traceback."""

from __future__ import annotations

import pytest

from gymbench.builtin.backend_settings import OpenAISettings
from gymbench.errors import GymbenchError


def test_credentials_in_the_url_and_an_api_key_are_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-for-the-test")
    settings = OpenAISettings(base_url="http://user:secret@127.0.0.1:8000/v1", model="m")
    with pytest.raises(GymbenchError, match=r"^\+base_url carries credentials \(user:password@\) and OPENAI_API_KEY"):
        settings.endpoint()
    monkeypatch.delenv("OPENAI_API_KEY")
    assert settings.endpoint() == "http://user:secret@127.0.0.1:8000/v1"  # basic auth alone is the user's choice
    monkeypatch.setenv("MY_KEY", "sk-other")
    named = OpenAISettings(base_url="http://user:secret@127.0.0.1:8000/v1", model="m", api_key_env="MY_KEY")
    with pytest.raises(GymbenchError, match="and MY_KEY holds an API key"):
        named.endpoint()
