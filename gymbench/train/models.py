"""The built-in benchmark models: a deep MLP and a small decoder-only transformer.

Both follow :class:`BenchModel`, the small contract the runner needs from any model a plugin
registers: repeated layers in ``blocks`` (what gradient checkpointing wraps), a synthetic batch,
and ``forward(inputs, targets) -> loss``. Shapes come from a size preset plus overrides, so a
benchmark names its model by configuration instead of by code.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, Protocol, TypeVar, runtime_checkable

import torch
import torch.nn.functional as F
from torch import nn

from gymbench.errors import GymbenchError

Batch = tuple[torch.Tensor, torch.Tensor]
ConfigT = TypeVar("ConfigT")


@runtime_checkable
class BenchModel(Protocol):
    """What the training-step runner needs from a model (an ``nn.Module`` that also has these)."""

    blocks: nn.ModuleList

    def make_batch(self, batch_size: int, seq_len: int, generator: torch.Generator) -> Batch:
        """Synthetic ``(inputs, targets)`` on the CPU; the runner moves them to the device."""
        ...

    def tokens_per_sample(self, seq_len: int) -> int: ...

    def __call__(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor: ...


@runtime_checkable
class SequenceModel(Protocol):
    """What variable-length steps and the RL step need on top: log-probabilities per position.

    ``positions`` restart at 0 for each sequence of a packed row; ``attn_mask`` is ``None`` for
    plain causal attention (padded rows) or a ``[rows, 1, L, L]`` bool mask (packed rows).
    """

    vocab_size: int

    def token_logprobs(
        self,
        tokens: torch.Tensor,
        targets: torch.Tensor,
        positions: torch.Tensor,
        attn_mask: torch.Tensor | None,
    ) -> torch.Tensor:
        """``[rows, L]`` float32 log-probability of each target token."""
        ...


def build_config(cls: type[ConfigT], presets: Mapping[str, ConfigT], config: Mapping[str, Any]) -> ConfigT:
    """A preset named by ``size`` with the other keys overriding its fields; typos are errors."""
    options = dict(config)
    size = str(options.pop("size", "small"))
    if size not in presets:
        raise GymbenchError(f"unknown model size {size!r}; choose one of {', '.join(presets)}")
    known = {f.name: f.type for f in fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise GymbenchError(f"unknown model option(s) {', '.join(unknown)}; {cls.__name__} takes {', '.join(known)}")
    try:
        return replace(presets[size], **{key: int(value) for key, value in options.items()})  # type: ignore[type-var]
    except (TypeError, ValueError) as exc:
        raise GymbenchError(f"model options must be integers: {exc}") from None


# --------------------------------------------------------------------------- deep MLP


@dataclass(frozen=True)
class MLPConfig:
    width: int = 512
    depth: int = 8
    classes: int = 64


MLP_SIZES = {
    "tiny": MLPConfig(width=64, depth=4, classes=16),
    "small": MLPConfig(width=512, depth=8, classes=64),
    "base": MLPConfig(width=1024, depth=16, classes=256),
}


class ResidualMLPBlock(nn.Module):
    """``x + W2·gelu(W1·x)``: residual so a deep stack still trains, 4× hidden like a transformer."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(F.gelu(self.up(self.norm(x))))


class DeepMLP(nn.Module):
    """Classification of random vectors; one sample counts as one token."""

    def __init__(self, config: MLPConfig) -> None:
        super().__init__()
        self.config = config
        self.blocks = nn.ModuleList(ResidualMLPBlock(config.width) for _ in range(config.depth))
        self.head = nn.Linear(config.width, config.classes)

    def make_batch(self, batch_size: int, seq_len: int, generator: torch.Generator) -> Batch:
        inputs = torch.randn(batch_size, self.config.width, generator=generator)
        targets = torch.randint(0, self.config.classes, (batch_size,), generator=generator)
        return inputs, targets

    def tokens_per_sample(self, seq_len: int) -> int:
        return 1

    def forward(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x = inputs
        for block in self.blocks:
            x = block(x)
        return F.cross_entropy(self.head(x).float(), targets)


# --------------------------------------------------------------------------- decoder-only transformer


@dataclass(frozen=True)
class TransformerConfig:
    vocab: int = 1024
    d_model: int = 256
    layers: int = 4
    heads: int = 4
    max_seq: int = 2048


TRANSFORMER_SIZES = {
    "tiny": TransformerConfig(vocab=128, d_model=32, layers=2, heads=2, max_seq=512),
    "small": TransformerConfig(vocab=1024, d_model=256, layers=4, heads=4, max_seq=2048),
    "base": TransformerConfig(vocab=8192, d_model=512, layers=8, heads=8, max_seq=4096),
}


class CausalSelfAttention(nn.Module):
    """Attention through ``scaled_dot_product_attention``, which picks the memory-efficient kernel."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        if config.d_model % config.heads:
            raise GymbenchError(f"d_model {config.d_model} is not divisible by heads {config.heads}")
        self.heads = config.heads
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model)
        self.out = nn.Linear(config.d_model, config.d_model)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        batch, seq, width = x.shape
        q, k, v = self.qkv(x).view(batch, seq, 3, self.heads, width // self.heads).permute(2, 0, 3, 1, 4)
        if attn_mask is None:
            attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            attended = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        return self.out(attended.transpose(1, 2).reshape(batch, seq, width))


class DecoderBlock(nn.Module):
    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(config.d_model)
        self.attention = CausalSelfAttention(config)
        self.norm2 = nn.LayerNorm(config.d_model)
        self.mlp = nn.Sequential(
            nn.Linear(config.d_model, 4 * config.d_model),
            nn.GELU(),
            nn.Linear(4 * config.d_model, config.d_model),
        )

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        x = x + self.attention(self.norm1(x), attn_mask)
        return x + self.mlp(self.norm2(x))


class TinyDecoder(nn.Module):
    """A GPT-style language model trained on random tokens (next-token loss)."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab, config.d_model)
        self.position = nn.Embedding(config.max_seq, config.d_model)
        self.blocks = nn.ModuleList(DecoderBlock(config) for _ in range(config.layers))
        self.norm = nn.LayerNorm(config.d_model)
        self.head = nn.Linear(config.d_model, config.vocab, bias=False)
        self.vocab_size = config.vocab

    def make_batch(self, batch_size: int, seq_len: int, generator: torch.Generator) -> Batch:
        if seq_len > self.config.max_seq:
            raise GymbenchError(f"seq_len {seq_len} exceeds the model's max_seq {self.config.max_seq}")
        tokens = torch.randint(0, self.config.vocab, (batch_size, seq_len + 1), generator=generator)
        return tokens[:, :-1], tokens[:, 1:]

    def tokens_per_sample(self, seq_len: int) -> int:
        return seq_len

    def logits(self, tokens: torch.Tensor, positions: torch.Tensor, attn_mask: torch.Tensor | None) -> torch.Tensor:
        if tokens.shape[1] > self.config.max_seq:
            raise GymbenchError(f"{tokens.shape[1]} tokens per row exceed the model's max_seq {self.config.max_seq}")
        x = self.embed(tokens) + self.position(positions)
        for block in self.blocks:
            x = block(x, attn_mask)
        return self.head(self.norm(x))

    def forward(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(inputs.shape[1], device=inputs.device)
        logits = self.logits(inputs, positions, None)
        return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())

    def token_logprobs(
        self,
        tokens: torch.Tensor,
        targets: torch.Tensor,
        positions: torch.Tensor,
        attn_mask: torch.Tensor | None,
    ) -> torch.Tensor:
        logits = self.logits(tokens, positions, attn_mask).float()
        picked = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none")
        return -picked.view(targets.shape)


def build_mlp(config: Mapping[str, Any]) -> DeepMLP:
    return DeepMLP(build_config(MLPConfig, MLP_SIZES, config))


def build_transformer(config: Mapping[str, Any]) -> TinyDecoder:
    return TinyDecoder(build_config(TransformerConfig, TRANSFORMER_SIZES, config))


def flop_parameter_count(model: nn.Module) -> int:
    """Parameters that take part in matrix multiplies: embeddings are lookups, so the 6·N rule skips
    them, unless a layer also multiplies by them (a head tied to the input embedding, as gpt2's)."""
    multiplied = {
        id(p) for m in model.modules() if not isinstance(m, nn.Embedding) for p in m.parameters(recurse=False)
    }
    embedded = {
        id(p): p.numel()
        for m in model.modules()
        if isinstance(m, nn.Embedding)
        for p in m.parameters()
        if id(p) not in multiplied
    }
    return sum(p.numel() for p in model.parameters()) - sum(embedded.values())
