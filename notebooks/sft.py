# ---
# jupyter:
#   jupytext:
#     cell_metadata_filter: tags
#     formats: py:percent
#     notebook_metadata_filter: kernelspec,-jupytext.text_representation
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Stages `sft_user` and `sft_agent`: SFT of the user simulator or the agent
#
# Supervised fine-tuning of the user simulator or the agent (`stage`: which) on the engine's
# `sft_user.jsonl` / `sft_agent.jsonl` (the domain's gold dialogues
# if the engine gave none, said loudly). What it does and what it simplifies: `kit/stages/sft.py`.
# Output: `model/`, a plain HF folder.
#
# Run by `kit run RECIPE` (papermill fills the parameters cell and writes the executed copy to
# `runs/<run-id>/<stage-id>/`), or by hand in JupyterLab with the defaults below.

# %% tags=["parameters"]
# Parameters of the `sft_user` and `sft_agent` stages: kit/stages/sft.py's Config (papermill overrides them).
seed = 0  # Seed of everything random in the stage.
threads = None  # torch CPU threads (None: torch's default).
domain = 'mock'  # τ² domain (mock, airline, retail, telecom) or a registered kit domain.
backend = 'hf'  # How a model *folder* is served for sampling: 'hf' (transformers) or 'vllm' (GPU offline engine).
kv_cache_gib = None  # Most GiB of key/value states each transformers sampler keeps to reuse prompt prefixes across turns (None: 4 on CPU, a tenth of the GPU's memory). A stage samples with up to two (agent and user): lower it where peak memory counts more than prefill time.
cpu_bf16 = False  # bfloat16 matmuls on a CPU with bf16 instructions (AVX512-BF16, AMX; kit.llm.precision): training under autocast with float32 weights, sampling on bf16 packed weights. ~1.7x faster training on such a CPU; results carry bf16 rounding. Ignored (float32, said in the log) on other CPUs and on GPUs.
data = None  # '@<synthesize stage>', a folder with sft_*.jsonl, or 'gold' (the domain's gold dialogues only). None: the latest synthesize stage.
model = None  # HF folder (or 'embedded') to start from. None: the recipe's base_model.
fallback = 'gold'  # No engine samples: train on the domain's gold dialogues (said loudly) or fail the stage.
gold_split = 'train'  # Split whose gold dialogues the fallback uses; a domain without it (mock) uses its default set (flagged).
gold_limit = None  # Use at most this many gold tasks.
max_samples = None  # Use at most this many samples.
max_tasks = None  # Engine data: the samples of at most this many tasks, the first in the data's order (arms compared at the same task count).
validated_only = False  # Engine data: only the samples its validation keeps (each sample's meta `validated`): the full engine's SFT data out of an engine run with `validation: false`, so both arms of the no_validation ablation train on the same run's tasks and rollouts. Samples without the mark (engine runs before 2026-12-06) are an error.
lora = False  # Train LoRA adapters (PEFT) instead of all weights; they are merged into the saved weights.
lora_r = 16  # LoRA rank.
lora_alpha = 32  # LoRA scaling numerator (the update is scaled by alpha / r).
lora_dropout = 0.0  # Dropout on the LoRA branch.
lora_target_modules = 'all-linear'  # Modules that get adapters: a list of names, or 'all-linear' (every linear layer but the head).
lr = 2e-05  # Peak learning rate (AdamW). Full fine-tuning ~1e-5..2e-5; LoRA usually wants ~1e-4..2e-4.
lr_scheduler = 'linear'  # transformers scheduler name: linear, cosine, constant, ...
warmup_steps = 0  # Linear warm-up steps.
epochs = 1.0  # Passes over the data (ignored when train_steps > 0).
train_steps = -1  # Optimizer steps to run; > 0 overrides `epochs`.
batch_size = 4  # Sequences (rows) per device per batch.
micro_batch_size = None  # Rows per forward/backward inside a batch: the batch's common prefix (the system prompt with the tools) runs once for the whole batch and its rows run in chunks of this many (kit.train.prefix.PrefixStates: the same gradients, less memory than the whole batch at once). None: the whole batch in one pass.
grad_accum = 1  # Forward passes per optimizer step (effective batch: batch_size x grad_accum x devices).
max_seq_len = 4096  # Longest training sequence in tokens; longer prompts are truncated from the left (see the module doc).
whole_dialogues = True  # One training row per dialogue: every turn of the role trained in one sequence (a dialogue longer than max_seq_len is cut into windows), instead of one row per turn that re-reads its prefix. The same loss and gradients (tests/test_sft.py), a fraction of the compute; batch_size then counts dialogues (rows).
gradient_checkpointing = False  # Recompute activations in the backward pass: less memory, ~30% more time (TRL's default is on).
dtype = 'auto'  # 'auto': bfloat16 on CUDA when supported, float32 otherwise; or float32 / bfloat16 / float16.
logging_steps = 1  # Log the training loss every this many optimizer steps (the loss curve's resolution).
use_unsloth = 'auto'  # 'auto': Unsloth when CUDA and the package are there; True: require it; False: never.
save_every = 25  # Write a transformers checkpoint (weights, optimizer, scheduler, RNG, data position) every this many optimizer steps; a rerun after a crash resumes from the newest one. 0: never.
keep_checkpoints = 1  # Checkpoints kept (transformers' save_total_limit); removed once the final model is written.

# --- set by `kit run` (leave as None when running this notebook by hand) ---
stage = None        # the recipe's stage name: sft_user or sft_agent (by hand: None runs sft_agent)
run_id = None       # the run: runs/<run_id>/
stage_id = None     # this stage's id in the recipe
arm = None          # ablation arm, if any
out_dir = None      # where this stage writes (default: runs/<run_id>/<stage_id>)
run_dir = None      # runs/<run_id>
wandb_group = None  # W&B group: the run id
fingerprint = None  # the runner's hash of this stage's inputs (written to stage.json)
resume_tag = None  # what its in-stage checkpoints are tagged with: a rerun resumes only from its own

# %%
import json
from pathlib import Path

import pandas as pd
from IPython.display import Image, display

from kit.report.build import fig_sft
from kit.runner.stage import begin
from kit.stages import sft

st = begin("sft_agent", globals())  # or sft_user: `kit run` sets `stage`
out = sft.run(st.config, st)

# %% [markdown]
# ## Loss

# %%
display(pd.Series(out.summary()))
curve = json.loads(Path(out.files["loss_curve"]).read_text())
run = {"key": st.key, "curve": curve, "summary": {"data_source": out.data_source}}
display(Image(filename=str(fig_sft([run], st.out_dir / "loss.png"))))

# %%
st.finish(out)
