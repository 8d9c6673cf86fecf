"""The curriculum's probe episodes train the steps after it (GRPOConfig.probe_train; kit.train.grpo_groups.ProbeGroups).

These are unit tests of the scheduling: which episodes each step's groups hold, how many were generated, what
the metrics count. The rollout is a fake that numbers every episode it generates (the policy still samples
the reply, so the update has real token ids to train on), and the rewards are hand-made from those numbers:
'always' and 'never' are solved in every or no episode, a 'mixed' task in every other one, so the band is the
two mixed tasks and each of their groups has a reward spread (an episode's reward is a function of its place
in its rollout call, so a resumed run scores its episodes as the uninterrupted one did). Model: tests/test_grpo_learning.py's random
2-layer Llama (the tests are about the loop's bookkeeping, not about what a model learns).
"""

import threading
from types import SimpleNamespace

import pytest
import torch
from test_grpo_learning import (  # noqa: F401
    SYSTEM,
    PromptTask,
    single_turn,
    small_cfg,
    tiny_llama,
    tokenizer,
    weights,
)

from kit.train import grpo
from kit.train.grpo import GRPOTrainer
from kit.train.grpo_groups import ProbeGroups, TaskDraws, collect_groups

TASKS = [PromptTask("always", "Say hi."), PromptTask("never", "Say bye."),
         PromptTask("mixed-a", "Count to three."), PromptTask("mixed-b", "Name a colour.")]
BAND = {"mixed-a", "mixed-b"}


def reward(task, traj):
    if task.id == "always":
        return 1.0
    if task.id == "never":
        return 0.0
    return float(traj.meta["index"] % 2)


class Counting:
    """rollout_fn that numbers every episode it generates (traj.meta['serial'], and 'index' in its call) and
    keeps them all."""

    def __init__(self):
        self.sample = single_turn(4)
        self.calls: list[list] = []   # the trajectories of each rollout call

    def __call__(self, tasks, agent, seed):
        trajs = self.sample(tasks, agent, seed)
        for i, t in enumerate(trajs):
            t.meta.update(serial=len(self.episodes) + i, index=i)
        self.calls.append(trajs)
        return trajs

    @property
    def episodes(self) -> list:
        return [t for c in self.calls for t in c]


def trainer(tokenizer, steps=2, **kw):  # noqa: F811
    cfg = small_cfg(**{"probe_k": 4, "probe_every": 0, "tasks_per_step": 2, "group_size": 4, "resample_budget": 0,
                       "train_steps": steps, **kw})
    return GRPOTrainer(tiny_llama(tokenizer), tokenizer, TASKS, cfg, rollout_fn=Counting(), reward_fn=reward,
                       agent_system=SYSTEM)


def run(tokenizer, steps=2, checkpoint_dir=None, **kw):  # noqa: F811
    """A trainer over TASKS with the counting rollout, trained: (trainer, rollout, step metrics, probe records)."""
    tr = trainer(tokenizer, steps, **kw)
    events: list = []
    history = tr.train(on_event=lambda kind, rec: events.append((kind, rec)), checkpoint_dir=checkpoint_dir)
    return tr, tr.rollout_fn, history, [rec for kind, rec in events if kind == "probe"]


@pytest.fixture
def step_groups(monkeypatch):
    """Every step's groups as collect_groups returned them (the trajectory objects themselves)."""
    seen: list[list] = []
    real = grpo.collect_groups

    def spy(*a, **kw):
        kept, groups, m = real(*a, **kw)
        seen.append(groups)
        return kept, groups, m

    monkeypatch.setattr(grpo, "collect_groups", spy)
    return seen


def test_the_first_steps_groups_are_the_probes_band_episodes_and_nothing_is_generated_twice(tokenizer, step_groups):  # noqa: F811
    tr, rollout, history, probes = run(tokenizer)
    assert probes[0]["band"] and set(probes[0]["band"]) == BAND
    probe_call, *step_calls = rollout.calls
    assert len(probe_call) == 4 * len(TASKS)  # one probe call (probe_batch 32): probe_k episodes of every task
    by_task = {tid: [t for t in probe_call if t.task_id == tid] for tid in BAND}
    first = step_groups[0]
    assert sorted(g.task.id for g in first) == sorted(BAND)
    for g in first:  # the very trajectory objects the probe generated, with the rewards it computed
        assert [id(t) for t in g.trajs] == [id(t) for t in by_task[g.task.id]] and g.from_probe == 4
        assert g.rewards == [reward(g.task, t) for t in by_task[g.task.id]]
    assert len(step_calls) == 1 and len(step_calls[0]) == 2 * 4  # step 0 rolled out nothing; step 1 its B x G
    generated = [t.id for t in rollout.episodes]
    trained = [t.id for groups in step_groups for g in groups for t in g.trajs]
    assert len(set(generated)) == len(generated) and len(set(trained)) == len(trained)  # no episode twice
    assert set(trained) <= set(generated)
    # metrics: episodes from the probe per step, each episode counted once in the total
    assert [m["episodes/from_probe"] for m in history] == [8, 0]
    assert [m["episodes/total"] for m in history] == [8, 16]
    assert history[0]["curriculum/probe_train_groups"] == 2
    assert all(g["from_probe"] == 4 for g in history[0]["groups"]) and "from_probe" not in history[1]["groups"][0]
    assert tr.probe_groups.slots == {}


def test_probe_train_off_rolls_every_step_out_and_draws_the_same_tasks(tokenizer, step_groups):  # noqa: F811
    run(tokenizer)
    on_tasks = [[g.task.id for g in groups] for groups in step_groups]
    step_groups.clear()
    _, off, hist_off, _ = run(tokenizer, probe_train=False)
    assert [len(c) for c in off.calls] == [16, 8, 8]  # the probe, then each step's B x G
    assert [m["episodes/from_probe"] for m in hist_off] == [0, 0] and "curriculum/probe_train_groups" not in hist_off[0]
    assert [m["episodes/total"] for m in hist_off] == [8, 16]
    probe_ids = {t.id for t in off.calls[0]}
    assert not probe_ids & {t.id for groups in step_groups for g in groups for t in g.trajs}
    # the task-draw sequence is the same with and without probe_train
    assert [[g.task.id for g in groups] for groups in step_groups] == on_tasks


def test_a_probe_of_fewer_episodes_than_a_group_is_topped_up_in_one_rollout_call(tokenizer, step_groups):  # noqa: F811
    _, rollout, history, _ = run(tokenizer, steps=1, probe_k=2, group_size=4)
    probe_call, step_call = rollout.calls  # one call: both tasks' missing episodes together
    assert len(step_call) == 2 * 2
    for g in step_groups[0]:
        probe = [t for t in probe_call if t.task_id == g.task.id]
        assert [id(t) for t in g.trajs[:2]] == [id(t) for t in probe] and g.from_probe == 2
        assert all(t in step_call for t in g.trajs[2:]) and len(g.trajs) == 4
    assert history[0]["episodes/from_probe"] == 4 and history[0]["episodes/total"] == 8


def test_a_checkpoint_holds_the_probe_episodes_left_and_resumes_to_the_same_weights(tokenizer, step_groups, tmp_path):  # noqa: F811
    """probe_train_steps 2 with one task per step: step 0 trains one band task's probe group, step 1 the other's.
    save_every 1 over 3 steps writes checkpoints after 1 step (its loop state holds step 1's probe group) and
    after 2 steps (none left); a fresh trainer resumed from either ends with the uninterrupted run's weights."""
    import shutil

    kw = {"tasks_per_step": 1, "probe_train_steps": 2, "save_every": 1, "keep_checkpoints": 2}
    tr, rollout, history, _ = run(tokenizer, steps=3, checkpoint_dir=tmp_path / "ckpts", **kw)
    probe_call = rollout.calls[0]
    assert [m["episodes/from_probe"] for m in history] == [4, 4, 0]
    assert len(rollout.calls) == 2 and len(rollout.calls[1]) == 4  # step 2 alone rolled out
    assert {step_groups[0][0].task.id, step_groups[1][0].task.id} == BAND
    straight = weights(tr.policy)
    assert sorted(p.name for p in (tmp_path / "ckpts").iterdir()) == ["step-000001", "step-000002"]
    for at in (1, 2):
        root = tmp_path / f"from-{at}"
        shutil.copytree(tmp_path / "ckpts" / f"step-{at:06d}", root / f"step-{at:06d}")
        again = trainer(tokenizer, 3, **kw)
        assert again.resume(root) == at
        assert len(again.probe_groups) == (1 if at == 1 else 0)
        step_groups.clear()
        hist = again.train()
        if at == 1:  # step 1 trains the probe's episodes of its task, read back from the checkpoint
            resumed = step_groups[0][0]
            assert [t.id for t in resumed.trajs] == [t.id for t in probe_call if t.task_id == resumed.task.id]
        assert [m["episodes/total"] for m in hist] == [m["episodes/total"] for m in history[at:]]
        assert torch.equal(weights(again.policy), straight), f"resumed after step {at}"


class ThreadProcs:
    """Processes of an `accelerate launch` run, played by threads of this one (only what ProbeGroups.plan and
    collect_groups use: count, index, gather)."""

    def __init__(self, count, index, board, barrier):
        self.count, self.index, self.board, self.barrier = count, index, board, barrier

    def gather(self, obj):
        self.board[self.index] = obj
        self.barrier.wait()
        out = [self.board[i] for i in range(self.count)]
        self.barrier.wait()
        return out


def test_under_two_processes_each_takes_its_positions_probe_groups_whoever_probed_them():
    """Hand-made tasks and episodes, no model: process r probed the pool's tasks r, r + W, ... (as the curriculum
    does) while a step's position j is process j % W's (collect_groups' rule). After the exchange every process
    trains, at its positions, the probe groups one process would train there: the first draw of each band task
    in the next probe_train_steps steps; a task's second draw (the next pass over the band) rolls out fresh."""
    W, B, G = 2, 4, 2
    cfg = small_cfg(tasks_per_step=B, group_size=G, resample_budget=0, probe_k=G, probe_train_steps=2)
    pool = [SimpleNamespace(id=f"t{i}") for i in range(6)]
    probed = {t.id: ([SimpleNamespace(id=f"{t.id}-ep{k}", infra_failed=False) for k in range(G)], [0.0, 1.0])
              for t in pool}

    def fresh_rollout(tasks, seed):
        return [SimpleNamespace(id=f"fresh-{t.id}-{seed}-{k}", infra_failed=False) for k, t in enumerate(tasks)]

    def scored_fresh(task, traj):  # the checker runs on fresh episodes only: the probe's came scored
        assert traj.id.startswith("fresh-"), traj.id
        return float(len(traj.id) % 2)

    def process(procs, out):
        mine = {tid: e for i, (tid, e) in enumerate(probed.items()) if i % procs.count == procs.index}
        draws, plan = TaskDraws(pool, seed=3), ProbeGroups()
        planned = plan.plan(mine, draws, procs, cfg, step=0)
        steps = []
        for s in range(2):
            _, seen, m = collect_groups(draws, procs, cfg, s, fresh_rollout, scored_fresh, probe=plan)
            steps.append(([(g.task.id, [t.id for t in g.trajs], g.from_probe) for g in seen], m))
        out[procs.index] = (planned, steps, len(plan))

    one: dict = {}
    process(SimpleNamespace(count=1, index=0, gather=lambda obj: [obj]), one)
    two: dict = {}
    board, barrier = {}, threading.Barrier(W)
    threads = [threading.Thread(target=process, args=(ThreadProcs(W, r, board, barrier), two)) for r in range(W)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sorted(two) == [0, 1]
    planned, single, left = one[0]
    assert planned == 6 and left == 0 and all(p == 6 and n == 0 for p, _, n in two.values())
    order = TaskDraws(pool, seed=3).draw(2 * B)
    for s in range(2):
        groups = single[s][0]
        assert [g[0] for g in groups] == [t.id for t in order[s * B:(s + 1) * B]]  # the draw order, kept
        for r in range(W):  # process r: positions r, r + W, ... of the same groups, the same probe episodes
            assert [g for g in two[r][1][s][0] if g[2]] == [g for g in groups[r::W] if g[2]]
        firsts = {t.id: n for n, t in reversed(list(enumerate(order)))}
        for n, (tid, ids, from_probe) in enumerate(groups, start=s * B):
            assert (from_probe == G and ids == [e.id for e in probed[tid][0]]) == (firsts[tid] == n)
            assert from_probe in (0, G)
    assert sum(m["episodes/from_probe"] for _, m in single) == 6 * G
    assert sum(m["episodes/from_probe"] for r in range(W) for _, m in two[r][1]) == 6 * G
