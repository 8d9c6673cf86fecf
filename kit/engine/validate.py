"""The task validator: executable checks first, then the model's judgment.

Checks, in order (every failing check becomes a `Rejection`: its `Check` and a detail; kit/engine/records.py):
  gold_runs        every gold action executes without error from the initial state
  changes_state    a task with writes changes the database; a lookup has info to communicate
  grounded_args    every argument value of every gold action of the agent is stated in the user
                   scenario or returned by an earlier gold tool call (a user's device action takes
                   its values from the agent's instruction)
  held_out         the gold actions (tool + arguments) do not contain every gold action of an
                   evaluation task (the domain's default task set, the kit's held-out set and its
                   confirmation slice, kit/data): the engine never trains on a solution evaluation scores (the rule
                   kit/eval/leak.py applies to a whole run)
  policy           the engine's own rule (no transfer to a human) and the domain's coded policy
                   rules (Domain.policy_violations; kit/envs/rules/)
  duplicate        no task accepted before it (this run, any round) has the same solution (gold
                   actions and information to communicate) and nearly the same text (Jaccard of
                   the scenario's words >= NEAR_DUPLICATE): `Seen`, kept by the engine
  gold_reward      the gold trajectory earns reward 1 from the kit verifier and the checker
  checker_strength the checker (criteria + generated state code) rejects every near-miss
                   mutant that must be rejected (kit/checkers/mutation.py)
  llm_judge        the model, shown the evaluation plan and the task, answers yes or no; the
                   task is rejected when its probability of "no" exceeds `judge_threshold`
The LLM judge runs only when every executable check passed (it is the expensive one).
"""

from __future__ import annotations

import json
from typing import Optional

from kit.checkers.checker import CheckedTask, Checker, run_checker
from kit.checkers.codegen import state_checker_source
from kit.checkers.mutation import mutation_test
from kit.engine.choice import Chooser
from kit.engine.plans import PlanPair
from kit.engine.prompts import Prompts
from kit.engine.records import Check, Rejection
from kit.envs.domain import Domain
from kit.replay import gold_trajectory


def _no_transfer(task) -> Optional[str]:
    """The engine's rule in every domain: a training task never ends in a hand-off to a human."""
    for a in task.evaluation_criteria.actions or []:
        if a.name == "transfer_to_human_agents":
            return "gold actions must not transfer to a human"
    return None


_EVAL_KEYS: dict[str, dict] = {}


def evaluation_tasks(domain: Domain) -> list:
    """The tasks an evaluation of `domain` may use: tau2's default set, the kit's held-out set and its
    confirmation slice."""
    from kit.data import HELDOUT_FILES, SHIPPED_SPLITS

    tasks = list(domain.tasks("default"))
    if domain.name in HELDOUT_FILES:
        tasks += [t for split in SHIPPED_SPLITS for t in domain.tasks(split)]
    return tasks


def evaluation_action_keys(domain: Domain) -> dict:
    """Evaluation task id -> the set of its gold (tool, arguments) keys (cached per domain)."""
    if domain.name not in _EVAL_KEYS:
        from kit.eval.leak import gold_action_keys

        _EVAL_KEYS[domain.name] = {t.id: keys for t in evaluation_tasks(domain) if (keys := gold_action_keys(t))}
    return _EVAL_KEYS[domain.name]


def _scenario_text(task) -> str:
    return str(task.user_scenario).lower()


def _leaves(value) -> list:
    """The scalar values inside an argument (a passenger list: each name and date), each of which the
    scenario must state; a scalar is its own leaf."""
    if isinstance(value, dict):
        return [x for v in value.values() for x in _leaves(v)]
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _leaves(v)]
    return [value]


def executable_checks(domain: Domain, task) -> list[Rejection]:
    reasons: list[Rejection] = []
    crit = task.evaluation_criteria
    env = domain.fork(task)
    before = env.fingerprint()  # O(changed records); tau2's full-dump hash took ~1 s on airline
    said = _scenario_text(task)
    for a in crit.actions or []:
        # a user's device action (telecom's toggle_data, ...) takes its arguments from the agent's instruction
        for k, v in (a.arguments.items() if a.requestor == "assistant" else ()):
            if not all(str(leaf).lower() in said for leaf in _leaves(v)):
                reasons.append(Rejection(Check.GROUNDED_ARGS, f"{a.name}.{k}={v!r} is neither in the scenario "
                                         "nor returned by an earlier gold call"))
        obs = env.execute(a.name, dict(a.arguments), a.requestor)
        if obs.error:
            reasons.append(Rejection(Check.GOLD_RUNS, f"{a.name}: {obs.content[:160]}"))
            return reasons
        said += " " + obs.content.lower()
    from kit.eval.leak import gold_action_keys

    mine = gold_action_keys(task)
    for eval_id, keys in evaluation_action_keys(domain).items():
        if keys <= mine:
            reasons.append(Rejection(Check.HELD_OUT, "the gold actions contain the whole solution of "
                                     f"evaluation task {eval_id}: " + "; ".join(f"{k}({a})" for k, a in sorted(keys))))
            break
    writes = [a for a in crit.actions or [] if domain.is_write_tool(a.name, a.requestor)]
    if writes and env.fingerprint() == before:
        reasons.append(Rejection(Check.CHANGES_STATE, "the gold writes leave the database unchanged"))
    from kit.tags import task_notes

    if not writes and not crit.communicate_info and not task_notes(task).get("refusal"):
        reasons.append(Rejection(Check.CHANGES_STATE, "no write and nothing to communicate"))
    transfer = _no_transfer(task)
    for why in ([transfer] if transfer else []) + domain.policy_violations(task):
        reasons.append(Rejection(Check.POLICY, why))
    return reasons


NEAR_DUPLICATE = 0.8  # Jaccard of the words of two tasks' reason_for_call + known_info


def _solution_key(task) -> tuple:
    from kit.eval.leak import gold_action_keys

    info = task.evaluation_criteria.communicate_info or []
    return frozenset(gold_action_keys(task)), tuple(sorted(str(i) for i in info))


def _words(task) -> frozenset[str]:
    import re

    instr = task.user_scenario.instructions
    text = " ".join(str(getattr(instr, f, "") or "") for f in ("reason_for_call", "known_info")) \
        if hasattr(instr, "reason_for_call") else str(instr)
    return frozenset(re.findall(r"[a-z0-9_]+", text.lower()))


# the frames a request comes in (kit/rollout/phrasing.py and model prose), not what it asks for
_FRAME_WORDS = frozenset("""you your yours would like need want wants calling because writing please have that this
with from about today help could just also some know like call contact agent customer""".split())


def _content(words: frozenset[str]) -> frozenset[str]:
    return frozenset(w for w in words if len(w) > 3 and w not in _FRAME_WORDS)


class Seen:
    """The tasks a run has accepted so far, by solution, for the `duplicate` check. Thread-safe:
    `claim` checks and records in one step, so two units running side by side cannot both accept
    the same task."""

    def __init__(self, tasks=()):
        import threading

        self._lock = threading.Lock()
        self._by_solution: dict[tuple, list[tuple[str, frozenset]]] = {}
        for t in tasks:
            self._by_solution.setdefault(_solution_key(t), []).append((t.id, _words(t)))

    def duplicate_of(self, task) -> Optional[str]:
        """The id of an accepted task with the same solution and nearly the same text (Jaccard of the
        words >= NEAR_DUPLICATE, or one's content words all in the other's: "You would like to list the
        all airports." and "You are calling because you need to list the all airports."), or None."""
        words = _words(task)
        content = _content(words)
        for tid, other in self._by_solution.get(_solution_key(task), []):
            union = words | other
            if not union or len(words & other) / len(union) >= NEAR_DUPLICATE:
                return tid
            if content and _content(other) and (content <= _content(other) or _content(other) <= content):
                return tid
        return None

    def actions_taken(self) -> set:
        """Every gold action key ((tool, sorted-JSON arguments), kit.eval.leak.action_key) of the accepted
        tasks: the synthesizer prefers write calls not in it, so a small database (telecom's) is not
        drawn into the same task again and again."""
        with self._lock:
            return {k for solution, rows in self._by_solution.items() if rows for k in solution[0]}

    def claim(self, task) -> Optional[Rejection]:
        """A DUPLICATE rejection, or None after recording the task as accepted."""
        with self._lock:
            dup = self.duplicate_of(task)
            if dup is not None:
                return Rejection(Check.DUPLICATE, f"same gold actions and nearly the same text as {dup}")
            self._by_solution.setdefault(_solution_key(task), []).append((task.id, _words(task)))
            return None

    def forget(self, task) -> None:
        """Undo a claim (the task failed a later check)."""
        with self._lock:
            rows = self._by_solution.get(_solution_key(task), [])
            rows[:] = [r for r in rows if r[0] != task.id]


def make_checker(domain: Domain, task, sandbox=None) -> tuple[CheckedTask, list[Rejection]]:
    """The task's executable checker (criteria + generated state code) and its test results."""
    rec = CheckedTask(task=task, checker=Checker(code=state_checker_source(domain, task), origin="codegen:gold_state"))
    reasons = []
    v = run_checker(domain, rec, gold_trajectory(domain, task), sandbox)
    if v.reward != 1.0:
        reasons.append(Rejection(Check.GOLD_REWARD, f"gold trajectory scores {v.reward}: {v.reason}"))
        return rec, reasons
    report = mutation_test(domain, rec, sandbox, keep_results=False)
    rec.checker.mutation_report = {"made": report.made, "must_reject": report.must_reject,
                                   "rejected": report.rejected, "slipped": len(report.slipped)}
    if report.slipped:
        reasons.append(Rejection(Check.CHECKER_STRENGTH, f"{len(report.slipped)} near-miss mutants slipped",
                                 mutation_report=rec.checker.mutation_report))
    return rec, reasons


def llm_judgment(chooser: Chooser, prompts: Prompts, plan: PlanPair, task, threshold: float = 0.7) -> tuple[bool, dict]:
    """The model's yes/no on the task against the evaluation plan; rejects when P(no) > threshold."""
    actions = "; ".join(f"{a.name}({json.dumps(a.arguments)})" for a in task.evaluation_criteria.actions or [])
    instr = task.user_scenario.instructions
    scenario = instr.reason_for_call if hasattr(instr, "reason_for_call") else str(instr)
    msgs = prompts.render("validator_judge", evaluation=plan.evaluation, scenario=scenario[:400], actions=actions)
    p_yes, p_no = chooser.probabilities(msgs, ["yes", "no"], what="validator judge")
    return p_no <= threshold, {"p_yes": round(p_yes, 3), "p_no": round(p_no, 3), "threshold": threshold}
