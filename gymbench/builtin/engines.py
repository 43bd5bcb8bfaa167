"""The built-in engines' metric names: vLLM (v0 and v1), SGLang, llama.cpp and TGI.

Registered through ``gymbench_register_engine_metrics`` exactly as a third party's engine is. The
names come from each engine's own documentation and source (vLLM's metrics design note, SGLang's
production-metrics page and its metrics collector, llama.cpp's ``server-task.cpp`` ``to_metrics``,
TGI's metrics reference), cross-checked with AIPerf's server-metrics reference.
"""

from __future__ import annotations

from gymbench.engine_metrics import EngineMetrics
from gymbench.hookspecs import hookimpl

VLLM = EngineMetrics(
    "vllm",
    "vllm:",
    running=("vllm:num_requests_running",),
    waiting=("vllm:num_requests_waiting",),
    kv_cache=("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),  # v1's name, then v0's
    generated_tokens=("vllm:generation_tokens_total",),
    prompt_tokens=("vllm:prompt_tokens_total",),
    ttft_seconds=("vllm:time_to_first_token_seconds",),
    description="vLLM, v0 and v1 names (the simulator serves these); token counters advance every step",
)

SGLANG = EngineMetrics(
    "sglang",
    "sglang:",
    running=("sglang:num_running_reqs",),
    waiting=("sglang:num_queue_reqs",),
    kv_cache=("sglang:token_usage",),
    generated_tokens=("sglang:generation_tokens_total",),
    prompt_tokens=("sglang:prompt_tokens_total",),
    ttft_seconds=("sglang:time_to_first_token_seconds",),
    tokens_counted_at_finish=True,
    description="SGLang (--enable-metrics); token counters advance when a request finishes",
)

LLAMACPP = EngineMetrics(
    "llamacpp",
    "llamacpp:",
    running=("llamacpp:requests_processing",),
    waiting=("llamacpp:requests_deferred",),
    kv_cache=("llamacpp:kv_cache_usage_ratio",),  # older builds only; current ones expose no KV gauge
    generated_tokens=("llamacpp:tokens_predicted_total",),
    prompt_tokens=("llamacpp:prompt_tokens_total",),
    tokens_counted_at_finish=True,
    description="llama.cpp's llama-server (--metrics); tokens counted when a slot is released",
)

TGI = EngineMetrics(
    "tgi",
    "tgi_",
    running=("tgi_batch_current_size",),
    waiting=("tgi_queue_size",),
    generated_tokens=("tgi_request_generated_tokens_sum",),  # a per-request histogram
    prompt_tokens=("tgi_request_input_length_sum",),
    tokens_counted_at_finish=True,
    description="Hugging Face TGI; token counts are per-request histograms, observed when a request ends",
)

BUILTIN_ENGINES = (VLLM, SGLANG, LLAMACPP, TGI)


@hookimpl
def gymbench_register_engine_metrics() -> list[EngineMetrics]:
    return list(BUILTIN_ENGINES)
