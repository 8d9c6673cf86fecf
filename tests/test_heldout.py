"""The mock held-out set (kit/data/mock_heldout.json): solvable, not free, new, labelled, split, reproducible.

It is the evaluation set nothing trains on, made by scripts/make_mock_heldout.py independently
of the data engine; these checks keep it honest: every task's gold replay scores 1 under τ²'s
own evaluator and the kit verifier, doing nothing scores 0, its gold actions repeat neither
τ²'s 9 mock tasks nor each other, a lookup task's ids can only come from a lookup, each task's
shape and phrasing label says what it is, the free-form phrasing is not one template, the
validation and test slices are disjoint, stratified and fixed, and the generator reproduces the
committed file exactly.
"""
from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
import re
from collections import Counter
from pathlib import Path

import pytest

from kit import _tau2
from kit.data import CONFIRM_FILES, HELDOUT_FILES, HELDOUT_SPLITS, heldout_tasks, task_meta
from kit.envs import load_domain
from kit.errors import UnknownName
from kit.replay import gold_trajectory, trajectory_from_actions
from kit.verify import tau2_verdict, verify

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "make_mock_heldout.py"
SHAPES = {"create", "create_desc", "complete", "reopen", "create_complete", "lookup_create", "lookup_complete"}
# the first version of the set (60 tasks, before issue #30): its tasks stay as they were, so numbers
# measured on them stay comparable (sha256 of their id, scenario, initial state and criteria)
FIRST_VERSION_SHA = "b4f383d92c499de0754f8f51c1fcec534adc20f3f673ffe1f9694d52245a03c0"
# the validation slice is fixed: changing it must be deliberate (sha256 of its sorted ids, 16 hex)
VAL_IDS_SHA = "db4d59fb77fe257e"


def _actions(task) -> str:
    return json.dumps([(a.name, a.arguments) for a in task.evaluation_criteria.actions], sort_keys=True)


@pytest.fixture(scope="module")
def dom():
    return load_domain("mock")


@pytest.fixture(scope="module")
def tasks(dom):
    return dom.tasks("heldout")


def test_loadable_and_well_formed(dom, tasks):
    assert len(tasks) >= 200
    assert [t.id for t in tasks] == [f"heldout-{i:03d}" for i in range(len(tasks))]  # unique, in order
    assert [t.model_dump() for t in tasks] == [t.model_dump() for t in heldout_tasks("mock")]
    assert dom.task("heldout-207").id == "heldout-207"
    names = {a.name for t in tasks for a in t.evaluation_criteria.actions}
    assert names == {"create_task", "update_task_status", "get_users"}
    with_world = sum(1 for t in tasks if t.initial_state is not None)
    assert 0 < with_world < len(tasks)  # most add users/tasks to the DB, some use the bare one
    for t in tasks:
        assert [getattr(b, "value", b) for b in t.evaluation_criteria.reward_basis] == ["DB"]
        said = t.user_scenario.instructions.known_info or ""
        said += t.user_scenario.instructions.reason_for_call
        actions = t.evaluation_criteria.actions
        for a in actions:  # every value the agent must use is told by the user, but what a call returns
            for key, value in a.arguments.items():
                found_by_a_call = (key == "task_id" and a is actions[-1] and len(actions) == 2) or \
                                  (key == "user_id" and actions[0].name == "get_users")
                if key != "status" and not found_by_a_call:
                    assert str(value) in said, (t.id, key, value)
        assert "###STOP###" in t.user_scenario.instructions.task_instructions


def test_a_lookup_task_names_the_user_and_never_the_id(dom, tasks):
    """lookup_create / lookup_complete: the user is known by a name that one user of the DB has; the id
    the write needs is in no word of the scenario, and get_users (mock's read tool) returns it."""
    lookups = [t for t in tasks if task_meta(t)["shape"].startswith("lookup")]
    assert len(lookups) >= 48
    for t in lookups:
        first, write = t.evaluation_criteria.actions
        assert first.name == "get_users" and first.arguments == {}
        env = dom.fork(t)
        users = json.loads(env.execute("get_users", {}, "assistant").content)
        scenario = str(t.user_scenario)
        named = [u for u in users if u["name"] in t.user_scenario.instructions.known_info]
        assert len(named) == 1, (t.id, [u["name"] for u in users])  # the name picks out one user
        assert named[0]["user_id"] not in scenario, t.id  # only the lookup finds the id
        if write.name == "create_task":
            assert write.arguments["user_id"] == named[0]["user_id"]
        else:  # the caller's only task: its id comes from get_users, its title from the user
            assert named[0]["tasks"] == [write.arguments["task_id"]] and write.arguments["task_id"] not in scenario
            title = env.execute("update_task_status", dict(write.arguments), "assistant")
            assert json.loads(title.content)["title"] in scenario


def test_fork_applies_initial_state_like_tau2(dom, tasks):
    for t in tasks:
        ref = _tau2.registry.get_env_constructor("mock")()
        ref.set_state(t.initial_state.initialization_data if t.initial_state else None, None, [])
        assert dom.fork(t).agent_db_hash() == ref.get_db_hash(), t.id


def test_gold_scores_one_and_doing_nothing_scores_zero(dom, tasks):
    for t in tasks:
        gold = gold_trajectory(dom, t)
        assert tau2_verdict("mock", t, gold) == {"task_id": t.id, "reward": 1.0, "breakdown": {"DB": 1.0}}
        assert verify(dom, t, gold).reward == 1.0, t.id
        idle = trajectory_from_actions(dom, t, [], "I'm sorry, I cannot help with that.")
        assert tau2_verdict("mock", t, idle) == {"task_id": t.id, "reward": 0.0, "breakdown": {"DB": 0.0}}
        assert verify(dom, t, idle).reward == 0.0, t.id


def test_new_and_varied(dom, tasks):
    tau2_own = {_actions(t) for t in dom.tasks() if t.evaluation_criteria and t.evaluation_criteria.actions}
    assert len(tau2_own) >= 4
    ours = [_actions(t) for t in tasks]
    assert not set(ours) & tau2_own
    assert len(set(ours)) == len(ours)


def test_every_task_is_labelled_with_the_shape_its_gold_actions_have(tasks):
    def shape_of(t) -> str:
        acts = t.evaluation_criteria.actions
        names = [a.name for a in acts]
        if names[0] == "get_users":
            return {"create_task": "lookup_create", "update_task_status": "lookup_complete"}[names[1]]
        if names == ["create_task", "update_task_status"]:
            return "create_complete"
        if names == ["create_task"]:
            return "create_desc" if acts[0].arguments.get("description") else "create"
        return {"completed": "complete", "pending": "reopen"}[acts[0].arguments["status"]]

    cells = Counter()
    for t in tasks:
        meta = task_meta(t)
        assert meta["shape"] == shape_of(t), t.id
        assert meta["phrasing"] in ("template", "free_form") and meta["split"] in ("val", "test"), t.id
        cells[meta["shape"], meta["phrasing"]] += 1
    assert {s for s, _ in cells} == SHAPES
    assert all(cells[s, p] >= 12 for s in SHAPES for p in ("template", "free_form")), cells
    assert sum(n for (_, p), n in cells.items() if p == "free_form") >= 140
    assert task_meta(load_domain("mock").task("create_task_1")) is None  # tau2's own carry no labels


def _skeleton(text: str) -> str:
    """A sentence with its values taken out: quoted strings, ids and names."""
    text = re.sub(r"'[^']+'|\"[^\"]+\"", "<v>", text or "")
    return re.sub(r"\b[a-z]+_[a-z0-9_]+\b|\b[A-Z][a-z]+ [A-Z][a-z]+\b", "<v>", text)


def test_free_form_phrasing_is_not_one_template(tasks):
    """Template tasks say each fact in one fixed sentence; free-form ones draw sentence structures,
    orderings, synonyms and manners from word banks (τ²'s own scenario style)."""
    by = {}
    for t in tasks:
        meta = task_meta(t)
        by.setdefault((meta["shape"], meta["phrasing"]), []).append(t.user_scenario.instructions)
    for shape in SHAPES:
        free = by[shape, "free_form"]
        reasons = Counter(_skeleton(i.reason_for_call) for i in free)
        assert len(reasons) >= 5 and reasons.most_common(1)[0][1] <= len(free) // 3, (shape, reasons)
        assert len({_skeleton(i.task_instructions) for i in free}) >= len(free) * 2 // 3, shape
        assert len({_skeleton(i.known_info) for i in free}) >= 3, shape
        assert len({_skeleton(i.reason_for_call) for i in by[shape, "template"]}) == 1, shape


def test_validation_and_test_slices_are_disjoint_stratified_and_fixed(dom, tasks):
    val, test = dom.tasks("heldout_val"), dom.tasks("heldout_test")
    assert [t.model_dump() for t in val] == [t.model_dump() for t in heldout_tasks("mock", "heldout_val")]
    ids_val, ids_test = [t.id for t in val], [t.id for t in test]
    assert not set(ids_val) & set(ids_test) and sorted(ids_val + ids_test) == [t.id for t in tasks]
    assert all(task_meta(t)["split"] == "val" for t in val) and all(task_meta(t)["split"] == "test" for t in test)
    assert 50 <= len(val) <= 70
    cells = Counter((task_meta(t)["shape"], task_meta(t)["phrasing"]) for t in tasks)
    in_val = Counter((task_meta(t)["shape"], task_meta(t)["phrasing"]) for t in val)
    for cell, n in cells.items():  # a quarter of every shape x phrasing cell
        assert in_val[cell] == n // 4, (cell, in_val[cell], n)
    assert hashlib.sha256(",".join(sorted(ids_val)).encode()).hexdigest()[:16] == VAL_IDS_SHA
    assert set(HELDOUT_SPLITS) == {"heldout", "heldout_val", "heldout_test", "heldout_confirm"}
    with pytest.raises(UnknownName):
        heldout_tasks("mock", "heldout_train")


def test_the_engine_and_the_leak_check_see_every_held_out_task(dom, tasks):
    """The engine rejects a proposal holding the solution of any held-out task (reject_held_out), and the
    leak check finds an evaluation task of either slice whose gold actions a run trained on."""
    from kit.engine.validate import evaluation_action_keys, executable_checks
    from kit.eval.leak import gold_action_keys, leak_report

    assert {t.id for t in tasks} | {t.id for t in dom.tasks("heldout_confirm")} <= set(evaluation_action_keys(dom))
    newest = [t for t in tasks if task_meta(t)["shape"] == "lookup_complete"][-1]  # added with the second version
    reasons = [r for r in executable_checks(dom, newest) if r.check == "held_out"]
    assert reasons and f"evaluation task {newest.id}:" in reasons[0].detail, reasons
    confirm = dom.tasks("heldout_confirm")[-1]
    reasons = [r for r in executable_checks(dom, confirm) if r.check == "held_out"]
    assert reasons and f"evaluation task {confirm.id}:" in reasons[0].detail, reasons
    seen = set().union(*(gold_action_keys(t) for t in tasks[-10:]))
    for split in ("heldout_val", "heldout_test"):
        part = dom.tasks(split)
        trained_on = {t.id for t in part} & {t.id for t in tasks[-10:]}
        assert trained_on and set(leak_report(part, seen)["overlapping_task_ids"]) >= trained_on, split


def test_the_first_version_is_kept_as_it_was(tasks):
    core = [{k: t[k] for k in ("id", "user_scenario", "initial_state", "evaluation_criteria")}
            for t in json.loads(HELDOUT_FILES["mock"].read_text(encoding="utf-8"))[:60]]
    assert hashlib.sha256(json.dumps(core, sort_keys=True).encode()).hexdigest() == FIRST_VERSION_SHA
    assert [task_meta(t)["shape"] for t in tasks[:5]] == ["create", "create_desc", "complete", "reopen",
                                                          "create_complete"]


def test_generator_is_independent_and_reproducible(tmp_path):
    imported = {n.module if isinstance(n, ast.ImportFrom) else a.name
                for n in ast.walk(ast.parse(SCRIPT.read_text())) if isinstance(n, (ast.Import, ast.ImportFrom))
                for a in n.names}
    assert not {m for m in imported if m and m.split(".")[0] == "kit"}  # not made by the kit (or its engine)
    spec = importlib.util.spec_from_file_location("make_mock_heldout", SCRIPT)
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    out = gen.write(tmp_path / "mock_heldout.json")
    assert out.read_bytes() == HELDOUT_FILES["mock"].read_bytes()


def test_the_confirmation_slice_is_new_solvable_labelled_and_reproducible(dom, tasks, tmp_path):
    """heldout_confirm (kit/data/mock_confirm.json): the generator at three further seeds, no task whose gold actions
    a task of the main set has (nor two of its own alike), every shape in both phrasings, gold earns 1 and doing
    nothing 0 (both verifiers), reachable by id, and written byte for byte by `make_mock_heldout.py --confirm`."""
    confirm = dom.tasks("heldout_confirm")
    assert len(confirm) >= 400
    assert [t.id for t in confirm] == [f"confirm-{i:03d}" for i in range(len(confirm))]
    assert dom.task(confirm[-1].id) is not None and not {t.id for t in confirm} & {t.id for t in tasks}
    keys = [_actions(t) for t in confirm]
    assert len(set(keys)) == len(keys) and not set(keys) & {_actions(t) for t in tasks}
    metas = [task_meta(t) for t in confirm]
    assert {m["split"] for m in metas} == {"confirm"}
    assert {(m["shape"], m["phrasing"]) for m in metas} == {(s, p) for s in SHAPES for p in ("template", "free_form")}
    for t in confirm[::25]:
        gold = gold_trajectory(dom, t)
        assert tau2_verdict("mock", t, gold)["reward"] == 1.0 and verify(dom, t, gold).reward == 1.0, t.id
        idle = trajectory_from_actions(dom, t, [], "I'm sorry, I cannot help with that.")
        assert tau2_verdict("mock", t, idle)["reward"] == 0.0 and verify(dom, t, idle).reward == 0.0, t.id
    spec = importlib.util.spec_from_file_location("make_mock_heldout", SCRIPT)
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert gen.write(tmp_path / "c.json", confirm=True).read_bytes() == CONFIRM_FILES["mock"].read_bytes()
