"""DB and ENV_ASSERTION checks: replay the trajectory in a fork, compare with the gold state.

Same rule as tau2's EnvironmentEvaluator: the predicted state is the task's initial state
plus every tool call of the trajectory replayed (a recorded result that differs from the
replayed one is an error, as in tau2); the gold state is the initial state plus the gold
actions, played as tau2 plays them (no sync of the user's side after each: Domain.gold_state). DB passes when both the agent and the user databases are equal. Env assertions
run on the predicted state. The kit compares only touched records (see kit/envs/cow.py),
and computes each task's gold state once.
"""

from __future__ import annotations

from kit.envs.domain import Domain
from kit.trajectory import Message


def check_state(domain: Domain, task, messages: list[Message]) -> dict:
    crit = task.evaluation_criteria
    if crit.actions is None and crit.env_assertions is None:
        return {"db_match": True, "env_assertions": [], "skipped": True, "changes": []}
    predicted = domain.fork(task, history=messages)  # raises ReplayError like tau2's set_state
    gold = domain.gold_state(task, sync=False)  # tau2's gold replay: no sync after the gold actions
    db_match = predicted.same_state(gold)
    assertions = [
        {"func_name": a.func_name, "env_type": a.env_type, "arguments": a.arguments,
         "met": predicted.run_assertion(a)}
        for a in (crit.env_assertions or [])
    ]
    changes = [] if db_match else [
        {"side": c.side, "table": c.table, "key": c.key, "gold": c.old, "predicted": c.new}
        for c in predicted.diff(gold)
    ]
    return {"db_match": db_match, "env_assertions": assertions, "skipped": False, "changes": changes}
