"""Batched generation for HFBackend with per-row KV reuse, ragged prefill and finished-row dropping.

`generate_rows(model, rows, ...)` samples a completion for every row of token ids, as
`model.generate` does for a left-padded batch, but organised for multi-turn rollouts on small
hardware:

1. Reuse. Each row takes the longest prefix of its tokens that the `PrefixKVCache` holds (a
   previous turn of the same conversation, or the system prompt it shares with other rows), and
   a prefix common to all rows that nothing holds yet is prefilled once, at batch 1.
2. Ragged prefill. Only the rows' remaining tails are run through the model, in groups of rows
   with similar tail lengths (split where padding would cost more than another forward pass,
   `_groups`) and chunks of at most `chunk` columns. Tails are
   left-aligned to the chunk's end so the last column holds every row's last prompt token and only
   its logits are computed. Keys/values go into a `RowCache` at each row's own slots. A prompt
   prefix that all rows of a group hold already is attended once for the group, and query heads
   that share a key/value head are attended as one block (kit.llm.fast.shared_prefix_attention).
3. Decode. All unfinished rows advance together, one token per step. A row that emits an end
   token, matches a stop string or reaches `max_new_tokens` is finished: its states
   (prompt + completion) are stored in the `PrefixKVCache` for the next turn and it leaves the
   batch, so the remaining steps cost less.
   A prompt prefix common to every row (the system prompt of a group) is attended once per step
   for all rows (kit.llm.fast.shared_prefix_attention) instead of once per row.

HFBackend runs this under kit.llm.fast.packed_linear on a float32 CPU model (weights packed once for
oneDNN instead of at every skinny matmul).

Sampling follows `model.generate`'s settings: the same effective generation config
(`effective_config`: unset fields take the model's and transformers' defaults), logits in float32,
temperature, top-k and top-p as transformers applies them (greedy: argmax), `StopStringCriteria`
for stop strings. Greedy tokens are `model.generate`'s (packed weights and the shared-prefix
attention move logits by float rounding only, ~1e-4 on logits of ~20, which the tests'
token-for-token comparisons tolerate); samples come from the same distribution through a cheaper
draw (`Sampler`), so seeded samples are reproducible but not `model.generate`'s.
The caller decides when this path applies (`plain_sampling`, `row_cache.supports`) and otherwise
calls `model.generate`. Rows come back as `model.generate`
returns them: generated ids, padded with `pad_id` to the longest row.
"""

from __future__ import annotations

import contextlib
import inspect
import time
from dataclasses import dataclass
from typing import Any

import torch
from transformers import GenerationConfig
from transformers.generation.logits_process import TopPLogitsWarper

from kit.llm.fast.prefix_cache import PrefixKVCache, common_prefix_len
from kit.llm.fast.row_cache import RowCache
from kit.llm.fast.shared_prefix_attention import shared_prefix

# generation_config fields that make `model.generate` add logits processors or decode otherwise, with
# their neutral values; a model whose (effective) generation config sets any of them is served by
# `model.generate` instead
_NEUTRAL = {
    "repetition_penalty": (None, 1.0), "encoder_repetition_penalty": (None, 1.0),
    "no_repeat_ngram_size": (None, 0), "encoder_no_repeat_ngram_size": (None, 0),
    "bad_words_ids": (None,), "force_words_ids": (None,), "min_length": (None, 0), "min_new_tokens": (None, 0),
    "forced_bos_token_id": (None,), "forced_eos_token_id": (None,), "remove_invalid_values": (None, False),
    "exponential_decay_length_penalty": (None,), "suppress_tokens": (None,), "begin_suppress_tokens": (None,),
    "sequence_bias": (None,), "guidance_scale": (None, 1.0), "min_p": (None,), "typical_p": (None, 1.0),
    "epsilon_cutoff": (None, 0.0), "eta_cutoff": (None, 0.0), "top_h": (None,), "renormalize_logits": (None, False),
    "watermarking_config": (None,), "num_beams": (None, 1), "penalty_alpha": (None,), "dola_layers": (None,),
    "prompt_lookup_num_tokens": (None,), "assistant_early_exit": (None,), "num_return_sequences": (None, 1),
    "output_scores": (None, False), "output_logits": (None, False), "return_dict_in_generate": (None, False),
}


def effective_config(model: Any, gen: GenerationConfig) -> GenerationConfig | None:
    """`gen` with the defaults `model.generate` fills in (unset fields come from the model's
    generation_config, then transformers' global defaults, e.g. top_k=50); None if unknown."""
    prepare = getattr(model, "_prepare_generation_config", None)
    if prepare is None:
        return None
    try:
        return prepare(gen)[0]
    except Exception:  # noqa: BLE001 -- another transformers version: let model.generate decide
        return None


def plain_sampling(gen: GenerationConfig | None) -> bool:
    """True when the effective config `gen` asks for nothing but greedy decoding or
    temperature / top-k / top-p sampling (what `Sampler` does)."""
    return gen is not None and all(getattr(gen, f, None) in ok for f, ok in _NEUTRAL.items())


@dataclass
class GenStats:
    """Where generation time goes (accumulated over calls)."""

    calls: int = 0
    rows: int = 0
    prompt_tokens: int = 0
    reused_tokens: int = 0
    prefill_tokens: int = 0  # tokens run through the model before decoding (shared prefixes included)
    padded_tokens: int = 0  # of which padding
    prefill_s: float = 0.0
    decode_steps: int = 0
    decode_rows: int = 0  # row-steps: tokens fed while decoding
    decode_s: float = 0.0
    shared_steps: int = 0  # decode steps that attended a shared prompt prefix once for all rows
    other_s: float = 0.0  # cache assembly, export to the prefix store

    def summary(self) -> str:
        total = self.prefill_s + self.decode_s + self.other_s
        share = (lambda s: f"{100 * s / total:.0f}%") if total else (lambda s: "-")
        return (f"prefill {self.prefill_tokens} tok ({self.padded_tokens} pad) {self.prefill_s:.1f}s {share(self.prefill_s)}; "
                f"decode {self.decode_rows} tok in {self.decode_steps} steps ({self.shared_steps} with a shared prefix) "
                f"{self.decode_s:.1f}s {share(self.decode_s)}; "
                f"other {self.other_s:.1f}s; reused {self.reused_tokens}/{self.prompt_tokens} prompt tokens")


class Sampler:
    """Token choice under `model.generate`'s settings: greedy (argmax), or temperature, top-k and
    top-p with transformers' semantics and in its order, then one draw per row.

    The draw is exact but cheaper than `model.generate`'s softmax + `torch.multinomial`, which
    draws one exponential random number per vocabulary entry and row (15 ms per decode step for 8
    rows of SmolLM2's 49k tokens on a 2-core CPU, a tenth of the step): with a top-k cut (transformers'
    default keeps 50) only the k candidates are warped and drawn from, and every draw is one uniform
    number per row through the cumulative distribution (float64). Same distribution as
    `model.generate`, another random stream: seeded samples are reproducible but differ from
    `model.generate`'s; greedy tokens are the same.
    """

    def __init__(self, gen: GenerationConfig, seeds: list[int] | None = None):
        self.greedy = not gen.do_sample
        # one random stream per row (rows of several callers batched together, each with its own seed):
        # a row's draws then do not depend on the other rows at all
        self.generators = None
        if seeds is not None and not self.greedy:
            self.generators = [torch.Generator().manual_seed(int(s)) for s in seeds]
        self.temperature = gen.temperature if gen.temperature not in (None, 1.0) and not self.greedy else None
        self.top_k = max(int(gen.top_k or 0), 0)
        # transformers' warper on the candidates: their softmax is the full one restricted to them
        self.top_p = TopPLogitsWarper(top_p=gen.top_p) if gen.top_p is not None and gen.top_p < 1.0 else None

    def __call__(self, logits: torch.Tensor, rows: list[int] | None = None, batch: int | None = None) -> torch.Tensor:
        """One next token per row of `logits` [len(rows), vocab]: the states of rows `rows` of a
        batch of `batch` (default: all rows, in order). Each draw takes the uniform number of its
        row's index among `batch`, so a row's samples do not depend on which rows are still active,
        in what order, or how their prompts were prefilled."""
        scores = logits.float()  # no copy of float32 logits: nothing below writes into them
        if self.greedy:
            return scores.argmax(dim=-1)
        if self.temperature is not None:
            scores = scores / self.temperature
        index = None
        if 0 < self.top_k < scores.shape[-1]:
            values, index = scores.topk(self.top_k + 1, dim=-1)
            kth = values[:, self.top_k - 1 : self.top_k]
            if bool((values[:, self.top_k :] == kth).any()):
                # a tie with the k-th score: transformers keeps every tied token, so do we
                scores, index = scores.masked_fill(scores < kth, float("-inf")), None
            else:
                scores, index = values[:, : self.top_k], index[:, : self.top_k]
        if self.top_p is not None:
            scores = self.top_p(None, scores)
        cdf = torch.softmax(scores, dim=-1).to(torch.float64).cumsum_(dim=-1)
        # the first entry whose cumulative probability exceeds u: a zero-probability token never is
        if self.generators is not None:
            u = torch.cat([torch.rand((1, 1), dtype=torch.float64, generator=g) for g in self.generators]).to(cdf.device)
        else:
            u = torch.rand((batch or cdf.shape[0], 1), dtype=torch.float64, device=cdf.device)
        if rows is not None:
            u = u[torch.tensor(rows, device=cdf.device)]
        u = u * cdf[:, -1:]
        picked = torch.searchsorted(cdf, u, right=True).clamp_(max=cdf.shape[-1] - 1)
        return (picked if index is None else index.gather(1, picked)).squeeze(1)


def _groups(tails: list[int], pass_tokens: int = 32, chunk: int = 256) -> list[tuple[int, int]]:
    """Split rows sorted by tail length (longest first) into [start, end) groups, one forward pass
    (per `chunk` columns) each, at the least estimated cost: a group costs its padded tokens
    (members x its longest tail) plus `pass_tokens` per pass, what one more pass costs in tokens
    of prefill (weights streamed once more, per-layer overheads: for SmolLM2-135M on a 2-core CPU
    a pass costs ~65 ms, a prefill token 1.7-2.8 ms depending on its context). An exact split
    (dynamic programming over the sorted tails): padding only where another pass costs more."""
    n = len(tails)
    best = [0.0] + [float("inf")] * n  # best[j]: least cost of the first j rows
    cut = [0] * (n + 1)
    for j in range(1, n + 1):
        for i in range(j):  # last group: rows i..j-1, as wide as tails[i]
            passes = -(-tails[i] // chunk)
            cost = best[i] + (j - i) * tails[i] + pass_tokens * passes
            if cost < best[j]:
                best[j], cut[j] = cost, i
    out, j = [], n
    while j:
        out.append((cut[j], j))
        j = cut[j]
    return out[::-1]


def generate_rows(
    model: Any,
    rows: list[list[int]],
    *,
    sampler: Sampler,
    max_new_tokens: int | list[int],
    eos_ids: set[int],
    pad_id: int,
    store: PrefixKVCache | None = None,
    stop_criteria: Any = None,
    chunk: int = 256,
    eager_mask: bool = False,
    stats: GenStats | None = None,
    split_attention: bool = True,
) -> list[list[int]]:
    """Generated ids for every row of prompt ids (see the module doc), padded to the longest row.
    `max_new_tokens`: one limit for all rows, or one per row."""
    limits = list(max_new_tokens) if isinstance(max_new_tokens, (list, tuple)) else [max_new_tokens] * len(rows)
    max_new_tokens = max(limits)
    stats = stats if stats is not None else GenStats()
    device = next(model.parameters()).device
    t0 = time.perf_counter()
    stats.calls += 1
    stats.rows += len(rows)
    stats.prompt_tokens += sum(len(r) for r in rows)
    rows = [tuple(r) for r in rows]

    cache, order, logits = prefill(model, rows, store=store, pad_id=pad_id, chunk=chunk, eager_mask=eager_mask,
                                   stats=stats, room=max_new_tokens, started=t0, split_attention=split_attention)
    cache.order = list(order)
    dtype = next(model.parameters()).dtype

    # 3. decode: rows leave the batch as they finish; a prompt prefix common to all rows is attended
    # once per step for the whole batch (kit.llm.fast.shared_prefix_attention)
    common = min(common_prefix_len(rows), min(len(r) for r in rows) - 1)
    split = common if split_attention and len(rows) > 1 and common >= 32 else 0
    t1 = time.perf_counter()
    seqs = [list(rows[i]) for i in order]  # per active buffer row: prompt + generated
    generated: dict[int, list[int]] = {}
    new: list[list[int]] = [[] for _ in order]
    export_s = 0.0
    while True:
        tokens = sampler(logits, cache.order, len(rows)).tolist()
        finished = []
        for k, tok in enumerate(tokens):
            new[k].append(tok)
            seqs[k].append(tok)
            if tok in eos_ids or len(new[k]) >= limits[cache.order[k]]:
                finished.append(k)
        if stop_criteria is not None:
            hits = stop_hits(stop_criteria, seqs, pad_id)
            finished = sorted(set(finished) | {k for k, hit in enumerate(hits) if hit})
        for k in sorted(finished, reverse=True):  # drop from the end: moved rows are still unfinished
            te = time.perf_counter()
            row = cache.order[k]
            generated[row] = new[k]
            fed = len(seqs[k]) - 1  # the last sampled token was never fed
            if store is not None and fed >= store.min_tokens:
                store.put(seqs[k][:-1], cache.export(k, fed))
            cache.drop(k, len(seqs[-1]) - 1)  # the row moving into k has fed all but its last token
            seqs[k], new[k] = seqs[-1], new[-1]
            seqs.pop(), new.pop()
            export_s += time.perf_counter() - te
        active = cache.active
        if not active:
            break
        step_ids = torch.tensor([[s[-1]] for s in seqs], device=device)
        step_slots = torch.tensor([[len(s) - 1] for s in seqs], device=device)
        with shared_prefix(model) if split and active > 1 else contextlib.nullcontext() as on:
            logits = _forward(model, cache, step_ids, step_slots, 0, dtype, eager_mask, split if on else 0)
        stats.decode_steps += 1
        stats.decode_rows += active
        stats.shared_steps += bool(split and active > 1 and on)
    stats.decode_s += time.perf_counter() - t1 - export_s
    stats.other_s += export_s

    longest = max(len(g) for g in generated.values())
    return [generated[i] + [pad_id] * (longest - len(generated[i])) for i in range(len(rows))]


def stop_hits(stop_criteria: Any, seqs: list[list[int]], pad_id: int) -> list[bool]:
    """Per sequence: does it end with one of the stop strings (transformers' StopStringCriteria)?"""
    window = stop_criteria.maximum_token_len
    recent = torch.tensor([[pad_id] * max(0, window - len(s)) + s[-window:] for s in seqs])
    return stop_criteria(recent, None).tolist()


def prefill(model: Any, rows: list[tuple[int, ...]], *, store: PrefixKVCache | None, pad_id: int, chunk: int,
            eager_mask: bool, stats: GenStats, room: int, started: float | None = None,
            split_attention: bool = True) -> tuple[RowCache, list[int], torch.Tensor]:
    """Steps 1 and 2 of the module doc for `rows`: reuse stored prefixes, prefill the tails.

    The rows go into a new RowCache with `room` free slots after each prompt; `split_attention`: a
    prefix common to a group of rows is attended once for the group. Returns (cache, order, logits):
    the row in buffer row j is rows[order[j]], and logits[j] are its next-token logits.
    """
    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    t0 = time.perf_counter() if started is None else started
    # 1. reuse: per row, the longest stored prefix (all but the last token: its logits are needed)
    prefixes: list[tuple[Any, int]] = [(None, 0)] * len(rows)
    if store is not None:
        store.sync(model)
        prefixes = [store.match(r, len(r) - 1) for r in rows]
        shared = min(common_prefix_len(rows), min(len(r) for r in rows) - 1)
        if len(rows) > 1 and shared >= store.min_tokens and any(n < shared for _, n in prefixes):
            t1 = time.perf_counter()
            before = store.stats["computed_tokens"]
            if store.lookup(model, list(rows[0][:shared])) is not None:  # once for every row
                prefixes = [store.match(r, len(r) - 1) for r in rows]
            stats.prefill_tokens += store.stats["computed_tokens"] - before
            stats.prefill_s += time.perf_counter() - t1
            t0 += time.perf_counter() - t1  # not "other" time
    reused = [n for _, n in prefixes]
    stats.reused_tokens += sum(reused)
    if store is not None:  # per row: whole prompt (but its last token) stored, a prefix of it, nothing
        for r, n in zip(rows, reused):
            store.stats["row_hits" if n == len(r) - 1 else "row_partial" if n else "row_misses"] += 1

    # rows sorted by tail length (longest first): prefill groups are contiguous buffer rows
    tails = [len(r) - n for r, n in zip(rows, reused)]
    order = sorted(range(len(rows)), key=lambda i: -tails[i])
    groups = _groups([tails[i] for i in order], chunk=chunk)
    widths = {}
    for a, b in groups:
        for i in order[a:b]:
            widths[i] = tails[order[a]]
    capacity = max(max(reused[i] + widths[i] for i in order), max(len(r) for r in rows) + room)
    cache = RowCache(model, len(rows), capacity)
    for slot, i in enumerate(order):
        key, n = prefixes[i]
        if key is not None:
            cache.load(slot, store.get(key, n), n)
    stats.other_s += time.perf_counter() - t0

    # 2. ragged prefill, group by group, chunk by chunk; keep the last column's logits
    t1 = time.perf_counter()
    last_logits: list[torch.Tensor] = []
    for a, b in groups:
        members = order[a:b]
        width = widths[members[0]]
        ids = torch.full((b - a, width), pad_id, dtype=torch.long)
        slots = torch.empty((b - a, width), dtype=torch.long)
        for k, i in enumerate(members):
            n, tail = reused[i], rows[i][reused[i]:]
            pads = width - len(tail)
            ids[k, pads:] = torch.tensor(tail)
            slots[k, pads:] = torch.arange(n, n + len(tail))
            slots[k, :pads] = torch.arange(n + len(tail), n + width)  # past the row's end: never seen
        stats.prefill_tokens += sum(tails[i] for i in members)
        stats.padded_tokens += sum(width - tails[i] for i in members)
        ids, slots = ids.to(device), slots.to(device)
        # a prompt prefix common to the group that every member holds already is attended once
        with shared_prefix(model) as on:  # and without per-head key/value copies (grouped attention)
            shared = 0
            if on and split_attention and b - a > 1:
                common = min(common_prefix_len([rows[i] for i in members]), min(reused[i] for i in members))
                shared = common if common >= 32 else 0
            for c in range(0, width, chunk):
                out = _forward(model, cache, ids[:, c : c + chunk], slots[:, c : c + chunk], a, dtype,
                               eager_mask, shared)
        last_logits.append(out)
    logits = torch.cat(last_logits)
    stats.prefill_s += time.perf_counter() - t1
    return cache, order, logits



def _forward(model, cache: RowCache, ids, slots, first: int, dtype, eager: bool, shared: int = 0):
    """One forward pass of buffer rows first..first+len(ids)-1 over `ids` written at `slots`;
    logits of the last column only. `shared` > 0: slots 0..shared-1 hold the same tokens in every
    row, attended once for all (the model's attention must be kit.llm.fast.shared_prefix_attention's)."""
    cache.plan(slots, first)
    extra = {"kit_shared": shared} if shared else {}
    out = model(
        input_ids=ids,
        position_ids=slots,
        attention_mask=cache.mask(slots, dtype, eager),
        cache=cache,
        use_cache=True,
        **_last_logits_only(model),
        **extra,
    )
    return out.logits[:, -1]


def _last_logits_only(model) -> dict:
    cls = type(model)
    if cls not in _LOGITS_TO_KEEP:
        _LOGITS_TO_KEEP[cls] = "logits_to_keep" in inspect.signature(model.forward).parameters
    return {"logits_to_keep": 1} if _LOGITS_TO_KEEP[cls] else {}


_LOGITS_TO_KEEP: dict[type, bool] = {}
