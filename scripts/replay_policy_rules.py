"""Run every coded policy rule (kit/envs/rules) over every tau2 task of airline, retail and telecom.

    python scripts/replay_policy_rules.py [domain ...]

Prints per domain: tasks, tasks with writes (the agent's write tools), tasks refused, and each
refusal (task id: message).
tau2's gold should break none of its own policy's rules; tests/test_rules.py lists the known
disagreements (tasks whose gold tau2 lets break its policy).
"""

from __future__ import annotations

import sys

from kit.envs import load_domain
from kit.envs.rules.gold import gold_actions

DOMAINS = ("airline", "retail", "telecom")


def replay(name: str) -> tuple[int, int, list[tuple[str, str]]]:
    """(tasks, tasks with a gold write of the agent's tools, [(task id, rule message)]) over every
    task of the domain (telecom's user-side device actions are not counted as writes)."""
    dom = load_domain(name)
    tasks = dom.tasks(None)
    writes = sum(any(a.requestor == "assistant" and dom.tool_kind(a.name) == "write" for a in gold_actions(t))
                 for t in tasks)
    refusals = [(t.id, why) for t in tasks for why in dom.policy_violations(t)]
    return len(tasks), writes, refusals


def main(argv: list[str]) -> int:
    for name in argv or DOMAINS:
        n, writes, refusals = replay(name)
        print(f"{name}: {n} tasks, {writes} with writes, {len({t for t, _ in refusals})} refused")
        for task_id, why in refusals:
            print(f"  {task_id}: {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
