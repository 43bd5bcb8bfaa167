"""The training-step room's plugin: the built-in models and the ``gymbench train`` command.

Imported by ``get_plugin_manager()`` for every CLI call, so it imports no torch: factories and the
command import their modules when called (the command's settings schema too: only ``train --help``
and ``train`` itself need it). The built-in models register through
``gymbench_register_models``, the same hook a third-party plugin implements.
"""

from __future__ import annotations

import argparse
import importlib.util
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gymbench.hookspecs import hookimpl
from gymbench.types import Command, Component

if TYPE_CHECKING:
    from gymbench.plugins import Plugins

HELP = (
    "benchmark training steps (LM or NeMo RL's GRPO policy step; precision, checkpointing, accumulation, "
    "variable lengths and packing, memory, FLOPs) or find the largest batch"
)


def build_mlp(config: Mapping[str, Any]) -> Any:
    from gymbench.train import models

    return models.build_mlp(config)


def build_transformer(config: Mapping[str, Any]) -> Any:
    from gymbench.train import models

    return models.build_transformer(config)


def build_hf_causal_lm(config: Mapping[str, Any]) -> Any:
    from gymbench.train import hf

    return hf.build_hf_causal_lm(config)


@hookimpl
def gymbench_register_models() -> list[Component]:
    models = [
        Component("mlp", build_mlp, "deep residual MLP (sizes tiny/small/base; width, depth, classes)"),
        Component(
            "transformer",
            build_transformer,
            "decoder-only transformer with SDPA attention (sizes tiny/small/base; vocab, d_model, layers, heads)",
        ),
    ]
    if importlib.util.find_spec("transformers") is not None:
        models.append(Component("hf-causal-lm", build_hf_causal_lm, "a Hugging Face causal LM from its config"))
    return models


def _configure_train(parser: argparse.ArgumentParser) -> None:
    from gymbench.train import command

    command.configure(parser)


def _run_train(args: argparse.Namespace, plugins: Plugins) -> int:
    from gymbench.train import command

    return command.run(args, plugins)


@hookimpl
def gymbench_register_commands() -> list[Command]:
    return [Command("train", HELP, _configure_train, _run_train)]
