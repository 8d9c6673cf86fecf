"""GRPO's pass-rate curriculum (kit/train/grpo_curriculum.py) on a real tiny run of the trainer.

Model: a randomly initialised 2-layer Llama with SmolLM2's tokenizer (tests/test_grpo_learning.py's):
the test is about which tasks the loop draws, not about what the model learns. The rewards are a
function of the task and of the text the model sampled.
"""

import torch

from kit.train.grpo import GRPOTrainer
from test_grpo_learning import SYSTEM, PromptTask, single_turn, small_cfg, tiny_llama, tokenizer  # noqa: F401

TASKS = [PromptTask("always", "Say hi."), PromptTask("never", "Say bye."),
         PromptTask("mixed-a", "Count to three."), PromptTask("mixed-b", "Name a colour.")]


def reward(task, traj):
    """'always' and 'never' are solved in every episode or in none; a 'mixed' task when the sampled
    reply has an even number of characters (about half the episodes of a random model)."""
    if task.id == "always":
        return 1.0
    if task.id == "never":
        return 0.0
    return float(len(traj.messages[-1].content or "") % 2 == 0)


def test_probe_sets_aside_tasks_always_or_never_solved_and_steps_draw_from_the_band(tokenizer):  # noqa: F811
    torch.manual_seed(0)
    # probe_train off: every step rolls out its own groups, which this test follows (tests/test_probe_reuse.py: on)
    cfg = small_cfg(probe_k=8, probe_every=2, tasks_per_step=2, group_size=4, resample_budget=0, probe_train=False)
    tr = GRPOTrainer(tiny_llama(tokenizer), tokenizer, TASKS, cfg, rollout_fn=single_turn(6), reward_fn=reward,
                     agent_system=SYSTEM)
    events, drawn = [], []
    real_rollout = tr._rollout

    def spy(tasks, seed):  # records which tasks each rollout call drew; the rollout itself is the real one
        drawn.append([t.id for t in tasks])
        return real_rollout(tasks, seed)

    tr._rollout = spy
    history = tr.train(steps=3, on_event=lambda kind, rec: events.append((kind, rec)))
    probes = [rec for kind, rec in events if kind == "probe"]
    assert [p["step"] for p in probes] == [0, 2]  # before the first step, then every probe_every steps
    first = probes[0]
    assert first["rates"]["always"] == 1.0 and first["rates"]["never"] == 0.0
    assert first["always"] >= 1 and first["never"] >= 1 and first["tasks"] == 4
    band = set(first["band"])
    assert band <= {"mixed-a", "mixed-b"} and band, first["rates"]
    assert all(cfg.band_min <= first["rates"][t] <= cfg.band_max for t in band)
    # the probe rolled out probe_k episodes of every task; the steps drew only from the band
    probe_calls = [d for d in drawn if len(d) >= 8 and len(set(d)) >= 1 and d.count(d[0]) == 8]
    assert sorted({t for d in probe_calls for t in d}) == sorted(t.id for t in TASKS)
    step_calls = [d for d in drawn if d not in probe_calls]
    assert step_calls and all(set(d) <= band | set(probes[1]["band"]) for d in step_calls)
    assert history[0]["curriculum/band_size"] == len(band) and "curriculum/band_size" not in history[1]
    assert history[0]["curriculum/always"] == first["always"]
    # each step's metrics name the groups it rolled out: the tasks the step drew, G rewards each
    for m, d in zip(history, step_calls):
        assert [g["task"] for g in m["groups"]] == list(dict.fromkeys(d)) and all(len(g["rewards"]) == 4 for g in m["groups"])
    # the band's state round-trips (what a resumed run restores)
    state = tr.curriculum.state_dict()
    tr.curriculum.load_state_dict({})
    tr.curriculum.load_state_dict(state)
    assert [t.id for t in tr.curriculum.band] == probes[1]["band"] or probes[1]["band_empty"]


def test_an_empty_band_falls_back_to_every_task_and_says_so(tokenizer):  # noqa: F811
    cfg = small_cfg(probe_k=2, tasks_per_step=1, group_size=2, resample_budget=0)
    tr = GRPOTrainer(tiny_llama(tokenizer), tokenizer, TASKS[:2], cfg, rollout_fn=single_turn(4), reward_fn=reward,
                     agent_system=SYSTEM)
    events = []
    m = tr.train(steps=1, on_event=lambda kind, rec: events.append(rec))[0]
    assert events[0]["band_empty"] and events[0]["band"] == [] and m["curriculum/band_empty"] == 1
    assert [t.id for t in tr.curriculum.band] == ["always", "never"]
    assert m["skip_reason"] == "all_groups_filtered"  # both tasks' groups are all-equal: the step says why


def test_band_bounds_are_checked():
    import pytest

    with pytest.raises(ValueError, match="band_min"):
        small_cfg(probe_k=4, band_min=0.9, band_max=0.5)
    with pytest.raises(ValueError, match="eval_trials > 1 at eval_temperature 0"):
        small_cfg(eval_every=2, eval_trials=2)


def test_pattern_balance_draws_every_gold_tool_pattern_equally():
    """Hand-made tasks (only their ids and gold action names matter here)."""
    from types import SimpleNamespace as NS

    from kit.train.grpo_curriculum import balanced_by_pattern, gold_pattern
    from kit.train.grpo_groups import TaskDraws

    def task(i, *names):
        return NS(id=f"t{i}", evaluation_criteria=NS(actions=[NS(name=n) for n in names]))

    creates = [task(i, "get_users", "create_task") for i in range(4)]
    update = task(9, "update_task_status")
    band = creates[:2] + [update] + creates[2:]
    assert gold_pattern(update) == "update_task_status" and gold_pattern(NS(id="x", evaluation_criteria=None)) == "no_actions"
    out = balanced_by_pattern(band)
    assert [t.id for t in out] == ["t0", "t1", "t2", "t3", "t9", "t9", "t9", "t9"]
    draws = TaskDraws(out, seed=0)
    first_pass = draws.draw(8)
    assert sum(t is update for t in first_pass) == 4  # one pass: each pattern 4 times
    state = draws.state_dict()
    again = TaskDraws(out, seed=0)
    again.load_state_dict(state)
    assert [t.id for t in again.draw(5)] == [t.id for t in draws.draw(5)]
    assert balanced_by_pattern([]) == []


def test_step_balance_puts_different_patterns_in_one_batch():
    """Hand-made tasks (ids and gold action names only): with strata, every 2 consecutive draws hold
    two patterns; without, a 2-draw batch of one pattern happens; both resume the same."""
    from types import SimpleNamespace as NS

    import pytest

    from kit.train.grpo_curriculum import balanced_by_pattern, gold_pattern
    from kit.train.grpo_groups import TaskDraws

    def task(i, *names):
        return NS(id=f"t{i}", evaluation_criteria=NS(actions=[NS(name=n) for n in names]))

    band = balanced_by_pattern([task(i, "create_task") for i in range(3)] + [task(9, "update_task_status")])
    strata = [gold_pattern(t) for t in band]
    draws = TaskDraws(band, seed=1, strata=strata)
    batches = [draws.draw(2) for _ in range(12)]
    assert all(len({gold_pattern(t) for t in b}) == 2 for b in batches)
    assert {t.id for b in batches[:3] for t in b} == {"t0", "t1", "t2", "t9"}  # a pass covers every create
    plain = TaskDraws(band, seed=1)
    assert any(len({gold_pattern(t) for t in plain.draw(2)}) == 1 for _ in range(20))
    state = draws.state_dict()
    again = TaskDraws(band, seed=1, strata=strata)
    again.load_state_dict(state)
    assert [t.id for t in again.draw(7)] == [t.id for t in draws.draw(7)]
    with pytest.raises(ValueError, match="strata"):
        TaskDraws(band, seed=0, strata=strata[:2])


def test_a_stage_with_the_same_start_reads_step_0s_probe_instead_of_rolling_it_out(tokenizer, tmp_path):  # noqa: F811
    """Two ablation arms from one start that differ in how they update (group size, filtering): the first
    probes and writes the memo, the second takes the band from it and rolls out no probe episode; its record
    names the stage that measured it and spent 0 s. An arm whose probe settings differ (probe_k) measures its own."""
    from kit.train.grpo_memo import StartMemo, start_identity

    def arm(origin, **kw):
        torch.manual_seed(0)
        cfg = small_cfg(**{"probe_k": 8, "probe_every": 0, "tasks_per_step": 2, "resample_budget": 0, **kw})
        memo = StartMemo(tmp_path / "memo", start_identity(cfg, policy="sft-fp/model", user="u", tasks=[t.id for t in TASKS]),
                         origin=origin)
        tr = GRPOTrainer(tiny_llama(tokenizer), tokenizer, TASKS, cfg, rollout_fn=single_turn(6), reward_fn=reward,
                         agent_system=SYSTEM, start_memo=memo)
        calls, real = [], tr._rollout
        tr._rollout = lambda tasks, seed: (calls.append(len(tasks)), real(tasks, seed))[1]
        events = []
        tr.history = tr.train(steps=1, on_event=lambda kind, rec: events.append((kind, rec)))
        probe = next(rec for kind, rec in events if kind == "probe")
        return probe, calls, tr

    first, calls_a, tr_a = arm("runs/x/a/grpo", group_size=4, filter_mode="all_equal")
    # the probe; its episodes (probe_k 8 >= G 4) are the step's two groups (probe_train): nothing more rolled out
    assert "reused_from" not in first and sum(calls_a) == 8 * len(TASKS)
    assert tr_a.history[0]["episodes/from_probe"] == 2 * 4
    assert "curriculum/probe_memo_no_episodes" not in tr_a.history[0]
    first_off, calls_off, _ = arm("runs/x/a-off/grpo", group_size=4, probe_train=False)  # the same start: memo
    assert first_off["reused_from"] == "runs/x/a/grpo" and sum(calls_off) == 2 * 4
    second, calls_b, tr_b = arm("runs/x/b/grpo", group_size=2, filter_mode="off")
    assert second["reused_from"] == "runs/x/a/grpo" and second["probe_s"] == 0.0
    assert second["rates"] == first["rates"] and second["band"] == first["band"]
    assert [t.id for t in tr_b.curriculum.band] == first["band"] or first["band_empty"]
    # the step's two groups of G=2 only: no probe episode, and none of the memo's probe to train on (said)
    assert sum(calls_b) == 2 * 2 and len(tr_b.probe_groups) == 0
    m = tr_b.history[0]
    assert m["curriculum/probe_memo_no_episodes"] == 1 and m["curriculum/probe_train_groups"] == 0
    assert m["episodes/from_probe"] == 0
    third, calls_c, _ = arm("runs/x/c/grpo", group_size=4, probe_k=4)
    assert "reused_from" not in third and sum(calls_c) == 4 * len(TASKS)
    # a memo of other tasks is not taken
    from kit.train.grpo_curriculum import Curriculum

    from kit.train.grpo_memo import adopt_probe

    assert not adopt_probe(Curriculum(TASKS[:2], small_cfg(probe_k=8)), first)


def test_grpo_seeds_of_one_start_probe_it_alike_and_share_its_memo(tokenizer):  # noqa: F811
    """kit.train.grpo_curriculum.start_seed: the probe before step 0 measures the start, so two runs that differ
    only in `seed` roll out the same probe episodes (the same rates, the same band) and share one memo identity;
    their steps draw and sample apart (their first step's rollouts differ)."""
    from kit.train.grpo_memo import start_identity

    def run(seed):
        torch.manual_seed(0)
        cfg = small_cfg(probe_k=8, probe_every=0, tasks_per_step=2, group_size=4, resample_budget=0, seed=seed,
                        probe_train=False)  # the step rolls out its groups: its seed tells the runs apart
        tr = GRPOTrainer(tiny_llama(tokenizer), tokenizer, TASKS, cfg, rollout_fn=single_turn(6), reward_fn=reward,
                         agent_system=SYSTEM)
        seeds, real = [], tr._rollout
        tr._rollout = lambda tasks, s: (seeds.append(s), real(tasks, s))[1]
        events = []
        tr.train(steps=1, on_event=lambda kind, rec: events.append((kind, rec)))
        return next(rec for kind, rec in events if kind == "probe"), seeds, cfg

    (p0, s0, c0), (p3, s3, c3) = run(0), run(3)
    assert p0["rates"] == p3["rates"] and p0["band"] == p3["band"]
    probe_calls = len(s0) - 1  # the last rollout call is the step's
    assert s0[:probe_calls] == s3[:probe_calls] and s0[-1] != s3[-1]
    assert start_identity(c0, policy="p", user="u", tasks=["t"]) == start_identity(c3, policy="p", user="u", tasks=["t"])


def test_the_start_memo_is_read_only_under_its_identity_and_not_by_the_stage_that_wrote_it(tmp_path):
    """kit/train/grpo_memo.py: a field that acts after step 0 (group size, filtering) leaves the identity as it
    is, one that acts before (probe_k, temperature, the tasks) changes it; a stage does not read its own record
    back as reused; the curve takes a point of its own validation tasks only."""
    from types import SimpleNamespace

    from kit.train.grpo_curve import LearningCurve
    from kit.train.grpo_memo import StartMemo, adopt_point, start_identity

    ident = lambda **kw: start_identity(small_cfg(**kw), policy="p", user="u", tasks=["t1"])  # noqa: E731
    assert ident(group_size=2, filter_mode="off", lr=1e-5) == ident(group_size=8)
    assert ident(probe_k=4) != ident(probe_k=8) and ident(temperature=0.6) != ident(temperature=1.0)
    assert start_identity(small_cfg(), policy="p", user="u", tasks=["t2"]) != ident()
    a = StartMemo(tmp_path, ident(), origin="runs/r/a/grpo")
    a.save("curve", {"step": 0, "pass1": 0.25, "ci95": [0.0, 0.5], "tasks": 2, "per_task": {"v1": 0.5}})
    assert a.load("curve") is None                                   # its own record: not "reused"
    b = StartMemo(tmp_path, ident(group_size=2), origin="runs/r/b/grpo")
    point = b.load("curve")
    assert point["reused_from"] == "runs/r/a/grpo" and point["pass1"] == 0.25
    assert StartMemo(tmp_path, ident(probe_k=2), origin="runs/r/c/grpo").load("curve") is None
    curve = LearningCurve([SimpleNamespace(id="v1"), SimpleNamespace(id="v2")], small_cfg(eval_every=2), None)
    assert adopt_point(curve, point) and curve.best["pass1"] == 0.25 and curve.points[-1]["best"]
    assert not adopt_point(curve, point)                                    # step 0 is already there
    other = LearningCurve([SimpleNamespace(id="w1"), SimpleNamespace(id="w2")], small_cfg(eval_every=2), None)
    assert not adopt_point(other, point) and other.points == []
