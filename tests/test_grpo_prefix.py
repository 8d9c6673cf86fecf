"""GRPO's token_logprobs with the shared prompt prefix run once (kit/train/sequences.py): the same
log-probs and gradients as the plain pass (float32, atol 1e-5), and the plain pass where sharing
does not apply. Model: a randomly initialised 2-layer Llama with SmolLM2's tokenizer (as in
tests/test_grpo_learning.py), rows built like real ones: one long shared prompt, per-turn dialogue
of different lengths, completions of different lengths."""

import pytest
import torch

from kit.train.sequences import Row, token_logprobs
from test_grpo_learning import tiny_llama, tokenizer  # noqa: F401  (the shared tiny model and tokenizer)

torch.set_num_threads(1)


def realistic_rows(tokenizer, shared=True):
    """Rows as trajectory_rows builds them: rendered prompt (system prompt + dialogue so far) +
    the sampled completion, mask 1 on the completion only."""
    system = ("You are a customer service agent. Follow the policy strictly. " * 12
              + "Tools: find_user(id), get_order(order_id), cancel_order(order_id, reason). " * 4)
    g = torch.Generator().manual_seed(1)
    rows = []
    for i, (dialogue, completion) in enumerate([(5, 30), (40, 7), (90, 18), (15, 1), (60, 44)]):
        head = system if shared else f"Row {i}. " + system
        prompt = tokenizer.apply_chat_template([{"role": "system", "content": head},
                                                {"role": "user", "content": "my order " * dialogue}],
                                               tokenize=False, add_generation_prompt=True)
        ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        sampled = torch.randint(100, 40000, (completion,), generator=g).tolist()
        rows.append(Row(ids + sampled, [0] * len(ids) + [1] * completion, advantage=float(i % 3) - 1.0, group=0))
    return rows


def logprobs_and_grads(model, rows, pad, min_prefix, temperature=0.7):
    model.zero_grad()
    logp, mask = token_logprobs(model, rows, pad, temperature, min_prefix=min_prefix)
    adv = torch.tensor([r.advantage for r in rows])[:, None]
    (-(logp * adv * mask).sum() / mask.sum()).backward()
    return logp.detach(), mask, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_shared_prefix_gives_the_plain_log_probs_and_gradients(tokenizer):
    from kit.train.sequences import _prefix_to_share

    model = tiny_llama(tokenizer)
    model.train()
    rows = realistic_rows(tokenizer)
    p = _prefix_to_share(model, rows, 64)
    assert p > 150  # the whole system prompt is shared
    plain, m_plain, g_plain = logprobs_and_grads(model, rows, tokenizer.pad_token_id, min_prefix=10**9)
    shared, m_shared, g_shared = logprobs_and_grads(model, rows, tokenizer.pad_token_id, min_prefix=64)
    assert plain.shape == shared.shape == (len(rows), 44)
    assert torch.equal(m_plain, m_shared)
    # each row's completion ends in the last columns, as before
    assert [int(m.sum()) for m in m_shared] == [30, 7, 18, 1, 44] and bool((m_shared[:, -1] == 1).all())
    on = m_plain > 0
    assert torch.allclose(shared[on], plain[on], atol=1e-5, rtol=0), (shared[on] - plain[on]).abs().max()
    assert g_plain.keys() == g_shared.keys() and len(g_plain) > 0
    for name, grad in g_plain.items():
        assert torch.allclose(g_shared[name], grad, atol=1e-5, rtol=1e-4), (name, (g_shared[name] - grad).abs().max())
    # deterministic (bit-identical resume relies on it)
    again, _, g_again = logprobs_and_grads(model, rows, tokenizer.pad_token_id, min_prefix=64)
    assert torch.equal(again, shared) and all(torch.equal(g_again[n], g) for n, g in g_shared.items())


def test_no_grad_shared_prefix_matches_too(tokenizer):
    """ppo_update computes the old and reference log-probs under no_grad: same numbers there."""
    model = tiny_llama(tokenizer, seed=3)
    model.eval()
    rows = realistic_rows(tokenizer)
    with torch.no_grad():
        plain, mask = token_logprobs(model, rows, tokenizer.pad_token_id, 1.0, min_prefix=10**9)
        shared, _ = token_logprobs(model, rows, tokenizer.pad_token_id, 1.0, min_prefix=64)
    on = mask > 0
    assert torch.allclose(shared[on], plain[on], atol=1e-5, rtol=0)


def test_plain_pass_without_a_shared_prefix_one_row_or_checkpointing(tokenizer):
    from kit.train.sequences import _prefix_to_share

    model = tiny_llama(tokenizer)
    rows = realistic_rows(tokenizer)
    assert _prefix_to_share(model, rows, 64) > 0
    assert _prefix_to_share(model, realistic_rows(tokenizer, shared=False), 64) == 0  # rows differ from token 1 on
    assert _prefix_to_share(model, rows[:1], 64) == 0  # one row
    assert _prefix_to_share(model, rows, 10**6) == 0  # prefix shorter than min_prefix
    model.gradient_checkpointing_enable()
    assert model.is_gradient_checkpointing and _prefix_to_share(model, rows, 64) == 0
    model.gradient_checkpointing_disable()

    class Wrapped(torch.nn.Module):  # how DistributedDataParallel holds the model
        def __init__(self, module):
            super().__init__()
            self.module = module

    assert _prefix_to_share(Wrapped(model), rows, 64) == 0
    # a completion right after the shared tokens: the token before it stays in the row's own suffix
    early = [Row(rows[0].ids[:100] + [5, 6], [0] * 100 + [1, 1], 1.0, 0), rows[1]]
    assert _prefix_to_share(model, early, 64) == 99
    # the fallback still gives the log-probs (one row: what the shared path gives for that row)
    with torch.no_grad():
        one, m1 = token_logprobs(model, rows[4:5], tokenizer.pad_token_id, 1.0)
        both, m2 = token_logprobs(model, rows[3:5], tokenizer.pad_token_id, 1.0)
    assert torch.allclose(one[0][m1[0] > 0], both[1][m2[1] > 0], atol=1e-5, rtol=0)


def test_a_prefix_run_once_per_minibatch_gives_the_plain_gradients(tokenizer):
    """PrefixStates (ppo_update): the prefix every row of a minibatch shares runs once, with gradients;
    micro-batches of one and two rows attend to it through leaf copies, and its backward pass after them
    gives the parameters the gradients of running every row whole."""
    from kit.train.sequences import PrefixStates

    model = tiny_llama(tokenizer, seed=5)
    model.train()
    rows = realistic_rows(tokenizer)
    pad = tokenizer.pad_token_id

    def loss(logp, mask, rs, total):
        adv = torch.tensor([r.advantage for r in rs])[:, None]
        return -(logp * adv * mask).sum() / total

    total = float(sum(sum(r.mask) for r in rows))
    model.zero_grad()
    logp, mask = token_logprobs(model, rows, pad, 0.7, min_prefix=10**9)  # every row whole, no sharing
    loss(logp, mask, rows, total).backward()
    plain = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    model.zero_grad()
    shared = PrefixStates.for_rows(model, rows, min_prefix=64)
    assert shared is not None and shared.p > 150
    for mi in (rows[:1], rows[1:3], rows[3:]):
        logp, mask = token_logprobs(model, mi, pad, 0.7, prefix=shared)
        loss(logp, mask, mi, total).backward()
    shared.backward()
    got = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    assert got.keys() == plain.keys() and len(plain) > 0
    for name, grad in plain.items():
        assert torch.allclose(got[name], grad, atol=1e-5, rtol=1e-4), (name, (got[name] - grad).abs().max())


def test_ppo_update_with_the_minibatch_prefix_steps_like_the_plain_update(tokenizer, monkeypatch):
    """The whole update: ppo_update with the prefix run once per minibatch moves the weights as the plain
    update does (plain SGD, so the step is the gradient), and says how many tokens it computed."""
    import random

    from kit.train import grpo_update
    from kit.train.grpo_config import GRPOConfig
    from kit.train.processes import Processes

    class NoAccelerator:  # the update calls accelerate's backward / no_sync / clip on one process
        num_processes, process_index = 1, 0

        def backward(self, loss):
            loss.backward()

        def no_sync(self, model):
            import contextlib
            return contextlib.nullcontext()

        def clip_grad_norm_(self, params, max_norm):
            return torch.nn.utils.clip_grad_norm_(list(params), max_norm)

    cfg = GRPOConfig(micro_batch_size=2, max_grad_norm=1e9)
    results = {}
    for name, min_prefix in (("shared", 64), ("plain", 10**9)):
        monkeypatch.setattr(grpo_update, "MIN_SHARED_PREFIX", min_prefix)
        model = tiny_llama(tokenizer, seed=7)
        opt = torch.optim.SGD(model.parameters(), lr=1.0)
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        acc = NoAccelerator()
        m, failed = grpo_update.ppo_update(model, opt, acc, Processes(acc), realistic_rows(tokenizer),
                                           cfg, tokenizer.pad_token_id, random.Random(0))
        assert failed is None
        results[name] = ({n: p.detach() - before[n] for n, p in model.named_parameters()}, m)
    (shared, ms), (plain, mp) = results["shared"], results["plain"]
    assert ms["train/shared_prefix_tokens"] > 150 and mp["train/shared_prefix_tokens"] == 0
    assert ms["train/tokens_computed"] < mp["train/tokens_computed"]
    for n, d in plain.items():
        assert torch.allclose(shared[n], d, atol=1e-5, rtol=1e-4), (n, (shared[n] - d).abs().max())
