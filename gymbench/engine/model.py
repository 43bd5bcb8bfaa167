"""A tiny Llama-architecture model with random weights, made here: no model hub, no download.

A real engine needs a model, and a benchmark of the engine's scheduling (continuous batching,
slots, prefill against decode) does not need one that says anything sensible. So the tokenizer is
a byte-level BPE trained on a small built-in text with ``tokenizers``, the weights come from numpy
with a fixed seed, and the file is written directly with the ``gguf`` package in the layout that
llama.cpp's ``llama`` architecture reads. The result is the same bytes on every machine for a
given size, and is cached beside the server binary (:func:`cached_model`).

Random weights give near-uniform next-token probabilities, so a reply ends at the end-of-sequence
token only by chance (about one token in the vocabulary's size); llama.cpp's ``"ignore_eos": true``
request field rules even that out where a test needs an exact length.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gymbench.errors import GymbenchError

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True)
class ModelSize:
    layers: int
    hidden: int
    heads: int
    ffn: int
    context: int = 4096
    vocab: int = 3000
    """The BPE's target vocabulary; the built-in text decides the exact size, a little below."""


MODEL_SIZES: dict[str, ModelSize] = {
    "tiny": ModelSize(layers=4, hidden=256, heads=4, ffn=688),
    "small": ModelSize(layers=8, hidden=512, heads=8, ffn=1376),
}
SEED = 20260423
FORMAT = 1
"""Bumped when what :func:`write_model` writes changes, so a cached model of the old layout is not reused."""

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
BOS, EOS = "<|endoftext|>", "<|im_end|>"
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
"""ChatML, which llama.cpp recognises by name as well as runs as a Jinja template."""

_WORDS = (
    "the a an of to in and or is are was were be been for on with as by at from that this it not no yes "
    "what which who when where why how many much more less most least first last next each every all some "
    "number numbers sum product difference quotient total answer question problem step steps solve find "
    "compute calculate value values equal equals plus minus times divided twice half third quarter "
    "one two three four five six seven eight nine ten eleven twelve twenty thirty hundred thousand million "
    "apple apples orange bananas books pages students teacher class school store price cost dollars cents "
    "hours minutes seconds days weeks months years speed distance miles meters train car bus walk run "
    "buys sells gives takes has have had left remaining more than fewer than each per every together "
    "model server request response token tokens batch slot queue prompt reply chat user assistant system "
    "think reason check verify because therefore so then if else while until after before during"
).split()
_PUNCTUATION = (".", ",", "?", "!", ":", ";", " =", " +", " -", " *", " /", "\n")


def corpus(size: int = 60_000) -> list[str]:
    """The built-in training text: seeded sentences of plain words, numbers and arithmetic, so the
    BPE learns whole words and digits (prompts of the built-in tasks tokenize to sensible lengths)."""
    import random

    rng = random.Random(SEED)
    lines, length = [], 0
    while length < size:
        words = [rng.choice(_WORDS) if rng.random() < 0.8 else str(rng.randint(0, 9999)) for _ in range(12)]
        line = " ".join(words).capitalize() + rng.choice(_PUNCTUATION)
        lines.append(line)
        length += len(line)
    return lines


def train_tokenizer(vocab: int) -> tuple[list[str], list[int], list[str]]:
    """Tokens, their GGUF types (1 normal, 3 control) and merges of a byte-level BPE."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus(), trainer=trainer)
    by_id = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    tokens = [token for token, _ in by_id]
    types = [3 if token in SPECIAL_TOKENS else 1 for token in tokens]
    merges = json.loads(tokenizer.to_str())["model"]["merges"]
    return tokens, types, [m if isinstance(m, str) else " ".join(m) for m in merges]


def _weights(size: ModelSize, vocab: int) -> dict[str, np.ndarray]:
    """Tensors by GGUF name, numpy shapes (out, in): ``gguf`` reverses them into ggml's order."""
    import numpy as np

    rng = np.random.default_rng(SEED)

    def matrix(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float16)

    h, f = size.hidden, size.ffn
    tensors = {"token_embd.weight": matrix(vocab, h), "output_norm.weight": np.ones(h, dtype=np.float32)}
    for i in range(size.layers):
        tensors |= {
            f"blk.{i}.attn_norm.weight": np.ones(h, dtype=np.float32),
            f"blk.{i}.attn_q.weight": matrix(h, h),
            f"blk.{i}.attn_k.weight": matrix(h, h),
            f"blk.{i}.attn_v.weight": matrix(h, h),
            f"blk.{i}.attn_output.weight": matrix(h, h),
            f"blk.{i}.ffn_norm.weight": np.ones(h, dtype=np.float32),
            f"blk.{i}.ffn_gate.weight": matrix(f, h),
            f"blk.{i}.ffn_up.weight": matrix(f, h),
            f"blk.{i}.ffn_down.weight": matrix(h, f),
        }
    tensors["output.weight"] = matrix(vocab, h)
    return tensors


def write_model(path: Path, size: ModelSize, name: str = "gymbench-tiny") -> Path:
    """Write the model to ``path`` (a GGUF file, F16 matrices and F32 norms)."""
    import gguf

    tokens, types, merges = train_tokenizer(size.vocab)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(name)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_context_length(size.context)
    writer.add_embedding_length(size.hidden)
    writer.add_block_count(size.layers)
    writer.add_feed_forward_length(size.ffn)
    writer.add_head_count(size.heads)
    writer.add_head_count_kv(size.heads)
    writer.add_rope_dimension_count(size.hidden // size.heads)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(len(tokens))
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(tokens.index(BOS))
    writer.add_eos_token_id(tokens.index(EOS))
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHATML_TEMPLATE)
    for tensor_name, array in _weights(size, len(tokens)).items():
        writer.add_tensor(tensor_name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def model_key(size: ModelSize) -> str:
    """The cache name's hash: every size parameter, the seed and the layout version."""
    spec = json.dumps({**asdict(size), "seed": SEED, "format": FORMAT}, sort_keys=True)
    return hashlib.sha256(spec.encode()).hexdigest()[:12]


def cached_model(size_name: str, cache_root: Path) -> Path:
    """The model of this size under ``cache_root/models/``, written there the first time (whole or
    not at all, so a half-written file is never taken for a model)."""
    if size_name not in MODEL_SIZES:
        raise GymbenchError(f"unknown model size {size_name!r}; expected one of: {', '.join(MODEL_SIZES)}")
    size = MODEL_SIZES[size_name]
    path = cache_root / "models" / f"gymbench-{size_name}-{model_key(size)}.gguf"
    if path.is_file():
        return path
    _require_model_packages()
    from gymbench.jsonio import AtomicFile

    with AtomicFile(path, then="; set XDG_CACHE_HOME to a writable folder") as out:
        write_model(out.temporary, size, name=f"gymbench-{size_name}")  # by path: gguf opens it itself
        os.chmod(out.temporary, 0o644)  # a model, like any file written here (mkstemp makes it 0600)
    return path


def _require_model_packages() -> None:
    import importlib.util

    missing = [name for name in ("tokenizers", "gguf") if importlib.util.find_spec(name) is None]
    if missing:
        raise GymbenchError(
            f"making the engine's model needs {' and '.join(missing)}; install them: pip install 'gymbench[engine]'"
        )
