"""GRPO with its rollouts served by a real OpenAI-compatible server (`transformers serve` on
loopback) whose weights follow the trainer: after each optimizer step the new weights go to a
folder the server loads by name, and the next step's episodes are sampled from it.

The policy is the embedded SmolLM2-135M (a randomly initialised model only repeats one token under
the server's sampling); the user is kit.rollout.ScriptedUser; the reward is a fixed function of the
sampled text (its length's parity), so a group's episodes differ in reward.
`transformers serve` returns no token ids, so rows are re-tokenized (`server_token_ids: false`),
which the metrics count; vLLM's ids path is not exercised here (no GPU)."""

import math

import httpx
import pytest
import torch
from _serving import serving

from kit.train.grpo import GRPOConfig, GRPOTrainer


@pytest.mark.slow
def test_rollouts_come_from_the_server_and_the_server_samples_each_steps_weights(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from kit.envs import load_domain
    from kit.llm import ensure_embedded_model
    from kit.rollout import ScriptedUser

    start = ensure_embedded_model()
    tok = AutoTokenizer.from_pretrained(start)
    domain = load_domain("mock")
    task = domain.task("create_task_1")

    def reward(task, traj):  # varies within a group: some advantage to train on
        first = next(m for m in traj.messages if m.role == "assistant" and "completion_tokens" in m.meta)
        return float(len(first.meta.get("raw") or "") % 2 == 0)

    with serving(None, tmp_path / "serve.log") as url:  # not pinned: it loads the folder a request names
        cfg = GRPOConfig(lr=1e-4, group_size=4, tasks_per_step=1, resample_budget=0, filter_mode="off",
                         micro_batch_size=4, max_new_tokens=12, max_messages=4, seed=0, print_metrics=False,
                         rollout="server", rollout_server=url, rollout_server_model=str(start),
                         server_token_ids=False, sync_dir=str(tmp_path / "sync"))
        model = AutoModelForCausalLM.from_pretrained(start, local_files_only=True)
        tr = GRPOTrainer(model, tok, [task], cfg, domain=domain, user=ScriptedUser(task), reward_fn=reward)
        assert tr.sampler is not tr.backend and tr.sampler.base_url == url
        history = tr.train(steps=2)
        models = [m["id"] for m in httpx.get(f"{url}/models", timeout=10).json()["data"]]

    print([(m["reward/mean"], m["reward/std"]) for m in history])
    assert any(m["reward/std"] > 0 for m in history)  # something to learn from
    for step, m in enumerate(history):
        assert m["skipped"] == 0, m["skip_reason"]
        assert m["train/turns"] >= 4 and m["train/retokenized_turns"] == m["train/turns"]  # from the server's text
        assert m["train/unmatched_turns"] == 0 and math.isfinite(m["loss"]) and m["time/weight_sync_s"] > 0
    # after each step the trained weights were written and requested by their folder's path
    step1, step2 = tmp_path / "sync" / "step-1", tmp_path / "sync" / "step-2"
    assert (step1 / "config.json").exists() and (step2 / "config.json").exists()
    assert tr.sampler.model == str(step2.resolve())
    # the server loaded step 1's weights: step 2's episodes were sampled from them
    assert str(step1.resolve()) in models, models
    trained = AutoModelForCausalLM.from_pretrained(step1, local_files_only=True).state_dict()
    initial = AutoModelForCausalLM.from_pretrained(start, local_files_only=True).state_dict()
    assert any(not torch.equal(trained[k], initial[k]) for k in initial), "step 1 pushed unchanged weights"
