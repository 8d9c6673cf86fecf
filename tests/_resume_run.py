"""The training runs tests/test_resume.py interrupts: GRPO and SFT on tiny models, a few steps, a
checkpoint every 2 steps. In-process (the test imports `grpo_run` / `sft_run`) or as a process to kill:

    python tests/_resume_run.py grpo OUT [--hold-at K]
    python tests/_resume_run.py sft OUT MODEL_DIR [--hold-at K]

--hold-at K: when the step after K finished steps begins (GRPO: in its rollouts; SFT: at
on_step_begin), write OUT/held and sleep until killed, so the test kills inside that step.

The models: a randomly initialised 2-layer Llama with SmolLM2's tokenizer (the test is about
resuming, not about what a model learns). GRPO: single-turn rollouts (tests/test_grpo_learning.py),
seeded per step and round by the trainer, a reward that is a fixed function of the sampled tokens,
LoRA, dynamic filtering with resampling, two PPO minibatches and the pass-rate curriculum (a probe
before steps 0 and 3: the kill lands in the second probe), so that every piece of loop state (task
queues, both streams, the band, the optimizer) decides what the steps after a resume do. SFT: full
weights, a warm-up schedule, 5 samples in batches of 2, so the resume lands inside an epoch.
"""

import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _grpo_distributed import SYSTEM, TASKS  # noqa: E402
from test_grpo_learning import single_turn, tiny_llama  # noqa: E402

STEPS, SAVE_EVERY = 6, 2
# a prefix every SFT row shares (>= 64 tokens: completion_loss runs it once and shares its cache)
PREFIX = "<|im_start|>system\n" + "You are a careful assistant who answers briefly and exactly. " * 7 + "<|im_end|>\n"
SFT_SAMPLES = [{"prompt": PREFIX + f"<|im_start|>user\nWhat is {a} plus {b}?<|im_end|>\n<|im_start|>assistant\n",
                "completion": f"{a} plus {b} is {a + b}.<|im_end|>"}
               for a, b in ((1, 2), (3, 4), (5, 8), (13, 21), (2, 7))]


def _hold(out: Path) -> None:
    (out / "held").write_text("")
    while True:
        time.sleep(60)


def grpo_run(out: Path, hold_at: int | None = None) -> tuple[list[dict], int]:
    """(every step's metrics, steps resumed from), through the grpo stage's own training function."""
    from transformers import AutoTokenizer

    from kit.llm import ensure_embedded_model
    from kit.stages.grpo import train_resumably
    from kit.train.grpo import GRPOConfig, GRPOTrainer

    tok = AutoTokenizer.from_pretrained(ensure_embedded_model())
    sample, box = single_turn(6), {}

    def rollout(tasks, agent, seed):
        if hold_at is not None and box["trainer"].step_idx == hold_at:
            _hold(out)
        return sample(tasks, agent, seed)

    def reward(task, traj):
        return float(traj.messages[-1].meta["token_ids"][-1] % 2 == 0)  # a group of 2 is all-equal half the time

    cfg = GRPOConfig(lr=1e-3, group_size=2, tasks_per_step=2, resample_budget=2, filter_mode="all_equal",
                     minibatches=2, micro_batch_size=2, max_new_tokens=6, seed=0, print_metrics=False,
                     lora=True, lora_r=4, lora_alpha=8, train_steps=STEPS, save_every=SAVE_EVERY,
                     probe_k=2, probe_every=3)  # the curriculum's band and its task stream are loop state too
    trainer = GRPOTrainer(tiny_llama(tok, seed=0), tok, TASKS, cfg, rollout_fn=rollout, reward_fn=reward,
                          agent_system=SYSTEM)
    box["trainer"] = trainer
    return train_resumably(trainer, out, tag="test")


def sft_run(out: Path, model_dir: Path, hold_at: int | None = None) -> dict:
    """run_sft's metrics; its final model in out/model, its checkpoints in out/checkpoints."""
    from transformers import TrainerCallback

    from kit.train.sft import SFTConfig, run_sft

    class Hold(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            if state.global_step == hold_at:
                _hold(out)

    cfg = SFTConfig(model_path=str(model_dir), output_dir=str(out / "model"), checkpoint_dir=str(out / "checkpoints"),
                    checkpoint_tag="test", train_steps=STEPS, save_every=SAVE_EVERY, batch_size=2, lr=1e-3,
                    warmup_steps=2, max_seq_len=160, dtype="float32", use_unsloth=False, seed=0)
    return run_sft(SFT_SAMPLES, cfg, callbacks=[Hold()] if hold_at is not None else None)


if __name__ == "__main__":
    torch.set_num_threads(1)
    args = sys.argv[1:]
    hold = int(args[args.index("--hold-at") + 1]) if "--hold-at" in args else None
    if args[0] == "grpo":
        grpo_run(Path(args[1]), hold)
    else:
        sft_run(Path(args[1]), Path(args[2]), hold)
