"""Registers ``my-llama`` for this suite: a ``conftest.py`` with a ``@gymbench.hookimpl`` is a
gymbench plugin for the tests under it (no package, no entry point)."""

from __future__ import annotations

from my_model import build_my_llama  # a module-level function: it is pickled to the memory pass's subprocess

from gymbench import Component, hookimpl


@hookimpl
def gymbench_register_models() -> list[Component]:
    return [Component("my-llama", build_my_llama, "a tiny Llama with random weights")]
