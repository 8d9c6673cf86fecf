"""Audit a finished (or partial) engine run: do its outputs hold what they promise?

For every accepted task: the tasks.jsonl line loads as a tau2 `Task`, its rl_tasks.jsonl
twin carries the same task and a checker, and replaying its gold actions earns reward 1
from tau2's own evaluator (τ² domains; a custom domain is scored by the kit verifier,
which agrees with tau2 on every τ² task, see `kit bench verify`); its gold passes the
domain's coded policy rules (kit/envs/rules); no two accepted tasks are duplicates (same
solution, nearly the same text: the engine's `duplicate` check, rerun over the whole set); and it
counts the SFT samples the grounding check dropped (rounds.csv). Ids must be unique in every file: a resumed
run that duplicated or lost a record fails here. The report also gives the task mix (kinds,
tasks per write tool, share with a write, write tools covered, the user's device actions of the
device_fix tasks), counted from tasks.jsonl.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from kit.checkers.checker import CheckedTask
from kit.engine.pools import POOL_FILES
from kit.engine.rounds import task_mix
from kit.engine.store import read_jsonl
from kit.engine.validate import Seen
from kit.envs.domain import BUILTIN_DOMAINS, load_domain
from kit.replay import gold_trajectory
from kit.verify import verify
from kit.verify.reference import tau2_verdict

from tau2.data_model.tasks import Task  # noqa: E402


def audit_run(out_dir: str | Path) -> dict:
    out = Path(out_dir)
    manifest = json.loads((out / "manifest.json").read_text())
    domain = load_domain(manifest["domain"])
    referee = "tau2" if domain.name in BUILTIN_DOMAINS else "kit"
    problems: list[str] = []
    tasks = [Task.model_validate(d) for d in read_jsonl(out / "tasks.jsonl")]
    checked = [CheckedTask.model_validate(d) for name in POOL_FILES.values() for d in read_jsonl(out / name)]
    for name, ids in (("tasks.jsonl", [t.id for t in tasks]), ("rl_tasks.jsonl + sft_tasks.jsonl", [c.task.id for c in checked]),
                      ("trajectories.jsonl", [d["id"] for d in read_jsonl(out / "trajectories.jsonl")])):
        dup = [i for i, n in Counter(ids).items() if n > 1]
        if dup:
            problems.append(f"{name}: duplicated ids {dup[:5]}")
    accepted = {p["task_id"] for p in read_jsonl(out / "proposals.jsonl") if p["accepted"]}
    if accepted != {t.id for t in tasks}:
        problems.append(f"tasks.jsonl holds {len(tasks)} tasks, proposals.jsonl accepted {len(accepted)}")
    by_id = {c.task.id: c for c in checked}
    rewards = {}
    seen = Seen()
    rule_refusals = 0
    for t in tasks:
        for why in domain.policy_violations(t):
            rule_refusals += 1
            problems.append(f"{t.id}: gold breaks a policy rule: {why}")
        dup = seen.claim(t)
        if dup is not None:
            problems.append(f"{t.id}: {dup.detail}")
        c = by_id.get(t.id)
        if c is None or c.task != t or not c.checker.code:
            problems.append(f"{t.id}: neither pool (rl_tasks.jsonl, sft_tasks.jsonl) has a matching task with a checker")
        traj = gold_trajectory(domain, t)
        r = tau2_verdict(domain.name, t, traj)["reward"] if referee == "tau2" else verify(domain, t, traj).reward
        rewards[t.id] = r
        if r != 1.0:
            problems.append(f"{t.id}: gold replay earns {r} from the {referee} evaluator")
    # SFT samples the grounding check dropped (never trained on): counted, not a problem of the run (a
    # rolled-out episode whose agent made up a value is dropped by design); with group_size 0 every
    # sample is a gold dialogue, and a drop says a task's own request does not carry its values
    ungrounded = sum(int(row.get("sft_ungrounded") or 0) for row in _rounds(out))
    writes = frozenset(n for n in domain.tool_names("assistant") if domain.tool_kind(n) == "write")
    mix = task_mix(tasks, writes)
    device = Counter(a.name for t in tasks for a in (t.evaluation_criteria.actions or [])
                     if a.requestor == "user" and domain.is_write_tool(a.name, "user"))
    return {"out_dir": str(out), "domain": domain.name, "referee": referee, "tasks": len(tasks),
            "gold_reward_1": sum(r == 1.0 for r in rewards.values()), "rule_refusals": rule_refusals,
            "sft_ungrounded": ungrounded, "kinds": dict(mix.kinds), "write_share": mix.write_share,
            "write_tools": {n: mix.tools.get(n, 0) for n in sorted(writes)},
            "write_tools_covered": len(writes & set(mix.tools)), "device_actions": dict(sorted(device.items())),
            "problems": problems}


def _rounds(out: Path) -> list[dict]:
    import csv

    path = out / "rounds.csv"
    return list(csv.DictReader(path.open())) if path.exists() else []
