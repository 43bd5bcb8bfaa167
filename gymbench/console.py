"""The console: a warning line that does not tear a progress bar, text made safe to show, and
Ctrl-C that lands where Python cannot raise it sent again (:func:`ctrl_c_never_swallowed`).

Ctrl-C while the ``gymbench`` console script is still importing is :mod:`gymbench.start_guard`'s:
it must be installed before anything heavier than ``os``, ``signal`` and ``sys`` is imported.
"""

from __future__ import annotations

import contextlib
import re
import signal
import sys
import threading
from collections.abc import Iterator


@contextlib.contextmanager
def ctrl_c_never_swallowed() -> Iterator[None]:
    """Ctrl-C that lands where Python cannot raise it is sent again, to land where it can.

    A KeyboardInterrupt raised inside a weakref callback, a ``__del__`` or a garbage-collector
    callback cannot unwind anything: Python prints ``Exception ignored in: ...`` with its traceback
    and carries on, and the run then finished as if the key had never been pressed (seen in CI: the
    signal landed in importlib's module-lock callback during a command's imports). The hook sends
    SIGINT to the main thread again a moment later, from a timer thread: sent from the hook itself
    it would be taken at the hook's next bytecode, where it is just as unraisable; a real signal
    (not ``_thread.interrupt_main``) also wakes a main thread blocked in a system call. Every other
    unraisable exception goes to the hook that was there before, and so does an interrupt swallowed
    in another thread (a signal is only ever handled in the main thread, so ``main`` run from another
    would get it nowhere useful); that hook is put back on the way out (``main`` also runs inside
    pytest, which has its own)."""
    previous = sys.unraisablehook

    def hook(unraisable: sys.UnraisableHookArgs) -> None:
        try:
            if (
                unraisable.exc_type is not None
                and issubclass(unraisable.exc_type, KeyboardInterrupt)
                and threading.current_thread() is threading.main_thread()  # where Python runs signal handlers
                and callable(signal.getsignal(signal.SIGINT))  # never SIG_DFL's kill, nor into SIG_IGN
            ):
                _send_sigint_again()
            else:
                previous(unraisable)
        except KeyboardInterrupt:  # a second Ctrl-C inside the hook: unraisable again
            _send_sigint_again()

    sys.unraisablehook = hook
    try:
        yield
    finally:
        sys.unraisablehook = previous


_AGAIN_AFTER_S = 0.01
"""Long enough for the main thread to leave the hook and the callback that raised (microseconds)."""


def _send_sigint_again() -> None:
    main_thread = threading.main_thread().ident
    assert main_thread is not None
    timer = threading.Timer(_AGAIN_AFTER_S, signal.pthread_kill, (main_thread, signal.SIGINT))
    timer.daemon = True
    timer.start()


def warn(message: str) -> None:
    """``gymbench: warning: ...`` on stderr, redacted, above a progress bar rather than through it
    (tqdm's ``write``): a backend or a command may warn while a collection shows its bar."""
    from tqdm import tqdm

    from gymbench.secrets import redact

    tqdm.write(f"gymbench: warning: {printable(redact(message))}", file=sys.stderr)


_UNSHOWABLE = re.compile(
    "[\x00-\x1f\x7f-\x9f"  # C0, DEL, C1: cursor moves, screen clears, OSC titles, bells, CSI (0x9b)
    "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"  # bidi marks, embeddings, overrides, isolates
    "\u2028\u2029"  # line and paragraph separators: a new line to some terminals and editors
    "\ud800-\udfff]"  # lone surrogates (JSON allows them): printing one is a UnicodeEncodeError
)


def printable(text: str) -> str:
    """``text`` with every character that would act on a terminal or reorder what it shows written
    as its escape (``\\x1b``, ``\\u202e``). Benchmark, metric and unit names come from records
    anyone can write: a name holding ``\\x1b[2J`` cleared the terminal a comparison printed to, and a
    right-to-left override made ``test_a`` and a name spelled backwards look alike. Every place that
    shows data-derived text (the terminal, markdown, HTML) passes it through here."""
    return _UNSHOWABLE.sub(_escaped, text) if _UNSHOWABLE.search(text) else text


_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escaped(found: re.Match[str]) -> str:
    char = found.group()
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
