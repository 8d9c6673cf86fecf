"""Stage `grpo`: GRPO of the agent against a user simulator, reward = the task's checker
(kit.train.grpo.GRPOTrainer; its docstring says what is kept from the paper and what is dropped).

Per step: `tasks_per_step` tasks, `group_size` multi-turn episodes each against the user simulator;
reward = the task's checker (the engine's rl_tasks.jsonl: τ² criteria + sandboxed code, scored by
kit.checkers.run_checker); group-relative advantages; dynamic filtering drops groups whose rewards are all
equal and draws fresh tasks; token-level PPO-clip.

The paper trains against the *fine-tuned* user (`user_model: "@sft_user"`, the default when the
recipe has an sft_user stage); the user-model ablation uses the raw base model instead.

With no engine tasks the stage trains on a split of the domain, said loudly (mock has no train
split: its default set is also what `evaluate` scores, which the report and the leak check show).

Before training: the RL tasks are refused when every gold action of one of them is in the policy's
SFT data (`allow_overlap` to train anyway); the engine's two pools are disjoint by construction.
With `probe_k` a pass-rate curriculum picks the tasks steps draw from (kit/train/grpo_curriculum.py), and
its episodes of those tasks are the next step's groups (`probe_train`: nothing rolled out twice);
with `eval_every` a learning curve on a validation slice (kit/train/grpo_curve.py) keeps the best policy.

Outputs: model/ (the last policy, HF folder), model_best/ (the best on the learning curve),
metrics.jsonl (one line per step), probes.jsonl (one line per probe: the band and every task's
rate), curve.jsonl (one line per validation point).

A crash does not cost the run: every `save_every` steps the stage writes a checkpoint into
checkpoints/ (kit/train/checkpoints.py); rerun (the same `kit run` command), it resumes from the
newest one of the same fingerprint, keeps the metrics lines of the steps that holds, and ends
with the weights an uninterrupted run would have. The checkpoints go once model/ is written. A dead
server (the rollout server, the user simulator's) is such a crash: after the backend's retries the stage
stops with an error naming it (`kit run` adds the recipe server's id); a rerun once it is back resumes.
An episode a server failed alone is left out of its group and counted (metrics `episodes/infra_failed`).
A failed episode that failure attribution puts on the user simulator is left out of its group's advantage and
replaced within the resample budget (`user_faults: mask`, the default; `keep`: trained on as any failure), and
counted either way (`episodes/user_faults`, `episodes/user_fault_masked`, `episodes/user_fault_resampled`, per
rule `episodes/user_fault/<rule>`; the report's GRPO table).
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import BaseModel, Field, model_validator

from kit import metrics as M
from kit.stages.base import ModelStageConfig, StageOutputs, mechanism_kwargs
from kit.stages.contract import (
    BASE_MODEL,
    Contract,
    MemoryUse,
    Problem,
    Produces,
    Reference,
    ReportPart,
    SectionContext,
)
from kit.sources import GoldRef, PathRef, SplitRef, parse_source
from kit.train.grpo_config import RESUMABLE_CHANGES, GRPOConfig, GRPOKnobs, SkipReason
from kit.train.grpo_curve import flat_curve_warning



class Config(ModelStageConfig, GRPOKnobs):
    """The policy, the user simulator, the tasks; every GRPO knob is kit.train.grpo_config.GRPOKnobs'
    (declared there once, inherited here)."""

    model: Optional[str] = Field(default=None, description="Policy to train: '@<sft_agent>', an HF folder or "
                                 "'embedded'. None: the latest sft_agent stage, else the base_model.")
    user_model: Optional[str] = Field(default=None, description="User simulator. None: the latest sft_user "
                                      "stage (the paper's fine-tuned user), else the base_model (raw user).")
    user_tag: Optional[str] = Field(default=None, description="'fine-tuned' or 'raw' (None: inferred).")
    tasks: Optional[str] = Field(default=None, description="'@<synthesize>' (its rl_tasks.jsonl), a JSONL file of "
                                 "checked tasks, or 'split:<name>'. None: the latest synthesize stage.")
    fallback_split: Optional[str] = Field(default="train", description="No synthesized tasks: train on this "
                                          "split of the domain (said loudly); the default set when it lacks it.")
    dtype: str = Field(default="auto", description="'auto' (bf16 on CUDA, else fp32) or a torch dtype name.")
    allow_overlap: bool = Field(default=False, description="Train even when some RL tasks' gold actions are all "
                                "in the policy's SFT data (a memorized task carries no signal); off: dropped "
                                "(drop_overlap) or refused.")
    reuse_start: bool = Field(default=True, description="Read step 0's probe and curve point from another GRPO "
                              "stage with the same start (policy stage, user, tasks, every setting that acts before "
                              "step 1: kit/train/grpo_memo.py) instead of rolling them out again; they are kept "
                              "beside the policy's stage folder. Off: always measured.")
    drop_overlap: bool = Field(default=True, description="RL tasks whose gold actions are all in the policy's SFT "
                               "data are left out, with a warning naming them (an engine's RL task can repeat the "
                               "calls of a longer SFT task); refused when none would be left. Off: refused.")


# the per-step metrics the notebook shows (metrics.jsonl has them all)
SHOWN = ("step", M.REWARD_MEAN, M.PASS_RATE, M.FILTERED_FRAC, M.GROUPS_KEPT, M.LOSS, M.CLIP_FRAC,
         M.USER_DEVIATION_RATE, M.USER_FAULTS, M.USER_FAULT_MASKED, "skip_reason", M.STEP_TIME)


class TaskSource(BaseModel):
    """Where GRPO's tasks came from: the engine's RL pool, a split the recipe named, or the split it fell
    back to without engine tasks; `split` is the split whose tasks were used ("default": the domain's
    default set). Written as text ("engine", "split:<name>", "fallback:<name>") for people."""

    kind: Literal["engine", "split", "fallback"]
    split: Optional[str] = None

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, v: Any) -> Any:
        """A stage.json of an older kit: the text form, whose split was quoted ("fallback:split 'train'")
        or the default set ("fallback:default set, no split 'train'")."""
        if not isinstance(v, str):
            return v
        kind, _, rest = v.partition(":")
        quoted = re.search(r"'([^']*)'", rest)
        split = None if kind == "engine" else ("default" if "default set" in rest or not (quoted or rest)
                                               else quoted.group(1) if quoted else rest)
        return {"kind": kind, "split": split}

    def __str__(self) -> str:
        return self.kind if self.kind == "engine" else f"{self.kind}:{self.split}"


class Outputs(StageOutputs):
    steps: int
    tasks: int
    task_source: TaskSource = Field(description="Where the tasks came from: the engine's RL pool or a split.")
    user_tag: str = Field(description="'fine-tuned' or 'raw'.")
    reward_first: Optional[float] = None
    reward_last: Optional[float] = None
    policy: Optional[str] = Field(default=None, description="The policy GRPO started from (an HF folder).")
    trained_steps: int = Field(default=0, description="Steps whose update was applied (not skipped).")
    skip_reasons: dict[SkipReason, int] = Field(default_factory=dict, description="Skipped steps per reason.")
    best_step: Optional[int] = Field(default=None, description="Learning curve: the step of the best "
                                     "validation pass^1 (model_best/); None without a curve.")
    best_pass1: Optional[float] = None
    last_pass1: Optional[float] = None
    episodes: Optional[int] = Field(default=None, description="Rollout episodes scored by the steps (resamples "
                                    "included, and a probe's episodes a step trained on, once; probes and "
                                    "learning-curve episodes otherwise not).")
    episode_budget: Optional[int] = Field(default=None, description="The budget that stopped training before "
                                          "`steps`, if one did (GRPOConfig.episode_budget).")

    def what_happened(self) -> str:
        """The policy this stage wrote, in words: what trained, or why nothing did."""
        if self.trained_steps == 0:
            why = ", ".join(f"{r.replace('_', ' ')} ({n})" for r, n in self.skip_reasons.items()) or "no steps"
            return f"GRPO skipped: {why}; the weights are its start's"
        budget = (f"; stopped by its episode budget ({self.episodes} episodes scored, budget {self.episode_budget})"
                  if self.episode_budget else "")
        return f"GRPO {self.trained_steps}/{self.steps} steps trained ({self.user_tag} user){budget}"

    def curve(self):
        """curve.jsonl as a data frame: one row per learning-curve point (empty without a curve)."""
        import pandas as pd

        from kit.files import read_jsonl

        f = self.files.get("curve")
        return pd.DataFrame(read_jsonl(f) if f and Path(f).exists() else [])
    resumed_from: int = Field(default=0, description="Steps a crashed attempt had checkpointed, resumed from "
                              "(0: trained in one go).")

    def history(self):
        """metrics.jsonl as a data frame: one row per step, columns named in kit.metrics."""
        import pandas as pd

        from kit.files import read_jsonl

        return pd.DataFrame(read_jsonl(self.files["metrics"]))


def read_checked_tasks(f: Path) -> dict:
    """The checked tasks (kit.checkers.checker.CheckedTask) of a JSONL file such as the engine's
    rl_tasks.jsonl, by task id; {} when the file does not exist."""
    from kit.checkers.checker import CheckedTask

    lines = f.read_text(encoding="utf-8").splitlines() if f.exists() else []
    recs = [CheckedTask.model_validate_json(line) for line in lines if line.strip()]
    return {r.task.id: r for r in recs}


def checker_reward(dom, checked: dict):
    """reward_fn(task, trajectory): the task's checker where it has one (kit.checkers.run_checker: τ²
    criteria + sandboxed code), else the kit verifier on its τ² criteria."""
    from kit.checkers.checker import run_checker
    from kit.verify import verify

    def reward_fn(task, traj):
        rec = checked.get(task.id)
        return run_checker(dom, rec, traj).reward if rec is not None else verify(dom, task, traj).reward

    return reward_fn


def training_tasks(config: Config, dom, st) -> tuple[list, dict, TaskSource]:
    """(tasks, checked tasks by id, where they came from)."""
    from kit.runner.stage import split_tasks

    checked, task_list, task_source = {}, [], TaskSource(kind="engine")
    src = parse_source(config.tasks) if config.tasks else None
    if isinstance(src, SplitRef):
        task_list, used_split = split_tasks(dom, src.name, st, "GRPO")
        task_source = TaskSource(kind="split", split=used_split.used)
    elif src is not None:  # a folder (the synthesize stage's: the runner resolved '@<id>') or a JSONL file
        f = Path(config.tasks) / "rl_tasks.jsonl" if Path(config.tasks).is_dir() else Path(config.tasks)
        checked = read_checked_tasks(f)
        task_list = [r.task for r in checked.values()]
        print(f"{len(task_list)} checked tasks from {f}")
    if not task_list:
        task_list, used_split = split_tasks(dom, config.fallback_split, st, "GRPO")
        task_source = TaskSource(kind="fallback", split=used_split.used)
        st.warn(f"NO ENGINE TASKS: {'no synthesize stage' if not config.tasks else 'the engine accepted no task'}; "
                f"GRPO trains on {len(task_list)} tasks of {config.domain} ({used_split}) instead (checker: τ² criteria)")
    return task_list, checked, task_source


def policy_sft_data(policy_dir: Path) -> list[Path]:
    """What the policy was fine-tuned on: the sft_agent.train.jsonl beside its folder (an SFT stage's
    output), or, for a GRPO stage's output, what its own start was fine-tuned on."""
    d = Path(policy_dir).parent
    files = sorted(d.glob("sft_*.train.jsonl"))
    if files:
        return [f for f in files if f.name == "sft_agent.train.jsonl"] or files
    info = d / "stage.json"
    if info.exists():
        summary = json.loads(info.read_text()).get("summary") or {}
        if summary.get("policy") and Path(summary["policy"]) != Path(policy_dir):
            return policy_sft_data(Path(summary["policy"]))
    return []


def check_pool_overlap(task_list: list, policy_dir: Path, allow: bool, st, drop: bool = False) -> dict:
    """RL tasks whose every gold action is in the policy's SFT data (kit.eval.leak's rule): a task the policy
    memorized is replayed or failed in every episode, so its group carries nothing. Refused; with `drop`, the
    report's `dropped` names them for the caller to leave out (refused still when none would be left); with
    `allow`, kept with a warning."""
    from kit.errors import BadInput
    from kit.eval.leak import leak_report, training_action_keys

    files = policy_sft_data(policy_dir)
    if not files:
        return {"checked_files": [], "n_overlap": 0, "n_tasks": len(task_list)}
    rep = leak_report(task_list, training_action_keys(files))
    rep["checked_files"] = [str(f) for f in files]
    if rep["n_overlap"]:
        ids = rep["overlapping_task_ids"]
        msg = (f"{rep['n_overlap']} of {len(task_list)} RL tasks have every gold action in the policy's SFT data "
               f"({', '.join(ids[:5])}{', ...' if len(ids) > 5 else ''}; {files[0]}): GRPO would train on tasks the "
               "policy memorized")
        if not allow and drop and rep["n_overlap"] < len(task_list):
            rep["dropped"] = list(ids)
            st.warn(msg + f"; left out (drop_overlap): GRPO trains on the other {len(task_list) - rep['n_overlap']}")
            return rep
        if not allow:
            raise BadInput(msg, "train GRPO on the engine's RL pool (tasks: '@<synthesize>' reads rl_tasks.jsonl, "
                           "disjoint from its SFT pool; raise synthesize.rl_share if it is empty), or set "
                           "allow_overlap: true to train anyway")
        st.warn(msg + " (allowed: allow_overlap)")
    return rep


def _stage_identity(folder: Path) -> Optional[str]:
    """'<stage fingerprint>/<folder name>' for a model folder a stage wrote (its stage.json beside it), else None."""
    from kit.files import read_json

    fp = (read_json(folder.parent / "stage.json") or {}).get("fingerprint")
    return f"{fp}/{folder.name}" if fp else None


def start_memo(config: Config, cfg, policy_dir: Path, task_list: list, checked: dict, eval_tasks: list, out_dir: Path):
    """The StartMemo of this stage's step 0 (kit/train/grpo_memo.py), or None: `reuse_start` off, or a policy
    no stage wrote (nothing identifies its weights but the weights)."""
    from kit.train.grpo_memo import StartMemo, start_identity

    policy = _stage_identity(Path(policy_dir))
    if not config.reuse_start or policy is None:
        return None
    user_dir = Path(config.user_model) if config.user_model and Path(config.user_model).is_dir() else None
    user = (_stage_identity(user_dir) if user_dir else None) or str(cfg.user_model)
    tasks = ([r.model_dump(mode="json") for r in checked.values()] if checked
             else [t.model_dump(mode="json") for t in task_list])
    ids = sorted(t.id for t in task_list)
    return StartMemo(Path(policy_dir).parent / "memo", start_identity(
        cfg, policy=policy, user=user, tasks={"ids": ids, "tasks": tasks},
        eval_tasks=[t.model_dump(mode="json") for t in eval_tasks]), origin=str(out_dir))


def user_tag(config: Config) -> str:
    """'fine-tuned' when the user model is an sft_user stage's output, else 'raw' (unless set)."""
    if config.user_tag:
        return config.user_tag
    info = Path(config.user_model).parent / "stage.json" if config.user_model else None
    stage = json.loads(info.read_text()).get("stage") if info is not None and info.exists() else None
    return "fine-tuned" if stage == "sft_user" else "raw"


def run(config: Config, st) -> Outputs:
    """Train the policy; metrics.jsonl gets one line per step as it ends."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from kit.envs import load_domain
    from kit.llm.spec import ModelSpec
    from kit.train.grpo import GRPOTrainer

    dom = load_domain(config.domain)
    task_list, checked, task_source = training_tasks(config, dom, st)
    reward_fn = checker_reward(dom, checked)

    print(f"{len(task_list)} tasks ({task_source}), "
          f"{sum(bool(r.checker.code) for r in checked.values())} with code checkers")
    policy_dir = ModelSpec.parse(config.model or "embedded", folder_kind="hf").folder()
    overlap = check_pool_overlap(task_list, policy_dir, config.allow_overlap, st, drop=config.drop_overlap)
    if overlap.get("dropped"):
        gone = set(overlap["dropped"])
        task_list = [t for t in task_list if t.id not in gone]
    print(f"pool overlap with the policy's SFT data: {overlap['n_overlap']} of {overlap['n_tasks']} tasks"
          + (f" ({', '.join(overlap['checked_files'])})" if overlap["checked_files"] else " (no SFT data found)")
          + (f"; left out: {', '.join(overlap['dropped'])}" if overlap.get("dropped") else ""))
    user_spec = str(ModelSpec.parse(config.user_model or "embedded", folder_kind=config.backend))
    tag = user_tag(config)
    dtype = {"auto": torch.bfloat16 if torch.cuda.is_available() else torch.float32}.get(config.dtype) \
        or getattr(torch, config.dtype)
    policy = AutoModelForCausalLM.from_pretrained(policy_dir, dtype=dtype, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(policy_dir, local_files_only=True)
    print(f"policy: {policy_dir}\nuser simulator ({tag}): {user_spec}")

    cfg = GRPOConfig(**mechanism_kwargs(config, GRPOConfig, user_model=user_spec, user_tag=tag,
                                        print_metrics=False, sync_dir=str(st.out_dir / "sync")))
    if config.rollout == "server":
        print(f"rollouts: {config.rollout_server} ({cfg.weight_sync} weight sync after each step)")
    eval_tasks = []
    if cfg.eval_every:
        eval_tasks = dom.tasks(cfg.eval_split)[: cfg.eval_limit]
        print(f"learning curve: {len(eval_tasks)} tasks of {config.domain} '{cfg.eval_split}' every {cfg.eval_every} steps")
    memo = start_memo(config, cfg, policy_dir, task_list, checked, eval_tasks, st.out_dir)
    if memo is not None:
        print(f"step 0's probe and curve point: shared through {memo.folder} (key {memo.key})")
    trainer = GRPOTrainer(policy, tokenizer, task_list, cfg, domain=dom, reward_fn=reward_fn, eval_tasks=eval_tasks,
                          start_memo=memo)
    main = trainer.acc.is_main_process  # under `accelerate launch`, one process writes
    for warning in (trainer.step_budget_warning, trainer.checkpoint_warning):
        if warning and main:
            st.warn(warning)

    def on_step(m: dict) -> None:
        if not main:
            return
        st.log("grpo", m, step=m["step"])
        print(f"step {m['step']}: reward {m[M.REWARD_MEAN]:.3f}, filtered {m[M.FILTERED_FRAC]:.2f}, "
              f"loss {m.get(M.LOSS, float('nan')):.4g}, {m[M.STEP_TIME]:.0f}s"
              + (f", user faults {m[M.USER_FAULTS]:.0f} ({m[M.USER_FAULT_MASKED]:.0f} masked, "
                 f"{m[M.USER_FAULT_RESAMPLED]:.0f} replacements)" if m.get(M.USER_FAULTS) else "")
              + (f" SKIPPED: {m['skip_reason']}" if m["skipped"] else ""))

    def on_event(kind: str, rec: dict) -> None:
        from kit.files import append_jsonl

        if kind == "eval" and rec["best"]:  # every process: saving waits for all of them
            trainer.save(st.out_dir / "model_best")
        if not main:
            return
        append_jsonl(st.out_dir / ("curve.jsonl" if kind == "eval" else "probes.jsonl"), rec)
        if kind == "probe":
            print(f"probe before step {rec['step']}: {rec['band_size']} of {rec['tasks']} tasks in the band "
                  f"[{rec['band_min']}, {rec['band_max']}] ({rec['always']} always solved, {rec['never']} never; "
                  f"{rec['probe_k']} episodes each, {rec['probe_s']:.0f}s)" + (" EMPTY: drawing from every task"
                                                                           if rec["band_empty"] else "")
                  + ("" if "train_groups" not in rec else
                     "; read from a memo, no episodes here: the steps roll out their own" if rec.get("reused_from")
                     else f"; its episodes are {rec['train_groups']} groups of the next steps (probe_train)"))
        else:
            print(f"validation after {rec['step']} steps: pass^1 {rec['pass1']:.3f} [{rec['ci95'][0]:.3f}, "
                  f"{rec['ci95'][1]:.3f}] on {rec['tasks']} tasks{' (best so far)' if rec['best'] else ''}")

    history, resumed = train_resumably(trainer, st.out_dir, st.checkpoint_tag, on_step, on_event)
    skips: dict[str, int] = {}
    for m in history:
        if m["skipped"]:
            skips[m["skip_reason"]] = skips.get(m["skip_reason"], 0) + 1
    best, points = trainer.curve.best, trainer.curve.points
    flat = flat_curve_warning(points) if any(not m["skipped"] for m in history) else None
    if flat and main:
        st.warn(flat)
    out_files = {"model": str(st.out_dir / "model"), "metrics": str(st.out_dir / "metrics.jsonl")}
    if points:
        out_files.update({"model_best": str(st.out_dir / "model_best"), "curve": str(st.out_dir / "curve.jsonl")})
    if trainer.curriculum.on:
        out_files["probes"] = str(st.out_dir / "probes.jsonl")
    out = Outputs(files=out_files, steps=config.train_steps, tasks=len(task_list), task_source=task_source,
                  user_tag=tag, reward_first=history[0][M.REWARD_MEAN] if history else None,
                  reward_last=history[-1][M.REWARD_MEAN] if history else None, policy=str(policy_dir),
                  trained_steps=sum(not m["skipped"] for m in history), skip_reasons=skips,
                  best_step=best["step"] if best else None, best_pass1=best["pass1"] if best else None,
                  last_pass1=points[-1]["pass1"] if points else None, resumed_from=resumed,
                  episodes=trainer.episodes_scored,
                  episode_budget=config.episode_budget if trainer.budget_spent and len(history) < config.train_steps
                  else None)
    print(out.what_happened())
    return out


def train_resumably(trainer, out_dir: Path, tag: Optional[str],
                    on_step: Optional[Callable[[dict], None]] = None,
                    on_event: Optional[Callable[[str, dict], None]] = None) -> tuple[list[dict], int]:
    """Train to `train_steps` from the newest checkpoint of `tag` in out_dir/checkpoints (a crashed
    attempt's; none: from step 0), write out_dir/model and remove the checkpoints. metrics.jsonl
    and probes.jsonl keep the lines of the steps the checkpoint holds (a crash may have left lines of
    later steps: they are run again), curve.jsonl the points the checkpoint holds; each gets one line
    per new step, probe or point. `on_step` sees every step's metrics, the earlier attempt's first
    (W&B gets the whole curve). Returns (every step's metrics, the steps resumed from)."""
    from kit.files import append_jsonl, atomic_write, read_jsonl

    main = trainer.acc.is_main_process
    metrics_file, checkpoints = out_dir / "metrics.jsonl", out_dir / "checkpoints"
    done = trainer.resume(checkpoints, tag)
    earlier = [m for m in read_jsonl(metrics_file) if m.get("step", done) < done] if done else []
    if main:
        def lines(rows):
            return "".join(json.dumps(m, default=str) + "\n" for m in rows)

        atomic_write(metrics_file, lines(earlier))
        probes = out_dir / "probes.jsonl"
        atomic_write(probes, lines([p for p in read_jsonl(probes) if p.get("step", done) < done] if done else []))
        atomic_write(out_dir / "curve.jsonl", lines(trainer.curve.points))  # the checkpoint's points
        if done:
            print(f"resuming from step {done} ({checkpoints}): {len(earlier)} steps' metrics kept, "
                  f"{trainer.cfg.train_steps - done} steps to go")
    for m in earlier:
        if on_step is not None:
            on_step(m)

    def step_done(m: dict) -> None:
        if main:
            append_jsonl(metrics_file, m)
        if on_step is not None:
            on_step(m)

    history = earlier + trainer.train(on_step=step_done, on_event=on_event, checkpoint_dir=checkpoints)
    trainer.save(out_dir / "model")
    if main:
        shutil.rmtree(checkpoints, ignore_errors=True)
    return history, done


# ----- the contract (kit/stages/contract.py) ------------------------------------------------------


def check(ps, plan: list, budgets: bool) -> list[Problem]:
    """The episode budget fits the longest task of the synthesize stage it trains on; `tasks` is a
    reference, 'split:<name>' or a JSONL file that exists."""
    from kit.stages.synthesize import engine_budget_problem

    p, out = ps.params, []
    if budgets:
        synth = next((q for q in plan if q.key == ps.refs.get("tasks") and q.stage == "synthesize"), None)
        problem = engine_budget_problem("max_messages", p.get("max_messages"), synth.params) if synth else None
        out += [problem] if problem else []
    src = parse_source(p["tasks"]) if isinstance(p.get("tasks"), str) else None
    if isinstance(src, GoldRef) or (isinstance(src, PathRef) and not src.exists()):
        out.append(("tasks", f"'{src}' is neither '@<stage id>', 'split:<name>' nor an existing JSONL file of "
                    "checked tasks (or a folder holding rl_tasks.jsonl)"))
    return out


def memory(p: dict, context: int) -> MemoryUse:
    """micro_batch_size rows of max_seq_tokens (else the model's context) per forward pass, at most
    micro_batch_tokens padded tokens where set; it samples."""
    return MemoryUse(rows=p.get("micro_batch_size", 4), length=p.get("max_seq_tokens") or context,
                     checkpointing=p.get("gradient_checkpointing"), field="max_seq_tokens", samples=True,
                     max_tokens=p.get("micro_batch_tokens"))


def leak_sources(summary: dict) -> list[str]:
    """The split a stage trained on when it fell back to one or was given one ('split:<name>')."""
    if not summary.get("task_source"):
        return []
    src = TaskSource.model_validate(summary["task_source"])
    return [] if src.kind == "engine" else [SplitRef(name=src.split or "default").text()]


def report_entry(common: dict, out: Outputs, stage: str) -> dict:
    from kit.files import read_jsonl

    return {**common, "history": out.history(), "outputs": out, "curve": out.curve(),
            "probes": read_jsonl(out.files["probes"]) if "probes" in out.files else []}


def report_sections(data: dict, ctx: SectionContext) -> list:
    from kit.report.grpo import grpo_section

    return [grpo_section(data, ctx.out, ctx.figures)]


def provenance(info: dict, folder: Path):
    """The report's words for a model folder this stage wrote: the steps that trained (or why none did),
    on what start (traced back through its stage.json), the last or the best policy."""
    from kit.files import read_jsonl
    from kit.report.run_data import AgentProvenance, agent_provenance, reasons_text

    stage, sid, raw = info.get("stage"), info.get("id"), info.get("summary") or {}
    out = Outputs.from_stage_json(info)
    start = agent_provenance(out.policy) if out.policy else AgentProvenance("base model")
    if "trained_steps" not in raw:  # a stage.json from before GRPO counted its applied steps
        return AgentProvenance(f"GRPO {out.steps} steps on {start.stage_id or 'the base model'} "
                               "(which trained: not recorded)", stage, sid)
    if out.trained_steps == 0:
        why = f"GRPO skipped: {reasons_text(out.skip_reasons, len(out.skip_reasons) > 1) or 'no step ran'}"
        return AgentProvenance(f"{start.text}; {why}", stage, sid, why)
    trained = f"{out.trained_steps}/{out.steps} steps trained"
    skipped = f"; skipped: {reasons_text(out.skip_reasons, True)}" if out.skip_reasons else ""
    if folder.name != "model_best" or out.best_step is None:
        return AgentProvenance(f"GRPO {trained} on {start.stage_id or 'the base model'}, last{skipped}", stage, sid)
    steps = read_jsonl(out.files.get("metrics") or folder.parent / "metrics.jsonl")
    if not any(m.get("step", 0) < out.best_step and not m.get("skipped") for m in steps):
        why = f"GRPO's best point (step {out.best_step}) came before any update"
        return AgentProvenance(f"{start.text}; {why} (of {trained})", stage, sid, why)
    return AgentProvenance(f"GRPO {trained} on {start.stage_id or 'the base model'}, best (step {out.best_step})"
                           f"{skipped}", stage, sid)


CONTRACT = Contract(
    names=("grpo",), produces=Produces.MODEL, models=("model", "model_best"), launchable=True, training_data=True,
    references={"model": Reference(Produces.MODEL, wire_from=("sft_agent",), fallback=BASE_MODEL),
                "user_model": Reference(Produces.MODEL, wire_from=("sft_user",), fallback=BASE_MODEL),
                "tasks": Reference(Produces.DATA, wire_from=("synthesize",))},
    check=check, memory=memory, leak_sources=leak_sources, resumable=RESUMABLE_CHANGES,
    report=ReportPart(bucket="grpo_runs", read=report_entry, sections=report_sections, rank=3),
    provenance=provenance)
