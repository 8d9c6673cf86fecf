"""oneDNN-prepacked linear weights for CPU decoding.

A decode step of a small model on CPU is a chain of skinny matmuls: a few rows (the batch) times
each weight matrix. `F.linear` hands them to a BLAS sgemm that re-packs the whole weight matrix
into its blocked layout on every call once there is more than one row; for SmolLM2-135M on the
2-core CPU this project is developed on, a step's weight matmuls cost 72 ms at 1 row but 144 ms at
8 rows (see `kit bench rollout`). oneDNN can pack each weight once
(`torch.ops.mkldnn._reorder_linear_weight`, what inductor's CPU freezing uses) and then runs
`_linear_pointwise` on the packed copy: 56 ms at 1 row, 84 ms at 8, so batching rows pays off.

`PackedLinears.use(model)` is a context manager: inside it, every `nn.Linear` of the model runs on
its packed weight when autograd is off and the input is a float CPU tensor; elsewhere (training,
GPU, other dtypes) the module's own forward runs. Packs belong to one set of weights: they are
rebuilt when `weights_key` changes (an optimizer step, `load_state_dict`), as the prefix KV store
is. The packed copies cost as much memory as the linear weights themselves, so `auto` packs only
models whose linear weights fit in `max_bytes`.

Results equal `F.linear` up to float rounding (another summation order: ~1e-6 relative). With `bf16`
(kit.llm.precision: a stage's `cpu_bf16` on a CPU with bf16 instructions) the packs are bfloat16 and
each call casts its input to bf16 and its output back to float32: half the weight bytes a decode step
reads, the bf16 dot-product instructions; results then carry bf16 rounding.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from kit.llm.fast.prefix_cache import weights_key


def available() -> bool:
    """True when this torch build has oneDNN's packed linear ops (x86 CPU wheels do)."""
    ops = getattr(torch.ops, "mkldnn", None)
    try:
        return bool(torch.backends.mkldnn.is_available() and ops is not None
                    and hasattr(ops, "_reorder_linear_weight") and hasattr(ops, "_linear_pointwise"))
    except (AttributeError, RuntimeError):
        return False


def linear_bytes(model: nn.Module) -> int:
    """Bytes of the weights of the model's nn.Linear modules (tied weights counted once)."""
    seen, total = set(), 0
    for mod in model.modules():
        if isinstance(mod, nn.Linear) and mod.weight.data_ptr() not in seen:
            seen.add(mod.weight.data_ptr())
            total += mod.weight.numel() * mod.weight.element_size()
    return total


class PackedLinears:
    """Packed copies of a CPU model's linear weights, used inside `use(model)` (see module doc)."""

    def __init__(self, max_bytes: int = 2 << 30, bf16: bool = False):
        self.max_bytes = max_bytes
        self.bf16 = bf16
        self._key: tuple | None = None
        self._packs: dict[nn.Linear, torch.Tensor] = {}
        self.packs_built = 0  # how many times the weights were (re)packed

    def supports(self, model: nn.Module) -> bool:
        param = next(model.parameters())
        return (available() and param.device.type == "cpu" and param.dtype == torch.float32
                and linear_bytes(model) <= self.max_bytes)

    def clear(self) -> None:
        self._key, self._packs = None, {}

    def _sync(self, model: nn.Module) -> None:
        key = weights_key(model)
        if key == self._key:
            return
        self._packs = {}
        with torch.no_grad():
            for mod in model.modules():
                if isinstance(mod, nn.Linear) and mod.weight.dtype == torch.float32:
                    w = mod.weight.detach()
                    self._packs[mod] = torch.ops.mkldnn._reorder_linear_weight(w.bfloat16() if self.bf16 else w)
        self._key = key
        self.packs_built += 1

    @contextlib.contextmanager
    def use(self, model: nn.Module) -> Iterator[None]:
        """Run the model's linears on packed weights inside the block (a no-op if unsupported)."""
        if not self.supports(model):
            yield
            return
        self._sync(model)
        patched = []
        try:
            for mod, packed in self._packs.items():
                mod.forward = _packed_forward(mod, packed, self.bf16)
                patched.append(mod)
            yield
        finally:
            for mod in patched:
                del mod.forward  # the class's forward again


def _packed_forward(mod: nn.Linear, packed: torch.Tensor, bf16: bool = False):
    bias = mod.bias.detach() if mod.bias is not None else None
    if bias is not None and bf16:
        bias = bias.bfloat16()

    def forward(x: torch.Tensor) -> Any:
        if torch.is_grad_enabled() or x.dtype != torch.float32 or x.device.type != "cpu":
            return F.linear(x, mod.weight, mod.bias)
        flat = x.reshape(-1, x.shape[-1])
        if bf16:
            flat = flat.to(torch.bfloat16)
        if not flat.is_contiguous():
            flat = flat.contiguous()
        out = torch.ops.mkldnn._linear_pointwise(flat, packed, bias, "none", [], "")
        if bf16:
            out = out.float()
        return out.reshape(*x.shape[:-1], out.shape[-1])

    return forward
