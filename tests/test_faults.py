"""Faults at scale: a server that fails one episode, and a server that dies in the middle of GRPO.

- A user-simulator server that answers one episode's turn with HTTP 500 or with garbage (after the
  backend's bounded retries): that episode is an infrastructure failure (`Trajectory.infra_error`,
  termination user_error), left out of its GRPO group and counted in the step's metrics, never scored;
  in an evaluation it is counted, left out of pass^k, and run again by a rerun.
- GRPO's rollout server killed mid-step: after the retries the stage stops with an error that names
  the server (its URL, `rollout_server`) and the step a rerun resumes from; once a server is back, the
  rerun resumes from that checkpoint and finishes.
- A failed stage's message names the recipe server (its id) whose URL it mentions.

The servers are real: `transformers serve` on loopback (tests/_serving.py). The faults of the first
kind come from tests/_fault_proxy.py, a FAULT INJECTOR in front of that real server (it fails the
requests of one chosen seed, i.e. one turn of one episode, and forwards every other request). The
policy in the GRPO tests is a tiny randomly initialised Llama (a real model, only small: what it says
does not matter to these tests); the user simulator is SmolLM2 served, or kit.rollout.ScriptedUser.
"""

import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _fault_proxy import fault_proxy  # noqa: E402
from _serving import serving  # noqa: E402
from test_grpo_learning import tiny_llama  # noqa: E402

from kit import metrics as M  # noqa: E402
from kit.llm.openai_backend import EndpointError, OpenAIBackend  # noqa: E402

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A real `transformers serve` (not pinned: it loads the folder a request names) and SmolLM2's folder."""
    from kit.llm import ensure_embedded_model

    start = ensure_embedded_model()
    with serving(None, tmp_path_factory.mktemp("serve") / "serve.log") as url:
        yield url, str(start)


def test_a_stage_failure_names_the_recipe_server_whose_url_it_mentions(tmp_path):
    from kit.runner.servers import ServerPlan, ServerSpec, name_servers

    plans = [ServerPlan(ServerSpec(id="policy", model="embedded", engine="vllm", port=8002), users=["grpo"]),
             ServerPlan(ServerSpec(id="user", model="embedded", engine="vllm", port=8001), users=["grpo"])]
    used = {"rollout_server": "policy", "user_model": "user"}
    msg = ("EndpointError: GRPO stopped in step 2 (its rollout_server): http://127.0.0.1:8002/v1, the agent's "
           "server, failed: ... ConnectError")
    named = name_servers(msg, used, plans, tmp_path / "servers")
    assert named.startswith(msg)
    assert "recipe server 'policy' (rollout_server: http://127.0.0.1:8002/v1" in named
    assert str(tmp_path / "servers" / "policy.log") in named
    assert "'user'" not in named  # its URL is not in the message
    assert name_servers("ValueError: bad", used, plans, tmp_path) == "ValueError: bad"


@pytest.mark.slow
def test_a_user_server_5xx_on_one_episode_is_left_out_of_its_grpo_group_and_counted(served):
    from transformers import AutoTokenizer

    from kit.envs import load_domain
    from kit.train.grpo import GRPOConfig, GRPOTrainer

    url, start = served
    tok = AutoTokenizer.from_pretrained(start)
    domain = load_domain("mock")
    tasks = [domain.task("create_task_1"), domain.task("update_task_1")]
    scored = []

    def reward(task, traj):  # the checker's stand-in: records what it was asked to score
        scored.append(traj)
        return float(len(scored) % 2)

    # step 0's rollout seed is 0 (seed 0), its first call is the user's: seeds 0..3 for the 4 episodes.
    # Seed 1 is the second episode of the first task's group, at its first user turn.
    with fault_proxy(url, fail_seeds={1}, mode="500") as (proxy, purl):
        user = OpenAIBackend(purl, start, tool_mode="prompt")
        cfg = GRPOConfig(lr=1e-3, group_size=2, tasks_per_step=2, resample_budget=0, filter_mode="off",
                         micro_batch_size=4, max_new_tokens=8, user_max_new_tokens=8, max_messages=4, seed=0,
                         print_metrics=False, user_faults="keep")  # a server's failures under test, not the user's
        tr = GRPOTrainer(tiny_llama(tok), tok, tasks, cfg, domain=domain, user=user, reward_fn=reward)
        (m,) = tr.train(steps=1)

    assert proxy.hits == user.max_attempts  # the failing turn was retried, a bounded number of times
    assert m[M.INFRA_FAILED] == 1
    assert len(scored) == 3 and not any(t.infra_failed for t in scored)  # never scored against the agent
    by_task = {g["task"]: g for g in m["groups"]}
    assert len(by_task) == 2
    hit = [g for g in m["groups"] if g.get("infra_failed")]
    assert len(hit) == 1 and len(hit[0]["rewards"]) == 1 and not hit[0]["kept"]  # one episode: no advantage
    other = next(g for g in m["groups"] if g is not hit[0])
    assert len(other["rewards"]) == 2 and other["kept"] and not m["skipped"]  # the step trained on the rest


@pytest.mark.slow
def test_an_evaluation_counts_a_garbled_user_turn_apart_and_a_rerun_runs_that_episode_again(served, tmp_path):
    from kit.eval import EvalConfig, evaluate
    from kit.files import read_jsonl
    from kit.trajectory import Termination

    url, start = served
    agent = OpenAIBackend(url, start, tool_mode="prompt")
    cfg = EvalConfig(domain="mock", limit=2, trials=1, max_messages=4, max_new_tokens=8, user_max_new_tokens=8,
                     seed=0, out_dir=str(tmp_path), allow_overlap=True)
    # the first call is the users': seeds 0 and 1, one per episode; seed 1 is the second task's
    with fault_proxy(url, fail_seeds={1}, mode="garbage") as (proxy, purl):
        res = evaluate(cfg, agent=agent, user=OpenAIBackend(purl, start, tool_mode="prompt"), progress=False)
        assert proxy.hits == 5  # retried, then given up
        trajs = list(read_jsonl(tmp_path / "trajectories.jsonl"))
        failed = [t for t in trajs if t.get("infra_error")]
        assert len(trajs) == 2 and len(failed) == 1
        assert failed[0]["termination_reason"] == Termination.USER_ERROR
        assert purl in failed[0]["infra_error"] and "not a JSON object" in failed[0]["infra_error"]
        assert res.meta[M.INFRA_FAILURES] == 1
        assert res.meta["infra_failed_episodes"][0]["task_id"] == failed[0]["task_id"]
        assert len(res.episodes) == 1 and failed[0]["task_id"] not in set(res.episodes["task_id"])
        assert sum(v["tasks"] for v in res.meta[M.PASS1_BY_SHAPE].values()) == 1  # pass^1 over the scored task

        proxy.fail_seeds.clear()  # the server is well again: a rerun runs the failed episode, only it
        again = evaluate(cfg, agent=agent, user=OpenAIBackend(purl, start, tool_mode="prompt"), progress=False)
    assert again.meta[M.INFRA_FAILURES] == 0 and len(again.episodes) == 2
    assert len(list(read_jsonl(tmp_path / "trajectories.jsonl"))) == 3


@pytest.mark.slow
def test_grpo_stops_naming_its_dead_rollout_server_and_a_rerun_resumes_once_a_server_is_back(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from kit.envs import load_domain
    from kit.files import read_jsonl
    from kit.llm import ensure_embedded_model
    from kit.rollout import ScriptedUser
    from kit.stages.grpo import train_resumably
    from kit.train.grpo import GRPOConfig, GRPOTrainer

    tok = AutoTokenizer.from_pretrained(ensure_embedded_model())
    start = tmp_path / "start"
    tiny_llama(tok).save_pretrained(start)
    tok.save_pretrained(start)
    domain = load_domain("mock")
    task = domain.task("create_task_1")
    out = tmp_path / "grpo"
    out.mkdir()
    procs, trainers = [], []

    class UserWhoseStepTwoKillsTheServer(ScriptedUser):
        """The scripted user; at step 2's first user turn it kills the rollout server (SIGKILL): the
        agent's next turn, in the middle of the step, finds it gone."""

        def generate_batch(self, conversations, tools=None, params=None):
            if procs and trainers and trainers[-1].step_idx == 2:
                proc = procs.pop()
                proc.kill()
                proc.wait()
            return super().generate_batch(conversations, tools, params)

    def trainer(url: str) -> GRPOTrainer:
        cfg = GRPOConfig(lr=1e-3, group_size=2, tasks_per_step=1, resample_budget=0, filter_mode="off",
                         micro_batch_size=4, max_new_tokens=8, max_messages=4, seed=0, print_metrics=False,
                         rollout="server", rollout_server=url, rollout_server_model=str(start),
                         server_token_ids=False, sync_dir=str(tmp_path / "sync"), save_every=1, train_steps=3,
                         user_faults="keep")  # every step must train (reward 0 stands in for the checker)
        model = AutoModelForCausalLM.from_pretrained(start, local_files_only=True)
        trainers.append(GRPOTrainer(model, tok, [task], cfg, domain=domain,
                                    user=UserWhoseStepTwoKillsTheServer(task), reward_fn=lambda t, traj: 0.0))
        return trainers[-1]

    with serving(None, tmp_path / "serve1.log", procs=procs) as url:
        with pytest.raises(EndpointError) as err:
            train_resumably(trainer(url), out, None)
    e = err.value
    print(e, "\n", e.hint)
    assert e.url == url and e.unreachable
    assert f"GRPO stopped in step 2 (its rollout_server): {url}, the agent's server, failed" in str(e)
    assert "after 5 attempts" in str(e)  # bounded retries, then the stop
    assert f"resumes from step 2, the last checkpoint in {out / 'checkpoints'}" in e.hint
    assert [m["step"] for m in read_jsonl(out / "metrics.jsonl")] == [0, 1]

    with serving(None, tmp_path / "serve2.log") as url2:  # a server again (another port: rollout_server may change)
        history, resumed = train_resumably(trainer(url2), out, None)
    assert resumed == 2 and [m["step"] for m in history] == [0, 1, 2]
    assert [m["step"] for m in read_jsonl(out / "metrics.jsonl")] == [0, 1, 2]
    assert (out / "model" / "config.json").exists() and not (out / "checkpoints").exists()
    assert trainers[-1].sampler.model == str((tmp_path / "sync" / "step-3").resolve())  # step 2 ran on the server


@pytest.mark.slow
def test_a_tau2_protocol_evaluation_counts_a_user_server_5xx_apart_and_a_rerun_runs_that_episode_again(served, tmp_path):
    """The same rule under tau2's own orchestrator (protocol tau2, litellm): the user simulator's server
    answers every request of one episode (the one whose instructions it carries) with HTTP 500. Both
    servers still answer, so the episode is counted as an infrastructure failure naming the servers, left
    out of pass^k and of the simulations file; the other episode is scored; a rerun runs only that one.
    Before this, the 500 stopped the whole evaluation with a RuntimeError."""
    from kit.envs import load_domain
    from kit.eval.tau2_native import SIM_FILE, evaluate_tau2_native

    url, start = served
    by_id = {t.id: t for t in load_domain("mock").tasks(None)}
    tasks = [by_id["create_task_1"], by_id["update_task_1"]]
    agent = f"openai:{url}#{start}"
    kw = dict(trials=1, max_messages=4, seed=0, out_dir=tmp_path, concurrency=1, max_tokens=16)
    with fault_proxy(url, set(), mode="500", fail_text="Request that task_1 be marked as completed") as (proxy, purl):
        res = evaluate_tau2_native("mock", tasks, agent, f"openai:{purl}#{start}", **kw)
        assert proxy.hits >= 1 and proxy.forwarded >= 1
        assert res[M.INFRA_FAILURES] == 1
        (failed,) = res["infra_failed_episodes"]
        assert failed["task_id"] == "update_task_1" and purl.rstrip("/") in failed["error"]
        assert [r["task_id"] for r in res["episodes"]] == ["create_task_1"]
        assert set(res["passk"]) == {1}
        assert [line for line in (tmp_path / SIM_FILE).read_text().splitlines() if "update_task_1" in line] == []

        proxy.fail_text = None  # the server is well again: the rerun runs the failed episode, only it
        again = evaluate_tau2_native("mock", tasks, agent, f"openai:{purl}#{start}", **kw)
    assert again["episodes_run"] == 1 and again[M.INFRA_FAILURES] == 0
    assert sorted(r["task_id"] for r in again["episodes"]) == ["create_task_1", "update_task_1"]
