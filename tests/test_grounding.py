"""The grounding check and the fidelity gate (kit/grounding.py) on hand-written good and bad
samples, and the grounded gold dialogues built from a task's request (kit/rollout/request.py)."""

import json

import pytest

from kit.envs import load_domain
from kit.grounding import agent_turn_problems, grounded_only, text_problems, user_turn_problems
from kit.replay import gold_trajectory
from kit.rollout.request import CLOSING, task_request
from kit.rollout.views import agent_view

SYSTEM = "You are a customer service agent. Policy: tasks have titles."


def _call(name, **args):
    return {"id": "c0", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def test_agent_call_with_values_from_the_request_is_grounded():
    msgs = [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": "Hi! Please create a task titled 'Buy milk' for user_7."},
            {"role": "assistant", "content": "", "tool_calls": [_call("create_task", user_id="user_7", title="Buy milk")]}]
    assert agent_turn_problems(msgs) == []


def test_agent_call_with_invented_values_is_not():
    # the first build's gold dialogues: a fixed opening line, then arguments nobody gave
    msgs = [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": "Hi, I need some help."},
            {"role": "assistant", "content": "", "tool_calls": [_call("update_task_status", task_id="task_1",
                                                                      status="completed")]}]
    problems = agent_turn_problems(msgs)
    assert len(problems) == 2 and "task_id='task_1'" in problems[0] and "status='completed'" in problems[1]


def test_values_from_tool_results_ground_later_calls():
    msgs = [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": "Create a task 'Pay rent' for user_3, then mark it completed."},
            {"role": "assistant", "content": "", "tool_calls": [_call("create_task", user_id="user_3", title="Pay rent")]},
            {"role": "tool", "tool_call_id": "c0", "content": '{"task_id": "task_9", "status": "pending"}'},
            {"role": "assistant", "content": "", "tool_calls": [_call("update_task_status", task_id="task_9",
                                                                      status="completed")]}]
    assert agent_turn_problems(msgs) == []
    msgs[3]["content"] = '{"task_id": "task_8"}'  # the result named another id: task_9 is now invented
    assert agent_turn_problems(msgs) == ["ungrounded argument update_task_status.task_id='task_9'"]


def test_transfer_summary_is_the_agents_own_words():
    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Delete all my tasks."},
            {"role": "assistant", "content": "", "tool_calls": [_call("transfer_to_human_agents",
                                                                      summary="User wants tasks deleted")]}]
    assert agent_turn_problems(msgs) == []


def test_user_turns_keep_to_their_scenario():
    system = "<scenario>You want to create a task titled 'Buy milk'. Your user id is user_7.</scenario>"
    view = [{"role": "system", "content": system}, {"role": "user", "content": "Hi! How can I help you today?"}]
    good = view + [{"role": "assistant", "content": "Hello, please create a task 'Buy milk' for user_7."}]
    stop = view + [{"role": "assistant", "content": CLOSING}]
    invented = view + [{"role": "assistant", "content": "Please create it for user_42, order #W2378156."}]
    flipped = view + [{"role": "assistant", "content": "Hello! I'd like to help with something you're doing."}]
    assert user_turn_problems(good) == [] and user_turn_problems(stop) == []
    assert user_turn_problems(invented) == ["invents user_42, #W2378156"]
    assert user_turn_problems(flipped)[0].startswith("assistant-speak")


def test_fidelity_gate_on_engine_text():
    # accepted by the first build's validator and judge (issue 17): meta-text and assistant-speak
    bad_reason = ('To be extremely transparent, I have created a custom action "update_task_status()" that '
                  "allows you to request a random sample of the original request in a single message.")
    problems = text_problems(bad_reason, (), known="")
    assert any(p.startswith("assistant-speak") for p in problems) and any(p.startswith("meta-text") for p in problems)
    assert text_problems("You know, I'd like to assist you in achieving your goal.")[0].startswith("assistant-speak")
    assert text_problems("You want to mark task_3 as done.", ["task_3", "completed"], known="task_3") == \
        ["misses 'completed'"]
    assert text_problems("Your user id is user_9.", ["user_9"], known="user_7") == ["invents user_9"]
    good = "You want a new task titled 'Buy milk'; your user id is user_7."
    assert text_problems(good, ["Buy milk", "user_7"], known="user_7 Buy milk") == []


@pytest.mark.parametrize("task_id", ["create_task_1", "update_task_1", "update_task_with_initialization_data"])
def test_gold_dialogue_opens_with_the_request_and_is_grounded(task_id):
    dom = load_domain("mock")
    task = dom.task(task_id)
    traj = gold_trajectory(dom, task)
    first_user = next(m for m in traj.messages if m.role == "user")
    for value in task_request(dom, task).values():
        assert str(value).lower() in first_user.content.lower()
    assert traj.messages[-1].role == "user" and "###STOP###" in traj.messages[-1].content
    # every agent turn with calls is grounded in what came before it
    for i, m in enumerate(traj.messages):
        if m.role == "assistant" and m.tool_calls:
            assert agent_turn_problems(agent_view(traj.messages[: i + 1], SYSTEM)) == []


def test_request_leaves_ids_made_by_earlier_calls_to_the_agent():
    dom = load_domain("mock")
    task = next(t for t in dom.tasks("heldout") if len(t.evaluation_criteria.actions) == 2)
    req = task_request(dom, task)
    create, update = req.steps
    new_id = task.evaluation_criteria.actions[1].arguments["task_id"]
    assert new_id not in req.values() and update.from_results == ["task_id"]
    assert "the new task" in req.text() and create.stated["title"] in req.opening()


def test_grounded_only_counts_what_it_drops():
    ok = {"role": "agent", "messages": [{"role": "system", "content": "x"}, {"role": "user", "content": "task_5 please"},
                                        {"role": "assistant", "tool_calls": [_call("get", task_id="task_5")]}]}
    bad = {"role": "agent", "messages": [{"role": "system", "content": "x"}, {"role": "user", "content": "hi"},
                                         {"role": "assistant", "tool_calls": [_call("get", task_id="task_5")]}]}
    kept, dropped = grounded_only([ok, bad, ok])
    assert kept == [ok, ok] and len(dropped) == 1 and dropped[0][0] is bad


def test_scenario_fields_are_addressed_to_the_customer():
    # seen in an engine run: a known_info that passed a facts-only gate
    junk = "I'm ready to assist you with any task. What's your request?"
    assert text_problems(junk, second_person=True)
    assert text_problems("You want to mark note_164 as completed.", ["note_164"], "note_164", second_person=True) == []
    assert text_problems("My user id is user_9.", [], "user_9", second_person=True) == [
        "not addressed to the customer: My"]
    # seen in an engine run, passed the first gate: third-person prose about "the customer", meta-text
    assert text_problems("Hello, this customer requested a random sample of the original request.", second_person=True)
    assert text_problems("a busy professional writing a new service promise is a classic case", second_person=True) == [
        "not addressed to the customer: no 'you'"]
    assert text_problems("In the prompt you provided, the customer asked")  # a free-text value
    assert text_problems("You know that the user id is user_1.", [], "user_1", second_person=True) == []


def test_gold_opening_restates_the_scenario_in_the_first_person():
    """The user SFT target for the first turn is the scenario said by the customer: for every held-out
    task (wordings the engine never writes) it names every value the gold writes need."""
    from kit.rollout.fidelity import _norm_value, required_user_values
    from kit.rollout.request import scenario_opening

    dom = load_domain("mock")
    tasks = dom.tasks("heldout")
    for task in tasks:
        opening = scenario_opening(dom, task, seed="gold")
        assert all(v in _norm_value(opening) for v in required_user_values(task, domain=dom)), opening
        assert " you " not in f" {opening.lower()} " and "your " not in opening.lower()
    reopen = next(t for t in tasks if "by mistake" in t.user_scenario.instructions.reason_for_call)
    assert "I marked '" in scenario_opening(dom, reopen, seed="gold")


def test_a_model_talking_about_itself_in_the_second_person_is_assistant_speak():
    """The retail engine run of 2026-12-03 accepted the known info "You're an AI assistant for text
    re-writing. Rewrite the input text so that it's more friendly and approachable." (the fidelity gate
    read it as addressed to the customer); the user SFT check then dropped the sample. The gate catches it."""
    from kit.grounding import text_problems

    text = "You're an AI assistant for text re-writing. Rewrite the input text so that it's more friendly."
    assert any(p.startswith("assistant-speak") for p in text_problems(text, (), "", second_person=True))
    assert not text_problems("You want your order shipped to your new address.", (), "", second_person=True)
