"""Numbers as people read them: ``2.08 µs`` rather than ``2.08e-06s``.

One place for every summary, table and plot label (collect, compare, report, train), so the same
duration never reads two ways. Core module: no imports beyond the standard library.
"""

from __future__ import annotations

import math

DURATION_SCALES = ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns"))
TIME_UNIT_SECONDS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def duration(seconds: float | None, digits: int = 3) -> str:
    """A duration in the largest of s, ms, µs, ns that keeps it at 1 or more (``-`` when unknown)."""
    if seconds is None or not math.isfinite(seconds):
        return "-" if seconds is None else str(seconds)
    if not seconds:
        return "0 s"
    scale, unit = duration_scale(seconds, digits)
    return f"{plain(seconds / scale, digits)} {unit}"


def duration_scale(seconds: float, digits: int = 3) -> tuple[float, str]:
    """The divisor and unit :func:`duration` writes ``seconds`` in (999.97 ms reads ``1 s``)."""
    magnitude = abs(seconds) * (1 + 0.5 * 10**-digits)
    for scale, unit in DURATION_SCALES:
        if magnitude >= scale:
            return scale, unit
    return DURATION_SCALES[-1]


def interval(value: float, low: float, high: float, digits: int = 3) -> str:
    """``24 ms [23–25]``: the interval in the value's unit, written once.

    A bound in the same unit may need a fourth digit (``992 ms [991–1,020]``); it gets it rather
    than reading ``1.02e+03``."""
    scale, unit = duration_scale(value, digits)
    bounds = f"{plain(low / scale, digits)}–{plain(high / scale, digits)}"
    return f"{plain(value / scale, digits)} {unit} [{bounds}]"


def plain(value: float, digits: int = 3) -> str:
    """``digits`` significant digits without an exponent: ``1,020`` rather than ``1.02e+03``,
    ``0.00012`` rather than ``1.2e-04``, for the figures of a duration already in its unit."""
    text = f"{value:.{digits}g}"
    if "e" not in text:
        return text
    if abs(value) >= 1:
        return f"{value:,.0f}"
    return f"{value:.{digits + 6}f}".rstrip("0").rstrip(".") or "0"


BYTE_SCALES = ((1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB"))


def quantity(value: float, unit: str, digits: int = 4) -> str:
    """A value with its unit as people read it: times as durations (``83.6 µs``), bytes in binary
    units (``409 MiB``), large counts with thousands separators (``94,371,840 FLOP``), never
    ``8.36e-05 s`` or ``4.29e+08 B``."""
    if not math.isfinite(value):
        return "n/a"
    scale = TIME_UNIT_SECONDS.get(unit)
    if scale is not None:
        return duration(value * scale, digits)
    if unit in ("B", "bytes"):
        return byte_size(value, digits)
    return f"{number(value, digits)} {unit}".rstrip()


def byte_size(value: float, digits: int = 4) -> str:
    """``409.4 MiB``: the largest binary unit that keeps the value at 1 or more."""
    for scale, unit in BYTE_SCALES:
        if abs(value) >= scale:
            return f"{value / scale:.{digits}g} {unit}"
    return f"{value:.{digits}g} B"


def number(value: float, digits: int = 4) -> str:
    """``digits`` significant digits, except that a large value keeps its digits (``1,190``, not
    ``1.19e+03``) and a small one is written out (``0.00008579``, not ``8.579e-05``)."""
    if 10 ** (digits - 1) <= abs(value):
        return f"{value:,.0f}"
    return plain(value, digits)


def time_axis(values_s: list[float]) -> tuple[float, str]:
    """The divisor and unit a plot of these durations reads best in (its median's unit)."""
    finite = sorted(abs(v) for v in values_s if math.isfinite(v) and v)
    middle = finite[len(finite) // 2] if finite else 1.0
    for scale, unit in DURATION_SCALES:
        if middle >= scale:
            return scale, unit
    return 1e-9, "ns"
