"""The GRPO loop (kit/train/grpo.py): it learns, it refuses bad input loudly, it runs end to end.

Models: the learning test uses the real embedded SmolLM2-135M-Instruct. The loop tests (bad
input, rows, multi-turn smoke) use a randomly initialised 2-layer Llama with SmolLM2's tokenizer:
they are about the loop's plumbing, not about what a model learns, and it makes them fast.
"""

import math
import time
from dataclasses import dataclass

import pytest
import torch

from kit.llm import ensure_embedded_model
from kit.llm.hf import HFBackend
from kit.llm.types import SamplingParams
from kit.train.grpo import GRPOConfig, GRPOTrainer
from kit.train.sequences import trajectory_rows
from kit.trajectory import Message, Trajectory

torch.set_num_threads(1)
SYSTEM = "You are a helpful assistant."


@dataclass
class PromptTask:
    """A single-turn task: one user prompt, no tools."""

    id: str
    prompt: str


def single_turn(max_new_tokens: int):
    """rollout_fn: one sampled assistant reply per task, recorded the way run_episodes records it."""

    def rollout(tasks, agent, seed):
        convs = [[{"role": "system", "content": SYSTEM}, {"role": "user", "content": t.prompt}] for t in tasks]
        outs = agent.generate_batch(convs, None, SamplingParams(temperature=1.0, max_new_tokens=max_new_tokens, seed=seed))
        trajs = []
        for t, (c,) in zip(tasks, outs):
            content = c.raw if c.parse_errors and not c.tool_calls else c.text
            msgs = [Message(role="user", content=t.prompt),
                    Message(role="assistant", content=content,
                            meta={"completion_tokens": c.completion_tokens, "token_ids": c.token_ids})]
            trajs.append(Trajectory(task_id=t.id, messages=msgs, termination_reason="agent_stop"))
        return trajs

    return rollout


def says(word):
    """Reward 1 when the agent's reply contains `word` (an outcome of the sampled text, nothing else)."""
    return lambda task, traj: float(word in (traj.messages[-1].content or "").lower())


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(ensure_embedded_model())


def tiny_llama(tokenizer, seed=0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                      tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id,
                      eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    return LlamaForCausalLM(cfg)


def weights(model):
    return torch.cat([p.detach().flatten().clone() for p in model.parameters()])


def small_cfg(**kw):
    base = {"lr": 1e-3, "group_size": 4, "tasks_per_step": 1, "resample_budget": 2, "micro_batch_size": 4,
            "max_new_tokens": 8, "seed": 0, "print_metrics": False}
    return GRPOConfig(**{**base, **kw})


def test_empty_task_list_and_bad_config_are_refused_by_name(tokenizer):
    with pytest.raises(ValueError, match="`tasks` is empty"):
        GRPOTrainer(tiny_llama(tokenizer), tokenizer, [], small_cfg(), rollout_fn=single_turn(4),
                    reward_fn=says("x"), agent_system=SYSTEM)
    with pytest.raises(ValueError, match="group_size"):
        small_cfg(group_size=1)
    with pytest.raises(ValueError, match="filter_mode"):
        small_cfg(filter_mode="none")
    with pytest.raises(ValueError, match="rollout_fn"):
        GRPOTrainer(tiny_llama(tokenizer), tokenizer, [PromptTask("a", "hi")], small_cfg())


def test_all_groups_filtered_and_budget_spent_skips_the_step_with_its_reason(tokenizer):
    model = tiny_llama(tokenizer)
    before = weights(model)
    tr = GRPOTrainer(model, tokenizer, [PromptTask("a", "Say hi."), PromptTask("b", "Say bye.")], small_cfg(),
                     rollout_fn=single_turn(4), reward_fn=lambda task, traj: 0.0, agent_system=SYSTEM)
    m = tr.step()
    assert (m["skipped"], m["skip_reason"], m["skipped/all_groups_filtered"]) == (1, "all_groups_filtered", 1)
    assert m["groups/resamples"] == 2 and m["groups/filtered_frac"] == 1.0 and m["groups/kept"] == 0
    assert m["reward/mean"] == 0.0 and "loss" not in m
    assert torch.equal(weights(model), before)


def test_nan_loss_skips_the_step_with_its_reason_and_leaves_the_weights(tokenizer):
    model = tiny_llama(tokenizer)
    before = weights(model)
    nan_reward = lambda task, traj: float("nan")  # a broken reward function
    tr = GRPOTrainer(model, tokenizer, [PromptTask("a", "Say hi.")], small_cfg(), rollout_fn=single_turn(4),
                     reward_fn=nan_reward, agent_system=SYSTEM)
    m = tr.step()
    assert (m["skipped"], m["skip_reason"], m["train/minibatches_applied"]) == (1, "nan_loss", 0)
    assert torch.equal(weights(model), before)


def test_rows_hold_the_rendered_prompt_then_exactly_the_sampled_tokens(tokenizer):
    model = tiny_llama(tokenizer)
    tr = GRPOTrainer(model, tokenizer, [PromptTask("a", "Say hi.")], small_cfg(), rollout_fn=single_turn(6),
                     reward_fn=says("x"), agent_system=SYSTEM)
    trajs = single_turn(6)([PromptTask("a", "Say hi.")] * 3, tr.backend, 0)
    for traj in trajs:
        (row,), unmatched = trajectory_rows(tr.backend, traj, SYSTEM, None, advantage=0.5, group=0)
        assert unmatched == 0 and row.advantage == 0.5
        n = row.mask.index(1)
        assert set(row.mask[n:]) == {1} and set(row.mask[:n]) == {0}
        prompt = tr.backend.render([{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Say hi."}])
        assert tokenizer.decode(row.ids[:n]) == prompt
        body = [t for t in row.ids[n:] if t not in tr.backend.skip_ids]
        assert tokenizer.decode(body).strip() == traj.messages[-1].content.strip()  # the parser strips text
        assert row.ids[n:] == traj.messages[-1].meta["token_ids"]
    # a generated turn whose backend reported no ids is skipped and counted, never re-tokenized
    del trajs[0].messages[-1].meta["token_ids"]
    assert trajectory_rows(tr.backend, trajs[0], SYSTEM, None, 0.5, 0) == ([], 1)


class RecordingRun:
    """Stands in for a W&B run (a third-party object): the test is about what the trainer logs."""

    def __init__(self):
        self.logged = []

    def log(self, data, step=None):
        self.logged.append((step, data))


def test_off_policy_minibatches_and_kl_penalty_update_and_log_stable_metrics(tokenizer):
    model = tiny_llama(tokenizer)
    before = weights(model)
    run = RecordingRun()
    odd_length = lambda task, traj: float(len(traj.messages[-1].content or "") % 2)  # varies with the sampled text
    cfg = small_cfg(group_size=8, minibatches=2, micro_batch_size=2, kl_coef=0.1, clip_eps=0.2, filter_mode="off")
    tr = GRPOTrainer(model, tokenizer, [PromptTask("a", "Say hi.")], cfg, rollout_fn=single_turn(6),
                     reward_fn=odd_length, agent_system=SYSTEM, wandb_run=run)
    m = tr.step()
    assert m["skipped"] == 0 and m["train/minibatches_applied"] == 2 and 0 < m["reward/mean"] < 1
    assert m["approx_kl"] > 0 and m["kl_ref"] > 0  # the second minibatch ran on moved weights
    assert not torch.equal(weights(model), before)
    (step, logged), = run.logged
    assert step == 0 and all(isinstance(v, (int, float)) for v in logged.values())
    # W&B keys are the metric names under the stage's section (kit.metrics.wandb_keys)
    assert {"grpo/reward/mean", "grpo/loss", "grpo/clip_frac", "grpo/grad_norm", "grpo/lr", "grpo/time/step_s"} <= set(logged)


def test_multi_turn_smoke_on_the_mock_domain_one_optimizer_step_and_metrics(tokenizer, tmp_path):
    from kit.envs import load_domain
    from kit.rollout import ScriptedUser

    domain = load_domain("mock")
    task = domain.task("create_task_1")
    model = tiny_llama(tokenizer)
    cfg = small_cfg(group_size=2, tasks_per_step=1, max_messages=4, max_new_tokens=16, filter_mode="off")
    tr = GRPOTrainer(model, tokenizer, [task], cfg, domain=domain, user=ScriptedUser(task))  # reward: kit.verify
    m = tr.step()
    assert m["skipped"] == 0, m["skip_reason"]
    assert m["train/minibatches_applied"] == 1 and math.isfinite(m["grad_norm"]) and math.isfinite(m["loss"])
    assert all(s["step"] == 1 for s in tr.opt.state.values())  # AdamW stepped every parameter once
    assert m["train/turns"] == m["episode/turns_mean"] * 2 >= 2 and m["train/unmatched_turns"] == 0
    assert 2 <= m["train/rows"] <= m["train/turns"]  # an episode's turns packed where exact (tests/test_grpo_pack.py)
    for key in ("reward/mean", "reward/std", "pass_rate", "groups/filtered_frac", "groups/resamples",
                "episode/tokens_mean", "user_deviation_rate", "clip_frac", "lr", "time/step_s"):
        assert key in m and math.isfinite(m[key]), key
    assert sum(v for k, v in m.items() if k.startswith("termination/")) == pytest.approx(1.0)
    assert m["reward/mean"] in (0.0, 0.5, 1.0)
    # the rollout user's behaviour (the user-model ablation's columns): the scripted user opens with "Hi, I need
    # some help with my account." (the request's values never said); a proper end is a stop termination
    assert m["request_stated_rate"] == 0.0 and m["proper_end_rate"] == sum(
        m.get(f"termination/{r}", 0) for r in ("user_stop", "agent_stop"))
    out = tr.save(tmp_path / "ckpt")
    reloaded = HFBackend(out, device="cpu")
    assert reloaded.chat([{"role": "user", "content": "hi"}], max_new_tokens=2, seed=0)[0].completion_tokens >= 1


def test_an_episode_budget_stops_training_at_equal_rollout_cost_and_survives_a_resume(tokenizer):
    """`episode_budget`: arms of different batch shapes stop after the same number of scored episodes (the
    ablations' equal-cost comparison); the count is part of the loop state a resume restores."""
    from kit.envs import load_domain
    from kit.rollout import ScriptedUser

    domain = load_domain("mock")
    task = domain.task("create_task_1")
    cfg = small_cfg(group_size=2, tasks_per_step=1, max_messages=4, max_new_tokens=8, filter_mode="off",
                    train_steps=10, episode_budget=4)
    tr = GRPOTrainer(tiny_llama(tokenizer), tokenizer, [task], cfg, domain=domain, user=ScriptedUser(task))
    history = tr.train()
    assert [m["episodes/total"] for m in history] == [2, 4] and tr.budget_spent and tr.step_idx == 2
    state = tr.loop_state()
    again = GRPOTrainer(tiny_llama(tokenizer), tokenizer, [task], cfg.model_copy(update={"episode_budget": 6}),
                        domain=domain, user=ScriptedUser(task))
    again.load_loop_state(state)
    assert again.episodes_scored == 4 and [m["episodes/total"] for m in again.train()] == [6]


def test_a_step_never_overshoots_the_episode_budget_resamples_stop_where_it_does(tokenizer):
    """Every group is filtered (reward 0 whatever the reply: the loop's counting is under test, not learning),
    so each step resamples. Budget 7 at G = 2, B = 1 and 3 resamples a step: the first step may resample only 2
    tasks (2 + 2 x 2 = 6 episodes), and a second step (2 more) would pass 7, so none starts."""
    task = PromptTask("pet", "Name an animal: cat or dog? Answer with one word.")
    cfg = small_cfg(group_size=2, tasks_per_step=1, resample_budget=3, filter_mode="all_equal", train_steps=5,
                    episode_budget=7)
    tr = GRPOTrainer(tiny_llama(tokenizer), tokenizer, [task], cfg, rollout_fn=single_turn(2),
                     reward_fn=lambda task, traj: 0.0, agent_system=SYSTEM)
    history = tr.train()
    assert [m["episodes/total"] for m in history] == [6] and [m["groups/resamples"] for m in history] == [2]
    assert tr.budget_spent and history[0]["skip_reason"]
    with pytest.raises(ValueError, match="episode_budget"):
        small_cfg(group_size=4, tasks_per_step=2, episode_budget=7)  # below one step's 8 episodes


@pytest.mark.slow
def test_grpo_raises_the_embedded_models_reward_for_saying_dog():
    """SmolLM2-135M asked "cat or dog?" mostly answers cat (measured: ~60% cat, ~12% dog at T=1).
    The reward is 1 when its reply contains "dog"; GRPO must flip that preference within 8 steps."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = ensure_embedded_model()
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    cfg = GRPOConfig(lr=2e-5, group_size=8, tasks_per_step=1, resample_budget=1, micro_batch_size=8,
                     max_new_tokens=6, train_steps=8, seed=0)
    task = PromptTask("pet", "Name an animal: cat or dog? Answer with one word.")
    tr = GRPOTrainer(model, tok, [task], cfg, rollout_fn=single_turn(6), reward_fn=says("dog"), agent_system=SYSTEM)
    t0 = time.perf_counter()
    curve = [m["reward/mean"] for m in tr.train()]
    print(f"reward/mean per step: {[round(r, 3) for r in curve]} in {time.perf_counter() - t0:.0f}s")
    first, last = sum(curve[:2]) / 2, sum(curve[-3:]) / 3
    assert first < 0.5, curve  # the base rate is a real, low starting point
    assert last >= first + 0.3 and last >= 0.6, curve
