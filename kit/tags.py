"""Tags a task carries in its tau2 `description.notes` (a JSON object): its shape and its phrasing.

    notes = tagged_notes({"plan": "plan0"}, shape="get_users>create_task", phrasing="free_form")
    Description(purpose=..., notes=notes)
    task_tags(task)      # {"shape": "get_users>create_task", "phrasing": "free_form"}
    task_notes(task)     # the whole notes object ({} when the notes are not a JSON object)

  shape      the task's tool pattern, the tools of its gold actions in order joined by ">", as the
             engine's plans and rounds.csv name patterns ("create_task", "create_task>update_task_status",
             "get_users>create_task": a lookup, then the write that uses the id it returned)
  phrasing   how its scenario is worded: "template" (the request stated plainly) or "free_form"
             (prose in tau2's style: a situation, then the goal; model prose that passed the fidelity gate)

Why the notes: tau2's `Task` keeps only its own fields (it drops unknown keys when it loads a task), and
`description.notes` is free text every tau2 loader keeps, so the tags survive tasks.jsonl, rl_tasks.jsonl
and any tau2 tool. A task without tags reads back None for each.
"""

from __future__ import annotations

import json
from typing import Any, Literal, Optional

Phrasing = Literal["template", "free_form"]
PHRASINGS: tuple[Phrasing, ...] = ("template", "free_form")
TAGS = ("shape", "phrasing")


def task_notes(task: Any) -> dict:
    """The task's description.notes as a dict ({} when absent or not a JSON object)."""
    desc = getattr(task, "description", None)
    if isinstance(task, dict):
        desc = task.get("description")
    notes = desc.get("notes") if isinstance(desc, dict) else getattr(desc, "notes", None)
    if not notes:
        return {}
    try:
        data = json.loads(notes)
    except (json.JSONDecodeError, TypeError):
        return {}
    return data if isinstance(data, dict) else {}


def task_tags(task: Any) -> dict[str, Optional[str]]:
    """{"shape": ..., "phrasing": ...} of a tau2 Task (or its dict); None where the task has no tag."""
    notes = task_notes(task)
    return {k: notes.get(k) for k in TAGS}


def tagged_notes(notes: dict, shape: str, phrasing: str, **more: Any) -> str:
    """`notes` with the tags (and any `more` keys) as the JSON text of description.notes."""
    if phrasing not in PHRASINGS:
        raise ValueError(f"phrasing must be one of {PHRASINGS}, got {phrasing!r}")
    return json.dumps({**notes, "shape": shape, "phrasing": phrasing, **more})
