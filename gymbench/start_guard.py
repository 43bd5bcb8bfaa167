"""Ctrl-C while the ``gymbench`` console script is still importing: one line and exit 130.

The console script runs ``from gymbench.cli import main`` before ``main`` (and its handler for
Ctrl-C) exists, so a Ctrl-C during that import would end in a KeyboardInterrupt traceback. The
package's ``__init__`` calls :func:`guard_start_up` first thing, only when the program is the
``gymbench`` command (never when gymbench is imported as a library or by pytest), and only when
SIGINT has Python's default handler (a job started with SIGINT ignored keeps it ignored);
:func:`~gymbench.cli.main` hands SIGINT back to Python as soon as its own handler is in place.

A module of its own that imports nothing Python has not already loaded at start-up (``_signal``,
the C module under ``signal``, whose Python part would import and build its enums first): until the
guard is in place a Ctrl-C is a traceback, and CI caught one landing in a regular expression that
:mod:`gymbench.console` compiles at import, when the guard lived there.
"""

from __future__ import annotations

import _signal as signal
import os
import sys


def started_as_the_command() -> bool:
    return bool(sys.argv) and os.path.basename(sys.argv[0]) in ("gymbench", "gymbench.exe")


def guard_start_up() -> None:
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _interrupted_while_starting)


def end_start_up_guard() -> None:
    """From here on Ctrl-C is a KeyboardInterrupt again, which ``main`` turns into the same line."""
    if signal.getsignal(signal.SIGINT) is _interrupted_while_starting:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _interrupted_while_starting(signum: int, frame: object) -> None:
    """Nothing has been done yet, so there is nothing to unwind: exit at once. Raising here instead
    (SystemExit) would land inside whichever module is importing, C extensions included, and an
    extension left half-initialised can crash the interpreter as it shuts down."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C while saying so
    os.write(2, b"gymbench: interrupted\n")
    os._exit(130)
