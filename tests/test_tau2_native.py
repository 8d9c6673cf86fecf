"""τ²-native protocol: tau2's own orchestrator, LLMAgent, UserSimulator and evaluator against a
real OpenAI-compatible server (`transformers serve` on loopback, the embedded SmolLM2, offline).
SmolLM2's stock template ignores `tools`, so the agent only talks: rewards are 0 -- the point is
the plumbing (litellm -> endpoint -> tau2 orchestrator -> tau2 evaluator -> JSONL -> resume).
"""

import json

import pytest

from kit.envs import load_domain
from kit.eval.runner import EvalConfig, EvalResult, evaluate
from kit.eval.tau2_native import SIM_FILE, evaluate_tau2_native
from kit.llm import EndpointError

from _serving import free_port, serving

TASK_IDS = ("create_task_1", "update_task_1")


def _tasks():
    by_id = {t.id: t for t in load_domain("mock").tasks(None)}
    return [by_id[i] for i in TASK_IDS]


def test_unreachable_endpoint_is_one_clear_line(tmp_path):
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    with pytest.raises(EndpointError) as err:
        evaluate_tau2_native("mock", _tasks(), f"openai:{url}#m", f"openai:{url}#m", out_dir=tmp_path)
    msg = str(err.value)
    assert url in msg and "unreachable" in msg and "\n" not in msg
    assert not (tmp_path / SIM_FILE).exists()


def test_tau2_protocol_needs_openai_specs():
    with pytest.raises(ValueError, match="openai:http://host:port/v1#model"):
        evaluate(EvalConfig(domain="mock", model="embedded", user_model="embedded", protocol="tau2", limit=1))
    with pytest.raises(ValueError, match="protocol"):  # pydantic names the field and its choices
        EvalConfig(domain="mock", protocol="tau3")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from kit.llm import ensure_embedded_model

    folder = str(ensure_embedded_model())
    with serving(folder, tmp_path_factory.mktemp("serve") / "serve.log") as url:
        yield f"openai:{url}#{folder}"


@pytest.mark.slow
def test_episodes_through_tau2_orchestrator_then_resume(server, tmp_path):
    from tau2.data_model.simulation import SimulationRun, TerminationReason

    res = evaluate_tau2_native("mock", _tasks(), server, server, trials=1, max_messages=4, seed=0,
                               out_dir=tmp_path, concurrency=2, max_tokens=32)
    assert res["protocol"] == "tau2-native" and res["episodes_run"] == 2 and res["tau2_version"]
    rows = {(r["task_id"], r["trial"]): r for r in res["episodes"]}
    assert set(rows) == {(t, 0) for t in TASK_IDS}
    reasons = {r.value for r in TerminationReason}
    for r in rows.values():
        assert r["reward"] in (0.0, 1.0) and r["termination_reason"] in reasons and r["num_messages"] >= 2
    assert set(res["passk"]) == {1}

    lines = (tmp_path / SIM_FILE).read_text().splitlines()
    sims = [SimulationRun.model_validate_json(line) for line in lines]
    assert sorted((s.task_id, s.trial) for s in sims) == sorted(rows)
    assert all(s.reward_info is not None and s.messages[0].role == "assistant" for s in sims)

    # resume through kit.eval.runner's dispatch: same pairs, zero new episodes, an EvalResult
    tasks_file = tmp_path / "tasks.json"
    tasks_file.write_text(json.dumps([t.model_dump(mode="json") for t in _tasks()]))
    again = evaluate(EvalConfig(domain="mock", model=server, user_model=server, tasks_file=str(tasks_file),
                                trials=1, max_messages=4, seed=0, out_dir=str(tmp_path), protocol="tau2"))
    assert isinstance(again, EvalResult) and again.meta["protocol"] == "tau2"
    assert again.meta["episodes_run"] == 0 and len((tmp_path / SIM_FILE).read_text().splitlines()) == 2
    assert {"task_id", "trial", "reward", "termination"} <= set(again.episodes.columns)
    assert again.episodes["reward"].tolist() == [rows[(t, 0)]["reward"] for t in TASK_IDS]
    assert again.passk == res["passk"]
    # tau2's own tasks: phrasing 'tau2', shape their gold tools, in the rows and in pass^1's breakdown
    assert again.episodes["shape"].tolist() == ["create_task", "update_task_status"]
    assert set(again.episodes["phrasing"]) == {"tau2"}
    assert again.meta["pass1_by_phrasing"] == {"tau2": {"pass^1": again.passk[1], "tasks": 2}}

    # the `evaluate` stage (what a recipe's `protocol: tau2` runs) over the same episodes: its Outputs
    # (no user-deviation numbers: those are kit-protocol only)
    from kit.runner.stage import Stage
    from kit.stages.evaluate import Config, run

    params = {"domain": "mock", "model": server, "user_model": server, "tasks_file": str(tasks_file), "trials": 1,
              "max_messages": 4, "seed": 0, "protocol": "tau2", "training_data": []}
    out = run(Config(**params), Stage("evaluate", params, {"out_dir": str(tmp_path)}))
    assert out.passk == {"1": again.passk[1]} and out.tasks == 2 and out.user_deviation_rate is None
