"""The tiny random-weights model: a GGUF that reads back as llama.cpp's ``llama`` architecture expects."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gymbench.engine import model
from gymbench.errors import GymbenchError

gguf = pytest.importorskip("gguf", reason="the model writer needs gguf: pip install 'gymbench[engine]'")
pytest.importorskip("tokenizers", reason="the model writer needs tokenizers: pip install 'gymbench[engine]'")


def field_value(reader: gguf.GGUFReader, name: str) -> object:
    return reader.fields[name].contents()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> gguf.GGUFReader:
    path = model.cached_model("tiny", tmp_path_factory.mktemp("cache"))
    return gguf.GGUFReader(path)


def test_the_model_is_a_llama_of_the_tiny_size(tiny: gguf.GGUFReader) -> None:
    size = model.MODEL_SIZES["tiny"]
    assert field_value(tiny, "general.architecture") == "llama"
    assert field_value(tiny, "llama.block_count") == size.layers == 4
    assert field_value(tiny, "llama.embedding_length") == size.hidden == 256
    assert field_value(tiny, "llama.attention.head_count") == size.heads
    assert field_value(tiny, "llama.feed_forward_length") == size.ffn
    assert field_value(tiny, "llama.context_length") == 4096
    assert field_value(tiny, "llama.rope.dimension_count") == size.hidden // size.heads


def test_every_tensor_is_there_in_ggml_order(tiny: gguf.GGUFReader) -> None:
    size = model.MODEL_SIZES["tiny"]
    vocab = field_value(tiny, "llama.vocab_size")
    shapes = {t.name: [int(n) for n in t.shape] for t in tiny.tensors}
    assert len(shapes) == 3 + 9 * size.layers
    assert shapes["token_embd.weight"] == shapes["output.weight"] == [size.hidden, vocab]
    assert shapes["blk.3.ffn_gate.weight"] == [size.hidden, size.ffn]
    assert shapes["blk.3.ffn_down.weight"] == [size.ffn, size.hidden]
    assert shapes["blk.0.attn_norm.weight"] == [size.hidden]
    types = {t.name: t.tensor_type for t in tiny.tensors}
    assert types["blk.0.attn_q.weight"] == gguf.GGMLQuantizationType.F16
    assert types["output_norm.weight"] == gguf.GGMLQuantizationType.F32


def test_the_tokenizer_is_a_byte_level_bpe_with_chatml(tiny: gguf.GGUFReader) -> None:
    tokens = field_value(tiny, "tokenizer.ggml.tokens")
    assert isinstance(tokens, list) and 2000 <= len(tokens) <= 4000
    assert len(tokens) == field_value(tiny, "llama.vocab_size")
    assert field_value(tiny, "tokenizer.ggml.model") == "gpt2"
    assert tokens[field_value(tiny, "tokenizer.ggml.eos_token_id")] == "<|im_end|>"  # type: ignore[index]
    assert tokens[field_value(tiny, "tokenizer.ggml.bos_token_id")] == "<|endoftext|>"  # type: ignore[index]
    assert "Ċ" in tokens and "Ġthe" in tokens  # every byte (a newline), and learnt words
    merges = field_value(tiny, "tokenizer.ggml.merges")
    assert isinstance(merges, list) and len(merges) > 1000 and all(m.count(" ") == 1 for m in merges[:50])
    types = field_value(tiny, "tokenizer.ggml.token_type")
    assert types[tokens.index("<|im_start|>")] == 3 and types[tokens.index("Ġthe")] == 1  # type: ignore[index]
    assert "<|im_start|>" in str(field_value(tiny, "tokenizer.chat_template"))


def test_the_model_is_made_once_and_reused(tmp_path: Path) -> None:
    first = model.cached_model("tiny", tmp_path)
    stamp = first.stat().st_mtime_ns
    assert model.cached_model("tiny", tmp_path) == first and first.stat().st_mtime_ns == stamp
    assert first.parent == tmp_path / "models" and [p.name for p in first.parent.iterdir()] == [first.name]


def test_the_same_size_is_the_same_bytes(tmp_path: Path) -> None:
    size = model.ModelSize(layers=1, hidden=64, heads=2, ffn=128, context=256)
    a = model.write_model(tmp_path / "a.gguf", size)
    b = model.write_model(tmp_path / "b.gguf", size)
    assert a.read_bytes() == b.read_bytes()


def test_sizes_have_their_own_keys() -> None:
    keys = {model.model_key(size) for size in model.MODEL_SIZES.values()}
    assert len(keys) == len(model.MODEL_SIZES)


def test_an_unknown_size_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(GymbenchError, match="unknown model size 'huge'; expected one of: tiny, small"):
        model.cached_model("huge", tmp_path)
    assert not os.path.exists(tmp_path / "models")
