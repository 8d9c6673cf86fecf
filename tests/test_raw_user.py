"""The user-model ablation's raw user is noisy, not mute: GRPO's groups get nonzero, varying reward against
a briefly SFT'd user, and none against the untouched model (recipes/ablations/user_model.yaml's raw arm plays
the SFT user after 8 of its 24 steps; the untouched 135M model states the request in 0 % of openings).

The users are real: the embedded SmolLM2-135M-Instruct, untouched and after the raw arm's 8 SFT steps on
engine-made user samples (tests/data/engine_sft_user_mock.jsonl: the first 40 lines of the user-model
ablation's sft_user.jsonl, 2026-12-04, written by the kit's engine on mock with the embedded model). The agent
is scripted (`ListeningAgent`, a stand-in for a model in a test about the user): it makes the task's gold calls
only when the user's opening names every value those calls need that the user knows
(kit.rollout.fidelity.required_user_values, what request_stated checks), and gives up otherwise. Its reward
therefore measures the user: a user that states its request gets it done, a mute one gets nothing. Groups are
collected, scored (kit.verify) and filtered by GRPO's own code (kit.train.grpo_groups.collect_groups).
Measured when written (6 tasks x G 4, GRPO's default user temperature 1.0): the untouched user stated none of 24
openings (every group filtered: GRPO skips the step), a 4-step user 2 (two groups with signal); the recipe's
8-step user states 0.22 of heldout_val openings (0.41 of its RL tasks'). 12 tasks x G 4: a user stating 8 % of
requests would fail the test by chance in 1.6 % of seeds (0.92^48), one stating 22 % in none that matter."""

from __future__ import annotations

from itertools import groupby
from pathlib import Path

import pytest

from kit.envs import load_domain
from kit.llm.types import Completion, SamplingParams
from kit.replay import gold_actions
from kit.rollout.fidelity import _norm_value, required_user_values
from kit.rollout.scripted import ScriptedAgent

GIVE_UP = "I am sorry, I could not tell what you need. ###STOP###"
N_TASKS, G = 12, 4
DATA = Path(__file__).parent / "data" / "engine_sft_user_mock.jsonl"


class ListeningAgent(ScriptedAgent):
    """kit's scripted gold agent (kit/rollout/scripted.py), bound to one task, that acts only when every needed
    value is in the user's opening; otherwise it gives up."""

    def __init__(self, task, domain):
        super().__init__(task)
        self.needed = required_user_values(task, domain=domain)

    def step(self, conv: list[dict]) -> Completion:
        opening = next((m.get("content") for m in conv if m["role"] == "user" and m.get("content")), "")
        if all(v in _norm_value(opening) for v in self.needed):
            return super().step(conv)
        return Completion(text=GIVE_UP, raw=GIVE_UP, finish_reason="stop")


def _tasks(dom) -> list:
    """Held-out tasks whose gold writes need values the user knows (the only ones a user's words decide)."""
    out = [t for t in dom.tasks("heldout_val")
           if required_user_values(t, domain=dom) and all(a.requestor == "assistant" for a in gold_actions(t))]
    return out[:N_TASKS]


def _groups(dom, tasks, user):
    from accelerate import Accelerator
    from kit.rollout import RolloutConfig, run_episodes
    from kit.train.grpo_config import GRPOConfig
    from kit.train.grpo_groups import TaskDraws, collect_groups, episode_metrics
    from kit.train.processes import Processes
    from kit.verify import verify

    # GRPO's user settings in the user-model ablation (48 user tokens, 13 messages); one step, no resampling
    cfg = GRPOConfig(group_size=G, tasks_per_step=len(tasks), resample_budget=0, user_max_new_tokens=48,
                     max_messages=13, user_temperature=1.0, seed=0)

    def rollout(todo, seed):
        rc = RolloutConfig(max_messages=cfg.max_messages, seed=seed,
                           user_params=SamplingParams(temperature=cfg.user_temperature,
                                                      max_new_tokens=cfg.user_max_new_tokens))
        trajs = []
        for _, same in groupby(todo, key=lambda t: t.id):  # one scripted agent per task, its G episodes batched
            same = list(same)
            trajs += run_episodes(dom, same, ListeningAgent(same[0], dom), user, rc, progress=False)
        return trajs

    kept, seen, m = collect_groups(TaskDraws(tasks, 0), Processes(Accelerator(cpu=True)), cfg, 0, rollout,
                                   lambda task, traj: verify(dom, task, traj).reward)
    return kept, seen, {**m, **episode_metrics(seen, dom)}


@pytest.fixture(scope="module")
def noisy_user_folder(tmp_path_factory):
    """The embedded model after 8 SFT steps (batch 4, lr 1e-4, 1 warm-up step: the raw arm's sft_user_raw) on
    engine-made user samples."""
    from kit.llm import ensure_embedded_model
    from kit.train.sft import SFTConfig, run_sft

    start = str(ensure_embedded_model())
    out = tmp_path_factory.mktemp("noisy_user") / "model"
    run_sft(DATA, SFTConfig(model_path=start, output_dir=str(out), train_steps=8, batch_size=4, lr=1e-4,
                                    warmup_steps=1, max_seq_len=1024, save_every=0))
    return out


@pytest.mark.slow
def test_grpo_against_a_briefly_trained_user_gets_nonzero_varying_reward_and_none_against_the_untouched_model(
        noisy_user_folder):
    from kit import metrics as M
    from kit.llm import make_backend

    dom = load_domain("mock")
    tasks = _tasks(dom)
    assert len(tasks) == N_TASKS
    seen_by = {}
    for name, spec in (("untouched", "embedded"), ("noisy", f"hf:{noisy_user_folder}")):
        kept, seen, m = _groups(dom, tasks, make_backend(spec))
        rewards = [r for g in seen for r in g.rewards]
        assert len(rewards) == N_TASKS * G, name
        seen_by[name] = (kept, rewards, m)
    kept, rewards, m = seen_by["untouched"]
    assert sum(rewards) == 0 and kept == [], m  # mute: no reward, every group filtered, GRPO's step skipped
    kept, rewards, m = seen_by["noisy"]
    assert 0 < sum(rewards) < len(rewards), (rewards, m)  # some requests stated, not all
    assert kept, m  # at least one group with signal: an advantage to learn from
    assert m[M.REQUEST_STATED_RATE] > seen_by["untouched"][2][M.REQUEST_STATED_RATE], m
