"""One GRPO run for tests/test_grpo_distributed.py, as one process or under `accelerate launch`.

    accelerate launch --multi_gpu --num_processes 2 tests/_grpo_distributed.py OUT [--lora]   (on CPU: gloo)

The model is a randomly initialised 2-layer Llama with SmolLM2's tokenizer (the test is about how
processes share a batch, not about what a model learns). Rollouts are single-turn and seeded per
task and step, so a task's group is the same whichever process samples it; rewards are a fixed
function of the sampled text. A checkpoint is written after step 1 (OUT/ckpt: weights and optimizer
by the main process, loop state by each); a second trainer resumed from it trains step 2 again.
Each process writes both trainers' final weights to OUT/rank<r>.pt.
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_grpo_learning import PromptTask, tiny_llama  # noqa: E402

from kit.llm import ensure_embedded_model  # noqa: E402
from kit.llm.types import SamplingParams  # noqa: E402
from kit.train.grpo import GRPOConfig, GRPOTrainer  # noqa: E402
from kit.trajectory import Message, Trajectory  # noqa: E402

SYSTEM = "You are a helpful assistant."
TASKS = [PromptTask(f"t{i}", p) for i, p in enumerate(["Name an animal.", "Say hello.", "Count to three.",
                                                        "Name a colour.", "Give a number.", "Say yes or no."])]


def main() -> None:
    from accelerate import Accelerator
    from transformers import AutoTokenizer

    out, lora = Path(sys.argv[1]), "--lora" in sys.argv
    torch.set_num_threads(1)
    acc = Accelerator(cpu=True)
    tok = AutoTokenizer.from_pretrained(ensure_embedded_model())
    model = tiny_llama(tok, seed=0)
    calls = {"n": 0}

    def rollout(tasks, agent, seed):
        """Each task's group sampled on its own, seeded by (task, call): independent of the process."""
        calls["n"] += 1
        trajs = []
        for k in range(0, len(tasks), G):
            t = tasks[k]
            conv = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": t.prompt}]
            # lengths differ by task, so the processes' shares hold different numbers of tokens
            params = SamplingParams(temperature=1.0, max_new_tokens=3 + 2 * int(t.id[1:]),
                                    seed=1000 * calls["n"] + int(t.id[1:]))
            for (c,) in agent.generate_batch([conv] * G, None, params):
                msgs = [Message(role="user", content=t.prompt),
                        Message(role="assistant", content=c.text,
                                meta={"completion_tokens": c.completion_tokens, "token_ids": c.token_ids})]
                trajs.append(Trajectory(task_id=t.id, messages=msgs, termination_reason="agent_stop"))
        return trajs

    def reward(task, traj):
        return float(traj.messages[-1].meta["token_ids"][-1] % 2 == 0)  # varies within a group

    G = 4
    cfg = GRPOConfig(lr=1e-3, group_size=G, tasks_per_step=4, resample_budget=0, filter_mode="off",
                     micro_batch_size=3, max_new_tokens=16, seed=0, print_metrics=False, train_steps=2, save_every=1,
                     lora=lora, lora_r=4, lora_alpha=8, gradient_checkpointing=lora)
    trainer = GRPOTrainer(model, tok, TASKS, cfg, reward_fn=reward, rollout_fn=rollout, agent_system=SYSTEM,
                          accelerator=acc)
    history = trainer.train(steps=2, checkpoint_dir=out / "ckpt")  # save_every=1: a checkpoint after step 1
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().clone() for k, v in trainer.policy.state_dict().items()}

    resumed = GRPOTrainer(tiny_llama(tok, seed=0), tok, TASKS, cfg, reward_fn=reward, rollout_fn=rollout,
                          agent_system=SYSTEM, accelerator=acc)
    done = resumed.resume(out / "ckpt")
    calls["n"] = done  # this test's rollouts seed by call count: state of the test's own, not the trainer's
    resumed.train()
    again = {k: v.detach().clone() for k, v in resumed.policy.state_dict().items()}
    torch.save({"state": state, "history": history, "world": acc.num_processes, "resumed_from": done,
                "resumed_state": again, "tasks": [t.id for t in trainer.tasks]}, out / f"rank{acc.process_index}.pt")


if __name__ == "__main__":
    main()
