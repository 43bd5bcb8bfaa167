"""Errors that reach a person.

Every failure caused by input (a file, a flag, a plugin) is a :class:`GymbenchError` whose message
says where the problem is, what was expected and what to do; the CLI prints the message without a
traceback. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class GymbenchError(Exception):
    """A problem the user can fix; the message is shown as-is."""


class PluginError(GymbenchError):
    """A plugin broke a registration rule (duplicate name, bad return value)."""


class ResultsFileError(GymbenchError):
    """A results file is unreadable, corrupt, or of a schema this gymbench does not know."""


class UnknownComponentError(GymbenchError):
    """A backend, verifier or strategy name that no plugin registered."""


class ServerUnreachable(GymbenchError):
    """A server did not answer (refused, timed out): an outage, not bad input. The CLI exits 1
    (the run stopped early) rather than 2, and a sharded run retries the shard once the server is back."""

    exit_status = 1
