"""Telecom device-fix tasks (kit/envs/arguments/device.py): the customer's phone is broken by tau2's
user-side initialization actions, the fix is the user's own device action (requestor "user") as the
agent guides them, tau2's env assertions check the symptom is gone.

On tau2's telecom domain, for every fault on every active line: tau2's evaluator scores the gold
dialogue 1 and scores it 0 once the user's fix is dropped; the scenario names the symptom, never a tool
or the cause; the gold dialogue asks for each device step in words and its SFT samples are grounded;
a device action's leak key carries its phone; the meta-planner gives device fixes their share and no
more; and (slow) a telecom engine run with the embedded model accepts device-fix tasks."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest

from kit.envs import load_domain
from kit.envs.arguments.device import (FAULTS, _lines, build, device_candidates, device_task, pattern,
                                      task_phones)
from kit.replay import gold_trajectory
from kit.verify import verify
from kit.verify.reference import tau2_verdict


@pytest.fixture(scope="module")
def telecom():
    return load_domain("telecom")


def _tasks(dom, lines=None):
    """One task per fault per active line (every line, or the first `lines` of them)."""
    pairs = list(_lines(dom.pristine_agent_db))[:lines]
    return [device_task(dom, build(f, c, line), f"dev-{f.name}-{line.line_id}", random.Random(i))
            for f in FAULTS["telecom"] for i, (c, line) in enumerate(pairs)]


def _without_fix(task):
    """The task whose gold lacks the user's fix (its last device write): what an agent that never asks for it does."""
    acts = task.evaluation_criteria.actions
    fix = max(i for i, a in enumerate(acts) if a.requestor == "user")
    crit = task.evaluation_criteria.model_copy(update={"actions": acts[:fix] + acts[fix + 1:]})
    return task.model_copy(update={"evaluation_criteria": crit})


def test_every_fault_on_every_line_scores_1_under_tau2_and_0_without_the_users_fix(telecom):
    tasks = _tasks(telecom)
    assert len(tasks) == len(FAULTS["telecom"]) * 7  # 7 active lines with data left in tau2's telecom db
    for task in tasks:
        from tau2.data_model.tasks import Task

        task = Task.model_validate(task.model_dump(mode="json"))  # as tau2 loads it from tasks.jsonl
        crit = task.evaluation_criteria
        assert any(a.requestor == "user" for a in crit.actions) and crit.env_assertions
        assert task.initial_state.initialization_actions[0].func_name == "set_user_info"
        gold = gold_trajectory(telecom, task)
        assert tau2_verdict("telecom", task, gold)["reward"] == 1.0, task.id
        assert verify(telecom, task, gold).reward == 1.0, task.id
        dropped = gold_trajectory(telecom, _without_fix(task))
        ref = tau2_verdict("telecom", task, dropped)
        assert ref["reward"] == 0.0 and ref["breakdown"]["ENV_ASSERTION"] == 0.0, (task.id, ref)
        assert verify(telecom, task, dropped).reward == 0.0, task.id


def test_a_gold_write_to_the_line_is_scored_as_tau2_replays_the_gold(telecom):
    """tau2's evaluator plays the gold actions without syncing the phone with its line; the kit's verifier
    does the same (Domain.gold_state(sync=False)). With a DB check, the roaming the agent enables never
    reaches tau2's gold phone, so tau2 scores even the gold 0 on DB: the kit must agree (it said 1 when it
    synced), and the device task with an agent write is scored on its env assertions alone."""
    barred = next(f for f in FAULTS["telecom"] if f.name == "roaming_off_line_barred")
    c, line = next(iter(_lines(telecom.pristine_agent_db)))
    task = device_task(telecom, build(barred, c, line), "dev-barred", random.Random(0))
    assert [b.value for b in task.evaluation_criteria.reward_basis] == ["ENV_ASSERTION"]
    from tau2.data_model.tasks import RewardType

    crit = task.evaluation_criteria.model_copy(update={"reward_basis": [RewardType.DB, RewardType.ENV_ASSERTION]})
    with_db = task.model_copy(update={"evaluation_criteria": crit})
    gold = gold_trajectory(telecom, with_db)
    ref, kit = tau2_verdict("telecom", with_db, gold), verify(telecom, with_db, gold)
    assert ref["breakdown"] == {"DB": 0.0, "ENV_ASSERTION": 1.0}
    assert kit.reward == ref["reward"] and kit.breakdown == ref["breakdown"]


def test_the_scenario_states_the_symptom_never_a_tool_or_the_cause(telecom):
    names = telecom.tool_names("assistant") + telecom.tool_names("user")
    causes = ("airplane", "sim card", "roaming", "data saver", "2g", "network mode", "mobile data setting")
    for task in _tasks(telecom, lines=2):
        instr = task.user_scenario.instructions
        text = str(task.user_scenario).lower()
        for n in names:
            assert n not in text and n.replace("_", " ") not in text, (task.id, n)
        for word in causes:
            assert word not in f"{instr.reason_for_call} {instr.known_info}".lower(), (task.id, word)
        init = task.initial_state.initialization_actions[0].arguments
        assert init["phone_number"] in instr.known_info and init["name"] in instr.known_info
        for a in task.evaluation_criteria.actions:  # the agent's ids are looked up, never said
            for k in ("customer_id", "line_id", "id"):
                if k in a.arguments:
                    assert a.arguments[k].lower() not in text, (task.id, a.arguments[k])


def test_the_gold_dialogue_asks_for_each_device_step_and_trains_grounded(telecom):
    """Each user call comes right after the agent's request for it and before the user's report of what the
    phone showed; the agent and user SFT samples of the gold dialogues all pass the grounding check; the
    scripted roles play the same steps through the rollout loop and tau2 scores them 1."""
    from transformers import AutoTokenizer

    from kit.grounding import grounded_only
    from kit.llm.embedded import ensure_embedded_model
    from kit.rollout import RolloutConfig, ScriptedAgent, ScriptedUser, run_episodes
    from kit.train.sft_data import gold_sft_samples

    tasks = _tasks(telecom, lines=1)
    for task in tasks:
        msgs = gold_trajectory(telecom, task).messages
        calls = [i for i, m in enumerate(msgs) if m.role == "user" and m.tool_calls]
        assert len(calls) == sum(a.requestor == "user" for a in task.evaluation_criteria.actions)
        for i in calls:
            ask, result, report = msgs[i - 1], msgs[i + 1], msgs[i + 2]
            assert ask.role == "assistant" and ask.content and not ask.tool_calls
            assert "_" not in ask.content.replace("4g_5g_preferred", "")  # words, not a tool name
            assert result.role == "tool" and report.role == "user" and report.content
        trajs = run_episodes(telecom, [task], ScriptedAgent(task), ScriptedUser(task), RolloutConfig(max_messages=40),
                             progress=False)
        assert tau2_verdict("telecom", task, trajs[0])["reward"] == 1.0, task.id
    tok = AutoTokenizer.from_pretrained(str(ensure_embedded_model()))
    agent, user = gold_sft_samples(telecom, tasks, tok)
    assert agent and user
    assert grounded_only(agent)[1] == [] and grounded_only(user)[1] == []


def test_a_device_action_is_keyed_with_its_phone(telecom):
    """tau2's telecom tasks all fix one phone (555-123-2002), and its `small` split holds single faults
    (data_mode_off: the whole gold is toggle_data()). Keyed by tool and arguments alone, a device fix on any
    customer's phone held that task's whole solution, so the leak check refused an evaluation on it, and the
    same fault on two phones was one solution (a duplicate when worded alike). Keyed with its phone, only a
    fix on that very phone overlaps."""
    from kit.engine.validate import Seen
    from kit.eval.leak import DEVICE_KEY, gold_action_keys, leak_report

    data_off = next(f for f in FAULTS["telecom"] if f.name == "mobile_data_off")
    by_phone = {line.phone_number: (c, line) for c, line in _lines(telecom.pristine_agent_db)}
    mine = [device_task(telecom, build(data_off, *by_phone[p]), f"dev-{p}", random.Random(0))
            for p in ("555-123-2004", "555-123-2005")]
    assert ("toggle_data", '{"' + DEVICE_KEY + '":"555-123-2004"}') in gold_action_keys(mine[0])
    small = telecom.tasks("small")
    keys = set().union(*(gold_action_keys(t) for t in mine))
    assert leak_report(small, keys)["n_overlap"] == 0
    same_phone = device_task(telecom, build(data_off, *by_phone["555-123-2002"]), "dev-2002", random.Random(0))
    overlap = leak_report(small, gold_action_keys(same_phone))["overlapping_task_ids"]
    assert overlap == ["[mobile_data_issue]data_mode_off[PERSONA:None]"]
    seen = Seen()
    assert seen.claim(mine[0]) is None and seen.claim(mine[1]) is None  # two customers, one wording: two tasks
    assert seen.claim(mine[0].model_copy(update={"id": "again"})) is not None


def test_no_device_task_goes_on_the_phone_the_evaluation_tasks_fix(telecom):
    """Every tau2 telecom task puts the same phone in the user's hand (555-123-2002). A fault fixed on that
    phone in training is a piece of some evaluation task's solution, so the engine draws its device tasks
    from the other customers' phones (the phones come from the tasks, not from a constant)."""
    from kit.engine.validate import evaluation_tasks

    avoid = task_phones(evaluation_tasks(telecom))
    assert avoid == {"555-123-2002"}
    db = telecom.pristine_agent_db
    assert "555-123-2002" in {line.phone_number for _, line in _lines(db)}  # it is a line a task could use
    for fault in FAULTS["telecom"]:
        for seed in range(5):
            cands = device_candidates("telecom", db, random.Random(seed), pattern(fault), limit=50,
                                      avoid_phones=avoid)
            assert cands and all(c.phone not in avoid for c in cands), fault.name


class _FirstOption:  # a fake model (this test is about the plan mix, not the model): always the first option
    caps = type("Caps", (), {"scores": True})()

    def score_options(self, messages, options):
        return [0.0] + [-50.0] * (len(options) - 1)

    def chat(self, messages, params=None):
        return [type("Completion", (), {"text": "plan text " + str(len(messages[-1]["content"])), "raw": ""})()]


def test_the_meta_planner_gives_device_fixes_their_share_and_the_reflector_no_more(telecom):
    from kit.engine.choice import Chooser
    from kit.engine.plans import meta_plan, tool_patterns
    from kit.engine.prompts import Prompts
    from kit.engine.reflect import reflect

    chooser = Chooser(_FirstOption(), temperature=0.0, seed=0)
    plans, _ = meta_plan(telecom, 8, chooser, Prompts(), max_similarity=1.0, device_fix_share=0.25)
    kinds = Counter(p.slice.intent for p in plans)
    assert kinds["device_fix"] == 2 and [p.slice.intent for p in plans[-2:]] == ["device_fix"] * 2
    writes = {t for t in telecom.tool_names("assistant") if telecom.tool_kind(t) == "write"}
    assert {t for p in plans for t in p.slice.tools} >= writes  # the writes under policy keep their plans
    none, _ = meta_plan(telecom, 8, chooser, Prompts(), max_similarity=1.0, device_fix_share=0.0)
    assert not any(p.slice.intent == "device_fix" for p in none)
    mock, _ = meta_plan(load_domain("mock"), 4, chooser, Prompts(), max_similarity=1.0, device_fix_share=0.5)
    assert not any(p.slice.intent == "device_fix" for p in mock)  # no device faults there
    # every plan failed and device fixes did best: switches stop at the share
    stats = {p.id: {"proposals": 2, "accepted": 0, "rejections": Counter({"gold_runs": 2}), "failures": Counter()}
             for p in plans}
    pattern_stats = {">".join(t): (2, 2) for i, t in tool_patterns(telecom) if i == "device_fix"}
    new = reflect(telecom, plans, stats, {}, chooser, Prompts(), 0, pattern_stats, device_fix_share=0.25)
    assert sum(p.slice.intent == "device_fix" for p in new) <= 2
    uncapped = reflect(telecom, none, stats, {}, Chooser(_LikesDevices(), temperature=0.0, seed=0), Prompts(), 0,
                       pattern_stats, device_fix_share=None)
    assert sum(p.slice.intent == "device_fix" for p in uncapped) > 2  # the cap is what holds it


class _LikesDevices(_FirstOption):  # a fake model: picks a switch to a device fix when offered
    def score_options(self, messages, options):
        from kit.envs.arguments.device import device_patterns

        fixes = {t[-1] for t in device_patterns("telecom")}
        return [0.0 if any(f in o for f in fixes) else -50.0 for o in options]


def test_rounds_count_a_task_with_a_users_device_action_as_a_device_fix(telecom):
    from kit.engine.rounds import task_mix

    writes = frozenset(t for t in telecom.tool_names("assistant") if telecom.tool_kind(t) == "write")
    tasks = _tasks(telecom, lines=1)
    mix = task_mix([t.model_dump(mode="json") for t in tasks] + tasks, writes)
    assert mix.kinds == Counter({"device_fix": 2 * len(tasks)}) and mix.write_share == 1.0
    assert mix.tools["toggle_airplane_mode"] == 2 and mix.tools["enable_roaming"] == 2


@pytest.mark.slow
def test_a_telecom_engine_run_accepts_device_fix_tasks_that_tau2_scores_1(tmp_path):
    """The engine with the embedded model on telecom, its one plan a device fix (the plan mix is the test above;
    each telecom plan costs minutes on 2 shared cores): at least one device-fix task accepted, rounds.csv and
    `kit audit` count it, tau2 scores every accepted gold 1."""
    from kit.engine import EngineConfig, run_engine
    from kit.engine.audit import audit_run
    from kit.engine.store import read_jsonl

    out = tmp_path / "telecom"
    cfg = EngineConfig(domain="telecom", out_dir=str(out), rounds=1, num_plans=1, tasks_per_plan=2, group_size=0,
                       llm_judge=False, explore_steps=0, wandb=False, seed=0, device_fix_share=1.0)
    res = run_engine(cfg, progress=False)
    rows = res.rounds
    assert "device_fix:" in rows[0]["kinds"], rows[0]
    rep = audit_run(Path(out))
    assert rep["kinds"].get("device_fix", 0) >= 1 and rep["device_actions"], rep
    assert rep["gold_reward_1"] == rep["tasks"] == res.accepted, rep["problems"]
    device = [t for t in read_jsonl(out / "tasks.jsonl")
              if any(a["requestor"] == "user" for a in t["evaluation_criteria"]["actions"])]
    assert device and all(t["evaluation_criteria"]["env_assertions"] for t in device)
