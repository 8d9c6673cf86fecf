"""The data engine (kit/engine): unit tests of its parts, then whole runs with the embedded
model on the τ² mock domain and on the kit's own library domain, a kill -9 resume, and the
audit that every accepted task replays to reward 1 under tau2's evaluator."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from pydantic import ValidationError

from kit.engine import EngineConfig, run_engine
from kit.engine.audit import audit_run
from kit.engine.edits import Harder, Hint, Keep, Persona, Simplify, SwitchTools, parse_edit
from kit.engine.plans import PlanPair, Slice, diversity, load_plans, lookup_param, save_plans, similarity, tool_patterns
from kit.engine.reflect import HINTS, _apply, _edits
from kit.engine.records import Check, CommittedUnit, Rejection, SynthesisFailure, UnitResult
from kit.engine.rounds import (ROUND_COLUMNS, RoundRow, from_failed_rollout, plan_feedback, round_stats,
                               write_rounds_csv)
from kit.engine.store import RunStore, read_jsonl
from kit.engine.choice import strip_lead_in
from kit.engine.synthesize import Pool, free_value_problem
from kit.engine.validate import executable_checks
from kit.envs import load_domain

from tau2.data_model.tasks import Action, EvaluationCriteria, Task, UserScenario

ROOT = Path(__file__).resolve().parents[1]


def read_jsonl_csv(path):
    import csv

    with open(path, newline="") as f:
        return list(csv.DictReader(f))


# ----- parts -------------------------------------------------------------------------------------


def test_pool_matches_arguments_to_fields_by_name_and_stem():
    pool = Pool()
    pool.walk({"user_id": "user_1", "tasks": ["task_1", "task_2"], "name": "Ann"}, source=0)
    assert [v for v, _ in pool.candidates("user_id")] == ["user_1"]
    assert sorted(v for v, _ in pool.candidates("task_id")) == ["task_1", "task_2"]  # tasks -> task_id
    assert pool.candidates("reservation_id") == []
    assert all(src == 0 for _, src in pool.candidates("task_id"))


def _plan(i, tools, persona="p", edge="none", text="create a task for the user"):
    return PlanPair(id=f"plan{i}", slice=Slice("change", tools, persona, edge), synthesis=text, evaluation=text)


def test_free_text_values_lose_lead_ins_and_prompt_echoes_are_refused():
    """Values the embedded 135M model wrote for mock create_task.title in a laptop-scale run (runs/
    user-model-laptop): half of them were the prompt's own words, which the SFT agent then learned."""
    persona, dom = "A polite retiree who explains things at length", "mock"
    assert strip_lead_in('The value of "title" is "QA (Business Improvement)') == "QA (Business Improvement)"
    assert strip_lead_in('The title of the task is "Quarterly budget') == "Quarterly budget"
    for good in ("Quarterly budget", "Call the plumber", "Blue winter jacket", "Book a flight to Paris", "Test task"):
        assert free_value_problem(strip_lead_in(good), persona, dom, "create_task") == "", good
    bad = {
        "The value of title should be in a": "an unfinished phrase",  # after the lead-in: "in a"
        "The value of 21": "echoes the question",
        "A customer who explains things at length": "describes the customer, not a value",
        "A first-time customer who is unsure of the": "describes the customer, not a value",
        "A mock service client wants to create a": "describes the customer, not a value",
        "A polite retiree who explains things at length": "copies the persona",
        "You will be assigned a task to create": "an instruction, not a value",
        "": "empty",
        # from the next run (runs/laptop-repro), after the rules above
        "The customer wants to create a new task": "narrates the request, not a value",
        "Create a new task for a busy professional": "restates the tool call",
    }
    for text, why in bad.items():
        assert free_value_problem(strip_lead_in(text), persona, dom, "create_task") == why, text
    assert free_value_problem("Create a new task for a busy professional", persona, dom) == ""  # tool unknown


def test_similarity_flags_near_duplicates_and_diversity_measures_spread():
    a = _plan(0, ["create_task"])
    assert similarity(a, _plan(1, ["create_task"])) == pytest.approx(1.0)
    b = _plan(2, ["update_task_status"], persona="q", edge="vague", text="mark the old task as completed today")
    assert similarity(a, b) < 0.3
    assert diversity([a, _plan(1, ["create_task"])]) == pytest.approx(0.0)
    assert diversity([a, b]) > 0.7


def test_tool_patterns_of_mock_cover_reads_writes_and_pairs():
    pats = tool_patterns(load_domain("mock"))
    assert ("change", ["create_task"]) in pats and ("lookup_change", ["get_users", "create_task"]) in pats
    # get_users alone takes no arguments: no question a customer could ask (every such plan's proposals were
    # rejected as unaskable), so it is no pattern of its own
    assert ("lookup", ["get_users"]) not in pats
    assert any(i == "multi_change" for i, _ in pats)
    assert all("transfer_to_human_agents" not in t for _, t in pats)


def _task(actions, instructions):
    return Task(id="t", user_scenario=UserScenario(instructions=instructions),
                evaluation_criteria=EvaluationCriteria(
                    actions=[Action(action_id=f"a{i}", name=n, arguments=a) for i, (n, a) in enumerate(actions)],
                    reward_basis=["DB"]))


def test_validator_executable_checks_name_each_failure():
    mock = load_domain("mock")
    ok = _task([("create_task", {"user_id": "user_1", "title": "Pay rent"})], "You are user_1; create 'Pay rent'.")
    assert executable_checks(mock, ok) == []
    ungrounded = _task([("create_task", {"user_id": "user_1", "title": "Pay rent"})], "You are user_1.")
    assert [r.check for r in executable_checks(mock, ungrounded)] == ["grounded_args"]
    noop = _task([("update_task_status", {"task_id": "task_1", "status": "pending"})], "task_1 should be pending")
    assert [r.check for r in executable_checks(mock, noop)] == ["changes_state"]
    broken = _task([("update_task_status", {"task_id": "task_9", "status": "completed"})], "task_9 completed")
    assert [r.check for r in executable_checks(mock, broken)] == ["gold_runs"]


def test_reflector_offers_edits_the_evidence_supports():
    mock = load_domain("mock")
    plan = PlanPair(id="plan0", slice=Slice("multi_change", ["update_task_status", "update_task_status"], "p", "e"),
                    synthesis="s", evaluation="e")
    bad = {"proposals": 2, "accepted": 0, "rejections": Counter({"changes_state": 2}), "failures": Counter()}
    edits = _edits(mock, plan, bad, {"create_task": (2, 2), "update_task_status>update_task_status": (0, 2)})
    assert Simplify() in edits and SwitchTools(tools=("create_task",)) in edits
    assert "switch:create_task" in [e.text() for e in edits]  # what the constrained choice shows the model
    assert Harder() not in edits
    easy = PlanPair(id="plan1", slice=Slice("change", ["create_task"], "p", "e"), synthesis="s", evaluation="e")
    good = {"proposals": 2, "accepted": 2, "rejections": Counter(), "failures": Counter(), "episodes": 4}
    assert Harder() in _edits(mock, easy, good, {})
    assert not any(isinstance(e, SwitchTools) for e in _edits(mock, easy, good, {}))
    # harder means another tool second, not the same write twice
    assert _apply(mock, easy, Harder()).tools == ["create_task", "update_task_status"]
    assert _apply(mock, plan, SwitchTools(tools=("create_task",))).tools == ["create_task"]
    # all accepted but no rollouts: no evidence the tasks are easy, so not made harder
    assert Harder() not in _edits(mock, easy, dict(good, episodes=0), {})
    # a rejection category offers its hint (typed keys; the Counter's keys are Check / SynthesisFailure)
    hinted = _edits(mock, easy, dict(bad, rejections=Counter({SynthesisFailure.WRITE_FAILED: 1})), {})
    assert [e.line for e in hinted if isinstance(e, Hint)] == [HINTS[SynthesisFailure.WRITE_FAILED]]


def test_edits_load_from_old_plans_as_text_and_new_ones_as_json(tmp_path):
    """plans/round_<k>.json of an older run holds each edit as text ("switch:a>b"): it loads typed;
    a plan saved now stores the edit's JSON and loads back equal."""
    old = {"id": "plan0", "slice": {"intent": "change", "tools": ["create_task"], "persona": "p", "edge": "none"},
           "synthesis": "s", "evaluation": "e", "hints": ["x"],
           "history": [{"round": 0, "edit": "switch:create_task>update_task_status", "options": 3},
                       {"round": 1, "edit": "persona:a polite retiree: chatty", "options": 2},
                       {"round": 2, "edit": "hint:Say every id: exactly", "options": 2},
                       {"round": 3, "edit": "keep", "options": 1}, {"round": 4, "edit": "simplify", "options": 2},
                       {"round": 5, "edit": "harder", "options": 2}]}
    (tmp_path / "round_6.json").write_text(json.dumps([old]))
    plan = load_plans(tmp_path / "round_6.json")[0]
    assert [h["edit"] for h in plan.history] == [
        SwitchTools(tools=("create_task", "update_task_status")), Persona(persona="a polite retiree: chatty"),
        Hint(line="Say every id: exactly"), Keep(), Simplify(), Harder()]
    assert [h["edit"].text() for h in plan.history] == [h["edit"] for h in old["history"]]  # text() is the old form
    save_plans(tmp_path / "again.json", [plan])
    saved = json.loads((tmp_path / "again.json").read_text())[0]["history"]
    assert saved[0]["edit"] == {"kind": "switch", "tools": ["create_task", "update_task_status"]}
    assert load_plans(tmp_path / "again.json")[0] == plan
    with pytest.raises(ValueError):
        parse_edit("rename:x")


def test_tool_patterns_keep_single_writes_at_least_as_common_as_pairs():
    for name in ("mock", "airline", "retail"):
        pats = tool_patterns(load_domain(name))
        pairs = [t for i, t in pats if i == "multi_change"]
        assert len(pairs) <= sum(i == "change" for i, _ in pats)
        assert all(a != b for a, b in pairs)
        # a lookup then one write: capped too, and each names the id argument its read returns
        lookups = [t for i, t in pats if i == "lookup_change"]
        assert len(lookups) <= 3 and len({w for _, w in lookups}) == len(lookups)
        assert all(lookup_param(load_domain(name), r, w) for r, w in lookups)


def _unit(unit: str, rnd: int, proposals: list[dict], samples: list[dict]) -> UnitResult:
    return UnitResult(unit=unit, round=rnd, plan_id="plan0", proposals=proposals, accepted=[], episodes=[],
                      samples_agent=samples, samples_user=[], sft_ungrounded=0, choice_fallbacks=0, wall_s=1.5)


def test_store_commits_a_unit_whole_and_recover_drops_uncommitted_and_torn_lines(tmp_path):
    store = RunStore(tmp_path)
    line = store.commit(_unit("r0-p0", 0, [{"attempt": 0}, {"attempt": 1}], [{"s": 1}]))
    assert line["lines"]["proposals.jsonl"] == 2 and line["lines"]["samples_agent.jsonl"] == 1 and line["proposals"] == 2
    store.commit(_unit("r1-p0", 1, [{"attempt": 0}], []))
    store.append("proposals.jsonl", [{"attempt": 9}])  # a unit killed before its commit line ...
    store.append("samples_agent.jsonl", [{"s": 9}])
    with open(tmp_path / "proposals.jsonl", "a") as f:
        f.write('{"attempt": 10')  # ... and a torn last line
    assert store.recover() == {"proposals.jsonl": 2, "samples_agent.jsonl": 1}
    assert store.recover() == {}  # idempotent
    units = store.units(files=("proposals.jsonl", "samples_agent.jsonl"))  # line counts say whose lines are whose
    assert [u.unit for u in units] == ["r0-p0", "r1-p0"]
    assert units[0].proposals == [{"attempt": 0}, {"attempt": 1}] and units[0].samples("agent") == [{"s": 1}]
    assert [u.unit for u in store.units(round=1)] == ["r1-p0"] and store.units(round=1)[0].proposals == [{"attempt": 0}]


def test_round_stats_is_a_pure_function_whose_fields_are_the_rounds_csv_columns(tmp_path):
    from kit import metrics as M

    assert ROUND_COLUMNS == [f.name for f in dataclasses.fields(RoundRow)]
    assert {M.PASS_RATE, M.USER_DEVIATION_RATE} <= set(ROUND_COLUMNS)
    plans = [PlanPair(id="plan0", synthesis="s", evaluation="e", slice=Slice("change", ["a"], "p", "none")),
             PlanPair(id="plan1", synthesis="s", evaluation="e", slice=Slice("lookup", ["b"], "q", "none"))]
    prop = {"plan_id": "plan0", "task_id": "t0", "accepted": True, "reasons": [], "repairs": ["fidelity:x"]}
    bad = {"plan_id": "plan1", "task_id": None, "accepted": False, "repairs": [],
           "reasons": [Rejection(Check.SYNTHESIS, "create_task failed after 2 repairs (x)",
                                 cause=SynthesisFailure.WRITE_FAILED).to_json()]}
    trajs = [{"task_id": "t0", "meta": {"reward": 1.0, "user_deviations": []}},
             {"task_id": "t0", "meta": {"reward": 0.0, "user_deviations": [{"kind": "role_flip"}]}}]
    fail = {"task_id": "t0", "label": "agent", "rule": "wrong_write", "evidence": "x"}
    summary = {"unit": "r0-p0", "round": 0, "samples_agent": 3, "samples_user": 1, "sft_ungrounded": 1,
               "choice_fallbacks": 0, "wall_s": 2.0}
    # t9: a task of another round; the second t0 sample is a turn of the failed rollout (what trajectory
    # validation drops), the third t0 one of the passed rollout, the first a gold dialogue's
    samples = [{"task_id": "t0", "meta": {"source": "gold"}, "reward": 1.0},
               {"task_id": "t0", "meta": {"source": "engine"}, "reward": 0.0},
               {"task_id": "t9"}, {"task_id": "t0", "meta": {"source": "engine"}, "reward": 1.0}]
    units = [CommittedUnit(summary, {"proposals.jsonl": [prop], "trajectories.jsonl": trajs, "failures.jsonl": [fail],
                                     "samples_agent.jsonl": samples, "samples_user.jsonl": samples[:1]}),
             CommittedUnit({**summary, "unit": "r0-p1", "wall_s": 1.0}, {"proposals.jsonl": [bad]})]
    pools = {"t0": "sft", "t9": "sft"}
    row = round_stats(0, plans, units, pools)
    assert row == round_stats(0, plans, units, pools)
    assert (row.sft_pool, row.rl_pool, row.sft_user) == (1, 0, 1)
    in_rl = round_stats(0, plans, units, {"t0": "rl", "t9": "sft"})  # t0 in the RL pool: its samples are not SFT data
    assert (in_rl.sft_pool, in_rl.rl_pool, in_rl.sft_agent, in_rl.sft_user) == (0, 1, 1, 0)
    assert (row.unvalidated_samples, in_rl.unvalidated_samples) == (1, 0)
    assert (row.proposals, row.built, row.accepted, row.acceptance_rate, row.reject_synthesis) == (2, 1, 1, 0.5, 1)
    assert (row.episodes, row.pass_rate, row.user_deviation_rate, row.failures_agent) == (2, 0.5, 0.5, 1)
    assert (row.fidelity_templated, row.repaired, row.sft_agent, row.sft_ungrounded, row.wall_s) == (1, 1, 4, 2, 3.0)
    stats, examples, patterns = plan_feedback(plans, units)
    assert stats["plan1"]["rejections"] == {SynthesisFailure.WRITE_FAILED: 1} and stats["plan0"]["episodes"] == 2
    assert examples["plan1"] == ["synthesis: write_failed: create_task failed after 2 repairs (x)"]
    assert examples["plan0"] == ["agent/wrong_write: x"] and patterns == {"a": (1, 1), "b": (0, 1)}
    write_rounds_csv(tmp_path / "rounds.csv", [row])
    header, values = (tmp_path / "rounds.csv").read_text().splitlines()
    assert header.split(",") == ROUND_COLUMNS and values.startswith("0,2,2,1,1,0.5,")


def test_rounds_csv_counts_the_realized_task_mix_per_kind_and_tool():
    """What the plans actually made: kinds (lookup / one_write / lookup_write / two_writes), tasks per
    tool, the share with a write, the domain's write tools covered, entropies over patterns and kinds."""
    def task(*names):
        return {"id": "x", "evaluation_criteria": {"actions": [{"action_id": str(i), "name": n, "arguments": {}}
                                                                for i, n in enumerate(names)]}}
    writes = frozenset({"create_task", "update_task_status", "delete_task"})
    tasks = [task("create_task"), task("create_task"), task("get_users", "create_task"),
             task("create_task", "update_task_status"), task("get_users")]
    summary = {"unit": "r0-p0", "round": 0, "choice_fallbacks": 0, "wall_s": 1.0}
    row = round_stats(0, [], [CommittedUnit(summary, {"tasks.jsonl": tasks})], {}, writes)
    assert row.kinds == "one_write:2 lookup:1 lookup_write:1 two_writes:1"
    assert row.tools == "create_task:4 get_users:2 update_task_status:1"
    assert (row.write_share, row.write_coverage) == (0.8, round(2 / 3, 4))
    # 4 patterns, counts 2,1,1,1 of 5: -(0.4 log 0.4 + 3 * 0.2 log 0.2)
    assert row.pattern_entropy == 1.9219 and row.kind_entropy == 1.9219
    # a chained task (the engine's `chain` plans say so in description.notes) and a refusal are kinds of their own
    chained = {**task("create_task", "update_task_status"), "description": {"notes": json.dumps({"chained": True})}}
    refusal = {**task("get_users"), "description": {"notes": json.dumps({"refusal": "policy"})}}
    row = round_stats(0, [], [CommittedUnit(summary, {"tasks.jsonl": tasks + [chained, refusal]})], {}, writes)
    assert row.kinds == "one_write:2 chained:1 lookup:1 lookup_write:1 refusal:1 two_writes:1"
    assert row.write_share == round(1 - 2 / 7, 4)
    empty = round_stats(0, [], [CommittedUnit(summary, {})], {}, writes)
    assert (empty.kinds, empty.write_share, empty.pattern_entropy) == ("", None, None)


def test_a_task_with_the_same_solution_and_nearly_the_same_text_is_a_duplicate():
    from kit.engine.validate import Seen

    def t(tid, reason, title="Pay rent"):
        return Task(id=tid, user_scenario=UserScenario(instructions={
            "domain": "mock", "reason_for_call": reason, "known_info": "You are user_1.", "task_instructions": "x"}),
            evaluation_criteria=EvaluationCriteria(actions=[Action(action_id="a0", name="create_task", arguments={
                "user_id": "user_1", "title": title})], reward_basis=["DB"]))
    seen = Seen([t("a", "Please add a task called Pay rent to my list.")])
    again = t("b", "Please add a task called Pay rent to my list!")
    why = seen.claim(again)
    assert why is not None and why.check is Check.DUPLICATE and "as a" in why.detail
    framed = t("f", "You are calling because you need to add a task called Pay rent.")  # a frame around the same ask
    assert seen.duplicate_of(framed) == "a"
    other_words = t("c", "I keep forgetting the rent; can you put it on my to-do list as Pay rent?")
    assert seen.claim(other_words) is None          # same gold, other text: kept (a paraphrase)
    assert seen.claim(t("d", "Please add a task called Pay rent to my list.", title="Pay gas")) is None
    assert seen.claim(t("e", "Please add a task called Pay gas to my list.", title="Pay gas")) is not None
    seen.forget(t("d", "", title="Pay gas"))        # d failed a later check: e's twin is free again
    assert seen.claim(t("e", "Please add a task called Pay gas to my list.", title="Pay gas")) is None
    # the synthesizer's view: the gold calls accepted so far (a forgotten task's are free again)
    taken = seen.actions_taken()
    assert {name for name, _ in taken} == {"create_task"} and any("Pay gas" in args for _, args in taken)
    seen.forget(t("e", "", title="Pay gas"))
    assert not any("Pay gas" in args for _, args in seen.actions_taken())


def test_meta_planner_and_reflector_cap_the_share_of_read_only_plans():
    """airline has 6 read tools and 6 writes: uncapped, lookups take about a third of the plans and the
    reflector drifts to them (they are the plans that succeed)."""
    from kit.engine.choice import Chooser
    from kit.engine.plans import meta_plan
    from kit.engine.prompts import Prompts
    from kit.engine.reflect import reflect

    airline = load_domain("airline")
    reads = {t[0] for i, t in tool_patterns(airline) if i == "lookup"}

    class LikesLookups:  # a fake model (this test is about the cap, not the model): picks a lookup when offered
        caps = type("Caps", (), {"scores": True})()

        def score_options(self, messages, options):
            return [0.0 if o.split(": ")[-1] in reads else -50.0 for o in options]

        def chat(self, messages, params=None):
            return [type("Completion", (), {"text": "plan text " + str(len(messages[-1]["content"])), "raw": ""})()]

    assert len(reads) >= 4
    chooser = Chooser(LikesLookups(), temperature=0.0, seed=0)
    plans, _ = meta_plan(airline, 16, chooser, Prompts(), max_lookup_share=0.25, max_similarity=1.0)
    assert sum(p.slice.intent == "lookup" for p in plans) <= 4
    # every write tool is in one of the first six plans, even with a model that would rather look up
    writes = {t for t in airline.tool_names("assistant") if airline.tool_kind(t) == "write"}
    assert {t for p in plans[:len(writes)] for t in p.slice.tools} >= writes
    uncapped, _ = meta_plan(airline, 16, chooser, Prompts(), max_lookup_share=None, max_similarity=1.0)
    assert sum(p.slice.intent == "lookup" for p in uncapped) > 4  # the cap is what holds it
    # every plan failed and lookups did best: the reflector may not switch past the cap
    stats = {p.id: {"proposals": 2, "accepted": 0, "rejections": Counter({"gold_runs": 2}), "failures": Counter()}
             for p in plans}
    pattern_stats = {">".join(t): (2, 2) for i, t in tool_patterns(airline) if i == "lookup"}
    new = reflect(airline, plans, stats, {}, chooser, Prompts(), 0, pattern_stats, max_lookup_share=0.25)
    assert sum(p.slice.intent == "lookup" for p in new) <= 4


def test_the_meta_planner_offers_the_least_used_dialogue_edges():
    """The 135M planner picked facts_on_request for 24 of 24 airline plans and none of 24 retail plans (engine
    runs of 2026-12-05); the edges are now offered least used first, so any model gives every edge its share."""
    from collections import Counter

    from kit.engine.choice import Chooser
    from kit.engine.plans import EDGES, meta_plan
    from kit.engine.prompts import Prompts

    class FirstOption:  # a fake model (this test is about what the planner offers, not the model): option 0
        caps = type("Caps", (), {"scores": True})()

        def score_options(self, messages, options):
            return [0.0] + [-50.0] * (len(options) - 1)

        def chat(self, messages, params=None):
            return [type("Completion", (), {"text": "plan text " + str(len(messages[-1]["content"])), "raw": ""})()]

    plans, _ = meta_plan(load_domain("retail"), 7, Chooser(FirstOption(), temperature=0.0, seed=0), Prompts(),
                         max_similarity=1.0)
    edges = Counter(p.slice.edge for p in plans)
    assert set(edges) == set(EDGES) and max(edges.values()) - min(edges.values()) <= 1, edges


def test_old_rejection_records_load_typed_and_count_as_before():
    """proposals.jsonl of an older run: a synthesis reason's detail led with its cause
    ("write_failed: ..."); it is parsed once, at Rejection.from_json, into the cause and the detail."""
    old = [{"check": "synthesis", "detail": "write_failed: create_task failed after 2 repairs (x)"},
           {"check": "synthesis", "detail": "empty_value: title"},
           {"check": "synthesis", "detail": "no_write: none"},          # a cause no kit names now
           {"check": "synthesis", "detail": None},
           {"check": "checker_strength", "detail": "1 near-miss mutants slipped", "mutation_report": {"made": 3}},
           {"check": "grounded_args", "detail": "create_task.title='x' is neither in ..."}]
    whys = [Rejection.from_json(d) for d in old]
    assert [w.category for w in whys] == [SynthesisFailure.WRITE_FAILED, SynthesisFailure.EMPTY_VALUE,
                                          SynthesisFailure.OTHER, SynthesisFailure.OTHER, Check.CHECKER_STRENGTH,
                                          Check.GROUNDED_ARGS]
    assert whys[0] == Rejection(Check.SYNTHESIS, "create_task failed after 2 repairs (x)", SynthesisFailure.WRITE_FAILED)
    assert whys[0].message() == old[0]["detail"] and whys[2].message() == "no_write: none"
    assert whys[4].mutation_report == {"made": 3} and whys[5].detail == old[5]["detail"]
    # the form written now: the cause a field of its own; it reads back equal
    assert whys[0].to_json() == {"check": "synthesis", "cause": "write_failed",
                                 "detail": "create_task failed after 2 repairs (x)"}
    assert [Rejection.from_json(w.to_json()) for w in whys] == whys
    # the categories compare equal to their old strings (rounds.csv columns, readers not yet typed)
    assert Check.SYNTHESIS == "synthesis" and f"{SynthesisFailure.WRITE_FAILED}" == "write_failed"
    assert json.dumps({SynthesisFailure.WRITE_FAILED: 1}) == '{"write_failed": 1}'
    # round statistics read the old and the new form alike
    plans = [PlanPair(id="plan0", synthesis="s", evaluation="e", slice=Slice("change", ["a"], "p", "none"))]
    rows = [{"plan_id": "plan0", "task_id": None, "accepted": False, "repairs": [], "reasons": [d]} for d in old]
    units = [CommittedUnit({"unit": "r0-p0", "round": 0, "sft_agent": 0, "sft_user": 0, "choice_fallbacks": 0,
                            "wall_s": 0.0}, {"proposals.jsonl": rows})]
    new = [CommittedUnit(units[0].summary, {"proposals.jsonl": [dict(r, reasons=[w.to_json()]) for r, w in zip(rows, whys)]})]
    row = round_stats(0, plans, units, {})
    assert (row.reject_synthesis, row.reject_checker_strength, row.reject_grounded_args) == (4, 1, 1)
    assert row == round_stats(0, plans, new, {}) and plan_feedback(plans, units) == plan_feedback(plans, new)
    assert plan_feedback(plans, units)[0]["plan0"]["rejections"] == {
        "write_failed": 1, "empty_value": 1, "other": 2, "checker_strength": 1, "grounded_args": 1}


def test_units_in_threads_build_the_engines_tokenizer_once(tmp_path, monkeypatch):
    """Two units reaching Engine.tokenizer at once built it twice, or failed inside transformers' lazy
    import ("cannot import name 'AutoTokenizer'"; the rehearsal, once its model was fast). The backends are
    a stand-in object: this is about the lock, and with `sft_tokenizer` set no backend is asked."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    import transformers

    eng = _engine_without_models(tmp_path)
    real, calls, both_in = transformers.AutoTokenizer.from_pretrained, [], threading.Barrier(2)

    def slow(*a, **k):
        calls.append(1)
        time.sleep(0.3)  # the second unit arrives while the first one builds
        return real(*a, **k)

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", slow)

    def unit(_):
        both_in.wait()
        return eng.tokenizer

    with ThreadPoolExecutor(2) as pool:
        first, second = pool.map(unit, range(2))
    assert len(calls) == 1 and first is second


def _engine_without_models(tmp_path, **knobs):
    """An Engine whose model backends are a stand-in object: for tests of what it does with a task it is
    handed (validation, bookkeeping), where no model is asked anything."""
    from types import SimpleNamespace

    from kit.engine.run import Engine

    stand_in = SimpleNamespace(caps=SimpleNamespace(scores=False, tokenizer=False, parallel=True))
    return Engine(EngineConfig(domain="mock", out_dir=str(tmp_path / "e"), sft_tokenizer="embedded", wandb=False,
                               **knobs), progress=False, backends=dict.fromkeys(("model", "agent", "user"), stand_in))


def test_validation_off_counts_what_each_check_finds_but_keeps_the_held_out_guard(tmp_path):
    """`validation: false` (the no_validation arm): every check still runs, a defect is accepted and recorded
    as `unvalidated`, and a task holding an evaluation task's solution is rejected as in the validated arm.
    With validation on, the same defective tasks are rejected."""
    from kit.engine.synthesize import Proposal

    mock = load_domain("mock")
    plan = PlanPair.__new__(PlanPair)  # the judge (the only reader of the plan) is off
    defects = {"gold_runs": _task([("update_task_status", {"task_id": "task_9", "status": "completed"})],
                                  "task_9 completed"),
               "changes_state": _task([("update_task_status", {"task_id": "task_1", "status": "pending"})],
                                      "task_1 should be pending"),
               "grounded_args": _task([("create_task", {"user_id": "user_1", "title": "Pay rent"})], "You are user_1.")}
    held = mock.tasks("default")[0].model_copy(update={"id": "copy-of-an-evaluation-task"})
    off = _engine_without_models(tmp_path / "off", validation=False, llm_judge=False)
    on = _engine_without_models(tmp_path / "on", validation=True, llm_judge=False)
    for check, task in defects.items():
        rec, reasons, would = off._validate(plan, Proposal("u", 0, "p", task=task), None)
        assert rec is not None and reasons == [] and check in [w.check for w in would], check
        rec, reasons, would = on._validate(plan, Proposal("u", 0, "p", task=task), None)
        assert rec is None and reasons[0].check == check and would == [], check
    rec, reasons, would = off._validate(plan, Proposal("u", 0, "p", task=held), None)
    assert rec is None and [r.check for r in reasons] == ["held_out"]


def test_engine_config_names_the_bad_field(tmp_path):
    with pytest.raises(ValidationError, match="rounds"):
        EngineConfig(domain="mock", out_dir=str(tmp_path), rounds=0)
    with pytest.raises(ValidationError, match="num_plan"):
        EngineConfig(domain="mock", out_dir=str(tmp_path), num_plan=4)  # typo of num_plans


# ----- whole runs with the embedded model ----------------------------------------------------------


@pytest.fixture(scope="module")
def mock_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("engine") / "mock"
    cfg = EngineConfig(domain="mock", out_dir=str(out), rounds=2, num_plans=2, tasks_per_plan=1, group_size=1,
                       max_messages=4, max_new_tokens=32, user_max_new_tokens=32, llm_judge=False, wandb=False, seed=1,
                       rl_share=0.5)
    return cfg, run_engine(cfg, progress=False)


@pytest.mark.slow
@pytest.mark.xdist_group("engine_mock_run")  # one worker builds the shared run
def test_engine_run_writes_every_output_and_accepted_tasks_replay_to_reward_1(mock_run):
    cfg, res = mock_run
    out = Path(cfg.out_dir)
    for name in ("tasks.jsonl", "rl_tasks.jsonl", "trajectories.jsonl", "sft_agent.jsonl", "sft_user.jsonl",
                 "failures.jsonl", "proposals.jsonl", "rounds.csv", "manifest.json", "plans/round_0.json",
                 "plans/round_1.json", "prompts/round_0/synth_reason.md", "prompts/round_1/plan_hints.json"):
        assert (out / name).exists(), name
    assert [r["round"] for r in res.rounds] == [0, 1]
    assert sum(r["proposals"] for r in res.rounds) == 4
    assert res.accepted >= 1, "no task accepted: the synthesizer or validator regressed"
    rep = audit_run(out)  # every accepted task loads as a tau2 Task; gold replay -> reward 1 from tau2
    assert rep["referee"] == "tau2" and rep["problems"] == [] and rep["gold_reward_1"] == res.accepted
    assert rep["rule_refusals"] == 0 and sum(rep["kinds"].values()) == res.accepted
    assert rep["sft_ungrounded"] == sum(r["sft_ungrounded"] for r in res.rounds)
    assert rep["write_tools_covered"] == sum(n > 0 for n in rep["write_tools"].values())
    trajs = read_jsonl(out / "trajectories.jsonl")
    assert len(trajs) == res.accepted * cfg.group_size
    assert all("reward" in t["meta"] for t in trajs)
    fails = read_jsonl(out / "failures.jsonl")
    assert len(fails) == sum(t["meta"]["reward"] < 1 for t in trajs)
    assert all(f["label"] in ("task", "agent", "user", "undetermined") for f in fails)
    # two disjoint pools: every accepted task in exactly one; only the SFT pool's gold dialogues are SFT data
    sft_pool = {r["task"]["id"] for r in read_jsonl(out / "sft_tasks.jsonl")}
    rl_pool = {r["task"]["id"] for r in read_jsonl(out / "rl_tasks.jsonl")}
    assert not sft_pool & rl_pool and sft_pool | rl_pool == {t["id"] for t in read_jsonl(out / "tasks.jsonl")}
    rounds = read_jsonl_csv(out / "rounds.csv")
    assert sum(int(r["sft_pool"]) for r in rounds) == len(sft_pool)
    assert sum(int(r["rl_pool"]) for r in rounds) == len(rl_pool)
    sft = read_jsonl(out / "sft_agent.jsonl")
    gold = [s for s in sft if s["meta"].get("source") == "gold"]
    assert {s["task_id"] for s in gold} == sft_pool  # every SFT-pool task has its gold dialogue, no RL task has
    from kit.eval.leak import leak_report, training_action_keys

    rl_tasks = [r["task"] for r in read_jsonl(out / "rl_tasks.jsonl")]
    assert leak_report(rl_tasks, training_action_keys([out / "sft_agent.jsonl"]))["n_overlap"] == 0
    plans1 = json.loads((out / "plans/round_1.json").read_text())
    assert all(p["history"] and p["history"][-1]["round"] == 0 for p in plans1)  # the reflector ran
    m = json.loads((out / "manifest.json").read_text())
    assert m["status"] == "complete" and m["domain"] == "mock" and m["tau2_version"]


@pytest.mark.slow
def test_raw_synthesis_without_validation_lets_defects_in_and_counts_them(tmp_path):
    """The no_validation ablation's data, on a tiny real run (embedded model, mock): with raw synthesis (the
    model's values and text kept, no repair) the engine makes defective tasks; validation off accepts them,
    and rounds.csv counts every accepted task a check would have rejected: the same checks validation runs
    (executable_checks, rerun here on the accepted tasks) flag the same tasks."""
    out = tmp_path / "raw"
    cfg = EngineConfig(domain="mock", out_dir=str(out), rounds=1, num_plans=1, tasks_per_plan=2, group_size=0,
                       llm_judge=False, wandb=False, seed=0, raw_synthesis=True, validation=False)
    res = run_engine(cfg, progress=False)
    props = read_jsonl(out / "proposals.jsonl")
    flagged = {p["task_id"]: {w["check"] for w in p["unvalidated"]} for p in props if p["accepted"] and p["unvalidated"]}
    row = read_jsonl_csv(out / "rounds.csv")[0]
    assert int(row["unvalidated"]) == len(flagged) >= 1, (row, props)
    assert res.accepted == sum(p["accepted"] for p in props)
    assert all(not p["reasons"] or p["reasons"][0]["check"] in ("synthesis", "held_out", "llm_judge") for p in props)
    assert any(p["unrepaired"] for p in props)  # what raw synthesis kept that a repair would have changed
    samples = read_jsonl(out / "samples_agent.jsonl")  # both pools' (gold dialogues: group_size 0)
    assert samples and {s["task_id"] for s in samples} & set(flagged)
    assert all(s["meta"]["validated"] == (s["task_id"] not in flagged) for s in samples)  # what validated_only drops
    mock = load_domain("mock")
    for t in read_jsonl(out / "tasks.jsonl"):
        found = {r.check.value for r in executable_checks(mock, Task.model_validate(t))}
        assert found == flagged.get(t["id"], set()) - {"duplicate", "gold_reward", "checker_strength"}, t["id"]
    per_check = Counter(c for cs in flagged.values() for c in cs)
    assert row["unvalidated_checks"] == " ".join(f"{k}:{v}" for k, v in sorted(per_check.items(),
                                                                               key=lambda kv: (-kv[1], kv[0])))


@pytest.mark.slow
@pytest.mark.xdist_group("engine_mock_run")  # the validated run is mock_run
def test_trajectory_validation_keeps_no_turn_of_a_failed_rollout(mock_run):
    """Trajectory validation on a tiny real run (embedded model, mock, one rollout per task): no turn of a rollout
    that failed its checker is SFT data, and rounds.csv's `unvalidated_samples` (what validation off would have
    let in: the no_validation ablation's defects, counted on hand-made units in
    test_round_stats_is_a_pure_function_whose_fields_are_the_rounds_csv_columns) is 0."""
    cfg, _ = mock_run
    on = Path(cfg.out_dir)
    assert any(t["meta"]["reward"] < 1 for t in read_jsonl(on / "trajectories.jsonl"))  # there was something to drop
    assert [s for s in read_jsonl(on / "sft_agent.jsonl") if from_failed_rollout(s)] == []
    assert sum(int(r["unvalidated_samples"]) for r in read_jsonl_csv(on / "rounds.csv")) == 0


@pytest.mark.slow
def test_without_trajectory_validation_a_failed_rollout_is_sft_data_and_counted(tmp_path):
    """The no_validation arm's rollout defects on a tiny real run (embedded model as assistant and user, mock, one
    task, one rollout): with validation off, the failed dialogue's turns become SFT samples, and rounds.csv's
    `unvalidated_samples` counts exactly those (the validated run keeping none is
    test_trajectory_validation_keeps_no_turn_of_a_failed_rollout). The full arm's data out of that same run
    (sft_agent's `validated_only`) is the SFT data of the same engine with validation on, turn for turn."""
    from kit.stages.sft import Config as SFTStageConfig, training_samples

    out = tmp_path / "off"
    knobs = dict(domain="mock", rounds=1, num_plans=1, tasks_per_plan=1, group_size=1, max_messages=4,
                 max_new_tokens=32, user_max_new_tokens=32, llm_judge=False, wandb=False, seed=1, rl_share=0.0)
    run_engine(EngineConfig(out_dir=str(out), validation=False, **knobs), progress=False)
    failed = {t["id"] for t in read_jsonl(out / "trajectories.jsonl") if t["meta"]["reward"] < 1}
    assert failed, "the base model passed its rollout: nothing for validation to catch in this run"
    samples = read_jsonl(out / "sft_agent.jsonl")
    kept = [s for s in samples if from_failed_rollout(s)]
    assert kept and {s["trajectory_id"] for s in kept} <= failed
    assert sum(int(r["unvalidated_samples"]) for r in read_jsonl_csv(out / "rounds.csv")) == len(kept)
    assert [s for s in samples if not s["meta"]["validated"]] == kept

    run_engine(EngineConfig(out_dir=str(tmp_path / "on"), validation=True, **knobs), progress=False)
    for role in ("agent", "user"):
        view, _ = training_samples(SFTStageConfig(domain="mock", data=str(out), validated_only=True), role, st=None)
        on = read_jsonl(tmp_path / "on" / f"sft_{role}.jsonl")
        assert view and [(s.prompt, s.completion) for s in view] == [(s["prompt"], s["completion"]) for s in on], role


@pytest.mark.slow
@pytest.mark.xdist_group("engine_mock_run")
def test_audit_reports_a_duplicate_task_and_counts_ungrounded_sft_samples(mock_run, tmp_path):
    """The audit reruns the duplicate check over the whole accepted set and reads rounds.csv's ungrounded
    count: a copy of the run with one accepted task repeated under a new id, and one more dropped sample."""
    import csv
    import shutil

    cfg, res = mock_run
    out = tmp_path / "copy"
    shutil.copytree(cfg.out_dir, out)
    first = read_jsonl(out / "tasks.jsonl")[0]
    with (out / "tasks.jsonl").open("a") as f:
        f.write(json.dumps({**first, "id": first["id"] + "-again"}) + "\n")
    rows = list(csv.DictReader((out / "rounds.csv").open()))
    before = sum(int(r["sft_ungrounded"] or 0) for r in rows)
    rows[0]["sft_ungrounded"] = str(int(rows[0]["sft_ungrounded"] or 0) + 1)
    with (out / "rounds.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    rep = audit_run(out)
    assert any(p.startswith(first["id"] + "-again: same gold actions") for p in rep["problems"]), rep["problems"]
    assert rep["sft_ungrounded"] == before + 1


@pytest.mark.slow
@pytest.mark.xdist_group("engine_mock_run")  # one worker builds the shared run
def test_engine_rerun_of_a_complete_run_does_nothing(mock_run):
    cfg, res = mock_run
    before = {p: p.read_bytes() for p in Path(cfg.out_dir).glob("*.jsonl")}
    again = run_engine(cfg, progress=False)
    assert again.resumed_units == cfg.rounds * cfg.num_plans
    assert {p: p.read_bytes() for p in Path(cfg.out_dir).glob("*.jsonl")} == before
    assert again.rounds == res.rounds or [r["accepted"] for r in again.rounds] == [r["accepted"] for r in res.rounds]


@pytest.mark.slow
def test_kill_minus_9_then_rerun_resumes_without_loss_or_duplicates(tmp_path):
    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "kit.cli", "synthesize", "--domain", "mock", "--out", str(out), "--rounds", "1",
           "--num-plans", "2", "--tasks-per-plan", "1", "--group-size", "0", "--no-wandb", "--seed", "3",
           "--concurrency", "1"]  # one unit after the other: the kill lands in the second
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    units = out / "units.jsonl"
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None and not (units.exists() and units.read_text().strip()):
        time.sleep(0.2)
    assert proc.poll() is None, f"run ended before it could be killed: {proc.stderr.read()[-2000:]}"
    proc.send_signal(signal.SIGKILL)  # in the middle of the second (last) unit
    proc.wait()
    done_before = [json.loads(x)["unit"] for x in units.read_text().splitlines()]
    assert len(done_before) < 2
    rerun = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    committed = [json.loads(x)["unit"] for x in units.read_text().splitlines()]
    assert sorted(committed) == ["r0-p0", "r0-p1"]  # each once, the killed one redone
    assert committed[: len(done_before)] == done_before
    props = read_jsonl(out / "proposals.jsonl")
    assert sorted(p["unit"] for p in props) == ["r0-p0", "r0-p1"]
    assert audit_run(out)["problems"] == []


LIBRARY_RECIPE = """\
name: library-plumbing
domain: kit.envs.library          # a domain of one's own, by its module: nothing registers it first
check_budgets: false
stages:
  - stage: synthesize
    params: {rounds: 1, num_plans: 1, tasks_per_plan: 2, group_size: 1, max_messages: 4, max_new_tokens: 32,
             user_max_new_tokens: 32, llm_judge: false, wandb: false}
"""


def test_a_recipe_names_a_domain_of_ones_own_by_its_module(tmp_path):
    from kit.runner.recipe import RecipeError, load_recipe

    path = tmp_path / "library.yaml"
    path.write_text(LIBRARY_RECIPE)
    (synth,) = load_recipe(path).plan
    assert synth.params["domain"] == "kit.envs.library"
    path.write_text(LIBRARY_RECIPE.replace("kit.envs.library", "kit.envs.no_such_domain"))
    with pytest.raises(RecipeError, match=r"stages\[0\]\.params\.domain: domain module 'kit.envs.no_such_domain' cannot"):
        load_recipe(path)


@pytest.mark.slow
def test_a_custom_domain_from_a_recipe_runs_through_the_synthesize_stage(tmp_path):
    """What `kit run` does in the stage's notebook: the recipe's validated params -> the stage's run."""
    from kit.runner.recipe import load_recipe
    from kit.runner.stage import Stage
    from kit.stages.synthesize import Config, run

    path = tmp_path / "library.yaml"
    path.write_text(LIBRARY_RECIPE)
    (synth,) = load_recipe(path).plan
    out = tmp_path / "library"
    outputs = run(Config(**synth.params), Stage("synthesize", synth.params, {"out_dir": str(out)}))
    props = read_jsonl(out / "proposals.jsonl")
    assert outputs.proposals == 2 and len(props) == 2 and any(p["task_id"] for p in props), [p["failure"] for p in props]
    tools = {c["call"].split("(")[0] for p in props for c in p["explored"]}
    assert tools <= {"get_member", "get_book"} and tools  # it explored the library with its read tools
    rep = audit_run(out)
    assert rep["referee"] == "kit" and rep["problems"] == [] and rep["tasks"] == outputs.accepted


# the engine through an OpenAI endpoint (a `transformers serve` of the embedded model, two units at once):
# tests/test_rehearsal.py's synthesize stage


def test_reflector_switches_keep_every_pattern_covered():
    """rl-cpu's round 0 (2026-12-02): six plans on six patterns; the reflector switched three of them to
    update_task_status>create_task (accepted best) and lost the only update-only plan. With the coverage
    guard a plan that yielded something keeps its pattern while it is the only one holding it, and a
    plan that yielded nothing may move, doubling one pattern at most."""
    mock = load_domain("mock")
    # mock's five patterns, one plan each (get_users alone is no pattern: it takes no arguments)
    slices = [("change", ["update_task_status"]), ("multi_change", ["create_task", "update_task_status"]),
              ("multi_change", ["update_task_status", "create_task"]), ("change", ["create_task"]),
              ("lookup_change", ["get_users", "create_task"])]
    assert sorted(map(tuple, (t for _, t in slices))) == sorted(tuple(t) for _, t in tool_patterns(mock))
    plans = [PlanPair(id=f"plan{i}", slice=Slice(it, t, "p", "e"), synthesis="s", evaluation="e")
             for i, (it, t) in enumerate(slices)]
    accepted = [2, 2, 4, 4, 0]
    stats = [{"proposals": 4, "accepted": a, "rejections": Counter({"held_out": 4 - a} if a else {"llm_judge": 4}),
              "failures": Counter()} for a in accepted]
    pattern_stats = {">".join(t): (a, 4) for (_, t), a in zip(slices, accepted)}
    coverage = Counter(">".join(t) for _, t in slices)
    for plan, st in zip(plans[:2], stats[:2]):
        # without the guard: switch to the best-accepted patterns, the collapse seen in the run
        assert "switch:update_task_status>create_task" in _texts(_edits(mock, plan, st, pattern_stats))
        assert not any(e.startswith("switch") for e in _texts(_edits(mock, plan, st, pattern_stats, coverage)))
    barren = _texts(_edits(mock, plans[4], stats[4], pattern_stats, coverage))
    assert "switch:update_task_status>create_task" in barren  # 0 of 4 accepted: it may double a pattern
    crowded = coverage + Counter({"update_task_status>create_task": 1}) - Counter({"create_task": 1})  # still 5 plans
    assert "switch:update_task_status>create_task" not in _texts(_edits(mock, plans[4], stats[4], pattern_stats, crowded))
    # a duplicate may move to a pattern nobody holds
    dup = Counter(coverage)
    dup["update_task_status"] -= 1
    dup["update_task_status>create_task"] += 1
    moved = PlanPair(id="plan0", slice=Slice("multi_change", ["update_task_status", "create_task"], "p", "e"),
                     synthesis="s", evaluation="e")
    edits = _texts(_edits(mock, moved, stats[0], {**pattern_stats, "update_task_status": (0, 0)}, dup))
    assert [e for e in edits if e.startswith("switch")] == ["switch:update_task_status"]


def _texts(edits) -> list[str]:
    return [e.text() for e in edits]


@pytest.mark.slow
@pytest.mark.slow
def test_a_chain_plan_changes_the_record_its_first_write_made():
    """A `chain` plan (create_task, then update_task_status of the new task) through the synthesizer with the
    real embedded model: the update's task id is the one create_task returned, a value the customer cannot
    know (not in the scenario, not in the starting database), so the agent must read it off the tool result;
    the task passes the executable checks, and the realized task mix counts it as `chained`."""
    from kit.engine.choice import Chooser
    from kit.engine.plans import EDGES, PERSONAS, Slice, tool_patterns
    from kit.engine.prompts import Prompts
    from kit.engine.rounds import task_mix
    from kit.engine.synthesize import Synthesizer
    from kit.llm import make_backend

    dom = load_domain("mock")
    assert ("chain", ["create_task", "update_task_status"]) in tool_patterns(dom)
    synth = Synthesizer(dom, Chooser(make_backend("embedded"), temperature=0.0, seed=0), Prompts(), explore_steps=0)
    plan = PlanPair(id="p0", slice=Slice("chain", ["create_task", "update_task_status"], PERSONAS[0], EDGES[0]),
                    synthesis="The customer creates a task and then marks it done.", evaluation="Both writes are done.")
    prop = synth.propose(plan, "r0-p0", 0, "syn-chain", seed=1)
    assert prop.task is not None, prop.failure
    acts = prop.task.evaluation_criteria.actions
    assert [a.name for a in acts] == ["create_task", "update_task_status"]
    env = dom.fork(prop.task)
    made = json.loads(env.execute("create_task", dict(acts[0].arguments), "assistant").content)["task_id"]
    assert acts[1].arguments["task_id"] == made
    assert made not in json.dumps(dom.fork(prop.task).agent_db.model_dump(mode="json"))  # a new record
    assert made not in str(prop.task.user_scenario)
    assert executable_checks(dom, prop.task) == []
    writes = frozenset(n for n in dom.tool_names("assistant") if dom.tool_kind(n) == "write")
    assert task_mix([prop.task], writes).kinds == Counter({"chained": 1})


def test_world_writes_are_asked_for_in_words_and_the_agent_looks_up_the_ids():
    """Retail and airline writes through the synthesizer with the real embedded model: the gold starts
    with the reads that find the database-only ids (an order's items, the customer's payment methods),
    the scenario names none of those ids but says the customer's words for them, and the task passes
    the validator's executable checks (grounded_args: every value stated or returned by an earlier read)."""
    from kit.engine.choice import Chooser
    from kit.engine.plans import EDGES, PERSONAS, PlanPair, Slice
    from kit.engine.prompts import Prompts
    from kit.engine.synthesize import Synthesizer
    from kit.llm import make_backend

    llm = make_backend("embedded")
    cases = [("retail", "return_delivered_order_items", ("item_ids", "payment_method_id")),
             ("airline", "update_reservation_baggages", ("payment_id",))]
    for name, tool, hidden in cases:
        dom = load_domain(name)
        synth = Synthesizer(dom, Chooser(llm, temperature=0.0, seed=0), Prompts(), explore_steps=0)
        plan = PlanPair(id="p0", slice=Slice("change", [tool], PERSONAS[0], EDGES[0]),
                        synthesis=f"The customer asks to {tool.replace('_', ' ')}.", evaluation="The write is done.")
        prop = synth.propose(plan, "r0-p0", 0, f"syn-{name}", seed=3)
        assert prop.task is not None, prop.failure
        acts = prop.task.evaluation_criteria.actions
        assert acts[-1].name == tool and all(dom.tool_kind(a.name) == "read" for a in acts[:-1]) and len(acts) >= 2
        text = str(prop.task.user_scenario)
        for k in hidden:
            value = acts[-1].arguments[k]
            for leaf in (value if isinstance(value, list) else [value]):
                assert str(leaf) not in text, (name, k, leaf, text)
        assert ("credit card ending in" in text or "gift card" in text or "PayPal" in text
                or "certificate" in text), text
        if name == "retail":  # tau2's retail policy: authenticate the customer first, by the email they give
            assert acts[0].name == "find_user_id_by_email" and acts[0].arguments["email"] in text, (acts[0], text)
        assert executable_checks(dom, prop.task) == [], (name, text)


@pytest.mark.slow
def test_a_two_write_request_is_drawn_for_a_customer_who_can_make_both():
    """retail multi_change (return a delivered order's items, then cancel a pending order) with the real
    embedded model: the first write's customer is drawn among those who also hold a pending order, so the
    second write is never left without a candidate ("no cancel_pending_order call the world allows" ended
    every such proposal of the 2026-12-02 retail run); both writes are the same customer's, and the task
    passes the executable checks (retail's policy rules included)."""
    from kit.engine.choice import Chooser
    from kit.engine.plans import EDGES, PERSONAS, PlanPair, Slice
    from kit.engine.prompts import Prompts
    from kit.engine.synthesize import Synthesizer
    from kit.llm import make_backend

    dom = load_domain("retail")
    synth = Synthesizer(dom, Chooser(make_backend("embedded"), temperature=0.0, seed=0), Prompts(), explore_steps=0)
    tools = ["return_delivered_order_items", "cancel_pending_order"]
    plan = PlanPair(id="p0", slice=Slice("multi_change", tools, PERSONAS[0], EDGES[0]),
                    synthesis="The customer returns items of one order and cancels another.",
                    evaluation="Both writes are done.")
    for seed in range(2):
        prop = synth.propose(plan, f"r0-p{seed}", 0, f"syn-two-{seed}", seed=seed)
        assert prop.task is not None, prop.failure
        acts = prop.task.evaluation_criteria.actions
        writes = [a for a in acts if dom.tool_kind(a.name) == "write"]
        assert [a.name for a in writes] == tools, [a.name for a in acts]
        env = dom.fork(None)
        owners = {env.agent_db.orders[a.arguments["order_id"]].user_id for a in writes}
        assert len(owners) == 1, owners  # one customer's request
        assert executable_checks(dom, prop.task) == [], str(prop.task.user_scenario)


@pytest.mark.slow
def test_a_certificate_task_is_a_complaint_about_a_cancelled_flight():
    """airline send_certificate through the synthesizer with the real embedded model: the customer says which
    flight of which reservation was cancelled (the policy's condition for a certificate), the agent reads the
    reservation and the customer's membership before the write, and the task passes the executable checks
    (the policy rules included)."""
    from kit.engine.choice import Chooser
    from kit.engine.plans import EDGES, PERSONAS, Slice
    from kit.engine.prompts import Prompts
    from kit.engine.synthesize import Synthesizer
    from kit.llm import make_backend

    dom = load_domain("airline")
    synth = Synthesizer(dom, Chooser(make_backend("embedded"), temperature=0.0, seed=0), Prompts(), explore_steps=0)
    plan = PlanPair(id="p0", slice=Slice("change", ["send_certificate"], PERSONAS[0], EDGES[0]),
                    synthesis="The customer asks for compensation.", evaluation="The certificate is sent.")
    prop = synth.propose(plan, "r0-p0", 0, "syn-certificate", seed=2)
    assert prop.task is not None, prop.failure
    acts = prop.task.evaluation_criteria.actions
    assert [a.name for a in acts] == ["get_reservation_details", "get_user_details", "send_certificate"]
    rid = acts[0].arguments["reservation_id"]
    text = str(prop.task.user_scenario)
    assert "was cancelled" in text and rid in text, text
    assert executable_checks(dom, prop.task) == [], text


@pytest.mark.slow
def test_a_refusal_task_asks_for_a_forbidden_write_and_its_gold_leaves_the_database_as_it_was():
    """intent `refuse` with the real embedded model: the customer asks for a write the tool would run
    but a coded rule forbids (airline: a cancellation the policy does not allow; telecom: a payment
    request for a bill that is not overdue); the gold is the reads that check it, the task passes the
    executable checks, the gold dialogue ends in a refusal naming the reason, and rounds.csv counts it
    as a `refusal`, not a write."""
    from kit.engine.choice import Chooser
    from kit.engine.plans import EDGES, PERSONAS, PlanPair, Slice
    from kit.engine.prompts import Prompts
    from kit.engine.rounds import task_mix
    from kit.engine.synthesize import Synthesizer
    from kit.llm import make_backend
    from kit.replay import gold_final_text
    from kit.tags import task_notes

    llm = make_backend("embedded")
    for name, tool in (("airline", "cancel_reservation"), ("telecom", "send_payment_request")):
        dom = load_domain(name)
        assert ("refuse", [tool]) in tool_patterns(dom)
        synth = Synthesizer(dom, Chooser(llm, temperature=0.0, seed=0), Prompts(), explore_steps=0)
        plan = PlanPair(id="p0", slice=Slice("refuse", [tool], PERSONAS[0], EDGES[0]),
                        synthesis="The customer asks for something the policy forbids.", evaluation="The agent declines.")
        prop = synth.propose(plan, "r0-p0", 0, f"syn-{name}", seed=1)
        assert prop.task is not None, prop.failure
        task = prop.task
        acts = task.evaluation_criteria.actions
        assert acts and all(dom.tool_kind(a.name) == "read" for a in acts)
        assert task_notes(task)["refusal"] and task_notes(task)["shape"] == f"refuse:{tool}"
        assert executable_checks(dom, task) == []
        assert gold_final_text(task).startswith("I'm sorry, but I cannot do that: ")
        writes = frozenset(t for t in dom.tool_names("assistant") if dom.tool_kind(t) == "write")
        mix = task_mix([task], writes)
        assert mix.kinds == Counter({"refusal": 1}) and mix.write_share == 0.0


@pytest.mark.slow
def test_two_world_writes_are_for_one_customer_and_a_kept_flight_list_is_stated():
    """A two-write airline plan (book, then change flights) with the real embedded model: the second write
    is for the customer of the first (run 2026-12-03 had half its book>change tasks change another
    customer's booking); and a list argument whose values are in the database (the flights) is stated, not
    left to the agent as if a write had made it."""
    from kit.engine.choice import Chooser
    from kit.engine.plans import EDGES, PERSONAS, PlanPair, Slice
    from kit.engine.prompts import Prompts
    from kit.engine.synthesize import Synthesizer
    from kit.llm import make_backend

    dom = load_domain("airline")
    synth = Synthesizer(dom, Chooser(make_backend("embedded"), temperature=0.0, seed=0), Prompts(), explore_steps=0)
    plan = PlanPair(id="p0", slice=Slice("multi_change", ["book_reservation", "update_reservation_flights"],
                                         PERSONAS[0], EDGES[0]), synthesis="Book a trip, then change it.", evaluation="x")
    owners = 0
    for seed in range(3):
        prop = synth.propose(plan, "r0-p0", 0, f"syn-two-{seed}", seed=seed)
        if prop.task is None:
            continue
        acts = prop.task.evaluation_criteria.actions
        booked_for = acts[0].arguments["user_id"]
        env = dom.fork(prop.task)
        env.execute(acts[0].name, dict(acts[0].arguments), "assistant")
        changed = env.agent_db.reservations[acts[-1].arguments["reservation_id"]]
        assert changed.user_id == booked_for, (booked_for, changed.user_id)
        text = str(prop.task.user_scenario)
        assert "the new reservation flights" not in text
        for f in acts[-1].arguments["flights"]:
            assert f["flight_number"] in text, text
        owners += 1
        break  # one built task shows it (each proposal costs the embedded model's choices)
    assert owners >= 1
