"""The CPU fast generation path of the hf backend (kit/llm/hf.py), behind this one entry point.

What it is: batched multi-turn generation that reuses each conversation's KV across turns
(`PrefixKVCache`), prefills ragged row tails in groups, drops finished rows from the batch
(`generate_rows`, generate.py), attends a shared system prompt once (shared_prefix_attention.py),
keeps per-row caches in place (row_cache.py) and packs linear weights once for oneDNN (packed_linear.py).
Only kit/llm/hf.py calls it; it
samples what `model.generate` would from the same distribution (tests/test_llm_hf.py compares them).
"""

from kit.llm.fast.generate import GenStats, Sampler, effective_config, generate_rows, plain_sampling
from kit.llm.fast.packed_linear import PackedLinears
from kit.llm.fast.prefix_cache import PrefixKVCache, common_prefix_len
from kit.llm.fast.row_cache import supports as supports_model

__all__ = ["GenStats", "PackedLinears", "PrefixKVCache", "Sampler", "common_prefix_len",
           "effective_config", "generate_rows", "plain_sampling", "supports_model"]
