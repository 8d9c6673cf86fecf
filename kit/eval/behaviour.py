"""What an agent does on an evaluation, read from its episodes, and what changed between two arms
scored on the same tasks: the evidence behind a paired number.

    profile = arm_profile(dom, tasks, trajs, rewards)        # one row: calls, writes, right tool, grounded, script
    table = changed_tasks(dom, tasks, a, b)                 # tasks whose pass rate differs, each arm's calls

A pass^1 difference says that something changed; these say what. Per episode (assistant calls only):
  - script: the sequence of tool names the agent called ("get_users > update_task_status");
  - wrote: at least one call of a write tool (the domain's tool types);
  - right_write: the set of write tools called equals the gold's (tasks with a write only);
  - exact_write: every gold write appears with the gold's compared arguments (tau2's `compare_args`);
  - grounded: every argument of every write call occurs earlier in the dialogue (kit.grounding's rule:
    an id the agent made up is not grounded);
  - tool_errors: tool messages marked as errors.
An arm's script share is the fraction of its episodes that play its most common script: an agent that
answers every request the same way has a share near 1 whatever the request.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any, Optional

import pandas as pd

from kit.grounding import agent_turn_problems

NO_CALL = "(no call)"


def _args(a: Any) -> dict:
    if isinstance(a, str):
        try:
            a = json.loads(a)
        except json.JSONDecodeError:
            return {}
    return a if isinstance(a, dict) else {}


def _gold_writes(dom, task) -> list[tuple[str, dict]]:
    """(name, compared arguments) of the task's gold assistant writes."""
    crit = getattr(task, "evaluation_criteria", None)
    out = []
    for a in (getattr(crit, "actions", None) or []):
        if getattr(a, "requestor", "assistant") != "assistant" or not dom.is_write_tool(a.name):
            continue
        args = _args(a.arguments)
        keep = a.compare_args if a.compare_args is not None else list(args)
        out.append((a.name, {k: args.get(k) for k in keep}))
    return out


def episode_profile(dom, task, traj) -> dict:
    """The per-episode facts above, for one trajectory (task None: the gold-dependent ones are None)."""
    seen: list[dict] = []
    calls: list[tuple[str, dict]] = []
    grounded = True
    for m in traj.messages:
        d = {"role": m.role, "content": m.content,
             "tool_calls": [{"name": tc.name, "arguments": tc.arguments} for tc in (m.tool_calls or [])]}
        if m.role == "assistant" and m.tool_calls:
            for tc in m.tool_calls:
                calls.append((tc.name, _args(tc.arguments)))
            writes = [c for c in d["tool_calls"] if dom.is_write_tool(c["name"])]
            if writes and agent_turn_problems(seen + [{**d, "tool_calls": writes}]):
                grounded = False
        seen.append(d)
    written = [(n, a) for n, a in calls if dom.is_write_tool(n)]
    gold = _gold_writes(dom, task) if task is not None else None
    right = exact = None
    if gold:
        right = {n for n, _ in written} == {n for n, _ in gold}
        exact = all(any(n == g and all(a.get(k) == v for k, v in ga.items()) for n, a in written) for g, ga in gold)
    return {"script": " > ".join(n for n, _ in calls) or NO_CALL, "calls": len(calls), "wrote": bool(written),
            "right_write": right, "exact_write": exact, "grounded": grounded if written else None,
            "tool_errors": traj.tool_errors()}


def _mean(values) -> Optional[float]:
    v = [float(x) for x in values if x is not None]
    return round(sum(v) / len(v), 3) if v else None


def arm_profile(dom, tasks: dict, trajs: dict, rewards: Optional[dict] = None) -> dict:
    """One arm's behaviour over its episodes: `trajs` {(task id, trial): Trajectory}, `tasks` {id: Task},
    `rewards` {(task id, trial): reward} (optional)."""
    eps = [episode_profile(dom, tasks.get(k[0]), t) for k, t in sorted(trajs.items())]
    scripts = Counter(e["script"] for e in eps)
    top, top_n = scripts.most_common(1)[0] if scripts else (NO_CALL, 0)
    row = {"episodes": len(eps)}
    if rewards:
        row["pass"] = _mean(rewards.get(k) for k in sorted(trajs))
    row.update({
        "calls / episode": _mean(e["calls"] for e in eps),
        "wrote": _mean(e["wrote"] for e in eps),
        "right write tool": _mean(e["right_write"] for e in eps),
        "exact write": _mean(e["exact_write"] for e in eps),
        "writes grounded": _mean(e["grounded"] for e in eps),
        "tool errors / episode": _mean(e["tool_errors"] for e in eps),
        "distinct scripts": len(scripts),
        "script share": round(top_n / len(eps), 3) if eps else None,
        "most common script": top,
    })
    return row


def _rates(rewards: dict) -> dict[str, float]:
    by: dict[str, list[float]] = {}
    for (task_id, _), r in rewards.items():
        by.setdefault(task_id, []).append(float(r == 1.0))
    return {t: sum(v) / len(v) for t, v in by.items()}


def _scripts_by_task(dom, tasks: dict, trajs: dict, wanted: set) -> dict[str, str]:
    """{task id: its two most common scripts} for the tasks in `wanted`, one pass over the trajectories."""
    by: dict[str, Counter] = {}
    for k, t in trajs.items():
        if k[0] in wanted:
            by.setdefault(k[0], Counter())[episode_profile(dom, tasks.get(k[0]), t)["script"]] += 1
    return {task: "; ".join(f"{n}× {x}" if n > 1 else x for x, n in c.most_common(2)) for task, c in by.items()}


def changed_tasks(dom, tasks: dict, a: tuple[dict, dict], b: tuple[dict, dict], limit: int = 12) -> pd.DataFrame:
    """Tasks both arms were scored on whose pass rate differs, largest change first (ties by task id):
    `a` and `b` are (trajectories, rewards) keyed by (task id, trial). Each row: the task, its shape and
    phrasing when the task says, A's and B's pass rate and the scripts each played (the two most common)."""
    from kit.tags import task_tags

    ra, rb = _rates(a[1]), _rates(b[1])
    shared = sorted(set(ra) & set(rb))
    moved = sorted((t for t in shared if ra[t] != rb[t]), key=lambda t: (-abs(rb[t] - ra[t]), t))
    moved = moved[:limit]
    sa, sb = (_scripts_by_task(dom, tasks, arm[0], set(moved)) for arm in (a, b))
    rows = []
    for t in moved:
        tags = task_tags(tasks[t]) if t in tasks else {}
        rows.append({"task": t, "shape": tags.get("shape"), "phrasing": tags.get("phrasing"),
                     "A pass": round(ra[t], 2), "B pass": round(rb[t], 2),
                     "A calls": sa.get(t, ""), "B calls": sb.get(t, "")})
    return pd.DataFrame(rows)
