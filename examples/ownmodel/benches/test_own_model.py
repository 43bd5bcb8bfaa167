"""Three ways to benchmark your own model's training step (each runs on a CPU in seconds)."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

SHAPES = {"batch": 4, "seq_len": 32, "steps": 3, "warmup": 1, "threads": 1}


def test_a_hugging_face_model_by_its_config(gymbench):
    # The built-in hf-causal-lm: any model_type transformers knows, sized by +model_options (checked
    # against the model's own config class: a typo or a wrong type stops the run with one line).
    result = gymbench.train_step(
        model="hf-causal-lm",
        size="tiny",
        model_options={"model_type": "llama", "num_hidden_layers": 2, "rms_norm_eps": 1e-5},
        **SHAPES,
    )
    assert result.step_time_s > 0


def test_your_own_factory_registered_in_conftest(gymbench):
    # my-llama comes from conftest.py's gymbench_register_models (my_model.build_my_llama).
    result = gymbench.train_step(model="my-llama", size="tiny", checkpointing="on", **SHAPES)
    assert result.tokens_per_s > 0


def test_the_largest_batch_of_your_model(gymbench):
    # Each trial and verification run is a fresh process (torch and transformers imported anew): one
    # verification run keeps the example quick; the default, 3, is what a real gate wants.
    result = gymbench.find_batch(
        model="my-llama", size="tiny", seq_len=32, max_batch=16, memory_budget_mib=256, verify_runs=1
    )
    assert result.chosen_batch >= 1
