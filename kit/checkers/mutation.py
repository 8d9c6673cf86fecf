"""Mutation testing of a checker: it must pass the gold and reject every near-miss that
really differs.

A mutant *must* be rejected when its final state differs from the gold final state (either
side's database) or a required gold action is missing from its tool calls (required: every
gold action whose tool is not a READ tool — writes, transfers, other generic tools). Other
mutants (a failed extra write that changed nothing, say) may go either way; they are
counted, not scored. A checker is accepted when it passes its gold trajectory and no
must-reject mutant slips through.

    report = mutation_test(domain, CheckedTask(task=task))
    report.accepted, report.slipped
"""

from __future__ import annotations

from typing import Optional

from pydantic import BaseModel, Field

from kit.checkers.checker import CheckedTask, run_checker
from kit.envs.domain import Domain
from kit.mutate import mutants
from kit.replay import gold_trajectory
from kit.verify.actions import check_actions


class MutantResult(BaseModel):
    kind: str
    detail: str
    must_reject: bool
    why: list[str] = Field(default_factory=list)  # state_differs | action_missing
    rejected: bool


class MutationReport(BaseModel):
    task_id: str
    gold_passed: bool
    made: int
    must_reject: int
    rejected: int
    slipped: list[MutantResult] = Field(default_factory=list)
    results: list[MutantResult] = Field(default_factory=list)

    @property
    def accepted(self) -> bool:
        return self.gold_passed and not self.slipped

    def line(self) -> str:
        return (f"{self.task_id}: gold {'pass' if self.gold_passed else 'FAIL'}, {self.made} mutants, "
                f"{self.must_reject} must be rejected, {self.rejected} rejected, {len(self.slipped)} slipped"
                f" -> {'accepted' if self.accepted else 'NOT accepted'}")


def mutation_test(domain: Domain, rec: CheckedTask, sandbox=None, min_mutants: int = 5,
                  seed: int = 0, keep_results: bool = True) -> MutationReport:
    task = rec.task
    gold_v = run_checker(domain, rec, gold_trajectory(domain, task), sandbox)
    gold_env = domain.gold_state(task)
    gold_actions = (task.evaluation_criteria.actions if task.evaluation_criteria else None) or []
    results: list[MutantResult] = []
    for m in mutants(domain, task, min_count=min_mutants, seed=seed):
        why = []
        try:
            final = domain.fork(task, history=m.trajectory.messages)
            if not final.same_state(gold_env):
                why.append("state_differs")
        except Exception:  # a mutant tau2 could not replay counts as differing
            why.append("state_differs")
        required = [a for a in gold_actions if domain.is_write_tool(a.name, a.requestor)]
        if not all(c["met"] for c in check_actions(required, m.trajectory.messages)):
            why.append("action_missing")
        v = run_checker(domain, rec, m.trajectory, sandbox)
        results.append(MutantResult(kind=m.kind, detail=m.detail, must_reject=bool(why), why=why,
                                    rejected=v.reward == 0.0))
    report = MutationReport(
        task_id=task.id, gold_passed=gold_v.reward == 1.0, made=len(results),
        must_reject=sum(r.must_reject for r in results), rejected=sum(r.rejected for r in results),
        slipped=[r for r in results if r.must_reject and not r.rejected],
        results=results if keep_results else [],
    )
    return report


def domain_mutation_summary(domain: Domain, tasks: Optional[list] = None, code_for=None, sandbox=None) -> dict:
    """Mutation-test every task's checker (criteria, plus `code_for(domain, task)` if given)."""
    from kit.checkers.checker import Checker

    tasks = tasks if tasks is not None else domain.tasks()
    out = {"domain": domain.name, "tasks": 0, "mutants": 0, "must_reject": 0, "rejected_must": 0,
           "slipped": 0, "slipped_state_differs": 0, "slipped_action_only": 0, "gold_failed": [],
           "slipped_examples": []}
    for task in tasks:
        code = code_for(domain, task) if code_for is not None else None
        rep = mutation_test(domain, CheckedTask(task=task, checker=Checker(code=code)), sandbox)
        out["tasks"] += 1
        out["mutants"] += rep.made
        out["must_reject"] += rep.must_reject
        out["rejected_must"] += sum(r.rejected for r in rep.results if r.must_reject)
        out["slipped"] += len(rep.slipped)
        out["slipped_state_differs"] += sum("state_differs" in r.why for r in rep.slipped)
        out["slipped_action_only"] += sum(r.why == ["action_missing"] for r in rep.slipped)
        if not rep.gold_passed:
            out["gold_failed"].append(task.id)
        out["slipped_examples"] += [f"{task.id}: {s.kind} ({s.detail}; {','.join(s.why)})" for s in rep.slipped[:2]]
    return out
