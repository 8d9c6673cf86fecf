"""pass^k and the evaluation runner."""

import json

import pytest

from kit.eval import EvalConfig, evaluate, load_tasks_file, pass_hat_k, pass_k_table


def test_pass_hat_k_matches_hand_computed_values():
    assert pass_hat_k(4, 4, 4) == 1.0
    assert pass_hat_k(3, 4, 1) == 0.75
    assert pass_hat_k(3, 4, 2) == 3 / 6  # C(3,2)/C(4,2)
    assert pass_hat_k(3, 4, 4) == 0.0
    assert pass_hat_k(2, 4, 3) == 0.0
    table = pass_k_table({"a": [1, 1, 1, 0], "b": [1, 0, 0, 0]}, max_k=4)
    assert table[1] == pytest.approx((0.75 + 0.25) / 2)
    assert table[2] == pytest.approx((3 / 6 + 0) / 2)
    assert table[4] == 0.0
    with pytest.raises(ValueError):
        pass_hat_k(5, 4, 1)
    with pytest.raises(ValueError):
        pass_k_table({})


def test_pass_k_table_equals_tau2s_compute_metrics():
    """kit's pass^k table is tau2's: the same numbers as tau2.metrics.agent_metrics.compute_metrics
    on the same rewards (a reward within 1e-6 of 1 is a success there, so here too)."""
    import pandas as pd

    import kit._tau2  # noqa: F401
    from tau2.metrics.agent_metrics import compute_metrics

    class Tau2Results:  # stands in for tau2's Results: the columns of Results.to_df() that compute_metrics reads
        def __init__(self, by_task):
            self.by_task = by_task

        def to_df(self):
            return pd.DataFrame([{"task_id": t, "reward": r, "info_num_trials": len(rs), "agent_cost": 0.0,
                                  "task_num_agent_actions": 1, "task_num_user_actions": 0, "task_num_actions": 1}
                                 for t, rs in self.by_task.items() for r in rs])

    cases = [
        {"a": [1.0, 1.0, 1.0, 0.0], "b": [1.0, 0.0, 0.0, 0.0], "c": [0.0, 0.0, 0.0, 0.0]},
        {"a": [1.0, 0.9999995, 0.5], "b": [1.0, 1.0, 1.0]},
        {"x": [0.0], "y": [1.0], "z": [1.0]},
    ]
    for by_task in cases:
        ours = pass_k_table(by_task, max_k=4)
        theirs = compute_metrics(Tau2Results(by_task)).pass_hat_ks
        assert set(ours) == set(theirs) and ours == pytest.approx(theirs), by_task
    assert pass_k_table(cases[1])[1] == pytest.approx((2 / 3 + 1) / 2)


def test_tasks_file_errors_name_the_position_and_field(tmp_path):
    from kit.envs import load_domain

    good = json.loads(load_domain("mock").tasks()[0].model_dump_json())
    bad = {**good, "id": None}
    p = tmp_path / "tasks.jsonl"
    p.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(ValueError, match=r"line 2: invalid Task field 'id'"):
        load_tasks_file(str(p))
    p.write_text(json.dumps([good]))
    assert [t.id for t in load_tasks_file(str(p))] == [good["id"]]


def test_endpoint_down_is_a_clear_error_and_leaves_no_half_written_trajectory(tmp_path):
    from _serving import free_port

    from kit.llm import EndpointError, make_backend

    url = f"http://127.0.0.1:{free_port()}/v1"
    dead = make_backend({"spec": f"openai:{url}#m", "max_attempts": 2, "timeout": 2})
    out = tmp_path / "eval"
    with pytest.raises(EndpointError, match=url):
        evaluate(EvalConfig(domain="mock", trials=1, limit=2, out_dir=str(out)), agent=dead, user=dead, progress=False)
    traj_file = out / "trajectories.jsonl"
    assert not traj_file.exists() or traj_file.read_text() == ""


def test_evaluation_resumes_from_finished_episodes(tmp_path):
    """A rerun skips (task, trial) pairs already written: the scripted roles prove the loop."""
    from kit.envs import load_domain
    from kit.rollout import ScriptedAgent, ScriptedUser

    task = load_domain("mock").tasks()[1]
    p = tmp_path / "t.json"
    p.write_text(json.dumps([json.loads(task.model_dump_json())]))
    cfg = EvalConfig(domain="mock", tasks_file=str(p), trials=2, temperature=0.6,
                     out_dir=str(tmp_path / "ev"), cross_check=True)
    res = evaluate(cfg, agent=ScriptedAgent(task), user=ScriptedUser(task), progress=False)
    assert res.passk[1] == 1.0 and res.meta["tau2_agreement"] == 1.0
    assert res.summary_line() == "pass^1 1.0000 (n=1, trials=2)"
    lines = (tmp_path / "ev" / "trajectories.jsonl").read_text().splitlines()
    assert len(lines) == 2
    cfg.trials = 3  # one more trial: only it runs
    res = evaluate(cfg, agent=ScriptedAgent(task), user=ScriptedUser(task), progress=False)
    assert len((tmp_path / "ev" / "trajectories.jsonl").read_text().splitlines()) == 3
    assert len(res.episodes) == 3 and res.meta["model"] == "embedded" and res.meta["tau2_version"]


def test_a_limited_evaluation_says_how_much_of_its_split_it_ran(tmp_path):
    """The domain runs of 2026-12-05 evaluated the first 10 of retail's 40 test tasks; the results page said
    "test". The evaluation records the split's size, and the page says "test (1 of 9)"."""
    from kit.envs import load_domain
    from kit.report.build import tasks_text
    from kit.rollout import ScriptedAgent, ScriptedUser

    dom = load_domain("mock")
    task = dom.tasks("default")[0]
    res = evaluate(EvalConfig(domain="mock", limit=1, out_dir=str(tmp_path / "ev")),
                   agent=ScriptedAgent(task), user=ScriptedUser(task), progress=False)
    n = len(dom.tasks("default"))
    assert res.meta["tasks"] == 1 and res.meta["tasks_available"] == n > 1
    assert tasks_text(res.meta) == f"default (1 of {n})"
    assert tasks_text({"split": "heldout_test", "tasks": 189}) == "heldout_test (189)"  # an older eval.json


def test_more_than_one_trial_must_sample():
    """Greedy trials are copies of one another: trials > 1 at temperature 0 is refused where the knobs are
    read (a recipe, `kit eval`, the evaluate stage), naming the field and the fix."""
    from pydantic import ValidationError

    from kit.eval.config import EvalKnobs
    from kit.stages.evaluate import Config

    assert EvalKnobs().trials == 1 and EvalKnobs().temperature == 0.0  # the defaults: one greedy episode
    assert EvalKnobs(trials=1, temperature=0).trials == 1
    assert EvalKnobs(trials=4, temperature=0.6, user_temperature=0.6).temperature == 0.6
    assert EvalKnobs(trials=4, temperature=0.6).user_temperature == 0.0  # a greedy referee user is allowed
    for cls in (EvalKnobs, EvalConfig, Config):
        extra = {"domain": "mock"} if cls is not EvalKnobs else {}
        with pytest.raises(ValidationError) as e:
            cls(trials=4, **extra)
        (err,) = e.value.errors()
        assert err["loc"] == ("temperature",), err
        assert "trials > 1 at temperature 0 repeats one greedy episode" in err["msg"]
        assert "temperature (the paper evaluates at 0.6" in err["msg"] and "trials: 1" in err["msg"]
    # an earlier evaluation's record (eval.json's config, read back by the report) is what ran, not a request
    old = EvalConfig.model_validate({"domain": "mock", "trials": 4}, context={"recorded": True})
    assert (old.trials, old.temperature) == (4, 0.0)


@pytest.mark.slow  # two real evaluations of the embedded model (~25 s)
def test_an_evaluation_of_the_same_weights_and_settings_is_reused_not_sampled_again(tmp_path):
    """GRPO's model_best/ when its curve never rose holds its start's weights under another folder: evaluating it
    again would sample the same episodes (evaluation is deterministic in weights and settings), so the second
    evaluation copies the first's (kit.eval.memo). Real evaluations of the embedded model, one task; any other
    weights or settings are not reused."""
    import os

    from kit.envs import load_domain
    from kit.eval.memo import EvalMemo
    from kit.llm.embedded import embedded_model_path

    src = embedded_model_path()
    folders = {}
    for name in ("a", "b", "c"):  # a and b: the same files under two names; c: another config
        d = tmp_path / name
        d.mkdir()
        for f in src.iterdir():
            if f.is_file():
                os.symlink(f, d / f.name)
        folders[name] = d
    cfg_c = json.loads((src / "config.json").read_text())
    (folders["c"] / "config.json").unlink()
    (folders["c"] / "config.json").write_text(json.dumps({**cfg_c, "kit_test": 1}))
    memo_dir = tmp_path / "memo"

    def cfg(folder, out, **kw):
        spec = folder if str(folder).startswith("openai:") else f"hf:{folder}"
        return EvalConfig(domain="mock", model=spec, user_model=f"hf:{folders['a']}", limit=1, trials=1,
                          max_messages=4, max_new_tokens=16, user_max_new_tokens=16, out_dir=str(tmp_path / out), **kw)

    first = evaluate(cfg(folders["a"], "ev_a"), progress=False, memo_dir=memo_dir)
    assert "reused_from" not in first.meta and len(first.episodes) == 1
    second = evaluate(cfg(folders["b"], "ev_b"), progress=False, memo_dir=memo_dir)
    assert second.meta["reused_from"] == str((tmp_path / "ev_a").resolve())
    assert second.meta["model"] == f"hf:{folders['b']}"  # the record names what this stage evaluated
    assert (tmp_path / "ev_b" / "trajectories.jsonl").read_text() == (tmp_path / "ev_a" / "trajectories.jsonl").read_text()
    cols = ["task_id", "reward", "termination", "steps", "agent_tokens"]
    assert second.episodes[cols].to_dict("records") == first.episodes[cols].to_dict("records")
    tasks = load_domain("mock").tasks()[:1]
    assert EvalMemo.open(memo_dir, cfg(folders["b"], "x"), tasks).find() is not None
    assert EvalMemo.open(memo_dir, cfg(folders["c"], "x"), tasks).find() is None  # other files
    assert EvalMemo.open(memo_dir, cfg(folders["a"], "x", temperature=0.6), tasks).find() is None  # other sampling
    assert EvalMemo.open(memo_dir, cfg(folders["a"], "x", seed=1), tasks).find() is None
    assert EvalMemo.open(memo_dir, cfg("openai:http://127.0.0.1:1/v1#m", "x"), tasks) is None  # an endpoint
