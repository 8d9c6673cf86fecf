"""GRPO arithmetic against numbers computed by hand (kit/train/grpo_math.py)."""

import math

import pytest
import torch

from kit.train.grpo_math import (
    assistant_token_mask,
    filter_groups,
    group_advantages,
    ppo_clip_loss,
)

torch.set_num_threads(1)


def test_group_advantages_use_each_groups_mean_and_population_std():
    adv = group_advantages([[1, 0, 0, 1], [1, 1, 1, 1]], eps=1e-6)
    # group 1: mean 0.5, population std 0.5 -> +-0.5 / (0.5 + 1e-6); group 2: no spread -> all 0
    assert adv[0] == pytest.approx([0.5 / 0.500001, -0.5 / 0.500001, -0.5 / 0.500001, 0.5 / 0.500001], abs=1e-12)
    assert adv[1] == [0.0, 0.0, 0.0, 0.0]
    # population, not sample, std: [1, 0, 0] has std sqrt(2/9), so 1 -> (2/3) / sqrt(2/9) = sqrt(2)
    assert group_advantages([[1, 0, 0]], eps=0)[0][0] == pytest.approx(math.sqrt(2))


def test_batch_scope_normalises_over_every_reward_of_the_batch():
    adv = group_advantages([[1, 0, 0, 1], [1, 1, 1, 1]], eps=0, scope="batch")
    # 8 rewards, six 1s: mean 0.75, variance (6 * 0.0625 + 2 * 0.5625) / 8 = 0.1875
    s = math.sqrt(0.1875)
    assert adv[0] == pytest.approx([0.25 / s, -0.75 / s, -0.75 / s, 0.25 / s])
    assert adv[1] == pytest.approx([0.25 / s] * 4)  # an all-success group still pushes up here
    with pytest.raises(ValueError, match="scope"):
        group_advantages([[1, 0]], scope="token")


def test_filter_modes_paper_drops_all_equal_areal_drops_only_all_success():
    rewards = [[1, 0, 0, 1], [1, 1, 1, 1], [0, 0, 0, 0]]
    assert filter_groups(rewards, "all_equal") == [True, False, False]
    assert filter_groups(rewards, "all_success") == [True, False, True]
    assert filter_groups(rewards, "off") == [True, True, True]
    with pytest.raises(ValueError, match="filter mode"):
        filter_groups(rewards, "some")


def test_assistant_mask_is_one_only_on_generated_tokens_of_a_multi_turn_episode():
    # system(3) user(2) assistant text(2) assistant tool call(2) tool result(1) env feedback(1) assistant(1) user(1)
    segments = [("system", [1, 2, 3]), ("user", [4, 5]), ("assistant", [6, 7]), ("completion", [8, 9]),
                ("tool", [10]), ("env", [11]), ("assistant", [12]), ("user", [13])]
    ids, mask = assistant_token_mask(segments)
    assert ids == list(range(1, 14))
    assert mask == [0, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 1, 0]
    assert assistant_token_mask([("prompt", [5, 6]), ("whatever_new_kind", [7])])[1] == [0, 0, 0]


def _toy():
    # ratios exp(new - old): row 0 -> [1.5, 0.5, 1.1] with A = +1; row 1 -> same ratios, A = -1, last token masked
    old = torch.zeros(2, 3)
    new = torch.log(torch.tensor([[1.5, 0.5, 1.1], [1.5, 0.5, 1.1]])).requires_grad_(True)
    adv = torch.tensor([1.0, -1.0])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    return new, old, adv, mask


def test_ppo_clip_loss_clips_and_normalises_over_all_unmasked_tokens():
    new, old, adv, mask = _toy()
    loss, stats = ppo_clip_loss(new, old, adv, mask, clip_eps=0.2)
    # row 0 (A=+1): -min(r, clip(r)) = [-1.2 (clipped), -0.5, -1.1]
    # row 1 (A=-1): -min(-r, -clip(r)) = [1.5, 0.8 (clipped)], third token masked
    assert loss.item() == pytest.approx((-1.2 - 0.5 - 1.1 + 1.5 + 0.8) / 5)
    assert stats["clip_frac"] == pytest.approx(2 / 5)
    assert stats["tokens"] == 5
    loss.backward()
    # d/dlogp of -r*A/5 is -r*A/5 where unclipped, 0 where the clipped term was used or masked
    assert new.grad.flatten().tolist() == pytest.approx([0.0, -0.5 / 5, -1.1 / 5, 1.5 / 5, 0.0, 0.0])
    # the paper's wider clip range (0.4) lets ratio 1.5 with A=+1 still through the clip at 1.4
    loss04, stats04 = ppo_clip_loss(new.detach(), old, adv, mask, clip_eps=0.4)
    assert loss04.item() == pytest.approx((-1.4 - 0.5 - 1.1 + 1.5 + 0.6) / 5)
    assert stats04["clip_frac"] == pytest.approx(2 / 5)


def test_sequence_norm_and_micro_batches_with_total_tokens_match_one_batch():
    new, old, adv, mask = _toy()
    seq, _ = ppo_clip_loss(new, old, adv, mask, clip_eps=0.2, norm="sequence")
    assert seq.item() == pytest.approx(((-1.2 - 0.5 - 1.1) / 3 + (1.5 + 0.8) / 2) / 2)
    full, _ = ppo_clip_loss(new, old, adv, mask, clip_eps=0.2)
    parts = [ppo_clip_loss(new[i : i + 1], old[i : i + 1], adv[i : i + 1], mask[i : i + 1], 0.2, total_tokens=5)[0]
             for i in range(2)]
    assert (parts[0] + parts[1]).item() == pytest.approx(full.item())


def test_on_policy_ratio_one_gives_minus_mean_advantage_and_kl_needs_a_reference():
    new = torch.tensor([[-1.0, -2.0], [-0.5, -0.1]])
    loss, stats = ppo_clip_loss(new, new.clone(), torch.tensor([2.0, -1.0]), torch.ones(2, 2))
    assert loss.item() == pytest.approx(-(2 + 2 - 1 - 1) / 4)
    assert stats["clip_frac"] == 0.0 and stats["approx_kl"] == pytest.approx(0.0)
    with pytest.raises(ValueError, match="logp_ref"):
        ppo_clip_loss(new, new, torch.ones(2), torch.ones(2, 2), kl_coef=0.1)
    # k3 penalty: ref - new = log 2 on one token -> 2 - log 2 - 1
    ref = new.clone()
    ref[0, 0] += math.log(2.0)
    loss_kl, st = ppo_clip_loss(new, new, torch.zeros(2), torch.ones(2, 2), kl_coef=0.5, logp_ref=ref)
    assert loss_kl.item() == pytest.approx(0.5 * (1 - math.log(2.0)) / 4)
    assert st["kl_ref"] == pytest.approx((1 - math.log(2.0)) / 4)
