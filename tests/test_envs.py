"""Episode environments over the real τ² domains: forks, tool calls, bad input, state."""

import json

import pytest

from kit import _tau2
from kit.envs import load_domain
from kit.replay import gold_trajectory
from kit.verify import verify


@pytest.fixture(scope="module")
def airline():
    return load_domain("airline")


def _tau2_env_after(domain_name, calls):
    env = _tau2.registry.get_env_constructor(domain_name)()
    for name, args, requestor in calls:
        try:
            env.make_tool_call(name, requestor=requestor, **args)
            env.sync_tools()
        except Exception:
            pass
    return env


def test_all_four_domains_load_with_tools_and_tasks():
    counts = {}
    for name in ["mock", "airline", "retail", "telecom"]:
        dom = load_domain(name)
        counts[name] = len(dom.tasks())
        assert dom.tool_schemas("assistant"), name
        assert dom.policy
    assert counts == {"mock": 9, "airline": 50, "retail": 114, "telecom": 114}
    assert len(load_domain("telecom").tool_names("user")) > 10  # the user's device tools


def test_read_then_write_changes_only_the_touched_records(airline):
    env = airline.fork()
    obs = env.call_tool("get_reservation_details", {"reservation_id": "4WQ150"})
    assert not obs.error and json.loads(obs.content)["reservation_id"] == "4WQ150"
    assert env.diff() == []
    obs = env.call_tool("cancel_reservation", {"reservation_id": "4WQ150"})
    assert not obs.error, obs.content
    changes = env.diff()
    assert [(c.table, c.key, c.op) for c in changes] == [("reservations", "4WQ150", "changed")]
    assert changes[0].fields_changed()["status"] == (None, "cancelled")


def test_forks_are_isolated_and_pristine_state_never_changes(airline):
    a, b = airline.fork(), airline.fork()
    a.call_tool("cancel_reservation", {"reservation_id": "4WQ150"})
    assert b.diff() == [] and airline.fork().diff() == []
    assert airline.pristine_agent_db.reservations["4WQ150"].status is None
    assert not a.same_state(b)


def test_kit_state_hash_equals_tau2_hash_after_the_same_calls():
    calls = [("cancel_reservation", {"reservation_id": "4WQ150"}, "assistant"),
             ("get_user_details", {"user_id": "mia_li_3668"}, "assistant")]
    dom = load_domain("airline")
    env = dom.fork()
    for name, args, req in calls:
        env.call_tool(name, args, req)
    ref = _tau2_env_after("airline", calls)
    assert env.agent_db_hash() == ref.get_db_hash()
    assert env.agent_db_hash() != dom.fork().agent_db_hash()


def test_an_episode_offers_its_databases_and_a_write_shows_there_only():
    """EpisodeEnv.agent_db / user_db / dbs(): what callers read, on the real mock domain."""
    dom = load_domain("mock")
    env, other = dom.fork(), dom.fork()
    before = set(env.agent_db.tasks)
    obs = env.call_tool("create_task", {"user_id": "user_1", "title": "Buy milk"})
    assert not obs.error, obs.content
    (new_id,) = set(env.agent_db.tasks) - before
    assert env.agent_db.tasks[new_id].title == "Buy milk"
    assert new_id in env.agent_db.users["user_1"].tasks
    assert set(other.agent_db.tasks) == before and set(dom.pristine_db("agent").tasks) == before  # forks isolated
    assert env.user_db is None and env.dbs() == [("agent", env.agent_db)]  # mock's user has no tools
    assert {(c.side, c.table) for c in env.diff()} == {("agent", "tasks"), ("agent", "users")}


def test_telecom_user_device_tools_change_the_user_side():
    dom = load_domain("telecom")
    task = dom.tasks()[0]
    env = dom.fork(task)
    before = env.user_db_hash()
    obs = env.call_tool("toggle_airplane_mode", {}, requestor="user")
    assert not obs.error, obs.content
    assert env.user_db_hash() != before
    changed = [c for c in env.diff() if c.side == "user"]
    assert changed and [side for side, _ in env.dbs()] == ["agent", "user"]
    assert all(c.table in type(env.user_db).model_fields for c in changed)  # the user side's database
    # the agent cannot call the user's tools
    obs = env.call_tool("toggle_airplane_mode", {}, requestor="assistant")
    assert obs.error and obs.error_kind == "unknown_tool"


@pytest.mark.parametrize(
    "name,args,kind",
    [
        ("no_such_tool", {}, "unknown_tool"),
        ("cancel_reservation", {"reservation": "4WQ150"}, "bad_arguments"),  # wrong name
        ("cancel_reservation", {}, "bad_arguments"),  # missing argument
        ("cancel_reservation", {"reservation_id": ["4WQ150"]}, "bad_arguments"),  # wrong type
        ("cancel_reservation", '{"reservation_id": "4WQ150"', "malformed_arguments"),  # broken JSON
        ("cancel_reservation", "[1, 2]", "malformed_arguments"),  # JSON, not an object
    ],
)
def test_bad_tool_calls_give_error_observations_and_leave_state_unchanged(airline, name, args, kind):
    env = airline.fork()
    before = env.agent_db_hash()
    obs = env.call_tool(name, args)
    assert obs.error and obs.error_kind == kind
    assert obs.content.startswith("Error:")
    assert env.agent_db_hash() == before and env.diff() == []
    assert env.errors == [obs]


def test_a_refused_tool_call_is_an_error_observation_not_an_exception(airline):
    env = airline.fork()
    obs = env.call_tool("get_reservation_details", {"reservation_id": "NOPE00"})
    assert obs.error and obs.error_kind == "tool_error" and "not found" in obs.content.lower()


def test_fork_applies_initial_state_like_tau2():
    """Telecom tasks set the device up with initialization actions; mock has history + data."""
    for dname in ["telecom", "mock"]:
        dom = load_domain(dname)
        for task in dom.tasks()[:10]:
            env = dom.fork(task)
            ref = _tau2.registry.get_env_constructor(dname)()
            st = task.initial_state
            if st is not None:
                ref.set_state(st.initialization_data, st.initialization_actions, st.message_history or [])
            assert env.agent_db_hash() == ref.get_db_hash(), task.id
            assert env.user_db_hash() == ref.get_user_db_hash(), task.id


def test_custom_domain_registers_forks_and_verifies():
    from kit.envs.library import register
    from kit.mutate import mutants

    register()
    dom = load_domain("library")
    env = dom.fork(dom.task("borrow_dune"))
    obs = env.call_tool("lend_book", {"member_id": "m1", "book_id": "b1"})
    assert not obs.error
    assert {(c.table, c.key) for c in env.diff()} == {("members", "m1"), ("books", "b1")}
    refused = env.call_tool("lend_book", {"member_id": "m2", "book_id": "b3"})
    assert refused.error and "fines" in refused.content
    for task in dom.tasks():
        assert verify(dom, task, gold_trajectory(dom, task)).reward == 1.0
        rewards = [verify(dom, task, m.trajectory).reward for m in mutants(dom, task)]
        assert rewards.count(0.0) >= 5, rewards


def test_airline_policy_rules_live_with_the_airline_domain(airline):
    from tau2.data_model.tasks import Action, EvaluationCriteria, Task, UserScenario

    from kit.envs.rules import BUILTIN_RULES

    assert airline.policy_rules == BUILTIN_RULES["airline"] and load_domain("mock").policy_rules == ()
    cancel = Task(id="cancel", user_scenario=UserScenario(instructions="cancel my trip"),
                  evaluation_criteria=EvaluationCriteria(actions=[
                      Action(action_id="a0", name="cancel_reservation", arguments={"reservation_id": "4WQ150"})]))
    assert airline.policy_violations(cancel) == []  # nothing of 4WQ150 has flown
    flown = cancel.model_copy(update={"evaluation_criteria": EvaluationCriteria(actions=[
        Action(action_id="a0", name="cancel_reservation", arguments={"reservation_id": "NQNU5R"})])})
    assert airline.policy_violations(flown) == [(
        "airline policy (airline_no_cancel_after_flown): cannot cancel reservation NQNU5R: segment HAT214 on "
        "2024-05-13 has landed")]


def test_a_domain_of_ones_own_loads_by_its_module_path_with_its_policy_rules():
    from kit.engine.records import Check, Rejection
    from kit.engine.validate import executable_checks
    from kit.envs import domain_problem, register_domain
    from kit.envs.library import get_environment, get_tasks

    dom = load_domain("kit.envs.library")  # nothing registered first: the module is the domain
    assert dom.name == "library" and dom.tool_names() and dom.task("borrow_dune")
    assert domain_problem("kit.envs.library") is None
    assert "cannot be imported" in domain_problem("kit.envs.no_such_domain")
    assert "no get_environment()" in domain_problem("kit.envs.cow")
    assert domain_problem("mars").startswith("unknown domain 'mars'")

    def no_lending(domain, task):
        return "strict library: no lending" if any(a.name == "lend_book" for a in task.evaluation_criteria.actions) \
            else None

    register_domain("strict_library", get_environment, get_tasks, policy_rules=[no_lending])
    strict = load_domain("strict_library")
    task = strict.task("borrow_dune")
    assert Rejection(Check.POLICY, "strict library: no lending") in executable_checks(strict, task)
    assert not [r for r in executable_checks(dom, task) if r.check == "policy"]
