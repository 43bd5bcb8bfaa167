"""FLOPs per training step: model FLOPs (for MFU) and hardware FLOPs (what actually ran).

Counted by ``FlopCounterMode`` on real steps. Two counts, as the PaLM paper defines MFU (its
appendix B: 6·N + 12·L·H·Q·T FLOPs per token, attention counted in full):

- **model** FLOPs: what the model needs for the real tokens, with no recompute of any kind.
  Checkpointing's recompute is switched off while counting, and the attention kernels' backward,
  which torch counts as five matmuls because flash-style kernels recompute ``Q·Kᵀ``, counts as the
  four the gradients need. Pad slots count nothing.
- **hardware** FLOPs: the step as run, recompute and pad slots included.

``FlopCounterMode`` knows the CUDA attention kernels but not the CPU one
(``_scaled_dot_product_flash_attention_for_cpu``), so on the CPU attention would count 0 FLOPs; we
map it to torch's own SDPA formulas. Like torch, causal attention counts as full attention.

Variable-length steps process different shapes each step, so a count is kept as rates: dense
(matmul) FLOPs per token slot and attention FLOPs per attention pair (query x key position), which
turn any step's :class:`~gymbench.train.packing.StepCount` into its FLOPs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.utils import flop_counter
from torch.utils.flop_counter import FlopCounterMode

from gymbench.train.checkpointing import recompute_disabled
from gymbench.train.models import flop_parameter_count
from gymbench.train.packing import StepCount
from gymbench.train.session import TrainSession

aten = torch.ops.aten
BACKWARD_MATMULS_NEEDED = (4, 5)
"""Of the five matmuls torch counts for an attention backward, the gradients need four."""
DENSE_FLOPS_PER_PARAMETER = {"lm": 6, "rl": 10}
"""Per token and parameter: forward 2 + backward 4; the RL step adds two forward-only passes."""

# Peak dense tensor-core throughput (FLOP/s) from the vendors' data sheets, by precision, keyed by
# the exact name torch reports (less "NVIDIA "), so one part is never taken for another: an H100
# PCIe or NVL is not an SXM, an L4 is not an L40, an A10G (AWS's part, no NVIDIA data sheet) is not
# an A10. fp32 is left out on purpose: it depends on whether TF32 is enabled. Pass --peak-tflops for
# anything else.
H100_SXM = {"bf16": 989e12, "fp16": 989e12}
H100_PCIE = {"bf16": 756e12, "fp16": 756e12}
H100_NVL = {"bf16": 835e12, "fp16": 835e12}
A100 = {"bf16": 312e12, "fp16": 312e12}
KNOWN_PEAKS = {
    "H200": H100_SXM,
    "H200 NVL": H100_NVL,
    "H100 80GB HBM3": H100_SXM,
    "H100 PCIe": H100_PCIE,
    "H100 NVL": H100_NVL,
    "A100-SXM4-40GB": A100,
    "A100-SXM4-80GB": A100,
    "A100-PCIE-40GB": A100,
    "A100 80GB PCIe": A100,
    "L40S": {"bf16": 362e12, "fp16": 362e12},
    "L40": {"bf16": 181e12, "fp16": 181e12},
    "L4": {"bf16": 121e12, "fp16": 121e12},
    "A10": {"bf16": 125e12, "fp16": 125e12},
}


def known_peak(device_name: str, precision: str) -> tuple[float | None, str]:
    """The data-sheet peak of exactly this part, and where it came from; ``None`` with the reason."""
    name = device_name.strip()
    name = name.removeprefix("NVIDIA ").strip()
    peaks = KNOWN_PEAKS.get(name)
    if peaks is None:
        return None, f"no known peak for {device_name!r} (gymbench knows {', '.join(KNOWN_PEAKS)}); pass --peak-tflops"
    if precision not in peaks:
        return None, f"no known {precision} peak for {device_name!r}; pass --peak-tflops"
    return peaks[precision], f"data sheet of {name} ({precision})"


def _cpu_sdpa(query: Any, key: Any, value: Any, *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
    return flop_counter.sdpa_flop_count(query, key, value)


def _cpu_sdpa_backward(
    grad_out: Any, query: Any, key: Any, value: Any, *args: Any, out_shape: Any = None, **kwargs: Any
) -> int:
    return flop_counter.sdpa_backward_flop_count(grad_out, query, key, value)


CPU_ATTENTION = {
    aten._scaled_dot_product_flash_attention_for_cpu: _cpu_sdpa,
    aten._scaled_dot_product_flash_attention_for_cpu_backward: _cpu_sdpa_backward,
}
ATTENTION_FORWARD = (
    aten._scaled_dot_product_flash_attention_for_cpu,
    aten._scaled_dot_product_efficient_attention,
    aten._scaled_dot_product_flash_attention,
    aten._scaled_dot_product_cudnn_attention,
    aten._flash_attention_forward,
    aten._efficient_attention_forward,
)
ATTENTION_BACKWARD = (
    aten._scaled_dot_product_flash_attention_for_cpu_backward,
    aten._scaled_dot_product_efficient_attention_backward,
    aten._scaled_dot_product_flash_attention_backward,
    aten._scaled_dot_product_cudnn_attention_backward,
    aten._flash_attention_backward,
    aten._efficient_attention_backward,
)


def _without_recompute(formula: Any, *, raw: bool) -> Any:
    needed, counted = BACKWARD_MATMULS_NEEDED

    def model_flops(*args: Any, **kwargs: Any) -> int:
        return formula(*args, **kwargs) * needed // counted

    model_flops._get_raw = raw  # type: ignore[attr-defined]  # torch's registry entries take tensors
    return model_flops


def flop_mappings(attention: bool = True) -> tuple[dict[Any, Any], dict[Any, Any]]:
    """Custom formulas for the hardware count and for the model count."""
    hardware: dict[Any, Any] = dict(CPU_ATTENTION) if attention else {}
    model = dict(hardware)
    for op in ATTENTION_BACKWARD:
        if op in hardware:
            model[op] = _without_recompute(hardware[op], raw=False)
        elif op in flop_counter.flop_registry:
            model[op] = _without_recompute(flop_counter.flop_registry[op], raw=True)
    return hardware, model


@dataclass(frozen=True)
class FlopRates:
    """FLOPs per dense token slot and per attention pair, from one counted step."""

    dense_per_slot: float
    attention_per_pair: float

    def of(self, tokens: int, pairs: int) -> float:
        return self.dense_per_slot * tokens + self.attention_per_pair * pairs


@dataclass(frozen=True)
class FlopReport:
    model: FlopRates
    hardware: FlopRates
    parameters: int
    """Parameters in matrix multiplies (embeddings excluded), for the 6·N rule."""
    step: str
    attention_counted: bool

    def model_flops(self, count: StepCount) -> float:
        return self.model.of(count.tokens, count.real_pairs)

    def hardware_flops(self, count: StepCount) -> float:
        return self.hardware.of(count.slots, count.computed_pairs)

    @property
    def rule(self) -> str:
        return f"{DENSE_FLOPS_PER_PARAMETER[self.step]}·N·tokens"

    def ratio_to_rule(self, count: StepCount) -> float:
        expected = DENSE_FLOPS_PER_PARAMETER[self.step] * self.parameters * count.tokens
        return self.model_flops(count) / expected if expected else float("nan")


def count_flops(session: TrainSession, *, attention: bool = True) -> FlopReport:
    """Count by running two real steps (they update the weights, like warm-up steps)."""
    hardware_map, model_map = flop_mappings(attention)
    hardware = _rates(session, hardware_map)
    with recompute_disabled():
        model = _rates(session, model_map)
    return FlopReport(model, hardware, flop_parameter_count(session.model), session.config.step, attention)


def _rates(session: TrainSession, mapping: dict[Any, Any]) -> FlopRates:
    with FlopCounterMode(display=False, custom_mapping=mapping) as counter:
        session.step()
    by_op = counter.get_flop_counts().get("Global", {})
    attention = sum(flops for op, flops in by_op.items() if op in ATTENTION_FORWARD or op in ATTENTION_BACKWARD)
    dense = sum(by_op.values()) - attention
    count = session.last_count
    return FlopRates(dense / max(count.slots, 1), attention / max(count.computed_pairs, 1))


def device_peak_flops(session: TrainSession, given_tflops: float | None) -> tuple[float | None, str]:
    """The peak MFU divides by, and where it came from; ``None`` with the reason when unknown."""
    if given_tflops is not None:
        return given_tflops * 1e12, "given"
    if session.device.type != "cuda":
        return None, "no known peak for a CPU; pass --peak-tflops to get MFU"
    return known_peak(torch.cuda.get_device_name(session.device), session.config.precision)


def flop_rate_text(flops_per_s: float) -> str:
    """TFLOP/s, or GFLOP/s (MFLOP/s) where TFLOP/s would round to 0.000."""
    for scale, unit in ((1e12, "TFLOP/s"), (1e9, "GFLOP/s")):
        if flops_per_s >= scale * 0.1:
            return f"{flops_per_s / scale:.3g} {unit}"
    return f"{flops_per_s / 1e6:.3g} MFLOP/s"
