"""The kit verifier: tau2's `evaluate_simulation(..., EvaluationType.ALL)`, fast.

    verdict = verify(load_domain("retail"), task, trajectory)
    verdict.reward, verdict.breakdown     # 1.0, {"DB": 1.0, "COMMUNICATE": 1.0}

Rules, in tau2's order: a run that did not end by AGENT_STOP or USER_STOP scores 0; a
task without evaluation criteria scores 1; otherwise the reward is the product of the
checks named in the task's reward basis: DB and ENV_ASSERTION (kit/verify/state.py),
ACTION (actions.py), COMMUNICATE (communicate.py). NL assertions need an LLM grader: the
kit reports them as not evaluated and, when they are part of the reward basis without a
grader, returns an error (tau2 raises in that case). Where tau2 raises (a replayed tool
result differs from the recorded one, a broken env assertion), the verdict carries
`error` and reward 0.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from pydantic import BaseModel, Field

from kit.checkers.status import CheckStatus
from kit.envs.domain import Domain
from kit.trajectory import Termination, Trajectory
from kit.verify.actions import check_actions
from kit.verify.communicate import check_communicate
from kit.verify.state import check_state

ELIGIBLE = {Termination.AGENT_STOP, Termination.USER_STOP}


class Verdict(BaseModel):
    task_id: str
    reward: float
    breakdown: Optional[dict[str, float]] = None
    db_match: Optional[bool] = None
    env_assertions: list[dict] = Field(default_factory=list)
    actions: list[dict] = Field(default_factory=list)
    communicate: list[dict] = Field(default_factory=list)
    nl_assertions: str = "not_evaluated"
    changes: list[dict] = Field(default_factory=list)  # records where predicted != gold
    note: Optional[str] = None
    error: Optional[str] = None
    # set when a task's checker adds model-written code to the criteria (kit/checkers/checker.py)
    criteria_reward: Optional[float] = None  # the criteria's reward before the code ran
    code_status: Optional[CheckStatus] = None  # the sandboxed code's status (kit/checkers/status.py)
    code_passed: Optional[bool] = None

    @property
    def reason(self) -> Optional[str]:
        """Why the reward is what it is, when there is something to say (error, then note)."""
        return self.error or self.note

    def summary(self) -> dict:
        out: dict[str, Any] = {"task_id": self.task_id, "reward": self.reward, "breakdown": self.breakdown}
        if self.error:
            out["error"] = self.error
        return out


def verify(
    domain: Domain,
    task,
    trajectory: Trajectory,
    nl_grader: Optional[Callable[[Any, Trajectory], list[dict]]] = None,
) -> Verdict:
    """Score `trajectory` on `task` (a tau2 Task) in `domain`. Never raises on bad input."""
    if trajectory.termination_reason not in ELIGIBLE:
        return Verdict(task_id=task.id, reward=0.0,
                       note=f"Simulation terminated prematurely. Termination reason: {trajectory.termination_reason}")
    crit = task.evaluation_criteria
    if crit is None:
        return Verdict(task_id=task.id, reward=1.0, note="No evaluation criteria")
    basis = {getattr(b, "value", b) for b in crit.reward_basis}
    msgs = trajectory.messages
    v = Verdict(task_id=task.id, reward=1.0, breakdown={})
    try:
        state = check_state(domain, task, msgs)
        for a in state["env_assertions"]:
            a["met"] = bool(a["met"])
    except Exception as e:  # tau2 raises here: a replay mismatch or a broken assertion
        return Verdict(task_id=task.id, reward=0.0, error=f"{type(e).__name__}: {e}")
    v.db_match, v.env_assertions, v.changes = state["db_match"], state["env_assertions"], state["changes"]
    if basis & {"DB", "ENV_ASSERTION"} and not state["skipped"]:
        if "DB" in basis:
            v.breakdown["DB"] = 1.0 if state["db_match"] else 0.0
        if "ENV_ASSERTION" in basis:
            v.breakdown["ENV_ASSERTION"] = 1.0 if all(a["met"] for a in state["env_assertions"]) else 0.0
    if "ACTION" in basis:
        v.actions = check_actions(crit.actions or [], msgs)
        v.breakdown["ACTION"] = 1.0 if all(a["met"] for a in v.actions) else 0.0
    if "NL_ASSERTION" in basis:
        if nl_grader is None:
            return Verdict(task_id=task.id, reward=0.0,
                           error="ValueError: NL assertions are part of the reward basis, "
                                 "but no NL-assertion grader (nl_grader) is given")
        checks = nl_grader(task, trajectory)
        v.nl_assertions = "evaluated"
        v.breakdown["NL_ASSERTION"] = 1.0 if all(c.get("met") for c in checks) else 0.0
    if "COMMUNICATE" in basis:
        v.communicate = check_communicate(crit.communicate_info or [], msgs)
        v.breakdown["COMMUNICATE"] = 1.0 if all(c["met"] for c in v.communicate) else 0.0
    for value in v.breakdown.values():
        v.reward *= value
    return v
