"""Multi-turn rollouts: the loop (scripted roles), bad model output, limits, real models.

Episodes through an OpenAI endpoint (`transformers serve`): tests/test_rehearsal.py (the engine and every
evaluation of its run sample through served models, one scored by tau2's orchestrator) and
tests/test_llm_openai.py (prompt and native tool modes against a served model)."""

import pytest

from kit.envs import load_domain
from kit.llm.toolcalls import parse_tool_calls
from kit.llm.types import Backend, Completion
from kit.rollout import (RolloutConfig, ScriptedAgent, ScriptedUser, min_episode_steps, run_episodes,
                         step_budget_warning)
from kit.rollout.fidelity import user_deviations
from kit.trajectory import Message, Trajectory
from kit.verify import same_verdict, tau2_verdict, verify

BROKEN = {"update_task_with_history_and_env_assertions"}  # no gold action can satisfy it (see README)


class TextModel(Backend):
    """A stand-in model that always writes the same raw text, for tests about the loop's
    handling of model output (not about a model). The text goes through the real parser."""

    def __init__(self, raw: str):
        self.raw = raw

    def generate_batch(self, conversations, tools=None, params=None):
        text, calls, errors = parse_tool_calls(self.raw)
        return [[Completion(text=text, tool_calls=calls, raw=self.raw, parse_errors=errors)] for _ in conversations]


def test_scripted_gold_policy_reaches_reward_1_on_every_mock_task_through_the_full_loop():
    dom = load_domain("mock")
    for task in dom.tasks():
        trajs = run_episodes(dom, [task] * 2, ScriptedAgent(task), ScriptedUser(task), progress=False)
        for traj in trajs:
            roles = [m.role for m in traj.messages]
            transfer = any(a.name == "transfer_to_human_agents" for a in task.evaluation_criteria.actions or [])
            assert (traj.termination_reason, traj.meta["stop_signal"]) == (
                ("user_stop", "transfer") if transfer else ("agent_stop", None))
            if task.evaluation_criteria.actions:
                assert "tool" in roles and "user" in roles
            want = 0.0 if task.id in BROKEN else 1.0
            assert verify(dom, task, traj).reward == want, task.id
            assert tau2_verdict("mock", task, traj)["reward"] == want


def test_step_budget_fits_a_perfect_dialogue_and_a_tight_one_is_flagged():
    """min_episode_steps bounds the gold (scripted) dialogue of every mock task: with exactly that
    budget it still ends in a stop. A budget without slack is flagged (an evaluation at
    max_steps=8 on mock gave reward 0 to every episode, all cut by max_steps)."""
    dom = load_domain("mock")
    tasks = dom.tasks()
    for task in tasks:
        cfg = RolloutConfig(max_messages=min_episode_steps(task))
        (traj,) = run_episodes(dom, [task], ScriptedAgent(task), ScriptedUser(task), cfg, progress=False)
        assert traj.meta["steps"] <= min_episode_steps(task), task.id
        assert traj.termination_reason in ("agent_stop", "user_stop"), task.id
    assert step_budget_warning(tasks, 30) is None
    w = step_budget_warning(tasks, 8)
    assert w.startswith("max_messages=8 is too tight for 7 of 9 tasks: a perfect dialogue needs 5 messages") and "score 0" in w
    assert "cannot end before max_steps at all" in step_budget_warning(tasks, 4)


def test_scripted_loop_with_user_device_tools_on_telecom():
    dom = load_domain("telecom")
    for task in dom.tasks()[:6]:
        traj = run_episodes(dom, [task], ScriptedAgent(task), ScriptedUser(task), progress=False)[0]
        assert any(tc.requestor == "user" for tc in traj.tool_calls())
        assert verify(dom, task, traj).reward == 1.0
        assert tau2_verdict("telecom", task, traj)["reward"] == 1.0


def test_unparseable_tool_call_text_is_shown_to_the_model_counted_and_the_episode_goes_on():
    dom = load_domain("mock")
    task = dom.tasks()[0]
    agent = TextModel('<tool_call>{"name": "create_task", "arguments": {"user_id": </tool_call>')
    cfg = RolloutConfig(max_messages=40, max_errors=3)
    traj = run_episodes(dom, [task], agent, ScriptedUser(task), cfg, progress=False)[0]
    feedback = [m for m in traj.messages if m.role == "system" and m.meta.get("kind") == "parse_error"]
    assert len(feedback) == 3 and feedback[0].content.startswith("Error: your tool call could not be parsed")
    assert traj.meta["errors"] == 3 and traj.termination_reason == "too_many_errors"
    # the model saw its error: the next agent view ends with the feedback
    from kit.rollout.views import agent_view
    view = agent_view(traj.messages[: traj.messages.index(feedback[0]) + 1], "sys")
    assert view[-1]["content"].startswith("Error: your tool call could not be parsed")


def test_a_model_that_never_stops_ends_at_max_steps():
    dom = load_domain("mock")
    task = dom.tasks()[0]
    agent = TextModel('<tool_call>{"name": "get_users", "arguments": {}}</tool_call>')
    traj = run_episodes(dom, [task], agent, ScriptedUser(task), RolloutConfig(max_messages=9), progress=False)[0]
    assert traj.termination_reason == "max_steps"
    assert 9 <= traj.meta["steps"] <= 11
    assert verify(dom, task, traj).reward == 0.0


def test_bad_tool_calls_from_a_model_stay_scorable_by_tau2():
    """Refused calls (unknown tool, wrong argument names, broken JSON arguments) become error
    observations; tau2 replays the recorded calls and agrees with the kit."""
    dom = load_domain("mock")
    task = dom.tasks()[0]
    for raw in ['<tool_call>{"name": "delete_everything", "arguments": {}}</tool_call>',
                '<tool_call>{"name": "create_task", "arguments": {"owner": "user_1"}}</tool_call>',
                '<tool_call>{"name": "create_task", "arguments": {"user_id": ["user_1"], "title": 3}}</tool_call>']:
        traj = run_episodes(dom, [task], TextModel(raw), ScriptedUser(task), RolloutConfig(max_messages=6), progress=False)[0]
        tool_msgs = [m for m in traj.messages if m.role == "tool"]
        assert tool_msgs and all(m.error for m in tool_msgs)
        assert load_domain("mock").fork(task).diff() == []
        traj.termination_reason = "agent_stop"  # score it as if it had ended normally
        kit, ref = verify(dom, task, traj).summary(), tau2_verdict("mock", task, traj)
        assert not ref.get("error"), ref
        assert same_verdict(kit, ref)


def test_a_call_tau2_runs_although_the_kit_type_check_refuses_it_is_run_so_tau2_can_replay_the_episode():
    """From a laptop-repro GRPO rollout that stopped the stage: update_task_status with a status outside the
    tool's Literal. The kit's type check refused it, tau2's tool runs it (no type check), so tau2's replay of
    the recorded error failed and the verifier raised ReplayError. Now the episode runs it as tau2 does."""
    dom = load_domain("mock")
    task = next(t for t in dom.tasks() if any(a.name == "update_task_status" for a in t.evaluation_criteria.actions or []))
    task_id = next(a.arguments["task_id"] for a in task.evaluation_criteria.actions if a.name == "update_task_status")
    raw = '<tool_call>{"name": "update_task_status", "arguments": {"task_id": "%s", "status": "rem_304"}}</tool_call>' % task_id
    traj = run_episodes(dom, [task], TextModel(raw), ScriptedUser(task), RolloutConfig(max_messages=4), progress=False)[0]
    tool = next(m for m in traj.messages if m.role == "tool")
    assert not tool.error and "rem_304" in tool.content and "Input should be" in tool.meta["refused_by_kit"]
    traj.termination_reason = "agent_stop"
    kit, ref = verify(dom, task, traj).summary(), tau2_verdict("mock", task, traj)  # replays in both, no error
    assert not ref.get("error"), ref
    assert same_verdict(kit, ref) and kit["reward"] == 0.0


def test_user_deviation_checks_flag_invented_facts_unasked_tools_and_early_stops():
    dom = load_domain("telecom")
    task = dom.tasks()[0]
    traj = Trajectory(task_id=task.id, termination_reason="user_stop", messages=[
        Message(role="assistant", content="Hi! How can I help you today?"),
        Message(role="user", content="My account is ZX99123 and my email is ghost@nowhere.io"),
        Message(role="user", content="How can I help you today?"),
        Message(role="user", content="###STOP###"),
    ])
    kinds = [d.kind for d in user_deviations(task, traj, goal_reached=False)]
    assert kinds.count("unsupported_fact") == 2 and "role_flip" in kinds and "premature_stop" in kinds
    clean = Trajectory(task_id=task.id, messages=[Message(role="assistant", content="Hi!"),
                                                  Message(role="user", content="My phone has no data.")])
    assert user_deviations(task, clean) == []


@pytest.mark.parametrize("domain", ["airline", "retail", "telecom"])
def test_big_domains_gold_dialogues_run_the_loop_and_their_prompts_carry_policy_and_tools(domain):
    """What the model-driven test below would add for the big domains (their prompts take a 2-core CPU a
    minute or more to prefill, so it runs mock): the loop plays their gold dialogues to reward 1 in kit and
    tau2, and the agent's first prompt, rendered with the embedded model's tokenizer as the HF backend
    renders it, holds the whole policy and every tool; on telecom the user's first prompt holds the user's
    device tools (its gold dialogues call them: the scripted telecom test above)."""
    from transformers import AutoTokenizer

    from kit.llm import ensure_embedded_model
    from kit.llm.prompting import render_prompt
    from kit.rollout.prompts import agent_system_prompt
    from kit.rollout.views import agent_view

    dom = load_domain(domain)
    for task in [t for t in dom.tasks() if t.evaluation_criteria.actions][:2]:
        (traj,) = run_episodes(dom, [task], ScriptedAgent(task), ScriptedUser(task), progress=False)
        assert verify(dom, task, traj).reward == 1.0 and tau2_verdict(domain, task, traj)["reward"] == 1.0, task.id
    tok = AutoTokenizer.from_pretrained(ensure_embedded_model())
    conv = agent_view([Message(role="assistant", content="Hi! How can I help you today?"),
                       Message(role="user", content="I need help with my booking.")], agent_system_prompt(dom.policy))
    prompt = render_prompt(tok, conv, dom.tool_schemas("assistant"), "prompt")
    assert dom.policy.strip()[-200:] in prompt and prompt.rstrip().endswith("assistant")
    assert all(f'"{t}"' in prompt for t in dom.tool_names("assistant"))
    assert len(tok(prompt)["input_ids"]) > 2000
    if dom.tool_names("user"):
        from kit.rollout.prompts import user_system_prompt
        from kit.rollout.views import user_view

        task = dom.tasks()[0]
        system = user_system_prompt(task, True)
        uconv = user_view([Message(role="assistant", content="Hi! How can I help you today?")], system)
        uprompt = render_prompt(tok, uconv, dom.tool_schemas("user"), "prompt")
        assert system.strip()[-200:] in uprompt
        assert all(f'"{t}"' in uprompt for t in dom.tool_names("user"))


@pytest.mark.slow
# airline, retail and telecom: the test above (their prompts hold policy and tools, telecom's user prompt its
# device tools; their gold dialogues through the loop)
def test_embedded_model_episodes_through_the_hf_backend(hf_backend):
    domain = "mock"
    dom = load_domain(domain)
    task = dom.tasks()[0]
    from kit.llm.types import SamplingParams
    group = 2
    cfg = RolloutConfig(max_messages=4, seed=0,
                        agent_params=SamplingParams(temperature=1.0, max_new_tokens=24),
                        user_params=SamplingParams(temperature=1.0, max_new_tokens=24))
    trajs = run_episodes(dom, [task] * group, hf_backend, hf_backend, cfg, progress=False)
    assert len(trajs) == group
    for traj in trajs:
        assert traj.termination_reason in {"max_steps", "agent_stop", "user_stop", "too_many_errors"}
        generated = [m for m in traj.messages if m.meta.get("completion_tokens")]
        assert {m.role for m in generated} == {"user", "assistant"}, "both roles must have generated"
        ref = tau2_verdict(domain, task, traj)  # tau2 can score what the kit produced
        assert same_verdict(verify(dom, task, traj).summary(), ref), ref


@pytest.mark.slow
def test_rollout_bench_alternates_repeats_of_the_same_work_and_keeps_each_sides_fastest(hf_backend):
    """`kit bench rollout`'s function at a tiny size (not a speed check: no timing is asserted)."""
    import re

    from kit.bench.rollout import bench_rollout

    lines = []
    res = bench_rollout(hf_backend, "mock", 0, group=2, max_messages=2, max_new_tokens=4, log=lines.append, repeat=2)
    repeats = [re.match(r"repeat (\d)/2: (kit|kit-sequential) (\d+) tokens in ([\d.]+) s", x)
               for x in lines if x.startswith("repeat")]
    assert [m.group(1) for m in repeats] == ["1", "1", "2", "2"]
    assert [m.group(2) for m in repeats] == ["kit", "kit-sequential", "kit-sequential", "kit"]  # alternating
    runs = {arm: [(int(m.group(3)), float(m.group(4))) for m in repeats if m.group(2) == arm]
            for arm in ("kit", "kit-sequential")}
    assert all(len({n for n, _ in r}) == 1 for r in runs.values())  # the same seeds: the same tokens each time
    assert res.tokens == (runs["kit"][0][0], runs["kit-sequential"][0][0]) and min(res.tokens) > 0
    assert abs(res.batched_s - min(s for _, s in runs["kit"])) < 0.06
    assert abs(res.sequential_s - min(s for _, s in runs["kit-sequential"])) < 0.06
    assert sum(x.startswith("kit profile: prefill") for x in lines) == 2
    assert re.fullmatch(r"rollout speedup: [\d.]+x \([\d.]+ tok/s vs [\d.]+ tok/s\)", res.line())
    with pytest.raises(ValueError, match="repeat must be >= 1"):
        bench_rollout(hf_backend, "mock", 0, group=2, repeat=0)
    with pytest.raises(ValueError, match="continuous batching was removed"):
        bench_rollout(hf_backend, "mock", 0, group=2, continuous=True)


@pytest.fixture(scope="module")
def hf_backend():
    import torch

    from kit.llm import make_backend

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield make_backend("embedded")
    torch.set_num_threads(threads)
