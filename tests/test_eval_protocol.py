"""The evaluation protocol: user-simulator measures (request_stated, proper_end), the pass^1 interval,
and the train/test leak check. Fast: hand-built trajectories on the tau2 mock domain, no model."""

from __future__ import annotations

import json

import pytest

from kit.envs import load_domain
from kit.eval import EvalConfig, evaluate
from kit.eval.leak import action_key, gold_action_keys, leak_report, run_training_data, training_action_keys
from kit.eval.passk import pass1_interval, pass_k_table
from kit.replay import gold_actions, trajectory_from_actions
from kit.rollout.fidelity import proper_end, request_stated, required_user_values
from kit.trajectory import TERMINATION_REASONS, Message, Trajectory


@pytest.fixture(scope="module")
def mock():
    return load_domain("mock")


def _task(dom, task_id):
    return next(t for t in dom.tasks(None) if t.id == task_id)


def _with_first_user_turn(dom, task, text):
    traj = trajectory_from_actions(dom, task, gold_actions(task), final_text="Done.")
    msgs = list(traj.messages)
    i = next(i for i, m in enumerate(msgs) if m.role == "user")
    msgs[i] = Message(role="user", content=text)
    return traj.model_copy(update={"messages": msgs})


# ----- request_stated ----------------------------------------------------------------------------


def test_required_values_are_the_gold_write_arguments_the_user_knows(mock):
    assert required_user_values(_task(mock, "create_task_1"), domain=mock) == ["user_1", "important meeting"]
    assert required_user_values(_task(mock, "update_task_1"), domain=mock) == ["task_1", "completed"]
    # the transfer's summary is not in the scenario; nl-eval tasks have no gold actions
    assert required_user_values(_task(mock, "impossible_task_1"), domain=mock) == []
    assert required_user_values(_task(mock, "create_task_1"), is_write=lambda name, req: False) == []


def test_request_stated_on_hand_written_first_user_turns(mock):
    task = _task(mock, "create_task_1")
    good = _with_first_user_turn(mock, task, "Please create a task called 'Important Meeting' for user_1")
    bad = _with_first_user_turn(mock, task, "Hi, I need some help.")
    half = _with_first_user_turn(mock, task, "Please create a task called Important Meeting.")
    assert request_stated(task, good, domain=mock) is True
    assert request_stated(task, bad, domain=mock) is False
    assert request_stated(task, half, domain=mock) is False
    # case, quotes and commas do not matter
    loud = _with_first_user_turn(mock, task, 'CREATE "IMPORTANT, MEETING" FOR USER_1 please')
    assert request_stated(task, loud, domain=mock) is True
    # only the first user message with text counts: a later complete request does not
    later = bad.model_copy(update={"messages": bad.messages + [
        Message(role="user", content="Create 'Important Meeting' for user_1")]})
    assert request_stated(task, later, domain=mock) is False
    # no user text at all
    silent = Trajectory(task_id=task.id, messages=[Message(role="assistant", content="Hello")])
    assert request_stated(task, silent, domain=mock) is False


def test_request_stated_is_none_without_values_to_state(mock):
    for tid in ("impossible_task_1", "create_task_1_nl_eval"):
        task = _task(mock, tid)
        traj = _with_first_user_turn(mock, task, "Please delete all my tasks.")
        assert request_stated(task, traj, domain=mock) is None


# ----- proper_end --------------------------------------------------------------------------------


@pytest.mark.parametrize("reason", TERMINATION_REASONS)
def test_proper_end_on_each_termination(mock, reason):
    task = _task(mock, "create_task_1")
    traj = trajectory_from_actions(mock, task, gold_actions(task), final_text="Done.", termination_reason=reason)
    assert proper_end(traj) is (reason in ("user_stop", "agent_stop"))


# ----- pass^1 interval ---------------------------------------------------------------------------


def test_bootstrap_interval_contains_the_mean_and_is_reproducible():
    results = {f"t{i}": [1.0, 0.0, 1.0, 1.0] if i % 3 else [0.0, 0.0, 0.0, 1.0] for i in range(12)}
    p1 = pass_k_table(results, max_k=1)[1]
    point, lo, hi = pass1_interval(results)
    assert point == pytest.approx(p1) and 0.0 <= lo <= p1 <= hi <= 1.0 and lo < hi
    assert pass1_interval(results) == (point, lo, hi)  # fixed seed
    _, lo99, hi99 = pass1_interval(results, ci=0.99)
    assert lo99 <= lo and hi <= hi99


def test_bootstrap_interval_is_a_point_when_every_trial_succeeds_or_fails():
    assert pass1_interval({"a": [1.0, 1.0], "b": [1.0, 1.0], "c": [1.0, 1.0]}) == (1.0, 1.0, 1.0)
    assert pass1_interval({"a": [0.0], "b": [0.5]}) == (0.0, 0.0, 0.0)  # partial reward is not a success
    with pytest.raises(ValueError):
        pass1_interval({})


# ----- leak check --------------------------------------------------------------------------------


def _sft_line(name, arguments):
    return json.dumps({"role": "agent", "task_id": "synth_0", "messages": [
        {"role": "system", "content": "policy"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c0", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}]},
    ]})


def test_gold_keys_are_canonical(mock):
    task = _task(mock, "create_task_1")
    assert gold_action_keys(task) == {("create_task", '{"title":"Important Meeting","user_id":"user_1"}')}
    assert action_key("create_task", '{"user_id": "user_1", "title": "Important Meeting"}') in gold_action_keys(task)
    assert gold_action_keys(_task(mock, "create_task_1_nl_eval")) == set()


def test_training_keys_from_task_rl_task_and_sft_files(mock, tmp_path):
    t1, t2 = _task(mock, "create_task_1"), _task(mock, "update_task_1")
    (tmp_path / "tasks.jsonl").write_text(t1.model_dump_json() + "\n")
    (tmp_path / "rl_tasks.jsonl").write_text(json.dumps({"task": json.loads(t2.model_dump_json()),
                                                         "checker": {}}) + "\n")
    (tmp_path / "sft_agent.jsonl").write_text(_sft_line("get_users", {}) + "\n")
    (tmp_path / "other.jsonl").write_text(_sft_line("never_read", {}) + "\n")  # not a training file name
    keys = training_action_keys([tmp_path])
    assert gold_action_keys(t1) | gold_action_keys(t2) | {("get_users", "{}")} == keys
    assert ("never_read", "{}") in training_action_keys([tmp_path / "other.jsonl"])
    with pytest.raises(FileNotFoundError):
        training_action_keys([tmp_path / "missing"])


def test_leak_check_refuses_an_overlapping_run_before_any_model(mock, tmp_path, monkeypatch):
    gold = gold_actions(_task(mock, "create_task_1"))[0]
    train = tmp_path / "sft_agent"
    train.mkdir()
    (train / "sft_agent.jsonl").write_text(_sft_line(gold.name, gold.arguments) + "\n")

    import kit.llm

    def no_model(*a, **k):
        raise AssertionError("a model was loaded before the leak check")

    monkeypatch.setattr(kit.llm, "make_backend", no_model)
    cfg = EvalConfig(domain="mock", trials=1, training_data=[str(train)], out_dir=str(tmp_path / "ev"))
    with pytest.raises(ValueError, match=r"evaluation tasks overlap the training data: 2 of \d+ tasks") as e:
        evaluate(cfg, progress=False)
    assert "create_task_1" in str(e.value) and "sft_agent.jsonl" in str(e.value)
    assert not (tmp_path / "ev" / "trajectories.jsonl").exists()


def test_leak_report_passes_a_disjoint_run(mock, tmp_path):
    p = tmp_path / "sft_agent.jsonl"
    p.write_text(_sft_line("create_task", {"user_id": "user_2", "title": "Something else"}) + "\n"
                 + _sft_line("get_users", {}) + "\n")
    tasks = mock.tasks(None)
    rep = leak_report(tasks, training_action_keys([p]))
    assert rep["n_overlap"] == 0 and rep["overlapping_task_ids"] == [] and rep["n_tasks"] == len(tasks)
    rep = leak_report(tasks, gold_action_keys(_task(mock, "update_task_1")))
    assert rep["overlapping_task_ids"] == ["update_task_1"]


def test_run_training_data_lists_earlier_training_stages(tmp_path):
    run = tmp_path / "run"
    stages = []
    for key, stage, summary in [("synthesize", "synthesize", {}), ("sft_agent", "sft_agent", {}),
                                ("grpo", "grpo", {"task_source": "fallback:default set, no split 'train'"}),
                                ("evaluate", "evaluate", {}), ("sft_late", "sft_agent", {})]:
        (run / key).mkdir(parents=True)
        stages.append({"key": key, "stage": stage, "id": key, "arm": None, "status": "complete",
                       "executed_notebook": str(run / key / f"{key}.ipynb"), "summary": summary})
    stages[3]["status"] = "running"
    (run / "manifest.json").write_text(json.dumps({"stages": stages}))
    got = run_training_data(run, before="evaluate")
    assert got == [str(run / "synthesize"), str(run / "sft_agent"), str(run / "grpo"), "split:default"]


# ----- evaluate: columns, meta ---------------------------------------------------------------------


def test_evaluate_reports_protocol_columns_and_meta(mock, tmp_path):
    from kit.rollout import ScriptedAgent, ScriptedUser

    task = _task(mock, "update_task_1")
    p = tmp_path / "t.json"
    p.write_text(json.dumps([json.loads(task.model_dump_json())]))
    other = tmp_path / "sft_agent.jsonl"
    other.write_text(_sft_line("get_users", {}) + "\n")
    cfg = EvalConfig(domain="mock", tasks_file=str(p), trials=2, temperature=0.6, training_data=[str(other)])
    res = evaluate(cfg, agent=ScriptedAgent(task), user=ScriptedUser(task), progress=False)
    df = res.episodes
    assert {"request_stated", "proper_end"} <= set(df.columns)
    assert df["proper_end"].all()
    assert res.meta["proper_end_rate"] == 1.0
    # the scripted user opens with a generic greeting: the request is not stated
    assert res.meta["request_stated_rate"] == 0.0
    assert res.meta["pass1_ci95"] == [res.passk[1], res.passk[1]]
    assert res.meta["leak"]["n_overlap"] == 0 and res.meta["leak"]["checked_files"] == [str(other)]
    # allowed overlap: evaluated, recorded, warned
    cfg.training_data, cfg.allow_overlap = [str(p)], True
    res = evaluate(cfg, agent=ScriptedAgent(task), user=ScriptedUser(task), progress=False)
    assert res.meta["leak"]["n_overlap"] == 1 and any("overlap" in w for w in res.meta["warnings"])


def test_report_shows_the_protocol_columns():
    import pandas as pd

    from kit.report.build import eval_table

    eps = pd.DataFrame([{"task_id": t, "trial": 0, "reward": r} for t, r in (("a", 1.0), ("b", 0.0))])
    meta = {"domain": "mock", "tasks": 2, "trials": 1, "user_deviation_rate": 0.5, "request_stated_rate": 0.25,
            "proper_end_rate": 0.75, "pass1_ci95": [0.0, 1.0], "leak": {"n_overlap": 1, "n_tasks": 2, "checked_files": []},
            "infra_failures": 3}
    old = {k: v for k, v in meta.items() if k not in ("request_stated_rate", "proper_end_rate", "pass1_ci95", "leak",
                                                      "infra_failures")}
    evs = [{"episodes": eps, "meta": m, "passk": {1: 0.5}, "summary": {}, "params": {}, "key": k, "arm": None}
           for k, m in (("new", meta), ("old", old))]
    table = eval_table(evs, 200, 0.95)
    row = table.iloc[0]
    assert (row["request stated"], row["proper end"], row["pass^1 95% CI"]) == (0.25, 0.75, "[0.000, 1.000]")
    assert row["train/test overlap"] == "1/2"
    assert row["episodes a server failed (not scored)"] == 3
    assert table.iloc[1][["request stated", "proper end", "pass^1 95% CI"]].isna().all()  # an older eval.json
    assert (row["agent T"], row["user T"]) == (None, None)  # not recorded: shown as missing, never as 0


# ----- pass^1 by task shape and phrasing -----------------------------------------------------------


def test_pass1_is_broken_down_by_shape_and_phrasing_in_eval_json_and_the_report(mock, tmp_path):
    """A real evaluation over held-out tasks of two phrasings and one of tau2's own: the agent replays one
    task's gold, so exactly that task passes; eval.json, every episode row and the report's tables say so."""
    from _fake_run import _stage

    from kit.data import task_meta
    from kit.files import write_json
    from kit.rollout import ScriptedAgent, ScriptedUser
    from kit.report.build import build_report
    from kit.stages import outputs_class

    held = mock.tasks("heldout")
    solved = next(t for t in held if (task_meta(t)["shape"], task_meta(t)["phrasing"]) == ("lookup_create", "free_form"))
    tasks = [held[0], solved, held[2], _task(mock, "update_task_1")]  # create / complete (template), tau2's own
    p = tmp_path / "tasks.json"
    p.write_text(json.dumps([json.loads(t.model_dump_json()) for t in tasks]))
    run = tmp_path / "runs" / "bd"
    st, entry = _stage(run, "evaluate", "evaluate")
    cfg = EvalConfig(domain="mock", tasks_file=str(p), trials=2, temperature=0.6, user_temperature=0.6,
                     out_dir=str(st.out_dir))
    res = evaluate(cfg, agent=ScriptedAgent(solved), user=ScriptedUser(solved), progress=False)
    assert res.passk[1] == 0.25
    assert res.meta["pass1_by_phrasing"] == {"template": {"pass^1": 0.0, "tasks": 2},
                                             "free_form": {"pass^1": 1.0, "tasks": 1},
                                             "tau2": {"pass^1": 0.0, "tasks": 1}}
    assert res.meta["pass1_by_shape"] == {"create": {"pass^1": 0.0, "tasks": 1},
                                          "lookup_create": {"pass^1": 1.0, "tasks": 1},
                                          "complete": {"pass^1": 0.0, "tasks": 1},
                                          "update_task_status": {"pass^1": 0.0, "tasks": 1}}
    rows = json.loads((st.out_dir / "eval.json").read_text())["episodes"]
    assert {(r["task_id"], r["shape"], r["phrasing"]) for r in rows} == {
        (held[0].id, "create", "template"), (solved.id, "lookup_create", "free_form"),
        (held[2].id, "complete", "template"), ("update_task_1", "update_task_status", "tau2")}
    st.finish(outputs_class("evaluate")(files={"eval": str(st.out_dir / "eval.json"),
                                               "episodes": str(st.out_dir / "episodes.csv")},
                                        label="scripted", passk={"1": 0.25}, model="embedded",
                                        user_model="embedded", tasks=4, trials=2))
    write_json(run / "manifest.json", {"run_id": "bd", "recipe": {"path": "x", "parsed": {"name": "bd"}},
                                       "stages": [entry]})
    rep = build_report(run, tmp_path / "rep", bootstrap=50)
    by = rep.data["eval_breakdown"]
    assert by["phrasing"].to_dict("records") == [{"evaluation": "scripted", "template": "0.00 (2)",
                                                  "free_form": "1.00 (1)", "tau2": "0.00 (1)"}]
    assert list(by["shape"].columns) == ["evaluation", "create", "lookup_create", "complete", "update_task_status"]
    row = rep.data["eval_table"].iloc[0]
    assert (row["agent T"], row["user T"]) == (0.6, 0.6)
    page = rep.html_path.read_text(encoding="utf-8")
    assert "pass^1 by phrasing and by task shape" in page and "<th>free_form</th>" in page


def test_the_breakdown_reads_older_eval_json_from_its_episode_rows_or_shows_nothing():
    import pandas as pd

    from kit.report.build import breakdown_table

    eps = pd.DataFrame([{"task_id": t, "trial": k, "reward": r, "shape": s, "phrasing": ph}
                        for t, s, ph, rs in (("a", "create", "free_form", [1.0, 0.0]), ("b", "create", "template",
                                                                                        [1.0, 1.0]))
                        for k, r in enumerate(rs)])
    ev = {"episodes": eps, "meta": {}, "passk": {1: 0.75}, "summary": {"label": "rows only"}, "params": {},
          "key": "e", "arm": None}
    table = breakdown_table([ev], "phrasing")
    assert table.to_dict("records") == [{"evaluation": "rows only", "template": "1.00 (1)", "free_form": "0.50 (1)"}]
    assert breakdown_table([ev], "shape").to_dict("records") == [{"evaluation": "rows only", "create": "0.75 (2)"}]
    bare = {**ev, "episodes": eps.drop(columns=["shape", "phrasing"])}
    assert breakdown_table([bare], "shape") is None  # an eval.json from before the labels: no table


def test_token_caps_that_cut_a_gold_call_or_the_opening_are_counted_and_said(mock):
    """kit.rollout.loop.token_caps_cut with the embedded tokenizer on tau2's 9 mock tasks: at 48 tokens per turn
    one gold tool call (52 tokens as the agent must write it) and one customer opening (49 tokens) do not fit,
    so those tasks score 0 whatever the agent knows; at 64 nothing is cut. Measured when written, in the
    tokenizer the evaluation's agent uses (kit/eval/runner.py records it in meta["token_caps"])."""
    from transformers import AutoTokenizer

    from kit.llm.embedded import ensure_embedded_model
    from kit.rollout.loop import token_caps_cut

    tok = AutoTokenizer.from_pretrained(ensure_embedded_model())
    tasks = mock.tasks("default")
    tight = token_caps_cut(mock, tasks, 48, 48, tok)
    assert (tight["calls"], tight["calls_cut"], tight["longest_call"], tight["tasks_cut"]) == (7, 1, 52, 1)
    assert (tight["openings"], tight["openings_cut"], tight["longest_opening"]) == (9, 1, 49)
    assert "max_new_tokens=48 cuts 1 of 7 gold tool calls" in tight["warning"]
    assert "user_max_new_tokens=48 cuts the customer's opening request in 1 of 9" in tight["warning"]
    roomy = token_caps_cut(mock, tasks, 64, 64, tok)
    assert roomy["calls_cut"] == roomy["openings_cut"] == 0 and roomy["warning"] is None
