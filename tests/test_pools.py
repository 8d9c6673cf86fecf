"""The engine's two disjoint task pools (kit/engine/pools.py) and GRPO's refusal of a task pool its
policy was fine-tuned on (kit/stages/grpo.py: check_pool_overlap), on tau2 mock's real tasks."""

import json

import pytest

from kit.engine.pools import assign_pools, rl_quota, task_pool
from kit.envs import load_domain
from kit.errors import BadInput
from kit.stages.grpo import check_pool_overlap, policy_sft_data


class Warnings:
    """The stage context's warn(), recorded (the only part of a stage these functions use)."""

    def __init__(self):
        self.lines = []

    def warn(self, s):
        self.lines.append(s)


def test_pools_are_a_deterministic_share_and_equal_solutions_share_a_pool():
    tasks = load_domain("mock").tasks(None)
    pools = [task_pool(t, 0.5, seed=0) for t in tasks]
    assert pools == [task_pool(t, 0.5, seed=0) for t in tasks]  # no state: resumed or parallel units agree
    assert {task_pool(t, 0.0) for t in tasks} == {"sft"} and {task_pool(t, 1.0) for t in tasks} == {"rl"}
    twin = tasks[0].model_copy(update={"id": "another-id"})  # same gold actions under another id
    assert all(task_pool(twin, s, seed) == task_pool(tasks[0], s, seed) for s in (0.2, 0.5, 0.8) for seed in range(5))
    # the share holds over many (task, seed) draws: 9 tasks x 40 seeds
    share = sum(task_pool(t, 0.33, seed) == "rl" for t in tasks for seed in range(40)) / (len(tasks) * 40)
    assert 0.25 < share < 0.41


def _task(i: int, tools: list[str]) -> dict:
    """A task as its JSON: gold actions `tools`, each with an argument that makes its solution unique."""
    return {"id": f"t{i}", "evaluation_criteria": {"actions": [
        {"action_id": str(k), "name": n, "arguments": {"task_id": f"task_{i}"}} for k, n in enumerate(tools)]}}


def test_pattern_split_gives_every_tool_pattern_its_share_of_both_pools():
    creates = [_task(i, ["get_users", "create_task"]) for i in range(12)]
    updates = [_task(100 + i, ["update_task_status"]) for i in range(4)]
    lone = [_task(200, ["get_users", "update_task_status", "create_task"])]
    tasks = creates + updates + lone
    pools = assign_pools(tasks, 0.33, seed=0, split="pattern")
    assert set(pools) == {t["id"] for t in tasks}
    assert sum(pools[t["id"]] == "rl" for t in creates) == 4  # round(0.33 x 12)
    assert sum(pools[t["id"]] == "rl" for t in updates) == 1  # round(0.33 x 4) = 1, and at least one each way
    assert pools == assign_pools(list(reversed(tasks)), 0.33, seed=0, split="pattern")  # order-free: resumes agree
    # a pattern of two or more always reaches both pools, whatever the seed; hash alone does not
    both = [all({pools[t["id"]] for t in ts} == {"sft", "rl"} for ts in (creates, updates))
            for pools in (assign_pools(tasks, 0.2, seed=s, split="pattern") for s in range(20))]
    assert all(both)
    by_hash = [{task_pool(t, 0.2, s) for t in updates} for s in range(20)]
    assert any(len(p) == 1 for p in by_hash)  # some seed puts all four updates in one pool
    assert assign_pools(tasks, 0.33, seed=3, split="hash") == {t["id"]: task_pool(t, 0.33, 3) for t in tasks}
    # equal solutions share a pool under the pattern split too
    twin = dict(creates[0], id="twin")
    p2 = assign_pools(tasks + [twin], 0.5, seed=1, split="pattern")
    assert p2["twin"] == p2[creates[0]["id"]]
    assert [rl_quota(n, 0.33, 0.9) for n in (0, 1, 2, 3, 12)] == [0, 0, 1, 1, 4]
    assert rl_quota(1, 0.33, 0.1) == 1 and rl_quota(5, 0.0, 0.0) == 0 and rl_quota(5, 1.0, 0.9) == 5
    with pytest.raises(ValueError, match="split must be"):
        assign_pools(tasks, 0.3, split="random")


def _calls(i: str, calls: list[tuple[str, dict]]) -> dict:
    return {"id": i, "evaluation_criteria": {"actions": [
        {"action_id": str(k), "name": n, "arguments": a} for k, (n, a) in enumerate(calls)]}}


def test_an_rl_task_whose_calls_an_sft_task_makes_moves_to_sft():
    """The dynamic_filtering run's case (2026-12-05): RL task `get_users > create_task(Quarterly budget review,
    user_1)`, SFT task the same two calls and an update after them; the pattern split put them in different pools
    (different patterns), so GRPO found the RL task's whole solution in the policy's SFT data. The pools move it
    to SFT, under either split, until no RL task is covered; the leak rule then finds nothing."""
    from kit.eval.leak import gold_action_keys, leak_report

    users, make = ("get_users", {}), ("create_task", {"title": "Quarterly budget review", "user_id": "user_1"})
    long_ = [_calls(f"long{i}", [users, make if i == 0 else ("create_task", {"title": f"T{i}", "user_id": "u"}),
                                ("update_task_status", {"task_id": f"task_{i}", "status": "completed"})])
             for i in range(6)]
    short = [_calls(f"short{i}", [users, make if i == 0 else ("create_task", {"title": f"S{i}", "user_id": "u"})])
             for i in range(6)]
    tasks = long_ + short
    for split, seeds in (("pattern", range(30)), ("hash", range(30))):
        for seed in seeds:
            pools = assign_pools(tasks, 0.5, seed=seed, split=split)
            sft_keys = set().union(*(gold_action_keys(t) for t in tasks if pools[t["id"]] == "sft"))
            rl = [t for t in tasks if pools[t["id"]] == "rl"]
            assert leak_report(rl, sft_keys)["n_overlap"] == 0, (split, seed)
            if pools["long0"] == "sft":
                assert pools["short0"] == "sft"           # its calls are all in long0's
    # the move itself: the covered RL task goes to SFT, the others stay
    from kit.engine.pools import cover_moves

    assert cover_moves(tasks, {"long0": "sft", "short0": "rl"} | {t["id"]: "rl" for t in tasks[1:6] + tasks[7:]}) \
        == {"long0": "sft", "short0": "sft"} | {t["id"]: "rl" for t in tasks[1:6] + tasks[7:]}


def _sft_stage(tmp_path, tasks):
    """An sft_agent stage folder as the SFT stage writes it: model/ and the samples it trained on."""
    from transformers import AutoTokenizer

    from kit.llm import ensure_embedded_model
    from kit.train.sft_data import gold_sft_samples

    d = tmp_path / "sft_agent"
    (d / "model").mkdir(parents=True)
    tok = AutoTokenizer.from_pretrained(ensure_embedded_model())
    agent, _ = gold_sft_samples(load_domain("mock"), tasks, tok)
    (d / "sft_agent.train.jsonl").write_text("".join(s.model_dump_json() + "\n" for s in agent))
    return d / "model"


def test_grpo_refuses_rl_tasks_whose_solution_its_policy_was_fine_tuned_on(tmp_path):
    tasks = [t for t in load_domain("mock").tasks(None) if t.evaluation_criteria and t.evaluation_criteria.actions]
    from kit.eval.leak import gold_action_keys

    trained = tasks[:3]
    seen = set().union(*(gold_action_keys(t) for t in trained))
    fresh = [t for t in tasks[3:] if not gold_action_keys(t) <= seen]  # mock's tasks share some solutions
    assert fresh
    policy = _sft_stage(tmp_path, trained)
    assert policy_sft_data(policy) == [policy.parent / "sft_agent.train.jsonl"]
    w = Warnings()
    assert check_pool_overlap(fresh, policy, allow=False, st=w)["n_overlap"] == 0  # disjoint: no complaint
    with pytest.raises(BadInput, match=r"RL tasks have every gold action in the policy's SFT data") as e:
        check_pool_overlap(fresh + trained[:2], policy, allow=False, st=w)
    assert trained[0].id in str(e.value) and "rl_tasks.jsonl" in e.value.hint and "allow_overlap" in e.value.hint
    rep = check_pool_overlap(fresh + trained[:2], policy, allow=True, st=w)
    assert rep["n_overlap"] == 2 and "allowed: allow_overlap" in w.lines[-1]
    # drop_overlap (the stage's default): the memorized tasks are named for the caller to leave out, the
    # rest trains; a pool of memorized tasks only is still refused (nothing would be left)
    rep = check_pool_overlap(fresh + trained[:2], policy, allow=False, st=w, drop=True)
    assert sorted(rep["dropped"]) == sorted(t.id for t in trained[:2]) and rep["n_tasks"] == len(fresh) + 2
    assert "left out (drop_overlap)" in w.lines[-1] and f"the other {len(fresh)}" in w.lines[-1]
    with pytest.raises(BadInput, match=r"RL tasks have every gold action"):
        check_pool_overlap(trained[:2], policy, allow=False, st=w, drop=True)
    # a GRPO stage's output is checked against what its own start was fine-tuned on
    g = tmp_path / "grpo"
    (g / "model").mkdir(parents=True)
    (g / "stage.json").write_text(json.dumps({"stage": "grpo", "summary": {"policy": str(policy)}}))
    assert policy_sft_data(g / "model") == [policy.parent / "sft_agent.train.jsonl"]
    # the embedded base model has no SFT data: nothing to check
    assert check_pool_overlap(trained, tmp_path / "nowhere" / "model", allow=False, st=w)["checked_files"] == []
