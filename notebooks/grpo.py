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
# # Stage `grpo`: GRPO of the agent
#
# GRPO of the agent against the user simulator with the tasks' checkers as reward: group-relative
# advantages, dynamic filtering, token-level PPO-clip. What it does and what it simplifies:
# `kit/stages/grpo.py` and `kit/train/grpo.py`. Outputs: `model/`, `metrics.jsonl`.
#
# Run by `kit run RECIPE` (papermill fills the parameters cell and writes the executed copy to
# `runs/<run-id>/<stage-id>/`), or by hand in JupyterLab with the defaults below.

# %% tags=["parameters"]
# Parameters of the `grpo` stage: kit/stages/grpo.py's Config (papermill overrides them).
seed = 0  # Seed of everything random in the stage.
threads = None  # torch CPU threads (None: torch's default).
domain = 'mock'  # τ² domain (mock, airline, retail, telecom) or a registered kit domain.
backend = 'hf'  # How a model *folder* is served for sampling: 'hf' (transformers) or 'vllm' (GPU offline engine).
kv_cache_gib = None  # Most GiB of key/value states each transformers sampler keeps to reuse prompt prefixes across turns (None: 4 on CPU, a tenth of the GPU's memory). A stage samples with up to two (agent and user): lower it where peak memory counts more than prefill time.
cpu_bf16 = False  # bfloat16 matmuls on a CPU with bf16 instructions (AVX512-BF16, AMX; kit.llm.precision): training under autocast with float32 weights, sampling on bf16 packed weights. ~1.7x faster training on such a CPU; results carry bf16 rounding. Ignored (float32, said in the log) on other CPUs and on GPUs.
model = None  # Policy to train: '@<sft_agent>', an HF folder or 'embedded'. None: the latest sft_agent stage, else the base_model.
user_model = None  # User simulator. None: the latest sft_user stage (the paper's fine-tuned user), else the base_model (raw user).
user_tag = None  # 'fine-tuned' or 'raw' (None: inferred).
tasks = None  # '@<synthesize>' (its rl_tasks.jsonl), a JSONL file of checked tasks, or 'split:<name>'. None: the latest synthesize stage.
fallback_split = 'train'  # No synthesized tasks: train on this split of the domain (said loudly); the default set when it lacks it.
dtype = 'auto'  # 'auto' (bf16 on CUDA, else fp32) or a torch dtype name.
allow_overlap = False  # Train even when some RL tasks' gold actions are all in the policy's SFT data (a memorized task carries no signal); off: dropped (drop_overlap) or refused.
reuse_start = True  # Read step 0's probe and curve point from another GRPO stage with the same start (policy stage, user, tasks, every setting that acts before step 1: kit/train/grpo_memo.py) instead of rolling them out again; they are kept beside the policy's stage folder. Off: always measured.
drop_overlap = True  # RL tasks whose gold actions are all in the policy's SFT data are left out, with a warning naming them (an engine's RL task can repeat the calls of a longer SFT task); refused when none would be left. Off: refused.
train_steps = 100  # Optimizer steps `train()` runs.
episode_budget = None  # At most this many rollout episodes scored by the steps (resamples included, and a probe's episodes a step trains on (probe_train), once; probes and learning-curve episodes otherwise not), even before train_steps: a step starts only while its G x B episodes fit, and its resamples stop where the budget does, so no arm overshoots it (arms of different batch shapes or filtering compared at the same rollout cost). None: train_steps alone.
group_size = 8  # G: episodes per task; the group their advantages are normalised in (paper: 8-16).
tasks_per_step = 16  # B: groups kept per optimizer step (paper: 16).
lr = 1.7e-05  # AdamW learning rate, constant (paper: 1.7e-5 dense, 5e-6 MoE; tiny CPU tests use more).
clip_eps = 0.4  # PPO clip range: ratios outside [1 - eps, 1 + eps] stop the gradient (paper: 0.4).
kl_coef = 0.0  # Weight of a k3 KL penalty to the initial policy; 0: no reference model (paper).
error_penalty = 0.0  # Subtracted from an episode's checker reward per failed tool call (floor 0) for filtering and advantages; the reward metrics stay the checker's. A failed call of a made-up id leaves the database as it was, so without it a success sprayed with failed calls scores as a clean one.
filter_mode = 'all_equal'  # Dynamic filtering: 'all_equal' (paper), 'all_success' (public AReaL) or 'off'.
adv_scope = 'group'  # Advantage normalisation: 'group' (paper) or 'batch' (public AReaL).
resample_budget = 16  # Extra tasks a step may draw to replace filtered groups; then it trains on what it kept. Counted in episodes, G per task: a replacement episode of a masked user fault (user_faults) spends 1/G of a task.
user_faults = 'mask'  # A failed episode that failure attribution (kit/checkers/attribution.py, rules only) puts on the user simulator: 'mask' leaves it out of its group's advantage (counted and reported, never scored 0 against the agent) and rolls out a replacement episode of the same task while the resample budget lasts; 'keep' trains on it as any failure (the paper; still counted). A passed episode is never masked. Needs the trainer's domain (τ² tasks); without one nothing is attributed.
minibatches = 1  # Optimizer steps per batch (PPO minibatches); > 1 computes old log-probs once up front.
micro_batch_size = 4  # Rows per forward/backward; gradients accumulate over a minibatch's micro-batches.
micro_batch_tokens = None  # Most padded tokens (rows x longest row, less the prefix every row of the minibatch shares: it runs once per minibatch, kit.train.sequences.PrefixStates) per forward/backward: a micro-batch takes up to micro_batch_size rows and stops before this budget (a longer row runs alone). Bounds the update's activation memory, which grows with the tokens of a micro-batch (plus the shared prefix's, held over the minibatch); None: rows only.
temperature = 1.0  # Rollout sampling temperature (paper: 1.0; evaluation uses 0.6).
top_p = 1.0  # Rollout nucleus sampling.
top_k = 0  # Rollout top-k; 0: none. The loss scores sampled tokens under the full softmax, so rollouts sample from it too (a cut makes them off-policy).
max_new_tokens = 192  # Most tokens per assistant turn.
max_messages = 30  # Messages per episode before termination max_steps (paper: up to 50 orchestrator steps).
max_errors = 10  # Failed tool calls before too_many_errors termination.
max_seq_tokens = None  # Rows (prompt + completion) longer than this are left out of the update and counted.
pack_turns = True  # Pack an episode's turns into one row where the next prompt extends the last (exact context; the prompt runs once, not once per turn). Token loss_norm only: under 'sequence' a row is one turn.
loss_norm = 'token'  # 'token': over all generated tokens of the batch (paper); 'sequence': per row, then mean.
max_grad_norm = 1.0  # Gradient clipping by global norm.
weight_decay = 0.0  # AdamW weight decay.
user_temperature = 1.0  # User simulator sampling temperature.
user_max_new_tokens = 96  # Most tokens per user turn.
probe_k = 0  # Pass-rate curriculum (kit/train/grpo_curriculum.py): episodes per RL task the current policy runs before the first step (and every `probe_every` steps); steps draw only from tasks whose pass rate lies in [band_min, band_max]. 0: off (every task is drawn). A public τ² GRPO run probes 16.
probe_every = 0  # Steps between probes; 0: only before the first step.
band_min = 0.05  # Lowest probe pass rate a task may have to be drawn (default: drop tasks never solved).
band_max = 0.8  # Highest probe pass rate a task may have to be drawn (default: drop tasks solved 13+ times of 16).
band_balance = 'task'  # How steps draw from the band: 'task' (every band task once per pass), 'pattern' (every gold tool pattern, e.g. get_users > create_task, as often as the most common one: a band of four create tasks and one update task trains updates as often as creates) or 'step' (as 'pattern', and a step's tasks_per_step tasks go round the patterns, so that one batch holds different patterns whose advantages must tell the requests apart).
probe_batch = 32  # Episodes rolled out together by a probe or a learning-curve evaluation.
probe_train = True  # A probe's episodes of the band's tasks train the steps after it (kit.train.grpo_groups.ProbeGroups): a task the next `probe_train_steps` steps draw takes its probe episodes as its group (min(probe_k, group_size) of them, topped up with fresh ones to group_size) instead of rolling them out again. Off: the probe only picks the band. A probe read from another stage's memo has no episodes here: steps roll out fresh (metric curriculum/probe_memo_no_episodes).
probe_train_steps = 1  # How many steps after a probe its episodes may train, each band task's at most once, in the order the steps draw them. 1: only the step right after it, on-policy (the probe sampled the very policy it trains). More reuses more of the probe but trains step s after it on episodes of a policy s updates old (a rollout server's log-probs correct the PPO ratio for it; local sampling does not: ratio 1).
eval_every = 0  # Learning curve (kit/train/grpo_curve.py): pass^1 of the current policy on `eval_split` before the first step, every this many steps and after the last; the best and the last policy are both saved. 0: off.
eval_split = 'heldout_val'  # The learning curve's tasks: a split neither trained on nor the final test set (mock: 'heldout_val').
eval_limit = None  # First N tasks of `eval_split` only.
eval_trials = 1  # Learning-curve episodes per task.
eval_temperature = 0.0  # Learning-curve sampling temperature (agent and user); 0: greedy, which with one trial gives the least noisy curve.
lora = False  # Train LoRA adapters (PEFT) instead of all weights; they are merged into the saved weights.
lora_r = 16  # LoRA rank.
lora_alpha = 32  # LoRA scaling numerator (the update is scaled by alpha / r).
lora_dropout = 0.0  # Dropout on the LoRA branch.
lora_target_modules = 'all-linear'  # Modules that get adapters: a list of names, or 'all-linear' (every linear layer but the head).
gradient_checkpointing = False  # Recompute activations in the backward pass: less memory, ~30% more time (TRL's default is on).
rollout = 'local'  # Where the policy samples: 'local' (the training process, transformers) or 'server' (an OpenAI-compatible server at `rollout_server`, weights pushed after each step; kit/train/rollout_server.py).
rollout_server = None  # rollout 'server': the server's URL with /v1 (vLLM: `make vllm-serve`), serving the policy's starting weights.
rollout_server_model = None  # The starting policy's name on the server (None: the first model it lists).
weight_sync = 'auto'  # How the server gets the new weights after each step: 'lora_adapter' (vLLM POST /v1/load_lora_adapter; needs lora), 'folder' (a full HF folder per step, requested by its path: servers that load models by name, like `transformers serve`); 'auto': lora_adapter with lora, else folder.
server_token_ids = True  # Ask the server for the sampled token ids and log-probs (vLLM); False for servers without them (`transformers serve`): the completion is re-tokenized, counted in train/retokenized_turns.
save_every = 10  # Write a checkpoint (trainable weights, optimizer, task draws, RNG streams, step) every this many steps into the stage's checkpoints/; a rerun after a crash resumes from the newest one and ends with the weights an uninterrupted run has (kit/train/checkpoints.py). 0: never.
keep_checkpoints = 1  # Checkpoints kept (the newest); more only help when a disk corrupts the newest one. Removed once the stage saved its model.

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

from kit.report.grpo import fig_grpo
from kit.runner.stage import begin
from kit.stages import grpo

st = begin("grpo", globals())
out = grpo.run(st.config, st)

# %% [markdown]
# ## Reward and dynamic filtering per step

# %%
hist = pd.read_json(out.files["metrics"], lines=True)
display(hist[[c for c in grpo.SHOWN if c in hist]])
if len(hist):
    display(Image(filename=str(fig_grpo([{"key": st.key, "history": hist}], st.out_dir / "grpo.png"))))

# %%
st.finish(out)
