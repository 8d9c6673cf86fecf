"""recipes/rehearsal-cpu.yaml: the GPU recipes' shape on CPU. The fast test holds the rehearsal to the GPU
recipes (same stages in the same order, the same launched stages, a server for each of theirs, LoRA and
gradient checkpointing, GRPO rollouts through a server) and to its list of what it cannot exercise; the
slow one runs it with `kit run` (5 real `transformers serve` servers started and stopped by the run, 2-process
accelerate launches, weight sync each GRPO step, tau2's orchestrator) and reruns it. No fake server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _serving import free_port
from _tiny_model import tiny_model_folder

from kit.llm.openai_backend import served_models
from kit.runner import load_recipe

ROOT = Path(__file__).resolve().parents[1]
REHEARSAL = ROOT / "recipes" / "rehearsal-cpu.yaml"


def _shape(recipe):
    return [(ps.id, ps.stage, bool(ps.launch)) for ps in recipe.plan]


def test_the_rehearsal_has_the_gpu_recipes_shape_and_names_what_it_cannot_run(gpu_env):
    reh = load_recipe(REHEARSAL)
    assert reh.spec.rehearsal is not None
    of = reh.spec.rehearsal.of
    assert sorted(of) == ["airline-qwen3.yaml", "retail-qwen3.yaml", "telecom-qwen3.yaml"]
    not_run = " ".join(reh.spec.rehearsal.not_exercised).lower()
    for gap in ("vllm", "load_lora_adapter", "deepspeed", "cuda", "token ids"):
        assert gap in not_run, gap
    by = {ps.id: ps for ps in reh.plan}
    for name in of:
        gpu = load_recipe(REHEARSAL.parent / name, check_gpu=False)
        assert _shape(reh) == _shape(gpu), name  # the same stages, in order, launched where theirs are
        gsrv = {sp.id: sp for sp in gpu.servers}
        rsrv = {sp.id: sp for sp in reh.servers}
        for sid, sp in gsrv.items():  # each of their servers has a stand-in serving the same thing to the same stages
            assert sid in rsrv, sid
            assert (rsrv[sid].source, rsrv[sid].users) == (sp.source, sp.users), sid
        for ps in gpu.plan:
            mine = by[ps.id]
            assert mine.servers.items() >= ps.servers.items(), ps.id  # every server reference of theirs
            for knob in ("lora", "gradient_checkpointing", "rollout"):
                if knob in ps.params:
                    assert mine.params.get(knob) == ps.params[knob], (ps.id, knob)
    assert all(sp.spec.engine == "transformers" for sp in reh.servers)
    shown = subprocess.run([sys.executable, "-m", "kit.cli", "run", str(REHEARSAL), "--validate"], capture_output=True,
                           text=True, timeout=300, cwd=ROOT)
    assert shown.returncode == 0, shown.stderr[-3000:]
    assert "what they declare that this run does not exercise:" in shown.stdout
    assert all(f"  - {line}" in shown.stdout for line in reh.spec.rehearsal.not_exercised)
    # what the GPU recipes cannot show on a laptop: the engine's SFT template and tau2's own orchestrator
    assert by["synthesize"].params["sft_tokenizer"] == "embedded"
    assert by["eval_rl"].params["protocol"] == "tau2" and by["eval_rl"].servers == {"model": "rl_srv",
                                                                                      "user_model": "user"}


@pytest.mark.slow
def test_the_rehearsal_runs_end_to_end_and_a_rerun_does_nothing(tmp_path):
    """The plumbing, not the model: the test's base model and raw servers are a small random-weight Llama
    with the embedded tokenizer (tests/_tiny_model.py; SmolLM2-135M made this test ~8 minutes of a 2-core
    machine, its forward passes over the mock policy most of it). `kit run recipes/rehearsal-cpu.yaml` by
    hand runs the embedded model."""
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    reh = load_recipe(REHEARSAL)
    tiny = tiny_model_folder(tmp_path / "tiny-model")
    ports = {sp.id: free_port() for sp in reh.servers}  # the recipe's ports may be taken on a shared machine
    cmd = [sys.executable, "-m", "kit.cli", "run", str(REHEARSAL), "--runs-dir", str(tmp_path / "runs"),
           "--reports-dir", str(tmp_path / "reports"), "--set", f"base_model={tiny}",
           "--set", "synthesize.judge_threshold=1.0"]  # random weights judge every task off-plan: asked, not obeyed
    cmd += [a for sid, port in ports.items() for a in ("--set", f"servers.{sid}.port={port}")]
    cmd += [a for sp in reh.servers if sp.spec.model == "embedded" for a in ("--set", f"servers.{sp.id}.model={tiny}")]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, cwd=ROOT)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    run = tmp_path / "runs" / "rehearsal-cpu"
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    for ps in reh.plan:
        info = json.loads((run / ps.id / "stage.json").read_text())
        assert info["status"] == "complete", ps.id
    # the run started every server when its model existed, each answered requests, none is left
    for sp in reh.servers:
        rec = manifest["servers"][sp.id]
        assert rec["url"] == f"http://127.0.0.1:{ports[sp.id]}/v1" and "stopped" in rec, sp.id
        assert served_models(rec["url"]) is None, sp.id  # nothing left behind
        with pytest.raises(ProcessLookupError):
            os.kill(rec["pid"], 0)
        assert "/v1/chat/completions" in (run / "servers" / f"{sp.id}.log").read_text(), sp.id
        assert f"server {sp.id}: ready" in out.stdout and f"server {sp.id}: stopped" in out.stdout, sp.id
    # the engine sampled through the policy server, its two plans as two units in flight at once
    synth = run / "synthesize"
    units = [json.loads(x) for x in (synth / "units.jsonl").read_text().splitlines()]
    assert sorted(u["unit"] for u in units) == ["r0-p0", "r0-p1"]
    props = [json.loads(x) for x in (synth / "proposals.jsonl").read_text().splitlines()]
    assert props and all(p["decisions"] for p in props)  # the served model made the decisions
    from kit.engine.audit import audit_run

    assert audit_run(synth)["problems"] == []
    # 2-process launches for both SFT stages and GRPO
    for sid in ("sft_user", "sft_agent", "grpo"):
        log = (run / sid / f"{sid}.log").read_text()
        assert "process 0 of 2" in log and "process 1 of 2" in log, sid
        assert json.loads((run / sid / "stage.json").read_text())["world_size"] == 2, sid
    # GRPO: rollouts from the server (text re-tokenized: transformers serve returns no token ids); after each
    # step the weights went to sync/step-N, which the unpinned server loaded and step N+1 sampled by name
    history = [json.loads(x) for x in (run / "grpo" / "metrics.jsonl").read_text().splitlines()]
    assert len(history) == 2
    for m in history:
        assert m["skipped"] == 0, m["skip_reason"]
        assert m["train/turns"] >= 1 and m["train/retokenized_turns"] == m["train/turns"]
        assert m["train/unmatched_turns"] == 0 and m["time/weight_sync_s"] > 0
    sync = (run / "grpo" / "sync").resolve()
    assert (sync / "step-1" / "config.json").exists() and (sync / "step-2" / "config.json").exists()
    policy_log = (run / "servers" / "grpo_policy.log").read_text()
    assert f"Loading {sync / 'step-1'}" in policy_log, policy_log[-2000:]
    assert f"Model: {sync / 'step-1'}" in policy_log  # step 2's episodes were sampled from step 1's weights
    # the RL agent was scored through tau2's orchestrator, on the run's own RL server
    ev = json.loads((run / "eval_rl" / "eval.json").read_text())
    assert ev["meta"]["protocol"] == "tau2", ev["meta"]
    assert (tmp_path / "reports" / "rehearsal-cpu" / "index.html").is_file()

    # a rerun of the complete run: every stage skipped, no server started
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.count("skipped") >= len(reh.plan) and "starting transformers" not in again.stdout
    for sp in reh.servers:  # one start each in the server logs
        assert (run / "servers" / f"{sp.id}.log").read_text().count("--- ") == 1, sp.id
