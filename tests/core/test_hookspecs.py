"""Every hook spec is documented: a plugin author reads the specs, not the call sites."""

from __future__ import annotations

import inspect

from gymbench import hookspecs


def _specs() -> list:
    return [fn for name, fn in inspect.getmembers(hookspecs, inspect.isfunction) if hasattr(fn, "gymbench_spec")]


def test_there_are_specs_and_all_are_prefixed() -> None:
    specs = _specs()
    assert len(specs) >= 8
    assert all(fn.__name__.startswith("gymbench_") for fn in specs)


def test_every_spec_documents_each_parameter_and_its_return() -> None:
    for fn in _specs():
        doc = inspect.getdoc(fn) or ""
        assert len(doc.splitlines()[0]) > 10, f"{fn.__name__} has no summary line"
        for param in inspect.signature(fn).parameters:
            assert f":param {param}:" in doc, f"{fn.__name__} does not document {param!r}"
        assert ":return:" in doc, f"{fn.__name__} does not say what its return value means"


def test_no_other_module_declares_hook_specs() -> None:
    import pkgutil

    import gymbench

    for module_info in pkgutil.walk_packages(gymbench.__path__, "gymbench."):
        if module_info.name in {"gymbench.hookspecs", "gymbench.pytest.plugin", "gymbench.testing"}:
            continue
        module = __import__(module_info.name, fromlist=["_"])
        assert not any(hasattr(obj, "gymbench_spec") for obj in vars(module).values()), (
            f"{module_info.name} declares hook specs outside hookspecs.py"
        )
