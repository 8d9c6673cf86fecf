"""bfloat16 compute on a CPU that has bf16 instructions, with float32 weights kept as they are.

A stage with `cpu_bf16: true` (kit/stages/base.py) sets $KIT_CPU_BF16 for its kernel; then, where the
CPU can (AVX512-BF16 or AMX: `supported()`):

- sampling (kit.llm.fast.packed_linear): the linear layers run on bf16 packed copies of the weights
  (inputs cast to bf16, outputs back to float32; norms, attention and the KV cache stay float32);
- training (SFT, GRPO's update: `autocast(model)`): forward passes under `torch.autocast("cpu",
  bfloat16)` with float32 master weights and optimizer states (mixed precision, as on a GPU).

Measured on the 2-core AMD EPYC (AVX512-BF16) this project is developed on, SmolLM2-135M: a training
step on 2 x 1024 tokens 13-16 s float32, 8-9 s under autocast; the linears of a decode step 1.5-1.7x
faster (see `kit bench rollout --arms kit,kit-bf16`). Results differ from float32 by bf16 rounding
(~3 significant digits per matmul), as on a GPU: greedy decodes can take another token where two are
nearly tied. Off by default; the CPU recipes turn it on.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator
from typing import Any

ENV = "KIT_CPU_BF16"  # set by a stage's `cpu_bf16` (kit/runner/stage.py); read here


@functools.cache
def supported() -> bool:
    """True when this CPU runs bf16 matmuls natively (oneDNN's check: AVX512-BF16 or AMX)."""
    import torch

    try:
        return bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def requested() -> bool:
    """Whether the running stage asked for bf16 CPU compute ($KIT_CPU_BF16)."""
    return os.environ.get(ENV, "").strip().lower() in ("1", "true", "yes", "on")


def enabled(flag: bool | None = None) -> bool:
    """bf16 CPU compute on: `flag` (None: $KIT_CPU_BF16) and the CPU supports it."""
    return bool(requested() if flag is None else flag) and supported()


def describe(flag: bool | None = None) -> str:
    """One line for a stage's log: what `cpu_bf16` does here."""
    if not (requested() if flag is None else flag):
        return "cpu_bf16 off: float32 compute"
    if not supported():
        return "cpu_bf16 requested, but this CPU has no bf16 instructions (AVX512-BF16 / AMX): float32 compute"
    return "cpu_bf16 on: bf16 matmuls (float32 weights; training under autocast)"


@contextlib.contextmanager
def autocast(model: Any, flag: bool | None = None) -> Iterator[None]:
    """Forward passes inside run under bf16 autocast when `enabled(flag)` and the model is a float32
    model on the CPU; otherwise nothing changes. Backward passes may run outside it."""
    import torch

    param = next(model.parameters(), None)
    if param is None or param.device.type != "cpu" or param.dtype != torch.float32 or not enabled(flag):
        yield
        return
    with torch.autocast("cpu", dtype=torch.bfloat16):
        yield
