"""Names a package exports but imports only when first used.

``gymbench --version`` and every pytest run load gymbench's plugin modules; a package whose
``__init__`` imported its heavy parts (scipy for the statistics, aiohttp for the simulator) would
make all of them pay for it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that imports ``exports[name]`` (a module path) on first access."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    return __getattr__
