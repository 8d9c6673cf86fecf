"""Near-miss trajectories: small, realistic mistakes a verifier must score exactly.

From a task's gold actions we derive trajectories that differ in one way each:

  dropped_write      one write action is missing
  wrong_argument     one argument of a write action has another plausible value
                     (another id of the same table, a number + 1, a flipped flag, ...)
  extra_write        a write the task did not ask for (repeated, or borrowed from
                     another task of the domain)
  wrong_record       a write aimed at another record of the same table (its id argument)
  wrong_requestor    an action made by the other side (the agent does the user's step)
  swapped_actions    two neighbouring actions in the opposite order
  missing_info       the final message leaves out a fact the agent must communicate
  premature_end      the dialogue stops halfway (agent_stop), or hits max_steps

Every mutant is executed in a fork (kit/replay.py), so its tool results are real. Some
mutants still deserve reward 1 (an extra write that fails changes nothing): the point is
that the kit's verdict equals tau2's on each, not that each fails.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from kit.envs.domain import Domain
from kit.replay import gold_actions, gold_final_text, trajectory_from_actions
from kit.trajectory import ToolCall, Trajectory


@dataclass
class Mutant:
    kind: str
    detail: str
    trajectory: Trajectory


def _other_value(domain: Domain, value: Any, salt: int) -> Any:
    """A plausible different value: another key of the table holding `value`, etc."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        for db in (domain.pristine_agent_db, domain.pristine_user_db):
            if db is None:
                continue
            for table in db.__dict__.values():
                if isinstance(table, dict) and value in table:
                    keys = sorted(k for k in table if k != value)
                    if keys:
                        return keys[salt % len(keys)]
        return value + "_x" if salt % 2 == 0 else value.upper() if value.upper() != value else value.lower() + "z"
    if isinstance(value, list):
        return value[:-1] if value else ["x"]
    if isinstance(value, dict):
        return {**value, "_extra": 1}
    return "wrong"


def _write_pool(domain: Domain) -> list[ToolCall]:
    """Write actions of every task of the domain (for extra writes from elsewhere)."""
    pool: list[ToolCall] = []
    for t in domain.tasks():
        pool.extend(a for a in gold_actions(t) if domain.is_write_tool(a.name, a.requestor))
    return pool


_POOLS: dict[str, list[ToolCall]] = {}


def mutants(domain: Domain, task, min_count: int = 5, seed: int = 0) -> list[Mutant]:
    """At least `min_count` near-miss trajectories of `task` (deterministic for a seed)."""
    actions = gold_actions(task)
    final = gold_final_text(task, domain)
    writes = [i for i, a in enumerate(actions) if domain.is_write_tool(a.name, a.requestor)]
    out: list[Mutant] = []

    def add(kind: str, detail: str, acts: list[ToolCall], text: Optional[str] = final, reason: str = "agent_stop"):
        traj = trajectory_from_actions(domain, task, acts, text, reason)
        traj.meta.update({"source": "mutant", "mutation": kind, "detail": detail})
        out.append(Mutant(kind, detail, traj))

    for i in writes[:3]:
        add("dropped_write", f"drop {actions[i].name} (#{i})", actions[:i] + actions[i + 1:])
    for n, i in enumerate(writes[:3]):
        a = actions[i]
        if not a.arguments:
            continue
        arg = sorted(a.arguments)[(seed + n) % len(a.arguments)]
        new_args = {**a.arguments, arg: _other_value(domain, a.arguments[arg], seed + n)}
        add("wrong_argument", f"{a.name}.{arg}: {a.arguments[arg]!r} -> {new_args[arg]!r}",
            actions[:i] + [a.model_copy(update={"arguments": new_args})] + actions[i + 1:])
    for i in writes[:2]:
        a = actions[i]
        ids = [k for k in sorted(a.arguments) if k.endswith("_id") and isinstance(a.arguments[k], str)]
        if ids:
            new_id = _other_value(domain, a.arguments[ids[0]], seed + 1)
            if new_id != a.arguments[ids[0]]:
                add("wrong_record", f"{a.name}.{ids[0]}: {a.arguments[ids[0]]!r} -> {new_id!r}",
                    actions[:i] + [a.model_copy(update={"arguments": {**a.arguments, ids[0]: new_id}})] + actions[i + 1:])
    flip = next((i for i, a in enumerate(actions) if a.requestor == "user"), None)
    if flip is not None:
        a = actions[flip]
        add("wrong_requestor", f"{a.name} done by the assistant, not the user",
            actions[:flip] + [a.model_copy(update={"requestor": "assistant"})] + actions[flip + 1:])
    if writes:
        i = writes[-1]
        add("extra_write", f"repeat {actions[i].name}", actions + [actions[i].model_copy(update={"id": ""})])
    if domain.name not in _POOLS:
        _POOLS[domain.name] = _write_pool(domain)
    pool = _POOLS[domain.name]
    mine = [(a.name, a.arguments) for a in actions]
    foreign = [p for p in pool if (p.name, p.arguments) not in mine]
    if foreign:
        p = foreign[(seed + len(task.id)) % len(foreign)]
        add("extra_write", f"borrowed {p.name}", actions + [p.model_copy(update={"id": ""})])
    for i in range(len(actions) - 1):
        if i in writes or i + 1 in writes:
            swapped = actions[:i] + [actions[i + 1], actions[i]] + actions[i + 2:]
            add("swapped_actions", f"swap #{i} and #{i + 1}", swapped)
            break
    infos = (task.evaluation_criteria.communicate_info if task.evaluation_criteria else None) or []
    if infos:
        kept = infos[1:]
        text = ("Here is what you asked for: " + "; ".join(kept) + ".") if kept else "All done."
        add("missing_info", f"leave out {infos[0]!r}", actions, text)
    half = len(actions) // 2
    add("premature_end", f"stop after {half} of {len(actions)} actions", actions[:half], None)
    add("premature_end", "max_steps", actions, final, reason="max_steps")
    k = 1
    while len(out) < min_count and k <= len(foreign):
        p = foreign[(seed + len(task.id) + 7 * k) % len(foreign)]
        add("extra_write", f"borrowed {p.name} (extra {k})", actions + [p.model_copy(update={"id": ""})])
        k += 1
    while len(out) < min_count:  # domains without write tools elsewhere: end it other ways
        reason = ["too_many_errors", "user_error", "agent_error"][(len(out) + k) % 3]
        add("premature_end", reason, actions, final, reason=reason)
        k += 1
    return out
