"""Held-out evaluation tasks shipped with the kit: `Domain.tasks("heldout")` reads them.

    from kit.data import heldout_tasks, task_meta
    tasks = heldout_tasks("mock")                  # 252 τ² Tasks, ids heldout-000 ...
    val = heldout_tasks("mock", "heldout_val")     # the fixed validation slice (63): learning curves
    test = heldout_tasks("mock", "heldout_test")   # the fixed test slice (189): the numbers a run reports
    confirm = heldout_tasks("mock", "heldout_confirm")  # a separate confirmation slice (712), kit/data/mock_confirm.json
    task_meta(tasks[0])                            # {"shape": "create", "phrasing": "template", "split": "test", ...}
    task_labels(dom, tasks)                        # {task id: (shape, phrasing)}: what evaluation breaks pass^1 down by

They are never trained on, and are made independently of the data engine (kit/engine), so an
evaluation on them measures what the engine's tasks taught rather than what they repeated:
kit/data/mock_heldout.json is written by scripts/make_mock_heldout.py (seeded, its own word
lists; its docstring gives the shapes, the phrasings and how the slices are drawn) and checked by
tests/test_heldout.py. Each task's shape, phrasing and slice are in its `description.notes`
(JSON), which τ²'s Task keeps and shows neither the agent nor the user simulator.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

HELDOUT_SPLIT = "heldout"
# split name -> the slice it keeps (None: the whole set); each task's slice is in its metadata
HELDOUT_SPLITS = {HELDOUT_SPLIT: None, "heldout_val": "val", "heldout_test": "test", "heldout_confirm": "confirm"}
HELDOUT_FILES = {"mock": Path(__file__).with_name("mock_heldout.json")}
# the confirmation slice: its own file (scripts/make_mock_heldout.py --confirm), not part of `heldout`; for a test
# declared after the 252 tasks above were used to choose something (a policy, a seed), so that it is
# independent of that choice. The engine's held-out guard (kit.engine.validate) keeps its solutions out of engine
# data as it does the main set's; the evaluation's leak check (kit.eval.leak) checks what a run trained on.
CONFIRM_SPLIT = "heldout_confirm"
CONFIRM_FILES = {"mock": Path(__file__).with_name("mock_confirm.json")}
# the splits that together hold every task the kit ships, each once: what the engine's held-out guard keeps out of
# engine data and what Domain.task finds by id
SHIPPED_SPLITS = (HELDOUT_SPLIT, CONFIRM_SPLIT)


def task_meta(task) -> Optional[dict]:
    """The held-out set's labels of a task (a tau2 Task or its dict): {"shape", "phrasing", "split", ...}
    from its description.notes (kit.tags reads them); None for a task without them (tau2's own)."""
    from kit.tags import task_notes

    meta = task_notes(task)
    return meta if "shape" in meta and "phrasing" in meta else None


def task_labels(domain, tasks) -> dict[str, tuple[str, str]]:
    """{task id: (shape, phrasing)} of evaluation tasks, for pass^1 by shape and by phrasing. A held-out
    task has its own labels; any other task's shape is its gold tools in order ('update_task_status',
    'create_task+update_task_status'; 'no_actions' without any), and its phrasing is 'tau2' when it is one
    of tau2's own tasks of a built-in domain (`domain`: a kit Domain), else 'unlabelled'."""
    from kit.envs.domain import BUILTIN_DOMAINS

    own = {t.id for t in domain.tasks(None)} if domain.name in BUILTIN_DOMAINS else set()
    out = {}
    for t in tasks:
        meta = task_meta(t)
        if meta is not None:
            out[t.id] = (str(meta["shape"]), str(meta["phrasing"]))
            continue
        crit = t.evaluation_criteria
        names = [a.name for a in ((crit.actions if crit else None) or [])]
        out[t.id] = ("+".join(names) or "no_actions", "tau2" if t.id in own else "unlabelled")
    return out


def heldout_tasks(domain: str, split: str = HELDOUT_SPLIT) -> list:
    """The held-out τ² Tasks of `domain`, all of them or one slice (`split`: a key of HELDOUT_SPLITS);
    kit.errors.UnknownName when the kit ships none for the domain or the split names no slice."""
    from kit import _tau2  # noqa: F401  (offline tau2)
    from kit.errors import UnknownName
    from tau2.data_model.tasks import Task

    if split not in HELDOUT_SPLITS:
        raise UnknownName(f"no held-out split '{split}'", f"use one of {', '.join(HELDOUT_SPLITS)}")
    files = CONFIRM_FILES if split == CONFIRM_SPLIT else HELDOUT_FILES
    if domain not in files:
        raise UnknownName(f"no {split} tasks for domain '{domain}'; available: {', '.join(files)}")
    tasks = [Task.model_validate(t) for t in json.loads(files[domain].read_text(encoding="utf-8"))]
    part = HELDOUT_SPLITS[split]
    return tasks if part is None else [t for t in tasks if (task_meta(t) or {}).get("split") == part]
