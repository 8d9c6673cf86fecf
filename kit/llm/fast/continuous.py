"""Continuous batching for HFBackend: a request joins the running batch as soon as it exists.

`generate_rows` (kit.llm.fast.generate) serves one batch call: every row starts together and the call
ends when its longest row does, so while the last rows decode, the batch is nearly empty. In a
rollout the next request of an episode (the user's answer to the agent turn that just ended) exists
the moment that turn ends; `serve` takes it into the batch then, so the G episodes of a group keep
the batch full instead of waiting for each other at every turn.

    serve(model, requests, on_done, ...)

`requests` are the first requests; `on_done(key, ids)` is called with each finished request's
generated ids and returns the follow-up requests (possibly none). New requests are prefilled
(stored prefixes reused, kit.llm.fast.generate.prefill) into buffer rows after the active ones, then
decode with them; finished rows are stored in the prefix store and leave the batch, as in
generate_rows. Every row keeps its own sampling settings (`Sampler`), token budget and stop
strings. Each group of rows with the same sampler draws together from the global generator (seed
it for reproducible runs), in the order the rows were admitted (not their buffer positions, which
depend on what the prefix store held); follow-ups are queued in that order too. The draws depend
on when requests arrive, so seeded samples differ from generate_rows'; greedy tokens are the same.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from kit.llm.fast.generate import GenStats, Sampler, _forward, prefill, stop_hits
from kit.llm.fast.prefix_cache import PrefixKVCache, common_prefix_len
from kit.llm.fast.row_cache import RowCache
from kit.llm.fast.shared_prefix_attention import shared_prefix


@dataclass
class Request:
    key: Any  # the caller's handle, given back to on_done
    ids: list[int]  # prompt token ids
    sampler: Sampler
    max_new_tokens: int
    stop_criteria: Any = None


@dataclass(eq=False)  # rows are told apart by identity (rows.index), never by content
class _Row:
    req: Request
    seq: list[int]  # prompt + generated
    serial: int  # admission order: draws and follow-ups go by it, not by buffer position
    new: list[int] = field(default_factory=list)


def _sample(rows: list[_Row], logits: torch.Tensor) -> list[int]:
    """One token per row, each group of rows sharing a sampler drawn together."""
    out = [0] * len(rows)
    by_sampler: dict[int, list[int]] = {}
    # a canonical order (groups and rows by admission): which uniform number a row draws must not
    # depend on where prefill put it in the buffer (that follows what the prefix store held)
    for k in sorted(range(len(rows)), key=lambda k: rows[k].serial):
        by_sampler.setdefault(id(rows[k].req.sampler), []).append(k)
    for ks in by_sampler.values():
        sampler = rows[ks[0]].req.sampler
        for k, tok in zip(ks, sampler(logits[ks]).tolist()):
            out[k] = tok
    return out


def _finished(row: _Row, eos_ids: set[int], pad_id: int) -> bool:
    if row.new[-1] in eos_ids or len(row.new) >= row.req.max_new_tokens:
        return True
    stop = row.req.stop_criteria
    return stop is not None and bool(stop_hits(stop, [row.seq], pad_id)[0])


def serve(
    model: Any,
    requests: list[Request],
    on_done: Callable[[Any, list[int]], list[Request]],
    *,
    eos_ids: set[int],
    pad_id: int,
    store: PrefixKVCache | None = None,
    chunk: int = 256,
    eager_mask: bool = False,
    stats: GenStats | None = None,
    max_rows: int = 64,
    split_attention: bool = True,
) -> None:
    """Serve `requests` and their follow-ups (see the module doc) until none is left."""
    stats = stats if stats is not None else GenStats()
    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    cache: RowCache | None = None
    rows: list[_Row] = []  # rows[i] is in buffer row i
    queue = list(requests)
    admitted = 0
    while queue or rows:
        if queue and len(rows) < max_rows:  # admit: prefill the new rows after the active ones
            room = max_rows - len(rows)
            joining, queue = queue[:room], queue[room:]
            ids = [tuple(r.ids) for r in joining]
            stats.calls += 1
            stats.rows += len(ids)
            stats.prompt_tokens += sum(len(r) for r in ids)
            if cache is not None and not rows:
                cache.active = 0
            cache, order, logits = prefill(model, ids, store=store, pad_id=pad_id, chunk=chunk, eager_mask=eager_mask,
                                           stats=stats, room=max(r.max_new_tokens for r in joining), cache=cache,
                                           keep_prompts=True, split_attention=split_attention)
            new_rows = [_Row(joining[i], list(ids[i]), admitted + i) for i in order]
            admitted += len(joining)
            rows += new_rows
            cache.order = list(range(len(rows)))
            pending = list(zip(new_rows, _sample(new_rows, logits)))
        else:  # decode one token for every active row
            t1 = time.perf_counter()
            common = min(common_prefix_len([r.req.ids for r in rows]), min(len(r.req.ids) for r in rows) - 1)
            split = common if split_attention and len(rows) > 1 and common >= 32 else 0
            step_ids = torch.tensor([[r.seq[-1]] for r in rows], device=device)
            step_slots = torch.tensor([[len(r.seq) - 1] for r in rows], device=device)
            with shared_prefix(model) if split else contextlib.nullcontext() as on:
                logits = _forward(model, cache, step_ids, step_slots, 0, dtype, eager_mask, split if on else 0)
            stats.decode_steps += 1
            stats.decode_rows += len(rows)
            stats.shared_steps += bool(split and on)
            pending = list(zip(list(rows), _sample(rows, logits)))
            stats.decode_s += time.perf_counter() - t1
        te = time.perf_counter()
        done = []
        for row, tok in pending:
            row.new.append(tok)
            row.seq.append(tok)
            if _finished(row, eos_ids, pad_id):
                done.append(row)
        for row in done:  # store, then leave the batch (the last active row moves into its place)
            k = rows.index(row)
            fed = len(row.seq) - 1  # the last sampled token was never fed
            if store is not None and fed >= store.min_tokens:
                store.put(row.seq[:-1], cache.export(k, fed))
            cache.drop(k, len(rows[-1].seq) - 1)
            rows[k] = rows[-1]
            rows.pop()
        stats.other_s += time.perf_counter() - te
        for row in sorted(done, key=lambda r: r.serial):
            queue += on_done(row.req.key, row.new)
