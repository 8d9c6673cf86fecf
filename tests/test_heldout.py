"""The mock held-out set (kit/data/mock_heldout.json): solvable, not free, new, reproducible.

It is the evaluation set nothing trains on, made by scripts/make_mock_heldout.py independently
of the data engine; these checks keep it honest: every task's gold replay scores 1 under τ²'s
own evaluator and the kit verifier, doing nothing scores 0, its gold actions repeat neither
τ²'s 9 mock tasks nor each other, and the generator reproduces the committed file exactly.
"""
from __future__ import annotations

import ast
import importlib.util
import json
from pathlib import Path

import pytest

from kit import _tau2
from kit.data import HELDOUT_FILES, heldout_tasks
from kit.envs import load_domain
from kit.replay import gold_trajectory, trajectory_from_actions
from kit.verify import tau2_verdict, verify

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "make_mock_heldout.py"


def _actions(task) -> str:
    return json.dumps([(a.name, a.arguments) for a in task.evaluation_criteria.actions], sort_keys=True)


@pytest.fixture(scope="module")
def dom():
    return load_domain("mock")


@pytest.fixture(scope="module")
def tasks(dom):
    return dom.tasks("heldout")


def test_loadable_and_well_formed(dom, tasks):
    assert len(tasks) >= 48
    assert [t.id for t in tasks] == [f"heldout-{i:03d}" for i in range(len(tasks))]  # unique, in order
    assert [t.model_dump() for t in tasks] == [t.model_dump() for t in heldout_tasks("mock")]
    assert dom.task("heldout-007").id == "heldout-007"
    names = {a.name for t in tasks for a in t.evaluation_criteria.actions}
    assert names == {"create_task", "update_task_status"}
    with_world = sum(1 for t in tasks if t.initial_state is not None)
    assert 0 < with_world < len(tasks)  # most add users/tasks to the DB, some use the bare one
    for t in tasks:
        assert [getattr(b, "value", b) for b in t.evaluation_criteria.reward_basis] == ["DB"]
        said = t.user_scenario.instructions.known_info + t.user_scenario.instructions.reason_for_call
        for a in t.evaluation_criteria.actions:  # every value the agent must use is told by the user
            for key, value in a.arguments.items():
                if key != "status" and not (key == "task_id" and len(t.evaluation_criteria.actions) == 2):
                    assert str(value) in said, (t.id, key, value)
        assert "###STOP###" in t.user_scenario.instructions.task_instructions


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
    assert len(set(ours)) >= 40


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
