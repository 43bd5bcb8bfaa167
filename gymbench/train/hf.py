"""A Hugging Face causal LM as a benchmark model; registered only when ``transformers`` imports.

Built from a config (random weights, nothing downloaded): ``model_type`` (default ``llama``) plus
size fields. Its decoder layers become ``blocks`` so gradient checkpointing can wrap them.

Packed rows: a Hugging Face model given only ``input_ids`` attends causally across the whole row,
so the documents of a packed row would see each other (and take positions that run on from their
neighbours'). :meth:`HFCausalLM.token_logprobs` passes the block-diagonal mask as a 4-D
``attention_mask`` and the per-document ``position_ids``, which every model on transformers' shared
masking takes as given (tests/train/test_models.py checks llama, qwen2 and gpt2 against each
document alone).
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from gymbench.errors import GymbenchError
from gymbench.train.models import Batch

HF_SIZES = {
    "tiny": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 128},
    "small": {"hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4, "intermediate_size": 688},
}
BLOCK_PATHS = ("model.layers", "transformer.h", "gpt_neox.layers", "model.decoder.layers")


class HFCausalLM(nn.Module):
    def __init__(self, config: Mapping[str, Any]) -> None:
        super().__init__()
        from transformers import AutoConfig, AutoModelForCausalLM

        options = dict(config)
        model_type = str(options.pop("model_type", "llama"))
        size = str(options.pop("size", "tiny"))
        if size not in HF_SIZES:
            raise GymbenchError(f"unknown size {size!r} for hf-causal-lm; choose {', '.join(HF_SIZES)}")
        defaults = _default_config(model_type)
        fields = {"vocab_size": 1024, **HF_SIZES[size], **checked_options(model_type, defaults, options)}
        if hasattr(defaults, "num_key_value_heads"):
            # grouped-query models (qwen2, mistral, ...) default to their big model's KV heads (qwen2: 32),
            # which a small preset's head count does not divide: plain multi-head attention unless given
            fields.setdefault("num_key_value_heads", fields["num_attention_heads"])
        try:
            self.inner = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **fields))
        except (ValueError, TypeError, KeyError) as exc:
            reason = f"unknown value {exc.args[0]!r}" if isinstance(exc, KeyError) else str(exc).strip()
            raise GymbenchError(f"hf-causal-lm ({model_type}) rejects +model_options: {reason}") from None
        self.vocab = self.vocab_size = fields["vocab_size"]
        self.blocks = _decoder_layers(self.inner)

    def make_batch(self, batch_size: int, seq_len: int, generator: torch.Generator) -> Batch:
        tokens = torch.randint(0, self.vocab, (batch_size, seq_len), generator=generator)
        return tokens, tokens  # the model shifts labels itself

    def tokens_per_sample(self, seq_len: int) -> int:
        return seq_len

    def forward(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return self.inner(input_ids=inputs, labels=targets).loss

    def token_logprobs(
        self,
        tokens: torch.Tensor,
        targets: torch.Tensor,
        positions: torch.Tensor,
        attn_mask: torch.Tensor | None,
    ) -> torch.Tensor:
        """The packed row's mask and positions go to the model, so no document sees another."""
        logits = self.inner(input_ids=tokens, position_ids=positions, attention_mask=attn_mask).logits.float()
        picked = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none")
        return -picked.view(targets.shape)


def _default_config(model_type: str) -> Any:
    from transformers import AutoConfig

    try:
        return AutoConfig.for_model(model_type)
    except (ValueError, KeyError):
        raise GymbenchError(
            f"hf-causal-lm: unknown model_type {model_type!r}; use a type transformers knows (llama, qwen2, gpt2 ...)"
        ) from None


def checked_options(model_type: str, defaults: Any, options: Mapping[str, Any]) -> dict[str, Any]:
    """``+model_options.*`` checked against the model's own config class, before anything is built.

    A name the config does not have is a typo (the size stays the default otherwise, silently), and
    each value takes the type of the config's default: ``1e-5`` stays a float, ``gelu`` a string.
    """
    known = _config_fields(defaults)
    checked = {}
    for name, value in options.items():
        if name not in known:
            close = difflib.get_close_matches(name, list(known), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; see transformers' {type(defaults).__name__}"
            raise GymbenchError(f"+model_options.{name}: {model_type} models have no option {name!r}{hint}")
        checked[name] = _as_type_of(known[name], value, name)
    return checked


def _config_fields(defaults: Any) -> dict[str, Any]:
    """Every option of a config and its default (transformers 5 configs are dataclasses)."""
    known = dict(defaults.to_dict())
    if dataclasses.is_dataclass(defaults):
        known.update({f.name: getattr(defaults, f.name, None) for f in dataclasses.fields(defaults)})
    return known


def _as_type_of(default: Any, value: Any, name: str) -> Any:
    expected = type(default)
    if default is None or isinstance(value, expected) and not (expected is int and isinstance(value, bool)):
        return value
    try:
        if isinstance(default, bool):
            if str(value).lower() not in ("true", "false"):
                raise ValueError(value)
            return str(value).lower() == "true"
        if isinstance(default, int):
            number = float(value)
            if not number.is_integer():
                raise ValueError(value)
            return int(number)
        if isinstance(default, float):
            return float(value)
        if isinstance(default, str):
            return str(value)
    except (TypeError, ValueError):
        raise GymbenchError(
            f"+model_options.{name}: got {value!r}, expected {expected.__name__} (the default is {default!r})"
        ) from None
    return value


def _decoder_layers(model: nn.Module) -> nn.ModuleList:
    for path in BLOCK_PATHS:
        found: Any = model
        for part in path.split("."):
            found = getattr(found, part, None)
        if isinstance(found, nn.ModuleList):
            return found
    raise GymbenchError(f"cannot find the decoder layers of {type(model).__name__} (looked at {BLOCK_PATHS})")


def build_hf_causal_lm(config: Mapping[str, Any]) -> HFCausalLM:
    return HFCausalLM(config)
