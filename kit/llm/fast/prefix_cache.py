"""Prefix KV caching for HFBackend: never prefill the same tokens twice.

Multi-turn rollouts re-render the whole conversation every turn: turn t+1's prompt is turn t's
prompt, its completion and a few new messages; and every row of a group starts with the same
system prompt (policy + tool schemas). On CPU, prefill would dominate. `PrefixKVCache` is an LRU
store of batch-1 key/value states keyed by their token sequence:

* `put(ids, kv)` stores the states of a finished row (prompt + completion) or of a shared prefix;
  stored entries that are a prefix of `ids` are dropped, since the new entry holds them;
* `match(ids)` finds the entry sharing the longest token prefix with `ids` (at least `min_tokens`)
  and `get` hands out views of its first n positions, so a new prompt prefills only its tail;
* `lookup(model, ids)` returns states for exactly `ids`, reusing the best entry and running one
  forward pass over the missing tokens (used to prefill a prefix common to a whole batch once).

Size is bounded by `max_entries` and `max_bytes` (least recently used entries go first). Stored
tensors are never written to: callers copy them into their own cache (kit.llm.fast.row_cache).

Staleness: entries belong to one set of weights. `weights_key` (model identity, parameter count,
storage pointers and the sum of the parameters' autograd version counters) is checked by
`sync(model)` (called by `match` and `lookup`) and the whole store is dropped when it changed;
in-place optimizer steps and `load_state_dict` bump the version counters. Writes through
`param.data` do not, so a trainer that updates weights that way must call `HFBackend.invalidate()`
(HFBackend also clears the store when it is called while the model is in training mode).

Only models whose cache is plain full-attention `DynamicLayer`s (Llama, Qwen2, Mistral without
sliding window...) are served; for others `lookup` returns None once and the backend falls back.
"""

from __future__ import annotations

import inspect
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

KV = list  # per layer: (keys, values), each [1, kv_heads, length, head_dim]


def common_prefix_len(rows: list) -> int:
    """Length of the longest token prefix shared by all rows."""
    if not rows:
        return 0
    first, n = rows[0], min(len(r) for r in rows)
    for row in rows[1:]:
        n = _shared(first, row, n)
    return n


def _shared(a: Sequence[int], b: Sequence[int], limit: int | None = None) -> int:
    """Length of the common prefix of a and b (at most `limit`), by bisection on slice equality:
    O(n log n) element compares done in C rather than a Python loop over tokens."""
    a, b = tuple(a), tuple(b)
    hi = min(len(a), len(b)) if limit is None else min(len(a), len(b), limit)
    if a[:hi] == b[:hi]:
        return hi
    lo = 0  # invariant: a[:lo] == b[:lo] and a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def weights_key(model: Any) -> tuple:
    """Cheap fingerprint of the weights: changes when parameters are updated in place or replaced."""
    params = list(model.parameters())
    try:
        version = sum(p._version for p in params)
    except RuntimeError:  # inference tensors have no version counter
        version = None
    return (id(model), len(params), version, sum(p.data_ptr() for p in params))


def kv_bytes(kv: KV) -> int:
    return sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in kv)


class PrefixKVCache:
    """LRU of batch-1 KV states (per layer: keys, values [1, heads, len, head_dim]) by token sequence."""

    def __init__(self, max_entries: int = 64, min_tokens: int = 32, max_bytes: int = 4 << 30):
        self.max_entries = max_entries
        self.min_tokens = max(1, min_tokens)
        self.max_bytes = max_bytes
        self.entries: OrderedDict[tuple[int, ...], KV] = OrderedDict()
        self.supported: bool | None = None  # None: not yet known for this model
        # hits / extends / misses: `lookup` calls served whole, by extending an entry, from scratch;
        # row_hits / row_partial / row_misses: generation rows whose prompt (but its last token) was
        # stored whole, in part, not at (kit.llm.fast.generate)
        self.stats = {"hits": 0, "extends": 0, "misses": 0, "row_hits": 0, "row_partial": 0, "row_misses": 0,
                      "reused_tokens": 0, "computed_tokens": 0, "stored": 0, "evicted": 0}
        self._weights: tuple | None = None
        self._bytes = 0

    def clear(self) -> None:
        self.entries.clear()
        self._weights = None
        self._bytes = 0

    @property
    def nbytes(self) -> int:
        """Bytes held by the stored states."""
        return self._bytes

    def sync(self, model: Any) -> None:
        """Drop every entry if the model's weights changed since they were stored."""
        key = weights_key(model)
        if key != self._weights:
            self.entries.clear()
            self._bytes = 0
            self._weights = key

    # -- reading ------------------------------------------------------------------------------
    def match(self, ids: Sequence[int], limit: int | None = None) -> tuple[tuple[int, ...] | None, int]:
        """(key, n): the entry sharing the longest prefix with `ids` and that length (capped at
        `limit`); (None, 0) when no entry shares `min_tokens`. Call `sync` first."""
        ids = tuple(ids)
        limit = len(ids) if limit is None else min(limit, len(ids))
        best, base = 0, None
        for stored in self.entries:
            if stored[: self.min_tokens] != ids[: self.min_tokens]:
                continue
            n = _shared(stored, ids, limit)
            if n > best:
                best, base = n, stored
        if base is None or best < self.min_tokens:
            return None, 0
        return base, best

    def get(self, key: tuple[int, ...], n: int) -> KV:
        """Views of the first n positions of entry `key` (marked as recently used). Read-only."""
        self.entries.move_to_end(key)
        self.stats["reused_tokens"] += n
        return [(k[:, :, :n], v[:, :, :n]) for k, v in self.entries[key]]

    # -- writing ------------------------------------------------------------------------------
    def put(self, ids: Sequence[int], kv: KV) -> None:
        """Store states `kv` of exactly `ids` (the caller gives up the tensors)."""
        ids = tuple(ids)
        if len(ids) < self.min_tokens or self.max_entries <= 0:
            return
        for stored in [s for s in self.entries if len(s) <= len(ids) and ids[: len(s)] == s]:
            self._bytes -= kv_bytes(self.entries.pop(stored))  # the new entry holds all of it
        self.entries[ids] = kv
        self._bytes += kv_bytes(kv)
        self.stats["stored"] += 1
        while self.entries and (len(self.entries) > self.max_entries or self._bytes > self.max_bytes):
            _, old = self.entries.popitem(last=False)
            self._bytes -= kv_bytes(old)
            self.stats["evicted"] += 1

    def lookup(self, model: Any, ids: list[int]) -> KV | None:
        """KV states for exactly `ids` (batch 1), from the store or computed; None if unsupported."""
        if self.supported is False or len(ids) < self.min_tokens:
            return None
        self.sync(model)
        ids = tuple(ids)
        base, best = self.match(ids)
        kv = None
        if base is not None:
            kv = self.get(base, best)
            if best == len(ids):
                self.stats["hits"] += 1
                return kv
            self.stats["extends"] += 1
        else:
            self.stats["misses"] += 1
        kv = self._forward(model, ids, best, kv)
        if kv is not None:
            self.put(ids, kv)
        return kv

    def _forward(self, model: Any, ids: tuple[int, ...], start: int, kv: KV | None) -> KV | None:
        import torch
        from transformers import DynamicCache
        from transformers.cache_utils import DynamicLayer

        config = model.config.get_text_config(decoder=True)
        cache = DynamicCache(ddp_cache_data=kv, config=config) if kv else DynamicCache(config=config)
        if any(type(layer) is not DynamicLayer for layer in cache.layers):
            self.supported = False
            return None
        device = model.device
        extra = {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(model.forward).parameters else {}
        model(
            input_ids=torch.tensor([ids[start:]], device=device),
            position_ids=torch.arange(start, len(ids), device=device)[None],
            cache=cache,
            use_cache=True,
            **extra,  # the prefix's logits are never used
        )
        self.stats["computed_tokens"] += len(ids) - start
        if any(type(layer) is not DynamicLayer or layer.get_seq_length() != len(ids) for layer in cache.layers):
            self.supported = False
            return None
        self.supported = True
        return [(layer.keys, layer.values) for layer in cache.layers]

    @staticmethod
    def expand(model: Any, kv: KV, batch_size: int) -> Any:
        """A new DynamicCache holding `kv` repeated over `batch_size` rows (copies; `kv` stays untouched)."""
        from transformers import DynamicCache

        rows = [(k.expand(batch_size, -1, -1, -1), v.expand(batch_size, -1, -1, -1)) for k, v in kv]
        # DynamicLayer.update concatenates onto an empty tensor: a fresh contiguous copy
        return DynamicCache(ddp_cache_data=rows, config=model.config.get_text_config(decoder=True))
