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
# # Stage `synthesize`: the self-evolving data engine
#
# The AReaL-SEA data engine on a τ² domain: plans, tasks with gold actions, validation, rollouts scored
# by each task's checker, failure attribution, reflection, `rounds` times. What it does and what it
# simplifies: `kit/stages/synthesize.py`. A rerun resumes at the first unfinished unit.
#
# Run by `kit run RECIPE` (papermill fills the parameters cell and writes the executed copy to
# `runs/<run-id>/<stage-id>/`), or by hand in JupyterLab with the defaults below.

# %% tags=["parameters"]
# Parameters of the `synthesize` stage: kit/stages/synthesize.py's Config (papermill overrides them).
seed = 0  # Seed of everything random in the stage.
threads = None  # torch CPU threads (None: torch's default).
domain = 'mock'  # τ² domain (mock, airline, retail, telecom) or a registered kit domain.
backend = 'hf'  # How a model *folder* is served for sampling: 'hf' (transformers) or 'vllm' (GPU offline engine).
kv_cache_gib = None  # Most GiB of key/value states each transformers sampler keeps to reuse prompt prefixes across turns (None: 4 on CPU, a tenth of the GPU's memory). A stage samples with up to two (agent and user): lower it where peak memory counts more than prefill time.
cpu_bf16 = False  # bfloat16 matmuls on a CPU with bf16 instructions (AVX512-BF16, AMX; kit.llm.precision): training under autocast with float32 weights, sampling on bf16 packed weights. ~1.7x faster training on such a CPU; results carry bf16 rounding. Ignored (float32, said in the log) on other CPUs and on GPUs.
model = None  # Engine roles' backend (None: the recipe's base_model).
agent_model = None  # Assistant in rollouts (None: model).
user_model = None  # User simulator in rollouts (None: model).
rounds = 3  # K rounds of synthesis → rollouts → reflection.
num_plans = 4  # Plan pairs per round (the paper's ablation: 4 vs 64).
tasks_per_plan = 2  # Task proposals per plan per round.
group_size = 2  # G rollouts per accepted task (0: no rollouts).
validation = True  # off: the task checks still run and are counted (rounds.csv `unvalidated`: accepted tasks a check would have rejected) but reject nothing, and rollouts are not filtered (`unvalidated_samples`: agent SFT samples from rollouts that failed their checker); the held-out guard and the LLM judge apply either way.
raw_synthesis = False  # The synthesizer keeps what the model wrote: no world candidates (every write argument chosen or written by the model), no re-choice of a write that errors or changes nothing, a flagged free-text value kept, the model's scenario text kept where the fidelity gate finds a problem. Defects for validation to catch at the task level (the no_validation ablation's first design ran both arms with it; docs/ablations.md).
evolution = True  # off: plans stay as the meta-planner wrote them.
llm_judge = True  # The validator's model judgment after the executable checks.
judge_threshold = 0.7  # Reject when the judge's P(no) exceeds it.
sft_tokenizer = None  # HF folder (or 'embedded') whose chat template renders SFT samples (default: the agent model's; an endpoint has none: name the served model's folder, else the embedded model's template is used).
concurrency = 8  # Units (plans) in flight at once: concurrent requests to endpoints; with an in-process model, worker threads whose model calls run as one batch (kit/llm/coalesce.py). 1: one unit after another.
max_messages = 16  # Messages per rollout episode.
max_new_tokens = 96  # Most tokens per agent turn in rollouts.
user_max_new_tokens = 96  # Most tokens per user turn in rollouts.
temperature = 0.8  # Rollout sampling temperature (agent and user).
explore_steps = 2  # Read calls the synthesizer makes before proposing.
max_repairs = 2  # Re-choices of a gold write that errors or changes nothing.
repair_scenario = True  # Append known facts the model's prose dropped.
rl_share = 0.33  # Share of accepted tasks that go to the RL pool (rl_tasks.jsonl: tasks + checkers for `grpo`) instead of the SFT pool (sft_tasks.jsonl; their gold dialogues are the SFT data); the pools are disjoint (kit/engine/pools.py). 0: every task is SFT data and GRPO falls back to a split.
pool_split = 'pattern'  # How tasks are split into the pools: 'pattern' gives every gold tool pattern its share in both pools (at least one task each when it has two or more); 'hash' draws each solution by a hash alone (a rare pattern can miss the RL pool) (kit/engine/pools.py).
gold_dialogues = True  # Also write each accepted task's gold-replay dialogue to sft_agent.jsonl (meta.source: 'gold').
choice_temperature = 1.0  # Softmax temperature of constrained choices.
max_similarity = 0.75  # Near-duplicate plan threshold.
max_lookup_share = 0.25  # Most read-only (lookup) plans the meta-planner writes, as a share of num_plans (rounded down): a tau2 agent is trained on writes under policy; 1: no cap.
device_fix_share = 0.25  # Plans whose task the customer fixes on their own phone (telecom's device faults: airplane mode, SIM, mobile data, roaming abroad, data saver, network mode), as a share of num_plans (rounded; a domain without device faults has none).
wandb = True  # Log round metrics to W&B (offline unless WANDB_MODE says otherwise).

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

from kit.report.build import fig_engine
from kit.runner.stage import begin
from kit.stages import synthesize

st = begin("synthesize", globals())
out = synthesize.run(st.config, st)

# %% [markdown]
# ## Yield per round
# Proposals, accepted tasks, rejection reasons, rollouts and their failure attribution.

# %%
rounds = pd.read_csv(out.files["rounds"])
display(rounds)
display(Image(filename=str(fig_engine([{"key": st.key, "rounds": rounds}], st.out_dir / "engine.png"))))

# %% [markdown]
# ## What it produced

# %%
display(pd.Series(out.lines, name="lines"))
print(synthesize.example_task(st.out_dir))

# %%
st.finish(out)
