"""Write the stage notebooks (notebooks/<stage>.ipynb) from the cells below, outputs stripped.

    .venv/bin/python notebooks/generate.py          # rewrite all six
    .venv/bin/python notebooks/generate.py --check  # exit 1 if a committed notebook differs

The `parameters` cell of each notebook is generated from the stage's pydantic schema
(kit/runner/stages.py): the same names, defaults and descriptions `kit run` validates against.
Editing a notebook in JupyterLab is fine; port the edit here too, or `--check` (tests) fails.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kit.runner.stages import RUNNER_FIELDS, STAGES  # noqa: E402

HERE = Path(__file__).resolve().parent

# what a notebook opened by hand uses where the schema has no default (or None means "wired by the runner")
STANDALONE = {"domain": "mock"}

RUNNER_CELL = '''
# --- set by `kit run` (leave as None when running this notebook by hand) ---
run_id = None       # the run: runs/<run_id>/
stage_id = None     # this stage's id in the recipe
arm = None          # ablation arm, if any
out_dir = None      # where this stage writes (default: runs/<run_id>/<stage_id>)
run_dir = None      # runs/<run_id>
wandb_group = None  # W&B group: the run id
fingerprint = None  # the runner's hash of this stage's inputs (written to stage.json)
'''.strip()


def params_cell(stage: str) -> str:
    lines = [f"# Parameters of the `{stage}` stage (kit/runner/stages.py validates them; papermill overrides them)."]
    for name, f in STAGES[stage].model_fields.items():
        default = STANDALONE.get(name, None if f.is_required() else f.default)
        desc = (f.description or "").replace("\n", " ")
        lines.append(f"{name} = {default!r}" + (f"  # {desc}" if desc else ""))
    return "\n".join(lines) + "\n\n" + RUNNER_CELL


def md(text: str):
    return new_markdown_cell(text.strip())


def code(text: str, tags: tuple[str, ...] = ()):
    c = new_code_cell(text.strip())
    if tags:
        c.metadata["tags"] = list(tags)
    return c


def header(stage: str, title: str, body: str) -> list:
    return [md(f"# Stage `{stage}`: {title}\n\n{body.strip()}\n\n"
               "Run by `kit run RECIPE` (papermill fills the parameters cell and writes the executed copy to "
               "`runs/<run-id>/<stage-id>/`), or by hand in JupyterLab with the defaults below."),
            code(params_cell(stage), tags=("parameters",))]


# ----- the stages -------------------------------------------------------------------------------

SYNTHESIZE = header("synthesize", "the self-evolving data engine", """
The AReaL-SEA data engine (`kit/engine`) on a τ² domain, `rounds` times: the meta-planner writes
plan pairs, the synthesizer proposes tasks with gold actions in a forked environment, the validator
accepts or rejects them (with reasons), `group_size` rollouts per accepted task are judged by the
task's checker, failures are attributed to the task, the agent or the user, and the reflector
rewrites the plans for the next round.

Outputs (in `out_dir`): `tasks.jsonl`, `rl_tasks.jsonl` (tasks + checkers, for `grpo`),
`sft_agent.jsonl` / `sft_user.jsonl` (for `sft_agent` / `sft_user`), `rounds.csv` (yield per round,
rejection reasons, failure attribution), `trajectories.jsonl`, `failures.jsonl`. A rerun resumes at
the first unfinished unit.
""") + [
    code('''
import os

import pandas as pd
from IPython.display import Image, display

from kit.runner.stage import begin, model_spec

st = begin("synthesize", globals())
'''),
    md("## Run the engine"),
    code('''
from kit.engine import EngineConfig, run_engine

spec = lambda m: None if m is None else model_spec(m, backend)
cfg = EngineConfig(
    domain=domain, out_dir=str(st.out_dir), rounds=rounds, num_plans=num_plans, tasks_per_plan=tasks_per_plan,
    group_size=group_size, validation=validation, evolution=evolution, llm_judge=llm_judge,
    judge_threshold=judge_threshold, model=spec(model or "embedded"), agent_model=spec(agent_model),
    user_model=spec(user_model), sft_tokenizer=sft_tokenizer, seed=seed, max_steps=max_steps,
    max_new_tokens=max_new_tokens, temperature=temperature, explore_steps=explore_steps,
    gold_dialogues=gold_dialogues, wandb=wandb and os.environ.get("WANDB_MODE") != "disabled",
    wandb_group=st.wandb_group,
)
result = run_engine(cfg, progress=True)
print(result.summary_line())
'''),
    md("## Yield per round\n\nProposals, accepted tasks, rejection reasons, rollouts and their failure attribution."),
    code('''
rounds_df = pd.read_csv(st.out_dir / "rounds.csv")
rounds_df
'''),
    code('''
from kit.runner.report import fig_engine

display(Image(filename=str(fig_engine([{"key": st.key, "rounds": rounds_df}], st.out_dir / "engine.png"))))
'''),
    md("## What it produced"),
    code('''
def count(name):
    f = st.out_dir / name
    return sum(1 for line in open(f, encoding="utf-8") if line.strip()) if f.exists() else 0

produced = {name: count(name) for name in ("tasks.jsonl", "rl_tasks.jsonl", "trajectories.jsonl",
                                           "sft_agent.jsonl", "sft_user.jsonl", "failures.jsonl")}
display(pd.Series(produced, name="lines"))
if produced["rl_tasks.jsonl"] == 0:
    st.warn("the engine accepted no task: `grpo` will fall back to the domain's own tasks")
for role in ("agent", "user"):
    if produced[f"sft_{role}.jsonl"] == 0:
        st.warn(f"the engine produced no {role} SFT samples: `sft_{role}` will fall back to gold dialogues")
'''),
    code('''
import json

first = st.out_dir / "tasks.jsonl"
if produced["tasks.jsonl"]:
    task = json.loads(first.read_text(encoding="utf-8").splitlines()[0])
    print("an accepted task:", task["id"])
    print(json.dumps({"user_scenario": task.get("user_scenario"),
                      "actions": (task.get("evaluation_criteria") or {}).get("actions")}, indent=1)[:3000])
'''),
    code('''
outputs = {"rounds": st.out_dir / "rounds.csv"}
outputs.update({name.split(".")[0]: st.out_dir / name for name, n in produced.items() if n})
st.finish(outputs=outputs, summary={"accepted": result.accepted, "rounds": len(result.rounds),
                                    "proposals": int(rounds_df["proposals"].sum()), **produced})
'''),
]


def sft(role: str) -> list:
    other = "user simulator" if role == "user" else "agent"
    why = ("The paper fine-tunes the user simulator on the same dialogues so it follows its instructions and "
           "uses its own tools correctly; GRPO then trains the agent against this user."
           if role == "user" else
           "The agent learns every assistant turn of the accepted dialogues (completion-only loss).")
    return header(f"sft_{role}", f"SFT of the {other}", f"""
Supervised fine-tuning (`kit.train.sft.run_sft`, TRL SFTTrainer, full or LoRA) of the {other} on the
engine's `sft_{role}.jsonl`. {why}

If the engine produced no {role} samples (a 135M model accepts few tasks), the stage falls back to
the gold dialogues of the domain's tasks (`kit.train.sft_data.gold_sft_samples`) and says so loudly:
here, in `stage.json`, in the run manifest and in the report (`fallback: fail` stops instead).

Output: `out_dir/model/`, a plain HF folder (merged weights + tokenizer, `loss_curve.json`).
""") + [
        code(f'''
from pathlib import Path

import pandas as pd
from IPython.display import Image, display

from kit.runner.stage import begin, model_folder, split_tasks

st = begin("sft_{role}", globals())
role = "{role}"
'''),
        md("## Training data"),
        code('''
from transformers import AutoTokenizer

from kit.envs import load_domain
from kit.train.sft_data import gold_sft_samples, read_samples, write_samples

base = model_folder(model or "embedded")
dom = load_domain(domain)
source = data or "gold"
samples, data_source = [], "gold"
if source != "gold":
    engine_file = Path(source) / f"sft_{role}.jsonl"
    samples = read_samples(engine_file) if engine_file.exists() else []
    data_source = "engine"
    print(f"{len(samples)} {role} samples from the engine ({engine_file})")
if not samples:
    if source != "gold" and fallback == "fail":
        raise RuntimeError(f"the engine produced no {role} SFT samples in {source} and fallback is 'fail'")
    tasks, used_split = split_tasks(dom, gold_split, st, f"the gold {role} SFT data")
    tasks = tasks[: gold_limit or None]
    agent_samples, user_samples = gold_sft_samples(dom, tasks, AutoTokenizer.from_pretrained(base))
    samples = agent_samples if role == "agent" else user_samples
    if source == "gold":
        print(f"data: gold dialogues by choice: {len(samples)} {role} samples from {len(tasks)} tasks")
    else:
        data_source = "gold-fallback"
        st.warn(f"NO ENGINE DATA: the engine produced no {role} SFT samples ({source}); this SFT trains on "
                f"{len(samples)} GOLD {role} samples from {len(tasks)} tasks ({used_split}) of {domain} instead")
samples = samples[: max_samples or None]
write_samples(samples, st.out_dir / f"sft_{role}.train.jsonl")
pd.Series({"samples": len(samples), "data": data_source, "tasks": len({s.task_id for s in samples})})
'''),
        code('''
s = samples[0]
print("...", s.prompt[-600:])
print("---- completion (what the loss covers) ----")
print(s.completion)
'''),
        md("## Train"),
        code('''
from kit.train.sft import SFTConfig, run_sft

cfg = SFTConfig(
    model_path=base, output_dir=str(st.out_dir / "model"), lora=lora, lora_r=lora_r, lora_alpha=lora_alpha, lr=lr,
    lr_scheduler=lr_scheduler, warmup_steps=warmup_steps, epochs=epochs, max_steps=max_steps,
    batch_size=batch_size, grad_accum=grad_accum, max_seq_len=max_seq_len,
    gradient_checkpointing=gradient_checkpointing, dtype=dtype, seed=seed, report_to="none",
    run_name=f"{st.run_id}/{st.key}", use_unsloth=use_unsloth,
)
metrics = run_sft(samples, cfg)
for step, loss in metrics["loss_curve"]:
    st.log({f"sft_{role}/loss": loss}, step=step)
pd.Series({k: metrics[k] for k in ("samples", "steps", "first_loss", "final_loss", "tokens_trained",
                                   "truncated_prompts", "dropped_too_long", "ungrounded_dropped", "wall_time_s")})
'''),
        code('''
from kit.runner.report import fig_sft

run = {"key": st.key, "curve": metrics["loss_curve"], "summary": {"data_source": data_source}}
display(Image(filename=str(fig_sft([run], st.out_dir / "loss.png"))))
'''),
        code('''
st.finish(outputs={"model": st.out_dir / "model", "loss_curve": st.out_dir / "model" / "loss_curve.json"},
          summary={"data_source": data_source, "samples": metrics["samples"], "steps": metrics["steps"],
                   "first_loss": metrics["first_loss"], "final_loss": metrics["final_loss"]})
'''),
    ]


GRPO = header("grpo", "GRPO of the agent", """
GRPO (`kit.train.grpo.GRPOTrainer`) on the agent: per step, `tasks_per_step` tasks, `group_size`
multi-turn episodes each against the user simulator; reward = the task's checker (the engine's
`rl_tasks.jsonl`: τ² criteria + sandboxed code); group advantages; dynamic filtering drops groups
whose rewards are all equal and draws fresh tasks; token-level PPO-clip.

The paper trains against the *fine-tuned* user (`user_model: "@sft_user"`, the default when the
recipe has an `sft_user` stage); the user-model ablation uses the raw base model instead.

Outputs: `out_dir/model/` (HF folder), `metrics.jsonl` (one line per step).
""") + [
    code('''
import json
from pathlib import Path

import pandas as pd
import torch
from IPython.display import Image, display

from kit.runner.stage import begin, model_folder, model_spec, split_tasks

st = begin("grpo", globals())
'''),
    md("## Tasks and reward"),
    code('''
from kit.checkers.checker import CheckedTask, judge
from kit.envs import load_domain
from kit.verify import verify

dom = load_domain(domain)
checked, task_list, task_source = {}, [], None
if tasks and tasks.startswith("split:"):
    task_list, used_split = split_tasks(dom, tasks[len("split:"):], st, "GRPO")
    task_source = f"split:{used_split}"
elif tasks:
    f = Path(tasks) / "rl_tasks.jsonl" if Path(tasks).is_dir() else Path(tasks)
    lines = f.read_text(encoding="utf-8").splitlines() if f.exists() else []
    recs = [CheckedTask.model_validate_json(line) for line in lines if line.strip()]
    checked = {r.task.id: r for r in recs}
    task_list, task_source = [r.task for r in recs], "engine"
    print(f"{len(task_list)} checked tasks from {f}")
if not task_list:
    task_list, used_split = split_tasks(dom, fallback_split, st, "GRPO")
    task_source = f"fallback:{used_split}"
    st.warn(f"NO ENGINE TASKS: {'no synthesize stage' if not tasks else 'the engine accepted no task'}; GRPO "
            f"trains on {len(task_list)} tasks of {domain} ({used_split}) instead (checker: τ² criteria)")


def reward_fn(task, traj):
    rec = checked.get(task.id)
    return judge(dom, rec, traj).reward if rec is not None else verify(dom, task, traj).reward


pd.Series({"tasks": len(task_list), "source": task_source, "with code checkers":
           sum(bool(r.checker.code) for r in checked.values())})
'''),
    md("## Policy and user simulator"),
    code('''
from transformers import AutoModelForCausalLM, AutoTokenizer

policy_dir = model_folder(model or "embedded")
user_spec = model_spec(user_model or "embedded", backend)
stage_of_user = json.loads((Path(user_model).parent / "stage.json").read_text()).get("stage") \\
    if user_model and (Path(user_model).parent / "stage.json").exists() else None
tag = user_tag or ("fine-tuned" if stage_of_user == "sft_user" else "raw")
torch_dtype = {"auto": torch.bfloat16 if torch.cuda.is_available() else torch.float32}.get(dtype) or getattr(torch, dtype)
policy = AutoModelForCausalLM.from_pretrained(policy_dir, dtype=torch_dtype, local_files_only=True)
tokenizer = AutoTokenizer.from_pretrained(policy_dir, local_files_only=True)
print(f"policy: {policy_dir}\\nuser simulator ({tag}): {user_spec}")
'''),
    md("## Train"),
    code('''
from kit.train.grpo import GRPOConfig, GRPOTrainer

cfg = GRPOConfig(
    lr=lr, clip_eps=clip_eps, kl_coef=kl_coef, group_size=group_size, tasks_per_step=tasks_per_step,
    filter_mode=filter_mode, adv_scope=adv_scope, resample_budget=resample_budget, minibatches=minibatches,
    micro_batch_size=micro_batch_size, max_steps=steps, temperature=temperature, max_new_tokens=max_new_tokens,
    max_episode_steps=max_episode_steps, max_seq_tokens=max_seq_tokens, user_model=user_spec, user_tag=tag,
    user_temperature=user_temperature, user_max_new_tokens=user_max_new_tokens, seed=seed, print_metrics=False,
)
trainer = GRPOTrainer(policy, tokenizer, task_list, cfg, domain=dom, reward_fn=reward_fn)
if trainer.step_budget_warning:
    st.warn(trainer.step_budget_warning)
metrics_file = st.out_dir / "metrics.jsonl"
metrics_file.write_text("")
history = []
for i in range(steps):
    m = trainer.step()
    history.append(m)
    st.log({f"grpo/{k}": v for k, v in m.items()}, step=i)
    with open(metrics_file, "a", encoding="utf-8") as f:
        f.write(json.dumps(m, default=str) + "\\n")
    print(f"step {i}: reward {m['reward/mean']:.3f}, filtered {m['groups/filtered_frac']:.2f}, "
          f"loss {m.get('loss', float('nan')):.4g}, {m['time/step_s']:.0f}s" + (f" SKIPPED: {m['skip_reason']}" if m["skipped"] else ""))
trainer.save(st.out_dir / "model")
hist = pd.DataFrame(history)
hist[[c for c in ("step", "reward/mean", "pass_rate", "groups/filtered_frac", "groups/kept", "loss", "clip_frac",
                  "user/deviation_rate", "skip_reason", "time/step_s") if c in hist]] if len(hist) else hist
'''),
    code('''
from kit.runner.report import fig_grpo

if len(hist):
    display(Image(filename=str(fig_grpo([{"key": st.key, "history": hist}], st.out_dir / "grpo.png"))))
'''),
    code('''
st.finish(outputs={"model": st.out_dir / "model", "metrics": metrics_file},
          summary={"steps": steps, "tasks": len(task_list), "task_source": task_source, "user_tag": tag,
                   "reward_first": history[0]["reward/mean"] if history else None,
                   "reward_last": history[-1]["reward/mean"] if history else None})
'''),
]


EVALUATE = header("evaluate", "pass^k on τ²-bench", """
`kit.eval.evaluate`: `trials` episodes per task of a τ² split (or a task file), each judged by the kit
verifier (tau2's evaluation semantics; `cross_check` also asks tau2's own evaluator), pass^k as
τ²-bench defines it with a 95% bootstrap interval on pass^1 over tasks, the user simulator's deviation
rate, how often its first message states the request (`request_stated`) and how often episodes end by a
stop rather than a limit (`proper_end`). Every number is recorded with the agent, the user simulator, the
sampling and the tau2 version. A rerun resumes (trajectories.jsonl).

Leak check first (`kit.eval.leak`, before any model is loaded): the evaluation tasks' gold actions
against what this run trained on (`training_data`; by default every synthesize / sft_user / sft_agent /
grpo stage that ran before this one). An overlap fails the stage unless `allow_overlap` is set; the
overlap is recorded in `eval.json` and shown in the report either way.

Outputs: `eval.json`, `episodes.csv`, `trajectories.jsonl`.
""") + [
    code('''
import pandas as pd
from IPython.display import Image, display

from kit.runner.stage import begin, model_spec

st = begin("evaluate", globals())
'''),
    code('''
from kit.eval import EvalConfig, evaluate
from kit.eval.leak import run_training_data

agent_spec = model_spec(model or "embedded", backend)
user_spec = model_spec(user_model or "embedded", backend)
train_paths = training_data if training_data is not None else run_training_data(st.run_dir, before=st.key, arm=st.arm)
print("leak check against:", *(train_paths or ["(no training data)"]), sep="\\n  ")
cfg = EvalConfig(domain=domain, model=agent_spec, user_model=user_spec, split=split, tasks_file=tasks_file,
                 trials=trials, temperature=temperature, user_temperature=user_temperature, max_steps=max_steps,
                 max_new_tokens=max_new_tokens, seed=seed, batch_size=batch_size, limit=limit,
                 cross_check=cross_check, training_data=train_paths, allow_overlap=allow_overlap,
                 out_dir=str(st.out_dir))
res = evaluate(cfg, progress=True)
for w in res.meta.get("warnings") or []:
    st.warn(w)
print(res.summary_line())
'''),
    md("## pass^k"),
    code('''
passk = pd.DataFrame([{"k": k, "pass^k": v} for k, v in res.passk.items()])
st.log({f"eval/pass^{k}": v for k, v in res.passk.items()} | {"eval/user_deviation_rate": res.meta["user_deviation_rate"] or 0.0}
       | {f"eval/{k}": res.meta[k] for k in ("request_stated_rate", "proper_end_rate") if res.meta.get(k) is not None})
display(passk)
pd.Series({k: res.meta.get(k) for k in ("domain", "tasks", "trials", "model", "user_model", "temperature",
                                        "pass1_ci95", "user_deviation_rate", "request_stated_rate", "proper_end_rate",
                                        "leak", "tau2_version", "tau2_agreement", "wall_s")})
'''),
    code('''
df = res.episodes
display(df.groupby("task_id")["reward"].agg(["mean", "count"]))
display(df["termination"].value_counts())
'''),
    code('''
from kit.runner.report import bootstrap_pass1, fig_pass1

p1, lo, hi = bootstrap_pass1(df)
rows = pd.DataFrame([{"evaluation": label or st.key, "pass^1": p1, "ci_low": lo, "ci_high": hi}])
display(Image(filename=str(fig_pass1(rows, st.out_dir / "pass1.png"))))
'''),
    code('''
st.finish(outputs={"eval": st.out_dir / "eval.json", "episodes": st.out_dir / "episodes.csv"},
          summary={"label": label or st.key, "passk": {str(k): v for k, v in res.passk.items()},
                   "pass^1": res.passk.get(1), "ci95": [lo, hi], "user_deviation_rate": res.meta["user_deviation_rate"],
                   "pass1_ci95": res.meta.get("pass1_ci95"), "request_stated_rate": res.meta.get("request_stated_rate"),
                   "proper_end_rate": res.meta.get("proper_end_rate"), "leak": res.meta.get("leak"),
                   "model": agent_spec, "user_model": user_spec, "tasks": res.meta["tasks"], "trials": trials})
'''),
]


REPORT = header("report", "the run's report", """
Reads everything the run's stages wrote (`runs/<run-id>/manifest.json`, each stage's `stage.json` and
outputs) and renders `reports/<run-id>/index.html` with its figures (PNG, beside it): engine yield per
round with failure categories, SFT loss curves, GRPO reward and filtered-fraction curves, pass^k per
evaluation next to the paper's numbers, the user deviation rate, an ablation's per-arm comparison, every
warning a stage raised, and the run manifest. The same sections are shown below.
""") + [
    code('''
from pathlib import Path

from kit.runner.stage import begin

st = begin("report", globals())
'''),
    code('''
from kit.runner.report import build_report, display_report

rep = build_report(st.run_dir, report_dir or Path("reports").resolve() / st.run_id, title=title, ci=ci,
                   bootstrap=bootstrap)
print("report:", rep.html_path)
display_report(rep)
'''),
    code('''
run = st.wandb()
if run is not None:
    import wandb

    run.log({f"report/{p.stem}": wandb.Image(str(p)) for p in rep.figures})
    if "eval_table" in rep.data:
        run.log({"report/evaluations": wandb.Table(dataframe=rep.data["eval_table"].astype(str))})
st.finish(outputs={"html": rep.html_path}, summary={"html": str(rep.html_path), "figures": len(rep.figures)})
'''),
]


NOTEBOOKS = {"synthesize": SYNTHESIZE, "sft_user": sft("user"), "sft_agent": sft("agent"), "grpo": GRPO,
             "evaluate": EVALUATE, "report": REPORT}


def build(stage: str):
    nb = new_notebook(cells=NOTEBOOKS[stage])
    nb.metadata["kernelspec"] = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
    nb.metadata["language_info"] = {"name": "python"}
    for i, c in enumerate(nb.cells):  # stable ids: regenerating gives the same file
        c["id"] = f"{stage}-{i:02d}"
    return nb


def main(argv: list[str]) -> int:
    check = "--check" in argv
    bad = []
    for stage in NOTEBOOKS:
        text = nbformat.writes(build(stage)) + "\n"
        path = HERE / f"{stage}.ipynb"
        if check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                bad.append(path.name)
        else:
            path.write_text(text, encoding="utf-8")
            print("wrote", path)
    if bad:
        print("differ from notebooks/generate.py:", ", ".join(bad), "(run: python notebooks/generate.py)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
