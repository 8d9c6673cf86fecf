"""A key/value cache for a batch of rows of different lengths, written in place.

transformers' `DynamicCache` keeps one [batch, heads, length, head_dim] tensor per layer and grows it
with `torch.cat` at every step: each decoded token copies the whole cache (batch x length), and rows
of different lengths must be padded to a common layout. `RowCache` instead preallocates one buffer
per layer, [rows, kv_heads, capacity, head_dim], where row r keeps its own tokens in slots
0..len_r-1, and every forward pass writes its new keys/values at per-row slots. So:

* the position of a token is its slot: no padding sits between a row's tokens, rows simply end at
  different slots (unused slots are masked out and hold zeros or stale finite values);
* a forward pass writes each new token at the slot the caller planned for it: a row's real tokens
  continue its sequence; a row with fewer new tokens than the pass is padded, and its pad tokens
  are written past the row's end, where later writes overwrite them and the mask never lets a real
  token see them;
* a pass covers a contiguous range of buffer rows; decoding covers the first `active` ones: a
  finished row is replaced by the last active row (`drop`), so finished rows cost nothing, and the
  attention reads a view `buffer[first:first + n, :, :span]` (no gather, no copy).

The caller (kit.llm.fast.generate) plans each pass with `plan(slots, first)` and passes the matching
4-D mask (`mask(...)`) and the slots as position ids to the model; the model's attention calls
`update`, as with any transformers cache. Only full-attention layers are handled (see `supports`).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer


def supports(model: Any) -> bool:
    """True for decoder-only models whose every layer is plain full attention (Llama, Qwen2, Mistral
    without sliding window...) and whose attention takes an explicit 4-D mask (sdpa or eager)."""
    config = model.config.get_text_config(decoder=True)
    if getattr(config, "is_encoder_decoder", False):
        return False
    if getattr(model.config, "_attn_implementation", None) not in ("sdpa", "eager"):
        return False
    try:
        layers = DynamicCache(config=config).layers
    except Exception:  # noqa: BLE001 -- a config transformers cannot build a cache for
        return False
    return bool(layers) and all(type(layer) is DynamicLayer for layer in layers)


def kv_shape(model: Any) -> tuple[int, int, int]:
    """(layers, kv_heads, head_dim) of the model's attention."""
    config = model.config.get_text_config(decoder=True)
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return config.num_hidden_layers, kv_heads, head_dim


class _RowLayer:
    """One layer's buffers; `RowCache.update` writes into them."""

    is_sliding = False
    is_compileable = False
    is_initialized = True
    supports_early_init = True

    def __init__(self, keys: torch.Tensor, values: torch.Tensor):
        self.keys, self.values = keys, values

    def get_seq_length(self) -> int:
        return self.keys.shape[-2]

    def get_max_length(self) -> int:
        return -1


class RowCache(Cache):
    """Per-row-length KV buffers for `rows` sequences of up to `capacity` tokens (see module doc)."""

    def __init__(self, model: Any, rows: int, capacity: int):
        n_layers, kv_heads, head_dim = kv_shape(model)
        param = next(model.parameters())
        shape = (rows, kv_heads, capacity, head_dim)
        # zeros, not empty: a masked slot still enters attention as weight 0 x value, and 0 x NaN is NaN
        layers = [
            _RowLayer(torch.zeros(shape, dtype=param.dtype, device=param.device),
                      torch.zeros(shape, dtype=param.dtype, device=param.device))
            for _ in range(n_layers)
        ]
        super().__init__(layers=layers)
        self.capacity = capacity
        self.rows = rows
        self.active = rows
        self.order = list(range(rows))  # order[i]: the caller's row held in buffer row i
        self._slots: torch.Tensor | None = None
        self._first = 0
        self._span = 0

    # -- filling ------------------------------------------------------------------------------
    def load(self, row: int, kv: list[tuple[torch.Tensor, torch.Tensor]], length: int) -> None:
        """Copy the first `length` tokens of batch-1 states `kv` (per layer keys, values) into `row`."""
        for layer, (k, v) in zip(self.layers, kv):
            layer.keys[row, :, :length].copy_(k[0, :, :length])
            layer.values[row, :, :length].copy_(v[0, :, :length])

    def export(self, row: int, length: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Batch-1 copies of the first `length` slots of buffer row `row` (for the prefix store)."""
        return [(layer.keys[row : row + 1, :, :length].clone(), layer.values[row : row + 1, :, :length].clone())
                for layer in self.layers]

    # -- stepping -----------------------------------------------------------------------------
    def plan(self, slots: torch.Tensor, first: int = 0) -> None:
        """Where the next forward pass writes: slots[i, j] for token j of buffer row first + i."""
        self._slots, self._first = slots, first
        self._span = int(slots.max()) + 1

    def mask(self, slots: torch.Tensor, dtype: torch.dtype, eager: bool) -> torch.Tensor:
        """Causal mask over slots: a token at slot s sees its row's slots 0..s; [rows, 1, q, span]."""
        keys = torch.arange(int(slots.max()) + 1, device=slots.device)
        allowed = keys[None, None, :] <= slots[:, :, None]
        if not eager:  # sdpa takes a boolean mask
            return allowed[:, None]
        return torch.zeros(allowed.shape, dtype=dtype, device=slots.device).masked_fill_(
            ~allowed, torch.finfo(dtype).min)[:, None]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        layer, slots, first = self.layers[layer_idx], self._slots, self._first
        n = slots.shape[0]
        rows = torch.arange(first, first + n, device=slots.device)[:, None]
        # advanced indices on dims 0 and 2 go first: the target is [n, q, kv_heads, head_dim]
        layer.keys[rows, :, slots] = key_states.transpose(1, 2)
        layer.values[rows, :, slots] = value_states.transpose(1, 2)
        return layer.keys[first : first + n, :, : self._span], layer.values[first : first + n, :, : self._span]

    def drop(self, i: int, span: int) -> None:
        """Take active buffer row `i` out of the batch (export it first if it is wanted): the last
        active row moves into its place. `span`: how many slots of the last row hold its tokens."""
        last = self.active - 1
        if i != last:
            for layer in self.layers:
                layer.keys[i, :, :span].copy_(layer.keys[last, :, :span])
                layer.values[i, :, :span].copy_(layer.values[last, :, :span])
            self.order[i] = self.order[last]
        self.order.pop()
        self.active = last

    # -- what transformers asks of a cache ----------------------------------------------------
    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self._span

    def get_mask_sizes(self, query_length: int, layer_idx: int = 0) -> tuple[int, int]:
        return self._span, 0

    def get_max_length(self, layer_idx: int | None = None) -> int:
        return self.capacity
