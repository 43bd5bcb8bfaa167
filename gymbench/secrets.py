"""Keeping API keys out of everything gymbench writes or prints.

Keys are read from the environment and sent in an ``Authorization`` header; they are never put
in settings, records or rows on purpose. But a server may echo the header back (in a 400 body, a
debug field, an error message), and that text ends up in ``failure.reason``, a response or a log
line. So every key gymbench reads is registered here, and text on its way out is redacted: the
registered values, and anything shaped like ``Bearer <token>`` or an OpenAI-style ``sk-`` key.

The registry is per process (keys come from this process's environment); it only grows.

Redaction is one filter at the few places where bytes leave the process, not a call at each place
a key was once found: :class:`~gymbench.jsonio.AtomicFile` (every metrics file, results record,
report, export, merge), the rows writer, and :func:`install_output_filter`, which puts
``sys.stdout`` and ``sys.stderr`` behind :class:`RedactingStream` (every warning, error, progress
bar, traceback). ``gymbench``'s ``main`` installs it, and so does every process that registers a
key (a shard worker, a pytest session that opens a backend), so a new output path is covered
without knowing about keys. A test in ``tests/core`` keeps file writes on those paths.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any, TextIO

REDACTED = "[REDACTED]"
MIN_SECRET_LENGTH = 8
"""Shorter values are not registered: redacting every ``abc`` in the output would do harm."""

_BEARER = re.compile(r"(?i)(bearer\s+)[^\s\"',;}\[\]\\]+")
_SK_KEY = re.compile(r"\bsk-[A-Za-z0-9_\-]{8,}")
_BEARER_BYTES = re.compile(rb"(?i)(bearer\s+)[^\s\"',;}\[\]\\]+")
_SK_KEY_BYTES = re.compile(rb"\bsk-[A-Za-z0-9_\-]{8,}")
_HAS_BEARER = re.compile(rb"bearer")
_HAS_SK = re.compile(rb"sk-")
"""The prechecks of every row written: a literal pattern's search is 2x faster than ``in`` on a
row of JSON (CPython 3.11), and the row writer runs them once per rollout."""
_SECRETS: set[str] = set()
_SECRETS_BYTES: set[bytes] = set()


def register_secret(value: str | None) -> str | None:
    """Remember a secret so that :func:`redact` removes it wherever it appears; return it stripped.

    Surrounding whitespace is not part of a key (``export KEY="$(cat key.txt)"`` keeps a ``\r``
    from a Windows file; a newline in a header would make the HTTP client raise with the value in
    its message), so the stripped key is what is registered and sent. This process's stdout and
    stderr go through the filter from now on.
    """
    value = value.strip() if value else value
    if value and len(value) >= MIN_SECRET_LENGTH:
        _SECRETS.add(value)
        _SECRETS_BYTES.add(value.encode("utf-8", "surrogatepass"))
        install_output_filter()
    return value or None


def secret_from_env(name: str | None) -> str | None:
    """The stripped value of the environment variable ``name``, registered as a secret."""
    return register_secret(os.environ.get(name)) if name else None


def redact(text: str) -> str:
    """``text`` with every registered secret, ``Bearer`` token and ``sk-`` key replaced."""
    for secret in _SECRETS:
        if secret in text:
            text = text.replace(secret, REDACTED)
    if "bearer" in text.lower():  # any casing: the pattern is case-insensitive, so is its pre-check
        text = _BEARER.sub(lambda m: m.group(1) + REDACTED, text)
    if "sk-" in text:
        text = _SK_KEY.sub(REDACTED, text)
    return text


def redact_bytes(data: bytes) -> bytes:
    """:func:`redact` for encoded output (rollout rows); cheap when there is nothing to remove."""
    for secret in _SECRETS_BYTES:
        if secret in data:
            data = data.replace(secret, REDACTED.encode())
    if _HAS_BEARER.search(data.lower()):  # one scan of a copy; any casing, as the pattern
        data = _BEARER_BYTES.sub(lambda m: m.group(1) + REDACTED.encode(), data)
    if _HAS_SK.search(data):
        data = _SK_KEY_BYTES.sub(REDACTED.encode(), data)
    return data


def redact_output(data: Any) -> Any:
    """What leaves the process, redacted: text or bytes; anything else passes (the writer raises)."""
    if isinstance(data, str):
        return redact(data)
    if isinstance(data, (bytes, bytearray, memoryview)):
        return redact_bytes(bytes(data))
    return data


class RedactingStream:
    """A text stream whose writes are redacted; everything else is the wrapped stream's.

    Each ``write`` is redacted whole: ``print`` writes a line in one call, tqdm a whole bar.
    """

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        self.stream.write(redact(text) if isinstance(text, str) else text)
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def install_output_filter() -> None:
    """Put ``sys.stdout`` and ``sys.stderr`` behind :class:`RedactingStream` (once; a stream
    replaced since, as pytest's capture does, is wrapped again). The key an unnamed
    ``+api_key_env`` falls back to (``OPENAI_API_KEY``) is registered too."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, RedactingStream):
            setattr(sys, name, RedactingStream(stream))
    key = os.environ.get("OPENAI_API_KEY", "").strip()
    if len(key) >= MIN_SECRET_LENGTH and key not in _SECRETS:
        register_secret(key)
