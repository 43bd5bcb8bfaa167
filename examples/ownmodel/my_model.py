"""Your own policy model, as gymbench's training-step benchmarks need it.

A tiny Hugging Face Llama with random weights (nothing downloaded), wrapped in the small contract
``gymbench.train.models.BenchModel`` asks for: the repeated layers in ``blocks`` (what gradient
checkpointing wraps), ``make_batch``, ``tokens_per_sample`` and ``forward(inputs, targets) -> loss``.
Put your real model's construction in ``build_my_llama``: gymbench calls it with the settings'
``size`` and ``+model_options``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

SIZES = {
    "tiny": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128},
    "small": {"hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 8, "intermediate_size": 688},
}


class MyLlama(nn.Module):
    def __init__(self, size: str, options: Mapping[str, Any]) -> None:
        super().__init__()
        from transformers import LlamaConfig, LlamaForCausalLM

        config = LlamaConfig(vocab_size=512, **{**SIZES[size], **options})
        self.inner = LlamaForCausalLM(config)
        self.blocks = self.inner.model.layers
        self.vocab = config.vocab_size

    def make_batch(
        self, batch_size: int, seq_len: int, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        tokens = torch.randint(0, self.vocab, (batch_size, seq_len), generator=generator)
        return tokens, tokens  # the model shifts the labels itself

    def tokens_per_sample(self, seq_len: int) -> int:
        return seq_len

    def forward(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return self.inner(input_ids=inputs, labels=targets).loss


def build_my_llama(config: Mapping[str, Any]) -> MyLlama:
    """The factory gymbench calls (module-level, so it pickles to the memory pass's subprocess)."""
    options = dict(config)
    return MyLlama(str(options.pop("size", "tiny")), options)
