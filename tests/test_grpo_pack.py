"""Packed GRPO rows (kit.train.sequences.trajectory_rows, pack=True): an episode's turns share one
row only where that is exact, so every generated token keeps the log-probability it has in its own
per-turn row, and the PPO update gives the same gradient.

Model: a randomly initialised 2-layer Llama with SmolLM2's tokenizer (tests/test_grpo_learning.py's
tiny_llama) rolled out on the real mock domain against the scripted user: the test is about how
rows are built and scored, not about what a model learns. The chat template, the tokenizer and the
rollout loop are the real ones, so "the next prompt extends the row" is checked on what they
actually produce.
"""

import random

import pytest
import torch

from kit.train.grpo import GRPOConfig, GRPOTrainer
from kit.train.processes import Processes
from kit.train.sequences import Row, sampler_logprobs, token_logprobs, trajectory_rows
from test_grpo_learning import small_cfg, tiny_llama, tokenizer  # noqa: F401  (the shared tiny model, tokenizer)

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def episodes(tokenizer):
    from kit.envs import load_domain
    from kit.rollout import ScriptedUser

    domain = load_domain("mock")
    task = domain.task("create_task_1")
    model = tiny_llama(tokenizer)
    cfg = small_cfg(group_size=4, tasks_per_step=1, max_messages=8, max_new_tokens=12, filter_mode="off")
    tr = GRPOTrainer(model, tokenizer, [task], cfg, domain=domain, user=ScriptedUser(task))
    trajs = tr._rollout([task] * 4, seed=3)
    return tr, trajs


def _masked_logprobs(model, rows, pad):
    """Each row's log-probs at its masked tokens, in order (one row per forward: no padding effects)."""
    out = []
    for r in rows:
        with torch.no_grad():
            logp, mask = token_logprobs(model, [r], pad)
        out.append(logp[0][mask[0] > 0])
    return out


@pytest.mark.slow
def test_packed_rows_score_every_sampled_token_as_its_own_turn_row_does(episodes):
    tr, trajs = episodes
    b, pad = tr.backend, tr.tokenizer.pad_token_id
    packed_any = False
    for traj in trajs:
        turns, miss = trajectory_rows(b, traj, tr.system, tr.tools, 1.0, 0)
        packed, miss2 = trajectory_rows(b, traj, tr.system, tr.tools, 1.0, 0, pack=True)
        assert miss == miss2 == 0 and len(turns) >= 2  # multi-turn episodes, every turn has its ids
        assert sum(r.turns for r in packed) == len(turns) and len(packed) <= len(turns)
        packed_any |= len(packed) < len(turns)
        # the masked ids, in order, are exactly the sampled ids of the turns
        assert [t for r in packed for t, m in zip(r.ids, r.mask) if m] == \
            [t for r in turns for t, m in zip(r.ids, r.mask) if m]
        a = torch.cat(_masked_logprobs(tr.model, turns, pad))
        p = torch.cat(_masked_logprobs(tr.model, packed, pad))
        assert torch.allclose(a, p, atol=1e-5), (a - p).abs().max()
    assert packed_any, "the chat template never let one turn's row extend into the next: packing does nothing"


@pytest.mark.slow
def test_a_row_cap_starts_a_new_row_instead_of_dropping_the_episode(episodes):
    tr, trajs = episodes
    traj = trajs[0]
    turns, _ = trajectory_rows(tr.backend, traj, tr.system, tr.tools, 1.0, 0)
    cap = len(turns[1].ids) - 1  # the second turn's prompt no longer fits in the first row
    packed, _ = trajectory_rows(tr.backend, traj, tr.system, tr.tools, 1.0, 0, pack=True, max_tokens=cap)
    assert len(packed) >= 2 and packed[0].turns == 1 and sum(r.turns for r in packed) == len(turns)


def test_sampler_logprobs_land_on_the_masked_columns_of_a_packed_row():
    row = Row(ids=[5, 6, 7, 8, 9, 10], mask=[0, 1, 0, 0, 1, 1], advantage=1.0, group=0, logprobs=[-1.0, -2.0, -3.0])
    logp = torch.zeros(1, 5)  # token_logprobs' layout: positions 1..5 (the first token has no prediction)
    mask = torch.tensor([[1.0, 0, 0, 1, 1]])
    old = sampler_logprobs([row], logp, mask)
    assert old.tolist() == [[-1.0, 0.0, 0.0, -2.0, -3.0]]


@pytest.mark.slow
def test_the_update_gives_the_same_gradient_packed_or_per_turn(episodes, tokenizer):
    from accelerate import Accelerator

    from kit.train.grpo_update import ppo_update

    tr, trajs = episodes
    grads = {}
    for pack in (False, True):
        rows = []
        for gi, traj in enumerate(trajs):
            rs, _ = trajectory_rows(tr.backend, traj, tr.system, tr.tools, 0.5 - gi * 0.3, 0, pack=pack)
            rows += rs
        model = tiny_llama(tokenizer)
        opt = torch.optim.SGD(model.parameters(), lr=0.0)  # a step that moves nothing: compare gradients

        acc = Accelerator(cpu=True)
        cfg = GRPOConfig(micro_batch_size=2, max_grad_norm=1e9, print_metrics=False)
        m, failed = ppo_update(model, opt, acc, Processes(acc), rows, cfg, tokenizer.pad_token_id, random.Random(0))
        assert failed is None
        grads[pack] = torch.cat([p.grad.flatten() for p in model.parameters()])
    assert torch.allclose(grads[True], grads[False], rtol=1e-4, atol=1e-7)


def test_micro_batches_stop_at_the_token_budget():
    from kit.train.grpo_update import micro_batches

    rows = [Row(ids=[1] * n, mask=[1] * n, advantage=0.0, group=0) for n in (10, 20, 30, 40, 100)]
    lengths = lambda mbs: [[len(r.ids) for r in mb] for mb in mbs]  # noqa: E731
    assert lengths(micro_batches(rows, 4)) == [[10, 20, 30, 40], [100]]
    # padded tokens = rows x longest: 10+20 -> 2 x 20 = 40; adding 30 would be 3 x 30 = 90 > 60
    assert lengths(micro_batches(rows, 4, tokens=60)) == [[10, 20], [30], [40], [100]]  # 100 alone, over budget
    assert lengths(micro_batches(rows, 2, tokens=1000)) == [[10, 20], [30, 40], [100]]
    assert lengths(micro_batches([], 4, tokens=60)) == []


@pytest.mark.slow
def test_a_token_budget_splits_micro_batches_without_changing_the_gradient(episodes, tokenizer):
    from accelerate import Accelerator

    from kit.train.grpo_update import ppo_update

    tr, trajs = episodes
    rows = []
    for gi, traj in enumerate(trajs):
        rs, _ = trajectory_rows(tr.backend, traj, tr.system, tr.tools, 0.5 - gi * 0.3, 0, pack=True)
        rows += rs
    grads, passes = {}, {}
    for budget in (None, 16):  # 16 tokens: every row runs alone
        model = tiny_llama(tokenizer)
        opt = torch.optim.SGD(model.parameters(), lr=0.0)
        acc = Accelerator(cpu=True)
        cfg = GRPOConfig(micro_batch_size=4, micro_batch_tokens=budget, max_grad_norm=1e9, print_metrics=False)
        m, failed = ppo_update(model, opt, acc, Processes(acc), rows, cfg, tokenizer.pad_token_id, random.Random(0))
        assert failed is None
        grads[budget] = torch.cat([p.grad.flatten() for p in model.parameters()])
        passes[budget] = m["train/micro_batches"]
    assert len(rows) > 1 and passes[16] == len(rows) and passes[None] == -(-len(rows) // 4)
    assert torch.allclose(grads[16], grads[None], rtol=1e-4, atol=1e-7)
