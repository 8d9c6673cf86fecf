"""Checkers: criteria + code, mutation testing, failure attribution on known causes."""

from kit.checkers.attribution import attribute
from kit.checkers.checker import CheckedTask, run_checker, state_view
from kit.checkers.mutation import mutation_test
from kit.envs import load_domain
from kit.mutate import mutants
from kit.replay import gold_trajectory, trajectory_from_actions
from kit.trajectory import Message, ToolCall, Trajectory


def _first_user_action_task(dom):
    return next(t for t in dom.tasks() if t.evaluation_criteria.actions)


def test_criteria_checker_mutation_report_on_a_retail_task():
    dom = load_domain("retail")
    rec = CheckedTask(task=dom.tasks()[0])
    rep = mutation_test(dom, rec)
    assert rep.gold_passed and rep.made >= 5 and rep.must_reject >= 3
    assert rep.accepted and rep.slipped == []
    kinds = {r.kind for r in rep.results if r.must_reject}
    assert {"dropped_write", "wrong_argument"} <= kinds


def test_attribution_task_defect_when_the_gold_cannot_reach_reward_1():
    dom = load_domain("mock")
    task = dom.task("update_task_with_history_and_env_assertions")
    att = attribute(dom, task, gold_trajectory(dom, task))
    assert (att.label, att.rule, att.decided_by) == ("task", "gold_unreachable", "rule")


def test_attribution_agent_writes_the_wrong_record():
    dom = load_domain("retail")
    task = dom.tasks()[0]
    wrong = next(m for m in mutants(dom, task) if m.kind == "wrong_record")
    att = attribute(dom, task, wrong.trajectory)
    assert (att.label, att.rule) == ("agent", "wrong_write")
    assert wrong.trajectory.messages[att.turn].tool_calls


def test_attribution_user_invents_a_fact_before_the_agent_errs():
    dom = load_domain("retail")
    task = dom.tasks()[0]
    traj = trajectory_from_actions(dom, task, [], None, "agent_stop")
    traj.messages.insert(1, Message(role="user", content="My order id is #W0000000 and my zip is 99999."))
    att = attribute(dom, task, traj)
    assert att.label == "user" and att.rule == "unsupported_fact" and att.turn == 1


def test_attribution_user_stops_before_the_goal():
    dom = load_domain("mock")
    task = _first_user_action_task(dom)
    traj = Trajectory(task_id=task.id, termination_reason="user_stop", meta={"stop_signal": "stop"}, messages=[
        Message(role="assistant", content="Hi! How can I help you today?"),
        Message(role="user", content="Never mind. ###STOP###")])
    att = attribute(dom, task, traj)
    assert (att.label, att.rule) == ("user", "premature_stop")


def test_a_user_who_stops_after_the_agent_said_it_was_done_is_not_blamed():
    """The shape of 88 of laptop-repro's 120 held-out SFT-agent episodes: the agent looks the user up,
    tells them the request is handled without writing anything, the user thanks it and stops. The
    failure is the agent's (it never made the write), not a user deviation."""
    from kit.rollout.fidelity import claims_done, user_deviations

    dom = load_domain("mock")
    task = next(t for t in dom.tasks() if any(a.name == "create_task" for a in t.evaluation_criteria.actions or []))
    user_id = next(a.arguments["user_id"] for a in task.evaluation_criteria.actions if a.name == "create_task")
    lookup = ToolCall(id="c0", name="get_users", arguments={})
    traj = trajectory_from_actions(dom, task, [lookup], "Your request has been handled. Is there anything else?",
                                   "user_stop", opening=f"Please create the task for {user_id}.",
                                   closing="Thank you, that's all I needed. ###STOP###")
    traj.meta["stop_signal"] = "stop"
    assert [d.kind for d in user_deviations(task, traj, goal_reached=False)] == []
    att = attribute(dom, task, traj)
    assert (att.label, att.rule) == ("agent", "missing_action") and "told the user the request was done" in att.evidence
    assert traj.messages[att.turn].content.startswith("Your request has been handled")
    # the same stop after a question, or after an unhelpful answer, is still the user's
    for said in ("Can you please specify the task id you're referring to?",
                 "I'm not familiar with the specific task you're referring to."):
        traj.messages[-2] = Message(role="assistant", content=said)
        assert [d.kind for d in user_deviations(task, traj, goal_reached=False)] == ["premature_stop"]
        assert (attribute(dom, task, traj).label, attribute(dom, task, traj).rule) == ("user", "premature_stop")
    for done in ("Your request has been handled.", "I've created the task 'Report' for user_1.",
                 "Task task_1 is now marked as completed.", "You're all set!", "The task was created successfully."):
        assert claims_done(done), done
    for not_done in ("Do you want task_1 marked as completed?", "Which task should I update?", "Hi! How can I help you today?",
                     "I can create the task once you give me the title."):
        assert not claims_done(not_done), not_done


def test_a_gold_action_called_with_arguments_missing_is_the_agents_failed_call_or_missing_argument():
    """From laptop-repro's episodes: create_task without its title matches the gold action by tau2's rule (the
    call's own arguments agree), the tool answers with an error, nothing changes; no rule fired before."""
    dom = load_domain("mock")
    task = next(t for t in dom.tasks() if any(a.name == "create_task" for a in t.evaluation_criteria.actions or []))
    gold = next(a for a in task.evaluation_criteria.actions if a.name == "create_task")
    call = ToolCall(id="c1", name="create_task", arguments={"user_id": gold.arguments["user_id"]})
    traj = trajectory_from_actions(dom, task, [call], "Your request has been handled.", "agent_stop")
    assert traj.messages[-2].error  # executed for real: title is required
    att = attribute(dom, task, traj)
    assert (att.label, att.rule) == ("agent", "failed_call") and "title" in att.evidence
    assert traj.messages[att.turn].tool_calls[0].id == "c1"
    # made, but without an argument the gold call has: the state differs, and it is said which
    full = dict(gold.arguments)
    left_out = next(k for k in full if k != "user_id" and k != "title") if len(full) > 2 else None
    if left_out is None:  # a gold create_task with only user_id and title: give it a description to leave out
        full["description"] = "Bring the slides"
        left_out = "description"
        task = task.model_copy(deep=True)
        next(a for a in task.evaluation_criteria.actions if a.name == "create_task").arguments.update(full)
    call = ToolCall(id="c2", name="create_task", arguments={k: v for k, v in full.items() if k != left_out})
    traj = trajectory_from_actions(dom, task, [call], "Your request has been handled.", "agent_stop")
    assert not traj.messages[-2].error
    att = attribute(dom, task, traj)
    assert (att.label, att.rule) == ("agent", "missing_argument") and left_out in att.evidence


def test_attribution_agent_never_makes_a_required_action():
    dom = load_domain("airline")
    task = next(t for t in dom.tasks() if t.evaluation_criteria.actions)
    traj = trajectory_from_actions(dom, task, [], "Sorry, I cannot help.", "agent_stop")
    att = attribute(dom, task, traj)
    assert att.label == "agent" and att.rule in {"missing_action", "missing_info"}


def test_state_view_holds_touched_records_and_changes():
    dom = load_domain("retail")
    task = dom.tasks()[0]
    gold = gold_trajectory(dom, task)
    final = dom.fork(task, history=gold.messages)
    view = state_view(final, dom.gold_state(task))
    assert view["changed"] and all(c[0] in ("agent", "user") for c in view["changed"])
    side, table, key, fields = view["changed"][0]
    assert key in view[side][table] and fields and set(fields) <= set(view[side][table][key])
    assert run_checker(dom, CheckedTask(task=task), gold).reward == 1.0


def test_sandboxed_state_code_closes_the_gap_the_criteria_leave_open():
    """Telecom tasks reward only env assertions: a stray write that keeps them true slips
    past the criteria. The gold-state code checker (run in the sandbox) rejects it."""
    from kit.checkers.checker import Checker
    from kit.checkers.codegen import state_checker_source

    dom = load_domain("telecom")
    task = next(t for t in dom.tasks()[:12] if mutation_test(dom, CheckedTask(task=t)).slipped)
    plain = mutation_test(dom, CheckedTask(task=task))
    coded = mutation_test(dom, CheckedTask(task=task, checker=Checker(code=state_checker_source(dom, task))))
    assert plain.slipped and all("state_differs" in s.why for s in plain.slipped)
    assert coded.gold_passed and coded.slipped == [] and coded.accepted


def test_attribution_user_rules_beyond_the_deviations():
    """The user rules attribution adds to kit/rollout/fidelity.py's deviations (kit/checkers/attribution.py):
    a tool the user was not given, a call ended before the agent could act, a request that never came up."""
    dom = load_domain("mock")
    task = dom.task("create_task_1")  # gold: create_task(user_1, Important Meeting); mock's user has no tools
    hi = Message(role="assistant", content="Hi! How can I help you today?")
    # the user hands the call over before the agent made any tool call: early_end (premature_stop is for ###STOP###)
    traj = Trajectory(task_id=task.id, termination_reason="user_stop", meta={"stop_signal": "transfer"},
                      messages=[hi, Message(role="user", content="Get me a human. ###TRANSFER###")])
    assert (attribute(dom, task, traj).label, attribute(dom, task, traj).rule) == ("user", "early_end")
    # ... not once the agent said it was done (it claimed what it had not done)
    traj.messages.insert(1, Message(role="user", content="Create 'Important Meeting' for user_1."))
    traj.messages.insert(2, Message(role="assistant", content="I've created the task."))
    assert attribute(dom, task, traj).label == "agent"
    # a tool call of a tool the user does not have
    call = ToolCall(id="u0", name="create_task", arguments={"user_id": "user_1", "title": "x"}, requestor="user")
    traj = Trajectory(task_id=task.id, termination_reason="agent_stop", messages=[
        hi, Message(role="user", tool_calls=[call]),
        Message(role="tool", content="Error", tool_call_id="u0", requestor="user", error=True)])
    assert (attribute(dom, task, traj).label, attribute(dom, task, traj).rule) == ("user", "ungiven_tool")
    # asked, the user never says what it wants and the dialogue runs out: request_not_stated
    talk = [hi, Message(role="user", content="Hi, I need some help."),
            Message(role="assistant", content="Sure, what should I do?"), Message(role="user", content="Work stuff."),
            Message(role="assistant", content="Which task, and for whom?")]
    traj = Trajectory(task_id=task.id, termination_reason="max_steps", messages=list(talk))
    att = attribute(dom, task, traj)
    assert (att.label, att.rule) == ("user", "request_not_stated") and "user_1" in att.evidence
    # not when the agent ended it, nor when the agent guessed a write (its own wrong_write), nor once the values
    # came up (here the agent found them in a tool result: it could act)
    assert attribute(dom, task, traj.model_copy(update={"termination_reason": "agent_stop"})).label == "agent"
    guess = ToolCall(id="c0", name="create_task", arguments={"user_id": "user_2", "title": "Work"})
    traj = Trajectory(task_id=task.id, termination_reason="max_steps", messages=talk[:4] + [
        Message(role="assistant", tool_calls=[guess]), Message(role="tool", content="{}", tool_call_id="c0")])
    assert attribute(dom, task, traj).rule == "wrong_write"
    traj = Trajectory(task_id=task.id, termination_reason="max_steps", messages=talk + [
        Message(role="tool", content="user_1 has a pending 'Important Meeting' draft")])
    assert attribute(dom, task, traj).label == "agent"
