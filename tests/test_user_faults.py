"""User-fault-aware groups (kit/train/grpo_groups.py, GRPOConfig.user_faults): a failed episode that failure
attribution (kit/checkers/attribution.py) puts on the user simulator is left out of its group's advantage and
replaced by a fresh episode of the same task within the resample budget ("mask"), or trained on ("keep").

The episodes are real kit Trajectory objects on the tau2 mock domain, scored by the real checker
(kit.verify.verify) and attributed by the real rules (UserFaultCheck), so each one's attribution is known
by construction. The rollout is a fake that returns them in a scripted order: these are unit tests of the
grouping (what is masked, replaced, charged and counted), not of a model's episodes.
"""

from types import SimpleNamespace

import pytest

from kit import metrics as M
from kit.checkers.attribution import USER_RULES, attribute
from kit.envs import load_domain
from kit.replay import trajectory_from_actions
from kit.rollout.fidelity import user_deviations
from kit.train.grpo_config import GRPOConfig
from kit.train.grpo_groups import TaskDraws, UserFaultCheck, collect_groups, episode_metrics
from kit.train.grpo_math import group_advantages
from kit.train.processes import Processes
from kit.trajectory import Message, ToolCall, Trajectory
from kit.verify import verify

DOM = load_domain("mock")
TASK = DOM.task("create_task_1")  # gold: create_task(user_id=user_1, title=Important Meeting)
OPENING = "Please create a task called 'Important Meeting' for user_1."
GREETING = "Hi! How can I help you today?"


def _episode(kind: str) -> Trajectory:
    """One episode of TASK whose verdict and attribution are known (EXPECTED)."""
    if kind == "pass":
        call = ToolCall(id="c0", name="create_task", arguments={"user_id": "user_1", "title": "Important Meeting"})
        return trajectory_from_actions(DOM, TASK, [call], "I've created the task.", "agent_stop", opening=OPENING)
    if kind == "pass_deviating":  # the user invents an id, the agent still gets it right: passed, never masked
        call = ToolCall(id="c0", name="create_task", arguments={"user_id": "user_1", "title": "Important Meeting"})
        return trajectory_from_actions(DOM, TASK, [call], "I've created the task.", "agent_stop",
                                       opening=OPENING + " My employee number is 4471923.")
    if kind == "agent_fail":  # the request was stated; the agent wrote the wrong title
        call = ToolCall(id="c0", name="create_task", arguments={"user_id": "user_1", "title": "Meeting"})
        return trajectory_from_actions(DOM, TASK, [call], "I've created the task.", "agent_stop", opening=OPENING)
    if kind == "premature_stop":  # the user hangs up at once
        return Trajectory(task_id=TASK.id, termination_reason="user_stop", meta={"stop_signal": "stop"}, messages=[
            Message(role="assistant", content=GREETING), Message(role="user", content="Never mind. ###STOP###")])
    if kind == "early_end":  # the user asks for a human before the agent could do anything
        return Trajectory(task_id=TASK.id, termination_reason="user_stop", meta={"stop_signal": "transfer"}, messages=[
            Message(role="assistant", content=GREETING), Message(role="user", content="###TRANSFER###")])
    if kind == "ungiven_tool":  # the user calls the agent's tool itself (mock's user has no tools)
        call = ToolCall(id="u0", name="create_task", arguments={"user_id": "user_1", "title": "x"}, requestor="user")
        return Trajectory(task_id=TASK.id, termination_reason="agent_stop", messages=[
            Message(role="assistant", content=GREETING), Message(role="user", tool_calls=[call]),
            Message(role="tool", content="Error: unknown tool", tool_call_id="u0", requestor="user", error=True),
            Message(role="assistant", content="I can help with that. ###STOP###")])
    if kind == "request_not_stated":  # asked twice, the user never says what it wants; the messages run out
        return Trajectory(task_id=TASK.id, termination_reason="max_steps", messages=[
            Message(role="assistant", content=GREETING), Message(role="user", content="Hi, I need some help."),
            Message(role="assistant", content="Sure, what would you like me to do?"),
            Message(role="user", content="Something about my work, I guess."),
            Message(role="assistant", content="Could you tell me which task and for whom?")])
    raise ValueError(kind)


# kind -> (checker reward, attribution label and rule of a failure)
EXPECTED = {"pass": (1.0, None), "pass_deviating": (1.0, None), "agent_fail": (0.0, ("agent", "wrong_write")),
            "premature_stop": (0.0, ("user", "premature_stop")), "early_end": (0.0, ("user", "early_end")),
            "ungiven_tool": (0.0, ("user", "ungiven_tool")),
            "request_not_stated": (0.0, ("user", "request_not_stated"))}


def reward_fn(task, traj):
    return verify(DOM, task, traj).reward


def scripted(*calls):
    """A fake rollout: its k-th call returns the episodes `calls[k]` names (one per task asked for)."""
    log = []

    def rollout(tasks, seed):
        kinds = calls[len(log)]
        assert len(kinds) == len(tasks), (len(log), kinds, len(tasks))
        log.append((list(kinds), seed))
        return [_episode(k) for k in kinds]

    return rollout, log


def procs():
    return Processes(SimpleNamespace(num_processes=1, process_index=0))


def cfg(**kw):
    return GRPOConfig(**{"group_size": 4, "tasks_per_step": 1, "resample_budget": 1, "filter_mode": "all_equal",
                         "seed": 0, **kw})


def collect(config, rollout, **kw):
    return collect_groups(TaskDraws([TASK], seed=0), procs(), config, 0, rollout, reward_fn,
                          user_fault=UserFaultCheck(DOM), **kw)


def test_each_hand_made_episode_has_the_verdict_and_attribution_it_was_built_for():
    assert set(USER_RULES) >= {a[1] for _, a in EXPECTED.values() if a and a[0] == "user"}
    for kind, (reward, att) in EXPECTED.items():
        traj = _episode(kind)
        assert reward_fn(TASK, traj) == reward, kind
        if att is not None:
            a = attribute(DOM, TASK, traj)
            assert (a.label, a.rule) == att, (kind, a)
            assert UserFaultCheck(DOM)(TASK, traj) == (att[1] if att[0] == "user" else None)
    assert user_deviations(TASK, _episode("pass_deviating"), goal_reached=True)  # a deviating user, yet a pass


def test_mask_leaves_user_faults_out_and_replaces_them_within_the_budget():
    """G = 4, budget 1 task = 4 episodes. Two of the first four are user faults: two replacements are drawn
    (one call), one of them a user fault again: one more, again: one more; then the budget is spent."""
    rollout, log = scripted(["pass", "agent_fail", "premature_stop", "early_end"],
                            ["pass", "ungiven_tool"], ["request_not_stated"], ["agent_fail"])
    kept, seen, m = collect(cfg(), rollout)
    assert [len(k) for k, _ in log] == [4, 2, 1, 1]  # never more than were masked; 4 + 4 = G x B + budget x G
    assert len({s for _, s in log}) == 4  # a fresh seed per call
    (g,) = seen
    assert kept == [g]
    assert g.rewards == [1.0, 0.0, 1.0, 0.0] and g.scores == g.rewards  # only the agent's episodes
    assert all(UserFaultCheck(DOM)(TASK, t) is None for t in g.trajs)
    assert sorted(g.user_faults) == sorted(["premature_stop", "early_end", "ungiven_tool", "request_not_stated"])
    assert len(g.masked) == 4 and all(r == 0.0 for _, r in g.masked) and g.replaced == 4
    assert group_advantages([g.scores])[0] == pytest.approx([1.0, -1.0, 1.0, -1.0], abs=1e-4)
    assert m[M.USER_FAULTS] == 4 and m[M.USER_FAULT_MASKED] == 4 and m[M.USER_FAULT_RESAMPLED] == 4
    assert m[M.GROUPS_RESAMPLES] == 0  # no task was drawn: the budget went to replacements
    for rule in g.user_faults:
        assert m[M.user_fault_key(rule)] == 1
    # every episode scored counts in the step's reward and user metrics (and the episode budget)
    em = episode_metrics(seen, DOM)
    assert em["proc/episodes"] == 8 and em[M.PASS_RATE] == 2 / 8


def test_a_passed_episode_is_never_masked_and_an_agents_failure_stays():
    rollout, log = scripted(["pass_deviating", "agent_fail", "agent_fail", "pass"])
    kept, seen, m = collect(cfg(), rollout)
    assert len(log) == 1 and kept[0].rewards == [1.0, 0.0, 0.0, 1.0] and kept[0].masked == []
    assert m[M.USER_FAULTS] == 0 and m[M.USER_FAULT_MASKED] == 0 and m[M.USER_FAULT_RESAMPLED] == 0


def test_keep_trains_on_user_faults_and_still_counts_them():
    rollout, log = scripted(["pass", "agent_fail", "premature_stop", "early_end"])
    kept, seen, m = collect(cfg(user_faults="keep"), rollout)
    assert len(log) == 1  # nothing is replaced
    assert kept[0].rewards == [1.0, 0.0, 0.0, 0.0] and kept[0].masked == [] and kept[0].replaced == 0
    assert m[M.USER_FAULTS] == 2 and m[M.USER_FAULT_MASKED] == 0 and m[M.USER_FAULT_RESAMPLED] == 0
    assert m[M.user_fault_key("premature_stop")] == m[M.user_fault_key("early_end")] == 1


def test_without_budget_nothing_is_replaced_and_a_group_left_with_one_episode_is_dropped():
    rollout, log = scripted(["pass", "agent_fail", "premature_stop", "early_end"])
    kept, seen, m = collect(cfg(resample_budget=0), rollout)
    assert len(log) == 1 and kept[0].rewards == [1.0, 0.0] and m[M.USER_FAULT_RESAMPLED] == 0
    rollout, log = scripted(["pass", "premature_stop", "early_end", "ungiven_tool"])
    kept, seen, m = collect(cfg(resample_budget=0), rollout)
    assert kept == [] and seen[0].rewards == [1.0] and m[M.FILTERED_FRAC] == 1.0  # one episode: no advantage


def test_a_replacement_spends_one_episode_of_the_budget_a_resampled_task_g():
    """G = 2, B = 2, budget 1 task = 2 episodes. The first group loses one episode to the user and gets a
    replacement (1 episode); the second group is all-equal and filtered, but the 1 episode left cannot pay
    for a task of 2: no task is resampled. With budget 2 tasks (4 episodes) the 3 left pay for one."""
    calls = (["pass", "premature_stop", "agent_fail", "agent_fail"], ["agent_fail"], ["pass", "agent_fail"])
    rollout, log = scripted(*calls)
    kept, seen, m = collect_groups(TaskDraws([TASK], seed=0), procs(), cfg(group_size=2, tasks_per_step=2), 0,
                                   rollout, reward_fn, user_fault=UserFaultCheck(DOM))
    assert [len(k) for k, _ in log] == [4, 1] and len(kept) == 1 and kept[0].rewards == [1.0, 0.0]
    assert m[M.USER_FAULT_RESAMPLED] == 1 and m[M.GROUPS_RESAMPLES] == 0
    rollout, log = scripted(*calls)
    kept, seen, m = collect_groups(TaskDraws([TASK], seed=0), procs(), cfg(group_size=2, tasks_per_step=2,
                                   resample_budget=2), 0, rollout, reward_fn, user_fault=UserFaultCheck(DOM))
    assert [len(k) for k, _ in log] == [4, 1, 2] and len(kept) == 2
    assert m[M.USER_FAULT_RESAMPLED] == 1 and m[M.GROUPS_RESAMPLES] == 1
    # an episode-budget cap (resample_limit, in tasks) caps replacements too
    rollout, log = scripted(*calls)
    kept, seen, m = collect_groups(TaskDraws([TASK], seed=0), procs(), cfg(group_size=2, tasks_per_step=2,
                                   resample_budget=2), 0, rollout, reward_fn, resample_limit=0,
                                   user_fault=UserFaultCheck(DOM))
    assert len(log) == 1 and m[M.USER_FAULT_RESAMPLED] == 0 and m[M.USER_FAULT_MASKED] == 1


def test_without_an_attribution_nothing_is_masked_or_counted():
    rollout, log = scripted(["pass", "agent_fail", "premature_stop", "early_end"])
    kept, seen, m = collect_groups(TaskDraws([TASK], seed=0), procs(), cfg(), 0, rollout, reward_fn)
    assert kept[0].rewards == [1.0, 0.0, 0.0, 0.0] and M.USER_FAULTS not in m


def test_the_counts_are_summed_over_processes_and_the_step_records_them_per_group():
    """GRPOTrainer.step on the mock domain with the scripted rollout and a tiny random model: the step's
    metrics and its per-group record carry the counts (the update itself is not under test here: the
    hand-made turns carry no sampled token ids, so the step may skip)."""
    import torch
    from test_grpo_learning import tiny_llama
    from transformers import AutoTokenizer

    from kit.llm import ensure_embedded_model
    from kit.train import grpo
    from kit.train.grpo import GRPOTrainer

    for key in (M.USER_FAULTS, M.USER_FAULT_MASKED, M.USER_FAULT_RESAMPLED, *map(M.user_fault_key, USER_RULES)):
        assert key in grpo._SUMMED
    tok = AutoTokenizer.from_pretrained(ensure_embedded_model())
    rollout, _ = scripted(["pass", "agent_fail", "premature_stop", "early_end"], ["pass", "agent_fail"])
    torch.manual_seed(0)
    tr = GRPOTrainer(tiny_llama(tok), tok, [TASK], cfg(print_metrics=False, train_steps=1), domain=DOM,
                     rollout_fn=lambda tasks, agent, seed: rollout(tasks, seed))
    m = tr.step()
    assert m[M.USER_FAULTS] == 2 and m[M.USER_FAULT_MASKED] == 2 and m[M.USER_FAULT_RESAMPLED] == 2
    (g,) = m["groups"]
    assert g["rewards"] == [1.0, 0.0, 1.0, 0.0] and g["user_faults"] == 2 and g["masked"] == 2 and g["replaced"] == 2
    assert tr.episodes_scored == 6  # the masked episodes were rolled out and scored: they count
