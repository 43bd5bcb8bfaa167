"""Keeping API keys out of everything gymbench writes or prints.

Keys are read from the environment and sent in an ``Authorization`` header; they are never put
in settings, records or rows on purpose. But a server may echo the header back (in a 400 body, a
debug field, an error message), and that text ends up in ``failure.reason``, a response or a log
line. So every key gymbench reads is registered here, and text on its way out is redacted: the
registered values, and anything shaped like ``Bearer <token>`` or an OpenAI-style ``sk-`` key.

The registry is per process (keys come from this process's environment); it only grows.
"""

from __future__ import annotations

import re

REDACTED = "[REDACTED]"
MIN_SECRET_LENGTH = 8
"""Shorter values are not registered: redacting every ``abc`` in the output would do harm."""

_BEARER = re.compile(r"(?i)(bearer\s+)[^\s\"',;}\[\]\\]+")
_SK_KEY = re.compile(r"\bsk-[A-Za-z0-9_\-]{8,}")
_BEARER_BYTES = re.compile(rb"(?i)(bearer\s+)[^\s\"',;}\[\]\\]+")
_SK_KEY_BYTES = re.compile(rb"\bsk-[A-Za-z0-9_\-]{8,}")
_SECRETS: set[str] = set()
_SECRETS_BYTES: set[bytes] = set()


def register_secret(value: str | None) -> None:
    """Remember a secret so that :func:`redact` removes it wherever it appears."""
    if value and len(value) >= MIN_SECRET_LENGTH:
        _SECRETS.add(value)
        _SECRETS_BYTES.add(value.encode("utf-8", "surrogatepass"))


def redact(text: str) -> str:
    """``text`` with every registered secret, ``Bearer`` token and ``sk-`` key replaced."""
    for secret in _SECRETS:
        if secret in text:
            text = text.replace(secret, REDACTED)
    if "earer" in text or "EARER" in text:
        text = _BEARER.sub(lambda m: m.group(1) + REDACTED, text)
    if "sk-" in text:
        text = _SK_KEY.sub(REDACTED, text)
    return text


def redact_bytes(data: bytes) -> bytes:
    """:func:`redact` for encoded output (rollout rows); cheap when there is nothing to remove."""
    for secret in _SECRETS_BYTES:
        if secret in data:
            data = data.replace(secret, REDACTED.encode())
    if b"earer" in data or b"EARER" in data:
        data = _BEARER_BYTES.sub(lambda m: m.group(1) + REDACTED.encode(), data)
    if b"sk-" in data:
        data = _SK_KEY_BYTES.sub(REDACTED.encode(), data)
    return data
