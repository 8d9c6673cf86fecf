"""A task's checker = τ² criteria + optional model-written code, stored with the task.

    rec = CheckedTask(task=task, checker=Checker(code=SOURCE))   # one line of rl_tasks.jsonl
    v = run_checker(domain, rec, trajectory, sandbox)               # reward 0/1 + breakdown

The criteria (gold actions with compared arguments, env assertions, communicate info) are
scored exactly as the kit verifier scores τ² tasks (kit/verify). The code, when present,
defines `check(state, trajectory) -> bool | dict` and always runs in the sandbox
(kit/checkers/sandbox.py). Its `state` is a read-only JSON view of the episode's final
state: every record the episode or the gold actions touched, in its final version, plus
every non-table field of the databases (small in every domain):

    {"agent": {"reservations": {"4WQ150": {...}}, ...}, "user": {...},
     "changed": [["agent", "reservations", "4WQ150", ["status"]], ...]}   # fields that changed

The reward is 1 only if the criteria give 1 and the code (if any) passes; a code verdict
that is not "ok" (rejected, timeout, limit, error) counts as a failure with its reason.
"""

from __future__ import annotations

import json
from typing import Any, Optional

from pydantic import BaseModel, Field

from kit.checkers.status import CheckStatus
from kit.envs.cow import CowTable, dump_record
from kit.envs.domain import Domain
from kit.envs.episode import EpisodeEnv
from kit.trajectory import Trajectory
from kit.verify import Verdict, verify

from tau2.data_model.tasks import Task  # noqa: E402  (kit.verify imported tau2 offline)


class Checker(BaseModel):
    code: Optional[str] = Field(default=None, description="Python source defining check(state, trajectory).")
    origin: str = Field(default="criteria", description="criteria | model:<name> | human")
    mutation_report: Optional[dict] = Field(default=None, description="Last mutation test (kit/checkers/mutation.py).")


class CheckedTask(BaseModel):
    """A tau2 Task with its checker: what the engine writes and the RL loop reads."""

    task: Task
    checker: Checker = Field(default_factory=Checker)


def _touched(env: EpisodeEnv) -> set[tuple[str, str, Any]]:
    keys = set()
    for side, db in env.dbs():
        for name, value in db.__dict__.items():
            if isinstance(value, CowTable):
                keys.update((side, name, k) for k in value.touched)
    return keys


def state_view(final: EpisodeEnv, gold: Optional[EpisodeEnv] = None) -> dict:
    """The JSON view a code checker sees (see the module docstring)."""
    view: dict[str, Any] = {"agent": {}, "user": {}, "changed": []}
    keys = _touched(final) | (_touched(gold) if gold is not None else set())
    for side, db in final.dbs():
        for name, value in db.__dict__.items():
            if isinstance(value, CowTable):
                view[side][name] = {k: dump_record(dict.get(value, k)) for (s, t, k) in keys
                                    if s == side and t == name and dict.__contains__(value, k)}
            else:
                view[side][name] = dump_record(value)
    view["changed"] = [[c.side, c.table, c.key, sorted(c.fields_changed())] for c in final.diff()]
    return json.loads(json.dumps(view, default=str))  # plain JSON: dates become ISO strings


def trajectory_view(traj: Trajectory) -> list[dict]:
    return [m.model_dump(include={"role", "content", "tool_calls", "tool_call_id", "requestor", "error"})
            for m in traj.messages]


def run_checker(domain: Domain, rec: CheckedTask, traj: Trajectory, sandbox=None,
                criteria: Optional[Verdict] = None) -> Verdict:
    """Reward of `traj` under the task's checker (criteria, then sandboxed code if any). `criteria`:
    the episode's kit.verify verdict where the caller has it (not verified again; it stays unchanged)."""
    out = criteria.model_copy() if criteria is not None else verify(domain, rec.task, traj)
    out.breakdown, out.criteria_reward = dict(out.breakdown or {}), out.reward
    if not rec.checker.code:
        return out
    if out.error:  # a trajectory tau2 cannot replay gets no code verdict either
        return out
    final = domain.fork(rec.task, history=traj.messages)
    state = state_view(final, domain.gold_state(rec.task))
    if sandbox is None:
        from kit.checkers.sandbox import run_code

        cv = run_code(rec.checker.code, state, trajectory_view(traj))
    else:
        cv = sandbox.run(rec.checker.code, state, trajectory_view(traj))
    out.code_status, out.code_passed = cv.status, (cv.passed if cv.status is CheckStatus.OK else False)
    out.breakdown["CODE"] = 1.0 if out.code_passed else 0.0
    if not out.code_passed:
        out.reward = 0.0
        out.note = f"code checker: {cv.status}: {cv.reason}"
    return out
