"""kit/eval/behaviour.py on real held-out mock tasks: gold replays, a made-up id and a one-script agent."""

from __future__ import annotations

import pytest

from kit.envs import load_domain
from kit.eval.behaviour import NO_CALL, arm_profile, changed_tasks, episode_profile
from kit.replay import gold_actions, gold_trajectory, trajectory_from_actions
from kit.trajectory import ToolCall


@pytest.fixture(scope="module")
def dom():
    return load_domain("mock")


@pytest.fixture(scope="module")
def tasks(dom):
    ts = dom.tasks("heldout_test")
    by_shape: dict = {}
    for t in ts:
        if t.evaluation_criteria and any(dom.is_write_tool(a.name) for a in t.evaluation_criteria.actions or []):
            by_shape.setdefault(t.description.notes, t)
    return {t.id: t for t in list(by_shape.values())[:6]}


def _made_up(dom, task):
    """The gold calls with every write's ids replaced by one nobody mentioned."""
    calls = []
    for c in gold_actions(task):
        args = dict(c.arguments)
        if dom.is_write_tool(c.name):
            args = {k: ("task_999" if k.endswith("_id") else v) for k, v in args.items()}
        calls.append(ToolCall(id=c.id, name=c.name, arguments=args, requestor=c.requestor))
    return trajectory_from_actions(dom, task, calls)


def test_gold_replay_is_right_exact_and_grounded(dom, tasks):
    for task in tasks.values():
        p = episode_profile(dom, task, gold_trajectory(dom, task))
        names = [a.name for a in task.evaluation_criteria.actions]
        assert p["script"] == " > ".join(names)
        assert p["wrote"] and p["right_write"] and p["exact_write"], (task.id, p)
        assert p["grounded"] is True, (task.id, p)


def test_a_made_up_id_is_neither_exact_nor_grounded(dom, tasks):
    hit = 0
    for task in tasks.values():
        gold = gold_actions(task)
        if not any(dom.is_write_tool(c.name) and any(k.endswith("_id") for k in c.arguments) for c in gold):
            continue
        p = episode_profile(dom, task, _made_up(dom, task))
        assert p["right_write"] is True  # the right tool ...
        assert p["exact_write"] is False and p["grounded"] is False, (task.id, p)  # ... with an id made up
        hit += 1
    assert hit >= 1  # the fixture holds at least one task whose write takes an id


def test_no_call_episode(dom, tasks):
    task = next(iter(tasks.values()))
    p = episode_profile(dom, task, trajectory_from_actions(dom, task, [], final_text="Done."))
    assert p == {"script": NO_CALL, "calls": 0, "wrote": False, "right_write": False, "exact_write": False,
                 "grounded": None, "tool_errors": 0}


def test_arm_profile_and_changed_tasks(dom, tasks):
    ids = sorted(tasks)
    gold = {(t, 0): gold_trajectory(dom, tasks[t]) for t in ids}
    script = {(t, 0): trajectory_from_actions(dom, tasks[t], [ToolCall(id="c1", name="get_users", arguments={})],
                                             final_text="Your request has been handled.") for t in ids}
    rg = {k: 1.0 for k in gold}
    rs = {k: 0.0 for k in script}
    rs[(ids[0], 0)] = 1.0  # one task both arms pass: not a change
    pa, pb = arm_profile(dom, tasks, script, rs), arm_profile(dom, tasks, gold, rg)
    assert pa["script share"] == 1.0 and pa["distinct scripts"] == 1 and pa["most common script"] == "get_users"
    assert pa["wrote"] == 0.0 and pa["right write tool"] == 0.0 and pa["writes grounded"] is None
    assert pa["pass"] == round(1 / len(ids), 3) and pb["pass"] == 1.0
    assert pb["wrote"] == 1.0 and pb["exact write"] == 1.0 and pb["writes grounded"] == 1.0
    table = changed_tasks(dom, tasks, (script, rs), (gold, rg))
    assert list(table["task"]) == ids[1:]  # every task but the one both pass, by task id at equal change
    assert (table["A pass"] == 0.0).all() and (table["B pass"] == 1.0).all()
    assert (table["A calls"] == "get_users").all()
    assert table["B calls"].str.contains(">|create_task|update_task_status", regex=True).all()


def test_report_section_reads_each_arms_episodes(tmp_path, dom):
    """The report's "What changed" section on a run folder written by the kit's writers (tests/_fake_run.py)
    with real trajectories: A plays one script (get_users, then claims success), B replays the gold."""
    from _fake_run import fake_eval_run

    from kit.report.paired import changes_section
    from kit.report.run_data import collect

    heldout = {t.id: t for t in dom.tasks("heldout")}
    ids = [f"heldout-{i:03d}" for i in range(6)]
    run = fake_eval_run(tmp_path, "changes", [("eval_sft", "SFT agent", {t: [0.0] for t in ids}, "u"),
                                              ("eval_rl", "RL", {t: [1.0] for t in ids}, "u")])
    for sid, make in (("eval_sft", lambda t: trajectory_from_actions(
            dom, t, [ToolCall(id="c1", name="get_users", arguments={})], final_text="Your request has been handled.")),
                      ("eval_rl", lambda t: gold_trajectory(dom, t))):
        with open(run / sid / "trajectories.jsonl", "w", encoding="utf-8") as f:
            for t in ids:
                traj = make(heldout[t])
                traj.trial = 0
                f.write(traj.model_dump_json() + "\n")
    sec = changes_section(collect(run))
    tables = [v for kind, v in sec.items if kind == "table"]
    prof, moved = tables
    assert list(prof["arm"]) == ["A: SFT agent", "B: RL"]
    assert list(prof["script share"]) == [1.0, prof["script share"][1]] and prof["script share"][1] < 1.0
    assert list(prof["pass"]) == [0.0, 1.0] and list(prof["wrote"]) == [0.0, 1.0]
    assert list(moved["task"]) == ids and (moved["A calls"] == "get_users").all()


def test_report_section_is_absent_without_trajectories(tmp_path):
    from _fake_run import fake_eval_run

    from kit.report.paired import changes_section
    from kit.report.run_data import collect

    run = fake_eval_run(tmp_path, "none", [("a", "SFT", {"heldout-000": [1.0]}, "u"), ("b", "RL", {"heldout-000": [0.0]}, "u")])
    assert changes_section(collect(run)) is None
