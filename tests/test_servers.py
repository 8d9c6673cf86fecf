"""A recipe's servers (kit/runner/servers.py): validation of `servers:` and of 'server:<id>' in stage
parameters (file, line and field), the plan of when each server starts and stops (a pure function), and
`kit run` starting a real `transformers serve` of the embedded model for an evaluation, reusing one that
already answers, and leaving no server process behind; where a server listens and the API key a server
beyond loopback needs, which the kit's own clients send. No fake server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _serving import free_port, serving

from kit.llm.openai_backend import KEYS_ENV, OpenAIBackend, endpoint_key, served_models
from kit.runner import RecipeError, load_recipe
from kit.runner.servers import (
    ServerFailed,
    Servers,
    ServerSpec,
    command,
    plan_servers,
    server_key,
)

ROOT = Path(__file__).resolve().parents[1]


def write(tmp_path: Path, text: str, name: str = "r.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


HEAD = "name: x\ndomain: mock\nservers:\n"
USER = "  - {id: usr, engine: transformers, model: embedded, port: 18990}\n"


# ----- validation ----------------------------------------------------------------------------------

BAD = {
    "unknown engine": (HEAD + "  - {id: usr, engine: sglang, model: embedded, port: 18990}\n"
                       "stages:\n  - stage: evaluate\n    params: {user_model: 'server:usr'}\n",
                       ":4: servers[0].engine: Input should be 'vllm' or 'transformers'"),
    "port in args": (HEAD + "  - {id: usr, engine: vllm, model: embedded, port: 18990, args: [--port, '9']}\n"
                     "stages:\n  - stage: evaluate\n",
                     ":4: servers[0].args: '--port' is set from the server's host / port / api_key fields"),
    "api key in args": (HEAD + "  - {id: usr, engine: vllm, model: embedded, port: 18990, args: [--api-key=k]}\n"
                        "stages:\n  - stage: evaluate\n",
                        ":4: servers[0].args: '--api-key=k' is set from the server's host / port / api_key fields"),
    "every address without a key": (
        HEAD + "  - {id: usr, engine: vllm, model: embedded, port: 18990, host: 0.0.0.0}\nstages:\n  - stage: evaluate\n",
        ":4: servers[0].api_key: server 'usr' listens on 0.0.0.0, beyond this machine, without an API key: add "
        "`api_key: generate` (the kit makes one and gives it to its own clients) or `api_key: env:MY_KEY`; or bind "
        "host 127.0.0.1"),
    "a LAN address without a key": (
        HEAD + "  - {id: usr, engine: vllm, model: embedded, port: 18990, host: 10.1.2.3}\nstages:\n  - stage: evaluate\n",
        ":4: servers[0].api_key: server 'usr' listens on 10.1.2.3, beyond this machine, without an API key"),
    "a key written into the recipe": (
        HEAD + "  - {id: usr, engine: vllm, model: embedded, port: 18990, api_key: sk-123}\nstages:\n  - stage: evaluate\n",
        ":4: servers[0].api_key: api_key must be 'generate' or 'env:VARNAME'"),
    "transformers serve beyond loopback": (
        HEAD + "  - {id: usr, engine: transformers, model: embedded, port: 18990, host: 0.0.0.0, api_key: generate}\n"
        "stages:\n  - stage: evaluate\n",
        ":4: servers[0].host: server 'usr' listens on 0.0.0.0, beyond this machine, but `transformers serve` has no "
        "API key option: anyone who reaches the port could use it. Bind host 127.0.0.1, or serve it with engine vllm"),
    "a key transformers serve cannot check": (
        HEAD + "  - {id: usr, engine: transformers, model: embedded, port: 18990, api_key: generate}\n"
        "stages:\n  - stage: evaluate\n",
        ":4: servers[0].api_key: server 'usr': `transformers serve` has no API key option"),
    "missing port": (HEAD + "  - {id: usr, engine: vllm, model: embedded}\nstages:\n  - stage: evaluate\n",
                     ":4: servers[0].port: required field missing"),
    "unknown server": (HEAD + USER + "stages:\n  - stage: evaluate\n"
                       "    params: {trials: 1, user_model: 'server:nope'}\n",
                       ":7: stages[0].params.user_model: 'server:nope' names no server of this recipe (servers: usr)"),
    "server where no model goes": (HEAD + USER + "stages:\n  - stage: evaluate\n"
                                   "    params: {split: 'server:usr'}\n",
                                   ":7: stages[0].params.split: 'server:usr': 'split' takes no server"),
    "a stage's model served before it exists": (
        HEAD + "  - {id: tuned, engine: vllm, model: '@sft_user', port: 18991}\nstages:\n"
        "  - {stage: evaluate, params: {user_model: 'server:tuned'}}\n  - stage: sft_user\n",
        ":4: servers[0].model: server 'tuned' serves '@sft_user', which runs after 'evaluate'"),
    "a stage that makes no model": (
        HEAD + "  - {id: tuned, engine: vllm, model: '@synthesize', port: 18991}\nstages:\n  - stage: synthesize\n"
        "  - {stage: evaluate, params: {user_model: 'server:tuned'}}\n",
        ":4: servers[0].model: '@synthesize' is a synthesize stage, which produces data, not a model to serve"),
    "missing folder": (HEAD + "  - {id: usr, engine: vllm, model: /no/such/folder, port: 18990}\n"
                       "stages:\n  - stage: evaluate\n",
                       ":4: servers[0].model: model folder '/no/such/folder' does not exist"),
    "one port twice": (HEAD + USER + "  - {id: other, engine: transformers, model: embedded, port: 18990}\n"
                       "stages:\n  - stage: evaluate\n",
                       ":5: servers[1].port: port 18990 is server 'usr's already"),
    "an unpinned vllm server": (HEAD + "  - {id: usr, engine: vllm, model: embedded, port: 18990, pinned: false}\n"
                                "stages:\n  - stage: evaluate\n",
                                ":4: servers[0]: pinned: false is for engine transformers"),
    "GRPO's folders to a pinned transformers server": (
        HEAD + "  - {id: pol, engine: transformers, model: '@sft_agent', port: 18991}\nstages:\n  - stage: sft_agent\n"
        "  - {stage: grpo, params: {rollout: server, rollout_server: 'server:pol', weight_sync: folder}}\n",
        ":4: servers[0].pinned: stage 'grpo' pushes its weights to server 'pol' as a folder per step, which a "
        "pinned `transformers serve` refuses: set pinned: false"),
    "GRPO's adapters to a transformers server": (
        HEAD + "  - {id: pol, engine: transformers, model: '@sft_agent', port: 18991, pinned: false}\nstages:\n"
        "  - stage: sft_agent\n  - stage: grpo\n"
        "    params: {rollout: server, rollout_server: 'server:pol', lora: true}\n",
        ":8: stages[1].params.weight_sync: server 'pol' is `transformers serve`, which loads no LoRA adapter at run "
        "time: set weight_sync: folder"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_server_or_server_reference_names_file_line_and_field(tmp_path, case):
    text, expected = BAD[case]
    p = write(tmp_path, text)
    with pytest.raises(RecipeError) as e:
        load_recipe(p)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(str(p)), msg
    assert expected in msg, msg


def test_server_references_become_urls_and_set_overrides_a_server(tmp_path):
    p = write(tmp_path, HEAD + USER + "  - {id: pol, engine: vllm, model: '@sft_agent', port: 18992}\nstages:\n"
              "  - stage: sft_agent\n  - {stage: evaluate, params: {model: 'server:usr', user_model: 'server:usr'}}\n"
              "  - {stage: grpo, params: {rollout: server, rollout_server: 'server:pol', user_model: 'server:usr'}}\n")
    r = load_recipe(p)
    by = {ps.id: ps for ps in r.plan}
    assert by["evaluate"].params["model"] == "openai:http://127.0.0.1:18990/v1"
    assert by["evaluate"].servers == {"model": "usr", "user_model": "usr"}
    assert by["grpo"].params["rollout_server"] == "http://127.0.0.1:18992/v1"  # GRPO takes the bare URL
    assert by["grpo"].params["user_model"] == "openai:http://127.0.0.1:18990/v1"
    r = load_recipe(p, {"servers.usr.port": 18999})
    assert {ps.id: ps for ps in r.plan}["evaluate"].params["model"] == "openai:http://127.0.0.1:18999/v1"
    with pytest.raises(RecipeError, match="servers.<server id>.<field>"):
        load_recipe(p, {"servers.nope.port": 1})


def test_an_unpinned_server_starts_without_its_model_and_its_clients_name_the_folder(tmp_path):
    """`transformers serve` without a model loads the folder each request names (GRPO's weight_sync: folder
    asks it for each step's folder): the runner gives the stages that use it the model by name."""
    from kit.runner.servers import command, name_models

    p = write(tmp_path, HEAD + "  - {id: pol, engine: transformers, model: '@sft_agent', port: 18992, pinned: false}\n"
              + USER + "stages:\n  - stage: sft_agent\n"
              "  - {stage: evaluate, params: {model: 'server:pol', user_model: 'server:usr'}}\n"
              "  - {stage: grpo, params: {rollout: server, rollout_server: 'server:pol', weight_sync: folder}}\n")
    r = load_recipe(p)
    specs = {sp.id: sp.spec for sp in r.servers}
    by = {ps.id: ps for ps in r.plan}
    folder = str(tmp_path / "runs" / "sft_agent" / "model")
    named = name_models(by["evaluate"].params, by["evaluate"].servers, specs, lambda spec: folder)
    assert named["model"] == f"openai:http://127.0.0.1:18992/v1#{folder}"
    assert named["user_model"] == "openai:http://127.0.0.1:18990/v1"  # pinned: it answers for its one model
    named = name_models(by["grpo"].params, by["grpo"].servers, specs, lambda spec: folder)
    assert named["rollout_server"] == "http://127.0.0.1:18992/v1" and named["rollout_server_model"] == folder
    given = {**by["grpo"].params, "rollout_server_model": "/my/name"}
    assert name_models(given, by["grpo"].servers, specs, lambda spec: folder)["rollout_server_model"] == "/my/name"
    cmd, _ = command(specs["pol"], folder)
    assert cmd[1] == "serve" and folder not in cmd and cmd[2:4] == ["--host", "127.0.0.1"]
    assert folder in command(specs["pol"].model_copy(update={"pinned": True}), folder)[0]


def test_an_engine_agent_behind_a_server_must_name_its_chat_template(tmp_path):
    """A served agent has no tokenizer in the kit's process: without sft_tokenizer the engine's SFT samples
    were rendered with the embedded model's chat template (a Qwen3 recipe would have trained on SmolLM's)."""
    body = HEAD + USER + "stages:\n  - stage: synthesize\n    params: {model: 'server:usr'%s}\n"
    with pytest.raises(RecipeError) as e:
        load_recipe(write(tmp_path, body % ""))
    assert "stages[0].params.sft_tokenizer: the agent is sampled through openai:http://127.0.0.1:18990/v1" in str(e.value)
    assert load_recipe(write(tmp_path, body % ", sft_tokenizer: embedded", "ok.yaml")).plan[0].params["sft_tokenizer"]


# ----- the plan (no process) -------------------------------------------------------------------------

PLANNED = (HEAD + USER
           + "  - {id: tuned, engine: vllm, model: '@sft_user', port: 18991, gpus: [2, 3]}\n"
           + "  - {id: idle, engine: vllm, model: embedded, port: 18993}\n"
           + "stages:\n  - stage: synthesize\n    params: {user_model: 'server:usr'}\n  - stage: sft_user\n"
           + "  - stage: sft_agent\n"
           + "  - {stage: evaluate, id: ev1, params: {user_model: 'server:usr'}}\n"
           + "  - {stage: grpo, params: {user_model: 'server:tuned'}}\n"
           + "  - {stage: evaluate, id: ev2, params: {user_model: 'server:usr'}}\n  - stage: report\n")


def test_the_plan_starts_each_server_when_its_model_exists_and_stops_it_after_its_last_user(tmp_path):
    r = load_recipe(write(tmp_path, PLANNED))
    plans = {sp.id: sp for sp in r.servers}
    usr, tuned, idle = plans["usr"], plans["tuned"], plans["idle"]
    assert (usr.source, usr.users) == (None, ["synthesize", "ev1", "ev2"])
    assert usr.start == "before synthesize" and usr.stop == "after ev2"
    assert (tuned.source, tuned.users) == ("sft_user", ["grpo"])
    assert tuned.start == "after sft_user completes (ready before grpo)" and tuned.stop == "after grpo"
    assert idle.users == [] and idle.start.startswith("never")
    # the same from the planned stages alone: a pure function of the plan
    again = plan_servers([sp.spec for sp in r.servers], r.plan)
    assert [(p.id, p.source, p.users) for p in again] == [(p.id, p.source, p.users) for p in r.servers]
    lines = tuned.describe()
    assert "vllm" in lines[0] and "http://127.0.0.1:18991/v1" in lines[0] and "gpus 2,3" in lines[0]
    assert "listens on 127.0.0.1:18991, key: none" in lines[1]
    assert "starts after sft_user completes" in lines[2] and "used by grpo" in lines[2]


def test_validate_prints_the_server_plan(tmp_path):
    p = write(tmp_path, PLANNED)
    out = subprocess.run([sys.executable, "-m", "kit.cli", "run", str(p), "--validate"], capture_output=True,
                         text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert "servers (started and stopped by `kit run`" in out.stdout
    assert "starts before synthesize; used by synthesize, ev1, ev2; stops after ev2" in out.stdout
    assert "grpo        model<-sft_agent" in out.stdout and "user_model<-server:tuned" in out.stdout


def test_validate_refuses_a_server_open_beyond_loopback_without_a_key_and_shows_where_each_listens(tmp_path):
    """`kit run --validate` (the same load as `kit run`): 0.0.0.0 without a key is refused with the fix and
    status 2; with a key it passes and shows the address and where the key comes from."""
    body = HEAD + "  - {id: usr, engine: vllm, model: embedded, port: 18990, host: 0.0.0.0%s}\n" + USER.replace(
        "usr", "loc").replace("18990", "18991") + "stages:\n  - stage: evaluate\n    params: {user_model: 'server:usr'}\n"

    def validate(text: str, name: str) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if k != "KIT_TEST_SERVER_KEY"}
        return subprocess.run([sys.executable, "-m", "kit.cli", "run", str(write(tmp_path, text, name)), "--validate"],
                              capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)

    out = validate(body % "", "open.yaml")
    assert out.returncode == 2, out.stdout + out.stderr
    assert (f"error: {tmp_path / 'open.yaml'}:4: servers[0].api_key: server 'usr' listens on 0.0.0.0, beyond this "
            "machine, without an API key: add `api_key: generate` (the kit makes one and gives it to its own "
            "clients) or `api_key: env:MY_KEY`; or bind host 127.0.0.1") in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
    out = validate(body % ", api_key: generate", "generated.yaml")
    assert out.returncode == 0, out.stderr
    assert "listens on 0.0.0.0:18990, key: generated" in out.stdout, out.stdout
    assert "listens on 127.0.0.1:18991, key: none" in out.stdout, out.stdout
    out = validate(body % ", api_key: 'env:KIT_TEST_SERVER_KEY'", "env.yaml")
    assert out.returncode == 0, out.stderr
    assert "listens on 0.0.0.0:18990, key: from $KIT_TEST_SERVER_KEY (not set in this shell)" in out.stdout, out.stdout


def test_only_loopback_addresses_count_as_this_machine_alone():
    def spec(host: str) -> ServerSpec:
        return ServerSpec(id="s", engine="vllm", model="embedded", port=18990, host=host)

    assert all(spec(h).loopback for h in ("127.0.0.1", "127.0.0.2", "::1", "localhost"))
    assert not any(spec(h).loopback for h in ("0.0.0.0", "::", "", "10.1.2.3", "gpu-node-7"))
    assert spec("0.0.0.0").url == "http://127.0.0.1:18990/v1"  # the kit's clients still come in on loopback


def test_a_generated_key_is_private_and_kept_for_reruns_and_an_env_key_is_read_at_run_time(tmp_path, monkeypatch):
    spec = ServerSpec(id="pol", engine="vllm", model="embedded", port=18990, host="0.0.0.0", api_key="generate")
    run = tmp_path / "runs" / "r1" / "servers"
    key = server_key(spec, run)
    assert len(key) >= 40 and (run / "pol.key").read_text().strip() == key
    assert (run / "pol.key").stat().st_mode & 0o777 == 0o600
    assert server_key(spec, run) == key  # a rerun of r1: a server it left running keeps answering
    assert server_key(spec, tmp_path / "runs" / "r2" / "servers") != key  # another run, another key
    (run / "pol.key").write_text("")  # a run killed while writing it: never a server without a key
    assert len(server_key(spec, run)) >= 40 and (run / "pol.key").stat().st_mode & 0o777 == 0o600

    from_env = spec.model_copy(update={"api_key": "env:KIT_TEST_SERVER_KEY"})
    monkeypatch.delenv("KIT_TEST_SERVER_KEY", raising=False)
    with pytest.raises(ServerFailed, match=r"server 'pol' takes its API key from \$KIT_TEST_SERVER_KEY .* not set"):
        Servers(plan_servers([from_env], [_Stage("ev", {"model": "pol"})]), tmp_path / "r3", print, folder=None)
    monkeypatch.setenv("KIT_TEST_SERVER_KEY", "k-from-env")
    assert server_key(from_env, tmp_path) == "k-from-env"

    # vLLM reads it from VLLM_API_KEY: not on the command line (`ps`, the manifest and the log show that).
    # The vllm path is only named here, never run: no GPU.
    exe = tmp_path / "bin" / "vllm"
    exe.parent.mkdir()
    exe.write_text("")
    exe.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", str(exe.parent))
    cmd, env = command(spec, "/m", key)
    assert env["VLLM_API_KEY"] == key and key not in " ".join(cmd) and cmd[-4:] == ["--host", "0.0.0.0", "--port", "18990"]
    assert command(spec.model_copy(update={"host": "127.0.0.1", "api_key": None}), "/m")[1]["VLLM_API_KEY"] == ""


def test_the_kits_clients_send_the_key_of_a_server_the_runner_holds(tmp_path, monkeypatch):
    """The runner takes a server with a key (here: one already answering on its port, reused) and gives its
    key to the kit's clients through $KIT_ENDPOINT_KEYS, which processes it starts inherit (papermill's
    kernels too: jupyter_client starts them with os.environ). `transformers serve` checks no key and vLLM
    needs a GPU, so the server is a real `transformers serve` and the test reads the Authorization header of
    each request the kit's clients sent it, recorded at the HTTP library's transport (httpx; the openai SDK's
    httpx2), which is the libraries' code, not ours: the request passes on to the server unchanged."""
    import importlib
    import importlib.util

    model = _embedded()
    monkeypatch.setenv(KEYS_ENV, "{}")  # restored after the test
    sent: list[tuple[str, str]] = []

    def recorded(original, is_async: bool):
        def send(self, request):
            sent.append((request.url.path, request.headers.get("authorization", "")))
            return original(self, request)

        async def asend(self, request):
            sent.append((request.url.path, request.headers.get("authorization", "")))
            return await original(self, request)

        return asend if is_async else send

    libraries = [importlib.import_module(m) for m in ("httpx", "httpx2") if importlib.util.find_spec(m)]
    for lib in libraries:
        monkeypatch.setattr(lib.HTTPTransport, "handle_request", recorded(lib.HTTPTransport.handle_request, False))
        monkeypatch.setattr(lib.AsyncHTTPTransport, "handle_async_request",
                            recorded(lib.AsyncHTTPTransport.handle_async_request, True))
    with serving(model, tmp_path / "serve.log") as url:
        sent.clear()  # the fixture's own health checks
        spec = ServerSpec(id="pol", engine="vllm", model=model, port=int(url.rsplit(":", 1)[1].split("/")[0]),
                          host="0.0.0.0", api_key="generate")
        stage = _Stage("ev", {"model": "pol"})
        servers = Servers(plan_servers([spec], [stage]), tmp_path / "run", print, folder=None)
        key = servers.keys["pol"]
        try:
            servers.ready(stage)
            assert servers.running["pol"].proc is None  # reused
            assert endpoint_key(url) == key
            got = OpenAIBackend(url).generate_batch([[{"role": "user", "content": "hi"}]], params={"max_new_tokens": 2})
            assert got[0][0].raw
            assert served_models(url) == [model]
            child = subprocess.run([sys.executable, "-c", "from kit.llm.openai_backend import OpenAIBackend as B; "
                                    f"print(B({url!r}).api_key)"], capture_output=True, text=True, cwd=ROOT, timeout=60)
            assert child.stdout.strip() == key, child.stderr
        finally:
            servers.close()
        assert endpoint_key(url) is None  # taken back once the run no longer holds the server
    paths = {p for p, _ in sent}
    assert {"/v1/models", "/v1/chat/completions"} <= paths, sent
    assert all(auth == f"Bearer {key}" for _, auth in sent), sent


def test_tau2s_agent_and_user_get_the_key_kit_run_gave_for_their_server(monkeypatch):
    """tau2's own agent and user simulator call the server through litellm, with the api_key we give them."""
    from kit.eval.tau2_native import litellm_model

    url = "http://127.0.0.1:18990/v1"
    monkeypatch.setenv(KEYS_ENV, json.dumps({url: "k-123"}))
    assert litellm_model(f"openai:{url}#m", check=False) == ("openai/m", {"api_base": url, "api_key": "k-123"})
    assert litellm_model("openai:http://127.0.0.1:18991/v1#m", check=False)[1]["api_key"] == "dummy"  # no key given


def test_the_gpu_recipes_declare_their_servers(gpu_env):
    for d in ("airline", "retail", "telecom"):
        r = load_recipe(ROOT / f"recipes/{d}-qwen3.yaml", check_gpu=False)
        plans = {sp.id: sp for sp in r.servers}
        assert {sp.spec.engine for sp in r.servers} == {"vllm"}
        assert plans["sft_user_srv"].source == "sft_user" and plans["sft_user_srv"].users == ["grpo"]
        assert plans["grpo_policy"].source == "sft_agent" and plans["grpo_policy"].users == ["grpo"]
        assert plans["user"].users[-1] == "eval_rl" and plans["policy"].users[-1] == "eval_base"
        grpo = next(ps for ps in r.plan if ps.id == "grpo")
        assert grpo.servers == {"user_model": "sft_user_srv", "rollout_server": "grpo_policy"}
        synth = next(ps for ps in r.plan if ps.id == "synthesize")  # SFT samples in the served model's template
        assert synth.params["sft_tokenizer"] == os.environ["KIT_AGENT_MODEL"]
        gpus = [g for sp in r.servers for g in sp.spec.gpus]
        assert len(gpus) == len(set(gpus)) and not set(gpus) & set(range(8))  # training has GPUs 0-7


# ----- real servers: `transformers serve` of the embedded model -----------------------------------


def _embedded() -> str:
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    from kit.llm.embedded import ensure_embedded_model

    return str(ensure_embedded_model())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


# `kit run` starting, using and stopping a recipe's servers end to end: tests/test_rehearsal.py (five of them)


@pytest.mark.slow
def test_a_healthy_server_on_the_port_is_reused_another_model_refused_and_a_dead_one_explained(tmp_path):
    model = _embedded()
    port = free_port()
    spec = ServerSpec(id="smol", engine="transformers", model=model, port=port, args=["--device", "cpu"],
                      start_timeout_s=300)
    (plan,) = plan_servers([spec], [_Stage("ev", {"user_model": "smol"})])
    said: list[str] = []
    first = Servers([plan], tmp_path / "a", said.append, folder=None)
    first.ready(_Stage("ev", {"user_model": "smol"}))
    pid = first.running["smol"].proc.pid
    try:
        # a second run finds it answering with the same model: reused, and not its to stop
        second = Servers([plan], tmp_path / "b", said.append, folder=None)
        second.ready(_Stage("ev", {"user_model": "smol"}))
        assert second.running["smol"].proc is None and any("reused" in s for s in said)
        second.close()
        assert _alive(pid) and served_models(spec.url) is not None
        # the port answers with another model: refused, naming both
        other = ServerSpec(id="other", engine="transformers", model=str(tmp_path), port=port)
        (oplan,) = plan_servers([other], [_Stage("ev", {"user_model": "other"})])
        with pytest.raises(ServerFailed, match=f"already serves {model}, not {tmp_path}"):
            Servers([oplan], tmp_path / "c", said.append, folder=None).ready(_Stage("ev", {"user_model": "other"}))
    finally:
        first.close()
    assert not _alive(pid) and served_models(spec.url) is None

    # a server that exits before answering: its error names it and shows its log's tail
    bogus = tmp_path / "bogus"
    bogus.mkdir()
    (bogus / "config.json").write_text("{}")
    bad = ServerSpec(id="broken", engine="transformers", model=str(bogus), port=free_port(), start_timeout_s=300)
    (bplan,) = plan_servers([bad], [_Stage("ev", {"user_model": "broken"})])
    keeper = Servers([bplan], tmp_path / "d", said.append, folder=None)
    t0 = time.monotonic()
    try:
        with pytest.raises(ServerFailed) as e:
            keeper.ready(_Stage("ev", {"user_model": "broken"}))
    finally:
        keeper.close()
    assert "server 'broken'" in str(e.value) and "exited with status" in str(e.value)
    assert str(tmp_path / "d" / "servers" / "broken.log") in str(e.value)
    assert len(str(e.value).splitlines()) > 2  # the log's tail follows
    assert time.monotonic() - t0 < 200


class _Stage:
    """What the server plan reads of a planned stage."""

    def __init__(self, key: str, servers: dict[str, str]):
        self.key = self.id = key
        self.servers = servers
