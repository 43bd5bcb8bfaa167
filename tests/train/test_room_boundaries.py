"""The training bench's plugin module must not import torch (it loads on every gymbench call).

Room boundaries for every room are tested in tests/core/test_room_boundaries.py.
"""

from __future__ import annotations

import ast
from pathlib import Path

import gymbench.train


def test_the_plugin_module_imports_no_torch_at_module_level() -> None:
    tree = ast.parse((Path(gymbench.train.__file__).parent / "plugin.py").read_text())
    top_level = {alias.name for node in tree.body if isinstance(node, ast.Import) for alias in node.names}
    top_level |= {node.module or "" for node in tree.body if isinstance(node, ast.ImportFrom)}
    assert not any(name.split(".")[0] == "torch" for name in top_level)
    assert not any(name.startswith("gymbench.train.") for name in top_level)
