"""How varied are the openings of a run's gold dialogues? Distinct first user messages, and distinct
sentences in them, once the values (ids, titles, names) are masked.

    python -m kit.bench.openings runs/engine-a runs/engine-b     # one JSON line per run
    opening_variety("runs/engine-a")     # {"dialogues": 15, "distinct_openings": 15, "distinct_sentences": 31, ...}

Why: an agent trained on dialogues that open with a handful of sentence shapes learns the shapes,
not to read the request (issue 30). Masking the values counts shapes: "Hi! I'd like to create a task
with title <v>." is one opening whatever the title. Reads only the run's files (sft_user.jsonl's
first user turns of gold dialogues, tasks.jsonl for the values to mask), so it measures a run made by
any version of the kit.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

_QUOTED = re.compile(r"""(?<!\w)'[^']+'(?!\w)|"[^"]+\"""")
_ID = re.compile(r"\b(?=[A-Za-z_]*\d)[A-Za-z0-9_]{3,}\b")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def _strings(obj: Any) -> list[str]:
    if isinstance(obj, dict):
        return [s for v in obj.values() for s in _strings(v)]
    if isinstance(obj, list):
        return [s for v in obj for s in _strings(v)]
    return [str(obj)] if isinstance(obj, (str, int, float)) and not isinstance(obj, bool) and str(obj).strip() else []


def task_values(task: dict) -> list[str]:
    """Values an opening may name: gold arguments and every value of the task's starting world."""
    crit = task.get("evaluation_criteria") or {}
    vals = _strings([a.get("arguments") for a in crit.get("actions") or []])
    vals += _strings((task.get("initial_state") or {}).get("initialization_data") or {})
    return sorted({v for v in vals if len(v) > 1}, key=len, reverse=True)


def mask(text: str, values: list[str]) -> str:
    """`text` with each value (longest first, case-insensitive), quoted strings and ids replaced by <v>."""
    out = text
    for v in values:
        out = re.sub(rf"(?<!\w){re.escape(v)}(?!\w)", "<v>", out, flags=re.I)
    out = _QUOTED.sub("<v>", out)
    return " ".join(_ID.sub("<v>", out).split())


def gold_openings(run_dir: str | Path) -> list[tuple[str, str]]:
    """[(task id, first user message)] of the run's gold dialogues, one per dialogue."""
    out, seen = [], set()
    path = Path(run_dir) / "sft_user.jsonl"
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        s = json.loads(line)
        if (s.get("meta") or {}).get("source") != "gold" or s.get("turn") != 0 or s["trajectory_id"] in seen:
            continue
        seen.add(s["trajectory_id"])
        out.append((s["task_id"], s["messages"][-1]["content"] or ""))
    return out


def opening_variety(run_dir: str | Path) -> dict:
    run = Path(run_dir)
    tasks = {}
    if (run / "tasks.jsonl").exists():
        for line in (run / "tasks.jsonl").read_text(encoding="utf-8").splitlines():
            if line.strip():
                t = json.loads(line)
                tasks[t["id"]] = t
    masked = [mask(text, task_values(tasks.get(tid, {}))) for tid, text in gold_openings(run)]
    sentences = [s for m in masked for s in _SENTENCE.split(m) if s]
    return {"run": str(run), "dialogues": len(masked), "distinct_openings": len(set(masked)),
            "distinct_sentences": len(set(sentences)), "sentences": len(sentences),
            "tasks": len(tasks)}


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print(json.dumps(opening_variety(arg)))
