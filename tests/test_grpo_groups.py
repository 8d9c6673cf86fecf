"""How GRPO picks its groups (kit/train/grpo_groups.py): draws without replacement, one shared
stream for every process, each process's share of the batch and of the resample budget.

No model here: the rollouts are plain functions that return trajectories whose reward is decided by
the task (a stand-in for episodes; the selection logic is what is under test). The accelerator is a
namespace with the two fields Processes reads on a single machine (rank and world size); nothing
communicates, because collect_groups only needs each process's own share.
"""

from dataclasses import dataclass
from types import SimpleNamespace

import pytest

from kit import metrics as M
from kit.train.grpo_config import GRPOConfig
from kit.train.grpo_groups import TaskDraws, collect_groups, episode_metrics
from kit.train.processes import Processes
from kit.trajectory import Message, Trajectory


@dataclass(frozen=True)
class T:
    id: str


TASKS = [T(f"t{i}") for i in range(10)]


def procs(rank: int, world: int) -> Processes:
    return Processes(SimpleNamespace(num_processes=world, process_index=rank))


def rollout_log():
    calls = []

    def rollout(tasks, seed):
        calls.append(([t.id for t in tasks], seed))
        ids = [t.id for t in tasks]  # episode k of a task's group says "<task>/<k>"
        return [Trajectory(task_id=t.id, messages=[Message(role="assistant", content=f"{t.id}/{ids[:i].count(t.id)}")],
                           termination_reason="agent_stop") for i, t in enumerate(tasks)]

    return rollout, calls


def mixed_unless(bad_ids):
    """Reward spread inside a group (kept under all_equal), except for tasks in `bad_ids` (all 0)."""
    return lambda task, traj: 0.0 if task.id in bad_ids else float(traj.messages[0].content.endswith(("/0", "/2")))


def test_draws_cover_every_task_once_per_pass_and_the_shared_stream_is_the_same_on_every_process():
    d0, d1 = TaskDraws(TASKS, seed=3, process_index=0), TaskDraws(TASKS, seed=3, process_index=1)
    first = d0.draw(10)
    assert sorted(t.id for t in first) == sorted(t.id for t in TASKS)
    assert d1.draw(10) == first  # same shared stream whatever the rank
    assert TaskDraws(TASKS, seed=4).draw(10) != first
    assert d0.draw(4, own=True) != d1.draw(4, own=True)  # each process's own stream differs


def test_each_process_takes_its_share_and_resamples_filtered_groups_from_its_own_budget():
    cfg = GRPOConfig(group_size=4, tasks_per_step=4, resample_budget=3, filter_mode="all_equal", seed=0)
    batch = TaskDraws(TASKS, seed=0).draw(4)
    for rank in (0, 1):
        rollout, calls = rollout_log()
        bad = {batch[rank].id}  # this process's first group is all-fail: filtered, then replaced
        kept, seen, m = collect_groups(TaskDraws(TASKS, seed=0, process_index=rank), procs(rank, 2), cfg, 5,
                                       rollout, mixed_unless(bad))
        assert calls[0][0] == [t.id for t in batch[rank::2] for _ in range(4)]  # groups r, r + W of the batch
        assert len(calls) == 2 and len(calls[1][0]) == 4  # one resampled task, G episodes
        assert calls[0][1] != calls[1][1]  # a new seed per round
        assert len(kept) == 2 and all(g.task.id not in bad for g in kept)
        assert m[M.GROUPS_RESAMPLES] == 1 and m[M.GROUPS_KEPT] == 2 and m[M.FILTERED_FRAC] == pytest.approx(1 / 3)
        assert len(seen) == 3


def test_the_resample_budget_is_shared_out_over_the_processes():
    cfg = GRPOConfig(group_size=2, tasks_per_step=4, resample_budget=3, filter_mode="all_equal", seed=0)
    for rank, budget in ((0, 2), (1, 1)):  # 3 resamples over 2 processes; every group is filtered
        rollout, calls = rollout_log()
        kept, seen, m = collect_groups(TaskDraws(TASKS, seed=0, process_index=rank), procs(rank, 2), cfg, 0,
                                       rollout, mixed_unless({t.id for t in TASKS}))
        assert m[M.GROUPS_RESAMPLES] == budget and kept == [] and len(seen) == 2 + budget
        assert len(calls) == 2 and len(calls[1][0]) == budget * 2  # one round draws what the budget allows


def test_the_resample_budget_runs_out_and_the_share_is_left_short():
    cfg = GRPOConfig(group_size=2, tasks_per_step=2, resample_budget=1, filter_mode="all_equal", seed=0)
    rollout, calls = rollout_log()
    kept, seen, m = collect_groups(TaskDraws(TASKS, seed=0), procs(0, 1), cfg, 0, rollout,
                                   mixed_unless({t.id for t in TASKS}))
    assert kept == [] and len(seen) == 3 and len(calls) == 2
    assert m[M.GROUPS_RESAMPLES] == 1 and m[M.GROUPS_KEPT] == 0 and m[M.FILTERED_FRAC] == 1.0


def test_a_process_with_no_share_rolls_out_nothing():
    cfg = GRPOConfig(group_size=2, tasks_per_step=1, resample_budget=0, seed=0)
    rollout, calls = rollout_log()
    kept, seen, m = collect_groups(TaskDraws(TASKS, seed=0, process_index=1), procs(1, 2), cfg, 0, rollout,
                                   mixed_unless(set()))
    assert calls == [] and kept == [] and seen == [] and m[M.GROUPS_KEPT] == 0


def test_episode_metrics_count_every_episode_seen():
    cfg = GRPOConfig(group_size=4, tasks_per_step=2, resample_budget=0, filter_mode="all_equal", seed=0)
    rollout, _ = rollout_log()
    draws = TaskDraws(TASKS, seed=0)
    batch = TaskDraws(TASKS, seed=0).draw(2)
    kept, seen, _ = collect_groups(draws, procs(0, 1), cfg, 0, rollout, mixed_unless({batch[0].id}))
    m = episode_metrics(seen)
    assert len(kept) == 1  # the all-fail group is filtered but its episodes still count
    assert m["proc/episodes"] == 8 and m[M.REWARD_MEAN] == 2 / 8 and m[M.PASS_RATE] == 2 / 8
    assert m["termination/agent_stop"] == 1.0


def test_one_process_merges_nothing():
    assert procs(0, 1).merge({"train/rows": 3}, ["train/rows"], []) == {}


def test_error_penalty_tells_a_clean_success_from_one_sprayed_with_failed_calls():
    """Every episode succeeds by the checker (reward 1), but odd episodes made a failed tool call: the
    checker alone gives the group no spread (filtered under all_equal); with error_penalty the scores
    differ, the group is kept, and the clean episodes get the positive advantages."""
    from kit.train.grpo_math import group_advantages
    from kit.train.grpo_update import policy_rows  # noqa: F401  (the rows read g.scores)

    def rollout(tasks, seed):
        out = []
        for k, t in enumerate(tasks):
            msgs = [Message(role="assistant", content="call")]
            if k % 2:
                msgs.append(Message(role="tool", content="Error: task not found", error=True))
            out.append(Trajectory(task_id=t.id, messages=msgs, termination_reason="agent_stop"))
        return out

    ones = lambda task, traj: 1.0
    plain = GRPOConfig(group_size=4, tasks_per_step=1, resample_budget=0, filter_mode="all_equal", seed=0)
    kept, seen, _ = collect_groups(TaskDraws(TASKS, seed=0), procs(0, 1), plain, 0, rollout, ones)
    assert kept == [] and seen[0].scores == [1.0] * 4
    cfg = GRPOConfig(group_size=4, tasks_per_step=1, resample_budget=0, filter_mode="all_equal", seed=0,
                     error_penalty=0.25)
    kept, seen, _ = collect_groups(TaskDraws(TASKS, seed=0), procs(0, 1), cfg, 0, rollout, ones)
    assert len(kept) == 1 and kept[0].rewards == [1.0] * 4 and kept[0].scores == [1.0, 0.75, 1.0, 0.75]
    adv = group_advantages([kept[0].scores])[0]
    assert adv[0] > 0 > adv[1] and adv[2] > 0 > adv[3]
    with pytest.raises(ValueError):
        GRPOConfig(error_penalty=-0.1)


def test_a_resample_limit_caps_the_budget_and_is_shared_out_over_the_processes():
    """What is left of an episode budget (`resample_limit`, in tasks) caps the step's resamples below
    resample_budget; two processes split the cap as they split the budget."""
    cfg = GRPOConfig(group_size=2, tasks_per_step=4, resample_budget=5, filter_mode="all_equal", seed=0)
    for rank, cap in ((0, 2), (1, 1)):  # limit 3 over 2 processes; every group is filtered
        rollout, calls = rollout_log()
        kept, seen, m = collect_groups(TaskDraws(TASKS, seed=0, process_index=rank), procs(rank, 2), cfg, 0,
                                       rollout, mixed_unless({t.id for t in TASKS}), resample_limit=3)
        assert m[M.GROUPS_RESAMPLES] == cap and len(seen) == 2 + cap
    rollout, calls = rollout_log()
    kept, seen, m = collect_groups(TaskDraws(TASKS, seed=0), procs(0, 1), cfg, 0, rollout,
                                   mixed_unless({t.id for t in TASKS}), resample_limit=0)
    assert m[M.GROUPS_RESAMPLES] == 0 and len(calls) == 1 and len(seen) == 4
