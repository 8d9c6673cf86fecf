"""Train/test leak check: did a run train on the very actions its evaluation tasks score?

    keys = training_action_keys(["runs/x/synthesize", "runs/x/sft_agent"])
    rep = leak_report(eval_tasks, keys)       # {"overlapping_task_ids", "n_overlap", "n_tasks", ...}

An action is keyed canonically as (tool name, its arguments as sorted compact JSON). Sources:
  - tau2 Task files (tasks.jsonl, a JSON list, or rl_tasks.jsonl whose lines are
    {"task": {...}, "checker": {...}}, kit.checkers.checker.CheckedTask): their gold actions;
  - SFT sample files (sft_agent.jsonl, and what an SFT stage trained on, sft_agent.train.jsonl):
    each line's `messages` (OpenAI chat list), every assistant `tool_calls` function + arguments;
  - a folder: every such file in it (tasks.jsonl, rl_tasks.jsonl, sft_agent.jsonl,
    sft_agent.train.jsonl);
  - "split:<name>" (resolved by kit.eval.runner against its domain): the gold actions of a
    split's tasks, e.g. what a GRPO stage trained on when it fell back to a split.

An evaluation task overlaps when it has gold actions and every one of them is among the
training keys (the whole solution was seen); `partial_task_ids` lists tasks sharing only some
(a common lookup such as a user's details is not, alone, a leak).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Optional

from kit.files import BadLine, read_records

TRAINING_FILES = ("tasks.jsonl", "rl_tasks.jsonl", "sft_agent.jsonl", "sft_agent.train.jsonl")


def action_key(name: str, arguments) -> tuple[str, str]:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            pass  # keep the raw string: it still keys the call
    return (str(name), json.dumps(arguments if arguments is not None else {}, sort_keys=True,
                                  separators=(",", ":"), default=str))


DEVICE_KEY = "@device"


def _device(task: dict) -> Optional[str]:
    """The phone a task's user holds (telecom: the number its initialization gives set_user_info), or None."""
    for a in ((task.get("initial_state") or {}).get("initialization_actions") or []):
        if a.get("env_type") == "user" and a.get("func_name") == "set_user_info":
            return (a.get("arguments") or {}).get("phone_number")
    return None


def _actions_of_task_dict(task: dict) -> list[tuple[str, str]]:
    """A user's device action (requestor "user": toggle_data(), ...) is keyed with the phone it acts on
    (DEVICE_KEY): without it, turning mobile data on for one customer would be the whole solution of
    every task whose fix is turning mobile data on (tau2's own telecom tasks all use one phone)."""
    crit = task.get("evaluation_criteria") or {}
    device = _device(task)
    out = []
    for a in crit.get("actions") or []:
        if not a.get("name"):
            continue
        args = a.get("arguments")
        if a.get("requestor") == "user" and device is not None and isinstance(args, dict):
            args = {**args, DEVICE_KEY: device}
        out.append(action_key(a.get("name"), args))
    return out


def gold_action_keys(task) -> set[tuple[str, str]]:
    """(tool name, sorted-JSON arguments) of a task's gold actions (a tau2 Task or its dict); a user's
    device action carries the phone it acts on (`_actions_of_task_dict`)."""
    if not isinstance(task, dict):
        task = task.model_dump(mode="json", include={"initial_state", "evaluation_criteria"})
    return set(_actions_of_task_dict(task))


def _keys_of_record(rec) -> set[tuple[str, str]]:
    if not isinstance(rec, dict):
        return set()
    if isinstance(rec.get("task"), dict):  # rl_tasks.jsonl: CheckedTask
        return set(_actions_of_task_dict(rec["task"]))
    if isinstance(rec.get("messages"), list):  # an SFT sample
        out = set()
        for m in rec["messages"]:
            if not isinstance(m, dict) or m.get("role") != "assistant":
                continue
            for tc in m.get("tool_calls") or []:
                fn = tc.get("function") if isinstance(tc.get("function"), dict) else tc
                if fn.get("name"):
                    out.add(action_key(fn["name"], fn.get("arguments")))
        return out
    if "evaluation_criteria" in rec:  # a tau2 Task
        return set(_actions_of_task_dict(rec))
    return set()


def _records(path: Path) -> Iterable:
    # a torn last line of a killed run (a BadLine) is skipped
    yield from (x for _, x in read_records(path)[1] if not isinstance(x, BadLine))


def training_files(paths: Iterable[str | Path]) -> list[Path]:
    """The files a list of files / folders stands for (folders: TRAINING_FILES in them)."""
    out: list[Path] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            out += [p / n for n in TRAINING_FILES if (p / n).is_file()]
        elif p.is_file():
            out.append(p)
        else:
            from kit.errors import NotFound

            raise NotFound(f"training data not found: {p}", "name task / SFT files, folders holding them, or "
                           "'split:<name>'; or leave training_data unset inside a recipe")
    return out


def training_action_keys(paths: Iterable[str | Path]) -> set[tuple[str, str]]:
    """Every action key in what a run trained on (task files, rl_tasks, SFT samples; folders)."""
    keys: set[tuple[str, str]] = set()
    for f in training_files(paths):
        for rec in _records(f):
            keys |= _keys_of_record(rec)
    return keys


def leak_report(eval_tasks, training_keys: set) -> dict:
    """{overlapping_task_ids, n_overlap, n_tasks, partial_task_ids}: see the module docstring."""
    eval_tasks = list(eval_tasks)
    overlap, partial = [], []
    for t in eval_tasks:
        gold = gold_action_keys(t)
        tid = t["id"] if isinstance(t, dict) else t.id
        if gold and gold <= training_keys:
            overlap.append(tid)
        elif gold & training_keys:
            partial.append(tid)
    return {"overlapping_task_ids": overlap, "n_overlap": len(overlap), "n_tasks": len(eval_tasks),
            "partial_task_ids": partial}


def run_training_data(run_dir: str | Path, before: Optional[str] = None, arm: Optional[str] = None) -> list[str]:
    """What the training stages of a `kit run` wrote, from its manifest: the folder of every
    stage whose CONTRACT says `training_data` (the engine, SFT, GRPO: kit/stages/contract.py) that
    completed (or was shared) before the stage keyed `before` (default: all of them), plus what its
    contract's `leak_sources` reads from its summary ("split:<name>" for a GRPO stage that fell back
    to, or was given, a split of the domain). In an ablation (`arm` given), only that arm's
    stages (a stage shared from another arm is listed under this arm too) and those outside any
    arm. Without a manifest: every such stage folder found under run_dir (stage.json naming a
    training stage)."""
    from kit.stages import contract, contracts

    training = {name for c in contracts() if c.training_data for name in c.names}
    run_dir = Path(run_dir)
    out: list[str] = []
    mpath = run_dir / "manifest.json"
    entries = []
    if mpath.exists():
        m = json.loads(mpath.read_text(encoding="utf-8"))
        for e in m.get("stages") or []:
            if before is not None and e.get("key") == before:
                break
            if arm is not None and e.get("arm") not in (None, arm):
                continue
            if e.get("stage") in training and e.get("status") in ("complete", "shared"):
                nb = e.get("executed_notebook") or e.get("log")  # a launched stage (accelerate) has a log
                d = e.get("shared_with") or (str(Path(nb).parent) if nb else str(run_dir / e["key"]))
                entries.append((Path(d), e.get("summary") or {}, e.get("stage")))
    else:
        for sj in sorted(run_dir.glob("*/stage.json")) + sorted(run_dir.glob("*/*/stage.json")):
            info = json.loads(sj.read_text(encoding="utf-8"))
            if info.get("stage") in training and info.get("status") == "complete":
                entries.append((sj.parent, info.get("summary") or {}, info.get("stage")))
    for d, summary, stage in entries:
        if d.is_dir() and str(d) not in out:
            out.append(str(d))
        sources = contract(stage).leak_sources
        for spec in (sources(summary) if sources is not None else []):
            if spec not in out:
                out.append(spec)
    return out
