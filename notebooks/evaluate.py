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
# # Stage `evaluate`: pass^k on τ²-bench
#
# Leak check, then `trials` episodes per task against the referee user simulator, each scored by the
# kit verifier; pass^k with a 95% interval, the user's deviation, request-stated and proper-end rates.
# What it does: `kit/stages/evaluate.py`. Outputs: `eval.json`, `episodes.csv`, `trajectories.jsonl`.
#
# Run by `kit run RECIPE` (papermill fills the parameters cell and writes the executed copy to
# `runs/<run-id>/<stage-id>/`), or by hand in JupyterLab with the defaults below.

# %% tags=["parameters"]
# Parameters of the `evaluate` stage: kit/stages/evaluate.py's Config (papermill overrides them).
seed = 0  # Seed of everything random in the stage.
threads = None  # torch CPU threads (None: torch's default).
domain = 'mock'  # τ² domain (mock, airline, retail, telecom) or a registered kit domain.
backend = 'hf'  # How a model *folder* is served for sampling: 'hf' (transformers) or 'vllm' (GPU offline engine).
kv_cache_gib = None  # Most GiB of key/value states each transformers sampler keeps to reuse prompt prefixes across turns (None: 4 on CPU, a tenth of the GPU's memory). A stage samples with up to two (agent and user): lower it where peak memory counts more than prefill time.
cpu_bf16 = False  # bfloat16 matmuls on a CPU with bf16 instructions (AVX512-BF16, AMX; kit.llm.precision): training under autocast with float32 weights, sampling on bf16 packed weights. ~1.7x faster training on such a CPU; results carry bf16 rounding. Ignored (float32, said in the log) on other CPUs and on GPUs.
model = None  # Agent. None: the latest grpo / sft_agent stage, else the base_model.
user_model = None  # User simulator at evaluation time (None: the base_model, the same referee for every arm).
label = None  # Name of this evaluation in the report.
training_data = None  # What the agent trained on, checked against the evaluation tasks' gold actions (kit.eval.leak): files, folders or 'split:<name>'. None: every synthesize / sft_user / sft_agent / grpo stage of this run that ran before this one.
split = 'default'  # τ² split: train / test / base, 'default' (tau2's default set), 'heldout' (the kit's own; 'heldout_val' / 'heldout_test' its fixed validation / test slices; 'heldout_confirm' a separate confirmation slice) or None (all).
tasks_file = None  # JSON list or JSONL of tau2 Task objects; replaces `split`.
trials = 1  # Episodes per task (pass^k needs k ≤ trials; more than one needs a sampling temperature).
temperature = 0.0  # Agent sampling temperature (the paper evaluates at 0.6; tau2's papers often at 0); above 0 when trials > 1.
user_temperature = 0.0  # User simulator sampling temperature.
max_new_tokens = 192  # Most tokens per agent turn.
user_max_new_tokens = 192  # Most tokens per user turn.
max_messages = 50  # Messages per episode (tau2's max_steps; the paper: up to 50 orchestrator steps; tau2: 100).
max_errors = 10  # Failed tool calls before too_many_errors termination.
batch_size = 16  # Episodes advanced together (one batched forward pass per turn).
limit = None  # First N tasks only.
cross_check = False  # Also score every episode with tau2's evaluator and report agreement.
allow_overlap = False  # Evaluate even when some evaluation tasks' gold actions are all in the training data (the report still shows the overlap); off: the evaluation fails.
protocol = 'kit'  # 'kit' (kit loop + kit verifier) or 'tau2' (tau2's own orchestrator, agent, user simulator and evaluator through litellm; needs openai: specs, see kit.eval.tau2_native).

# --- set by `kit run` (leave as None when running this notebook by hand) ---
stage = None        # the recipe's stage name
run_id = None       # the run: runs/<run_id>/
stage_id = None     # this stage's id in the recipe
arm = None          # ablation arm, if any
out_dir = None      # where this stage writes (default: runs/<run_id>/<stage_id>)
run_dir = None      # runs/<run_id>
wandb_group = None  # W&B group: the run id
fingerprint = None  # the runner's hash of this stage's inputs (written to stage.json)
resume_tag = None  # what its in-stage checkpoints are tagged with: a rerun resumes only from its own

# %%
import pandas as pd
from IPython.display import Image, display

from kit.report.build import fig_pass1
from kit.runner.stage import begin
from kit.stages import evaluate

st = begin("evaluate", globals())
out = evaluate.run(st.config, st)
res = out.result  # episodes, pass^k and meta of this evaluation

# %% [markdown]
# ## pass^k, per task, and how episodes ended

# %%
display(pd.Series(out.summary()))
display(res.episodes.groupby("task_id")["reward"].agg(["mean", "count"]))
display(res.episodes["termination"].value_counts())
lo, hi = out.pass1_ci95 or [None, None]
rows = pd.DataFrame([{"evaluation": out.label, "pass^1": out.pass1, "ci_low": lo, "ci_high": hi}])
display(Image(filename=str(fig_pass1(rows, st.out_dir / "pass1.png"))))

# %%
st.finish(out)
