"""`kit run` with a stage's `launch:` (kit/runner/launch.py): the recipe field's validation, the
`accelerate launch` command it becomes, its part in the fingerprint, a failing process, and (slow) a
real 2-process CPU sft_agent run whose run folder matches a notebook run of the same stage.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kit.runner import RecipeError, load_recipe

HEAD = "name: tl\ndomain: mock\ncheck_budgets: false\nstages:\n"
SFT = "  - stage: sft_agent\n    params: {data: gold, train_steps: 2, batch_size: 2, max_seq_len: 1024, gold_limit: 2}\n"


def write(tmp_path: Path, text: str, name: str = "r.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


BAD_LAUNCH = {
    "not a training stage": (HEAD + "  - stage: evaluate\n    launch: {num_processes: 2, cpu: true}\n",
                             ":6: stages[0].launch: stage 'evaluate' runs only as a notebook; `launch` "
                             "(accelerate launch) is for the training stages: sft_user, sft_agent, grpo"),
    "wrong type": (HEAD + SFT + "    launch:\n      num_processes: two\n      cpu: true\n",
                   ":8: stages[0].launch.num_processes: Input should be a valid integer"),
    "zero processes": (HEAD + SFT + "    launch: {num_processes: 0, cpu: true}\n",
                       ":7: stages[0].launch.num_processes: Input should be greater than or equal to 1"),
    "missing num_processes": (HEAD + SFT + "    launch: {cpu: true}\n",
                              ":7: stages[0].launch.num_processes: required field missing"),
    "unknown field": (HEAD + SFT + "    launch: {num_processes: 2, cpu: true, gpus: 2}\n",
                      ":7: stages[0].launch.gpus: unknown field"),
    "missing config file": (HEAD + SFT + "    launch: {num_processes: 2, config_file: /no/such/accelerate.yaml}\n",
                            ":7: stages[0].launch.config_file: accelerate config file '/no/such/accelerate.yaml' "
                            "does not exist"),
    "uneven machines": (HEAD + SFT + "    launch: {num_processes: 3, cpu: true, num_machines: 2}\n",
                        ":7: stages[0].launch: num_processes (3) must be a multiple of num_machines (2)"),
    "a rendezvous flag": (HEAD + SFT + "    launch: {num_processes: 2, cpu: true, extra_args: [--machine_rank=1]}\n",
                          ":7: stages[0].launch.extra_args: '--machine_rank=1' is set from num_processes"),
    "a flag kit sets itself": (HEAD + SFT + "    launch: {num_processes: 2, cpu: true, extra_args: [--num_processes=4]}\n",
                               ":7: stages[0].launch.extra_args: '--num_processes=4' is set from num_processes"),
}


@pytest.mark.parametrize("case", list(BAD_LAUNCH))
def test_a_bad_launch_field_is_one_error_naming_file_line_and_field(tmp_path, case):
    text, expected = BAD_LAUNCH[case]
    p = write(tmp_path, text)
    with pytest.raises(RecipeError) as e:
        load_recipe(p)
    msg = str(e.value)
    assert "\n" not in msg, msg
    assert msg.startswith(str(p)) and expected in msg, msg


def test_a_gpu_launch_needs_cuda_unless_validating(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    p = write(tmp_path, HEAD + SFT + "    launch: {num_processes: 2}\n")
    with pytest.raises(RecipeError) as e:
        load_recipe(p)
    assert ":7: stages[0].launch.cpu: launch: 2 GPU process(es) but this machine has no CUDA GPU" in str(e.value)
    assert load_recipe(p, check_gpu=False).plan[0].launch["num_processes"] == 2  # `kit run --validate`


def test_launch_is_planned_shown_by_validate_and_part_of_the_fingerprint(tmp_path):
    from kit.runner.execute import Runner, _resolve

    cfg = write(tmp_path, "distributed_type: MULTI_GPU\n", "accelerate.yaml")
    plain = load_recipe(write(tmp_path, HEAD + SFT))
    cpu2 = load_recipe(write(tmp_path, HEAD + SFT + "    launch: {num_processes: 2, cpu: true}\n", "a.yaml"))
    cpu3 = load_recipe(write(tmp_path, HEAD + SFT + "    launch: {num_processes: 3, cpu: true}\n", "b.yaml"))
    filed = write(tmp_path, HEAD + SFT + f"    launch: {{num_processes: 2, cpu: true, config_file: {cfg}}}\n", "c.yaml")
    assert plain.plan[0].launch is None
    assert cpu2.plan[0].launch == {"num_processes": 2, "config_file": None, "cpu": True, "extra_args": []}
    assert load_recipe(filed).plan[0].launch["config_file"] == str(cfg.resolve())

    def fp(recipe):
        ps = recipe.plan[0]
        return Runner(recipe, runs_dir=tmp_path / "runs")._fingerprint(ps, _resolve(ps, {}, {}), {})

    fps = [fp(plain), fp(cpu2), fp(cpu3), fp(load_recipe(filed))]
    assert len(set(fps)) == 4, fps
    cfg.write_text("distributed_type: DEEPSPEED\n")  # the config file's content counts, not only its name
    assert fp(load_recipe(filed)) != fps[3]

    # --set reaches launch too: one field, the whole mapping, or null (the notebook)
    assert fp(load_recipe(tmp_path / "a.yaml", {"sft_agent.launch.num_processes": 3})) == fps[2]
    assert fp(load_recipe(tmp_path / "a.yaml", {"sft_agent.launch": None})) == fps[0]
    assert fp(load_recipe(tmp_path / "r.yaml", {"sft_agent.launch": {"num_processes": 2, "cpu": True}})) == fps[1]

    r = subprocess.run([sys.executable, "-m", "kit.cli", "run", str(tmp_path / "a.yaml"), "--validate"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "sft_agent" in r.stdout and "[accelerate launch: 2 processes, cpu]" in r.stdout, r.stdout


def test_the_accelerate_command():
    from kit.runner.launch import KIT_ROOT, command

    cmd, env = command({"num_processes": 2, "config_file": None, "cpu": True, "extra_args": ["--debug"]}, "s.json")
    assert cmd[:3] == [sys.executable, "-m", "accelerate.commands.launch"]
    assert cmd[3:] == ["--num_processes", "2", "--multi_gpu", "--num_machines", "1", "--main_process_port", "0",
                       "--debug", "-m", "kit.runner.launch", "s.json"]  # torchrun: N CPU processes on gloo
    assert env["ACCELERATE_USE_CPU"] == "true" and env["CUDA_VISIBLE_DEVICES"] == ""
    assert env["PYTHONPATH"].split(":")[0] == str(KIT_ROOT)
    cmd, env = command({"num_processes": 1, "config_file": None, "cpu": True, "extra_args": []}, "s.json")
    assert "--cpu" in cmd and "--multi_gpu" not in cmd
    cmd, env = command({"num_processes": 8, "config_file": "/x/ds.yaml", "cpu": False, "extra_args": []}, "s.json")
    assert cmd[3:7] == ["--num_processes", "8", "--config_file", "/x/ds.yaml"]
    assert "--multi_gpu" not in cmd and "ACCELERATE_USE_CPU" not in env  # the config file decides


def test_a_launch_over_several_machines_gives_each_rank_its_command_and_a_slurm_script(tmp_path):
    from kit.runner.launch import command, node_commands, sbatch_script

    launch = {"num_processes": 4, "num_machines": 2, "cpu": True, "main_process_ip": "10.1.2.3", "main_process_port": 29511}
    cmd, _ = command(launch, "s.json", machine_rank=1)
    assert cmd[3:] == ["--num_processes", "4", "--multi_gpu", "--num_machines", "2", "--machine_rank", "1",
                       "--same_network", "--main_process_ip", "10.1.2.3", "--main_process_port", "29511",
                       "-m", "kit.runner.launch", "s.json"]
    lines = node_commands(launch, tmp_path / "grpo.launch.json")
    assert len(lines) == 2 and all(f"cd {tmp_path} && ACCELERATE_USE_CPU=true" in x for x in lines)
    assert "--machine_rank 0" in lines[0] and "--machine_rank 1" in lines[1]
    script = sbatch_script(launch, tmp_path / "grpo.launch.json", "kit-grpo")
    assert "#SBATCH --nodes=2" in script and "#SBATCH --ntasks-per-node=1" in script
    # each node's rank is its own SLURM_NODEID (escaped: expanded by srun's task, not by the batch script)
    assert "--machine_rank \\$SLURM_NODEID" in script and "--main_process_ip $MAIN" in script
    assert script.startswith("#!/bin/bash") and subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    assert "export ACCELERATE_USE_CPU=true" in script and f"cd {tmp_path}" in script


# LoRA adapters on a small random-weight Llama with the embedded tokenizer (tests/_tiny_model.py: the
# launch's plumbing, not the model, is under test; SmolLM2-135M made the test ~2 minutes), 2 optimizer
# steps of 2 short rows per process; lr 1e-3 so that 2 steps move the merged weights well above float noise
LORA_SFT = ("  - stage: sft_agent\n    params: {data: gold, gold_limit: 2, train_steps: 2, batch_size: 2, "
            "max_seq_len: 384, lora: true, lora_r: 8, lora_alpha: 16, lr: 1.0e-3, save_every: 0}\n")


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_two_machines_on_loopback_train_the_same_weights_as_one_machine(tmp_path):
    """`kit run` with `num_machines: 2` on loopback: it starts machine ranks 0 and 1 on this host (one
    process each, gloo, static rendezvous on 127.0.0.1), which train the weights one machine with two
    processes trains: the same global batch (2 processes x 2 rows), the same data order, the same
    all-reduce. A rank given the wrong machine_rank, or a global batch split otherwise (another world
    size), does not."""
    from _tiny_model import tiny_model_folder
    from transformers import AutoModelForCausalLM

    from kit.runner.execute import Runner

    tiny = tiny_model_folder(tmp_path / "tiny-model")
    head = HEAD.replace("domain: mock\n", f"domain: mock\nbase_model: {tiny}\n")
    kw = dict(runs_dir=tmp_path / "runs", reports_dir=tmp_path / "reports", stream=open(tmp_path / "console", "w"))
    two = Runner(load_recipe(write(tmp_path, head + LORA_SFT + "    launch: {num_processes: 2, cpu: true, num_machines: 2}\n",
                                   "two.yaml")), "two", **kw).run()
    sdir = two.run_dir / "sft_agent"
    assert (sdir / "sft_agent.nodes.sh").is_file() and (sdir / "sft_agent.sbatch").is_file()
    log0, log1 = (sdir / "sft_agent.log").read_text(), (sdir / "sft_agent.machine1.log").read_text()
    assert "--machine_rank 0" in log0 and "process 0 of 2" in log0 and "process 1 of 2" not in log0, log0[-3000:]
    assert "--machine_rank 1" in log1 and "process 1 of 2" in log1 and "process 0 of 2" not in log1, log1[-3000:]
    info = json.loads((sdir / "stage.json").read_text())
    assert info["status"] == "complete" and info["world_size"] == 2 and info["summary"]["steps"] == 2
    metrics = json.loads((sdir / "model" / "sft_metrics.json").read_text())
    assert metrics["processes"] == 2

    launched = write(tmp_path, head + LORA_SFT + "    launch: {num_processes: 2, cpu: true}\n", "one.yaml")
    one = Runner(load_recipe(launched), "one", **kw).run()
    _launched_stage_reads_like_a_notebook_stage(one, tmp_path, kw, launched, head)
    assert json.loads((one.run_dir / "sft_agent" / "model" / "sft_metrics.json").read_text())["tokens_trained"] == \
        metrics["tokens_trained"]  # the same rows reached the loss
    a = AutoModelForCausalLM.from_pretrained(sdir / "model").state_dict()
    b = AutoModelForCausalLM.from_pretrained(one.run_dir / "sft_agent" / "model").state_dict()
    start = AutoModelForCausalLM.from_pretrained(tiny).state_dict()
    assert a.keys() == b.keys() == start.keys()
    moved = max(float((a[k] - start[k]).abs().max()) for k in a)
    worst = max(float((a[k] - b[k]).abs().max()) for k in a)
    print(f"largest change from the start {moved:.3g}; largest difference between the launches {worst:.3g}")
    assert moved > 1e-4  # the two steps did train (float noise is ~1e-7)
    assert worst <= 1e-6 + 1e-3 * moved, (worst, moved)  # equal up to float reassociation


def _launched_stage_reads_like_a_notebook_stage(res, tmp_path, kw, launched, head):
    """One machine, two processes: both ranks ran, the stage is complete, a rerun skips it, and the same stage
    as a notebook leaves the same files (but the executed notebook and its figure instead of the log and the
    launch parameters), which the report reads alike."""
    from transformers import AutoModelForCausalLM

    from kit.runner.execute import Runner

    assert res.executed == ["sft_agent"]
    sdir = res.run_dir / "sft_agent"
    log = (sdir / "sft_agent.log").read_text()
    assert "process 0 of 2" in log and "process 1 of 2" in log, log[-3000:]  # both ranks ran
    assert "stage sft_agent: process 1 of 2 done" in log
    info = json.loads((sdir / "stage.json").read_text())
    assert info["status"] == "complete" and info["world_size"] == 2 and info["summary"]["steps"] == 2
    assert info["log"] == str(sdir / "sft_agent.log") and info["launch"]["num_processes"] == 2
    metrics = json.loads((sdir / "model" / "sft_metrics.json").read_text())
    assert metrics["processes"] == 2 and metrics["tokens_trained"] > 0
    assert AutoModelForCausalLM.from_pretrained(sdir / "model").config.use_cache  # the saved model loads
    m = json.loads((res.run_dir / "manifest.json").read_text())
    assert m["stages"][0]["log"] == str(sdir / "sft_agent.log") and m["stages"][0]["executed_notebook"] is None

    again = Runner(load_recipe(launched), "one", **kw).run()  # a rerun: complete, same fingerprint
    assert again.executed == [] and again.skipped == ["sft_agent"]

    nb = Runner(load_recipe(write(tmp_path, head + LORA_SFT, "notebook.yaml")), "notebook", **kw).run()
    ndir = nb.run_dir / "sft_agent"
    assert _files(sdir) - {"sft_agent.log", "sft_agent.launch.json"} == \
        _files(ndir) - {"sft_agent.ipynb", "loss.png"}, (_files(sdir), _files(ndir))
    ninfo = json.loads((ndir / "stage.json").read_text())
    assert set(info) - {"log", "launch", "world_size"} == set(ninfo) - {"executed_notebook"}
    assert set(info["summary"]) == set(ninfo["summary"]) and info["params"] == ninfo["params"]
    from kit.report.build import collect

    for run in (res.run_dir, nb.run_dir):  # the report reads both
        assert [s["key"] for s in collect(run)["sft_runs"]] == ["sft_agent"]


def _files(d: Path) -> set[str]:
    return {str(f.relative_to(d)) for f in d.rglob("*") if f.is_file() and "wandb" not in f.relative_to(d).parts}


def test_a_failing_process_fails_the_stage_with_the_logs_tail(tmp_path):
    """Each process fails reading a bad sft_agent.jsonl (a user error): StageFailed names it, shows
    the log's tail, stage.json and the manifest say failed, and a rerun starts the stage again."""
    from kit.runner.execute import Runner, StageFailed

    data = tmp_path / "data"
    data.mkdir()
    (data / "sft_agent.jsonl").write_text("{not json\n")
    p = write(tmp_path, HEAD + f"  - stage: sft_agent\n    params: {{data: {data}, train_steps: 1}}\n"
              "    launch: {num_processes: 2, cpu: true}\n")
    console = tmp_path / "console"
    with pytest.raises(StageFailed) as e:
        Runner(load_recipe(p), runs_dir=tmp_path / "runs", reports_dir=tmp_path / "reports",
               stream=open(console, "w")).run()
    sdir = tmp_path / "runs" / "tl" / "sft_agent"
    msg = str(e.value)
    assert e.value.user_error and "BadLine" in msg and "sft_agent.jsonl:1" in msg, msg
    assert f"log with the traceback: {sdir / 'sft_agent.log'}" in msg and "  | " in msg, msg
    log = (sdir / "sft_agent.log").read_text()
    assert "process 0 of 2" in log and "process 1 of 2" in log and "Traceback" in log
    failure = json.loads((sdir / "sft_agent.failure.json").read_text())  # what the runner read
    assert failure["error"] == "BadLine" and failure["user_error"] is True and failure["world"] == 2, failure
    assert f"{failure['error']}: {failure['message']}" in msg and "sft_agent.jsonl:1" in failure["message"]
    info = json.loads((sdir / "stage.json").read_text())
    assert info["status"] == "failed" and "BadLine" in info["error"] and info["log"] == str(sdir / "sft_agent.log")
    m = json.loads((tmp_path / "runs" / "tl" / "manifest.json").read_text())
    assert m["status"] == "failed" and m["failed_stage"] == "sft_agent"
    assert "launching 2 processes (CPU)" in console.read_text()


FAKE_PROCESS = """
import json, sys
from pathlib import Path
spec, failure = Path(sys.argv[1]), sys.argv[2]
print("[kit.runner.launch] FAILED process 0 of 1: ValueError: what the log says", file=sys.stderr)
if failure:
    (spec.parent / (spec.name.removesuffix(".launch.json") + ".failure.json")).write_text(failure)
sys.exit(1)
"""


@pytest.mark.parametrize("written", [True, False])
def test_the_runner_reports_the_failure_json_a_launched_process_wrote(tmp_path, monkeypatch, written):
    """A launched stage's failure reaches the runner as the JSON its failing process wrote (error class,
    message, user-error flag), not from the log; without that file, the exit status is all it says."""
    import kit.runner.launch as launch
    from kit.runner.execute import Runner, StageFailed
    from kit.runner.launch import LaunchFailure

    failure = LaunchFailure(error="NotFound", message="no such folder: /x", user_error=True, rank=1, world=2)
    monkeypatch.setattr(launch, "command", lambda spec, spec_file, machine_rank=0: (
        [sys.executable, "-c", FAKE_PROCESS, str(spec_file), failure.model_dump_json() if written else ""], {}))
    p = write(tmp_path, HEAD + SFT + "    launch: {num_processes: 1, cpu: true}\n")
    sdir = tmp_path / "runs" / "tl" / "sft_agent"
    sdir.mkdir(parents=True)
    (sdir / "sft_agent.failure.json").write_text(failure.model_copy(update={"message": "stale"}).model_dump_json())
    with pytest.raises(StageFailed) as e:
        Runner(load_recipe(p), runs_dir=tmp_path / "runs", reports_dir=tmp_path / "reports",
               stream=open(tmp_path / "console", "w")).run()
    msg = str(e.value)
    assert "stale" not in msg.splitlines()[0]  # an earlier attempt's file is gone before the launch
    assert "FAILED process 0 of 1: ValueError: what the log says" in msg  # the log's tail, for people
    if written:
        assert msg.startswith("stage 'sft_agent' failed: process 1 of 2: NotFound: no such folder: /x\n"), msg
        assert e.value.user_error
    else:
        assert msg.startswith("stage 'sft_agent' failed: accelerate launch exited with status 1\n"), msg
        assert not e.value.user_error
    info = json.loads((sdir / "stage.json").read_text())
    assert info["error"] == msg.splitlines()[0].removeprefix("stage 'sft_agent' failed: ")


RANK_PROCESS = """
import sys, time
rank = int(sys.argv[1])
if rank == 1:
    print("DistNetworkError: the rendezvous port is taken", flush=True)
    sys.exit(1)
print("machine 0 waits at the rendezvous for its peer", flush=True)
time.sleep(600)
"""


def test_a_machine_rank_that_fails_stops_the_ranks_waiting_for_it(tmp_path, monkeypatch):
    """Two machine ranks on loopback: rank 1's launcher fails at once, rank 0's would wait for it at the
    rendezvous for minutes (torch's timeout). The stage fails within the grace period, naming rank 1,
    with rank 1's log's tail, and rank 0's process group is stopped. (The launchers are stand-ins for
    `accelerate launch`: this is about the runner's waiting.)"""
    import kit.runner.launch as launch
    from kit.runner.execute import LaunchExecutor, Runner, StageFailed

    monkeypatch.setattr(launch, "command", lambda spec, spec_file, machine_rank=0: (
        [sys.executable, "-c", RANK_PROCESS, str(machine_rank)], {}))
    monkeypatch.setattr(LaunchExecutor, "rank_grace_s", 1.0, raising=False)
    p = write(tmp_path, HEAD + SFT + "    launch: {num_processes: 2, cpu: true, num_machines: 2}\n")
    t0 = time.monotonic()
    with pytest.raises(StageFailed) as e:
        Runner(load_recipe(p), runs_dir=tmp_path / "runs", reports_dir=tmp_path / "reports",
               stream=open(tmp_path / "console", "w")).run()
    assert time.monotonic() - t0 < 60  # not rank 0's 600 s
    msg = str(e.value)
    assert msg.startswith("stage 'sft_agent' failed: machine rank 1: accelerate launch exited with status 1 "
                          "(its log: sft_agent.machine1.log)"), msg
    assert "the rendezvous port is taken" in msg and "waits at the rendezvous for its peer\n" not in msg  # rank 1's tail
    assert msg.splitlines()[-2].endswith("log with the traceback: " + str(tmp_path / "runs" / "tl" / "sft_agent" /
                                                                         "sft_agent.machine1.log")), msg
    log0 = (tmp_path / "runs" / "tl" / "sft_agent" / "sft_agent.log").read_text()
    assert "waits at the rendezvous" in log0
    import subprocess as sp

    left = sp.run(["pgrep", "-f", "machine 0 waits at the rendezvous"], capture_output=True, text=True).stdout
    assert not left.strip(), left  # rank 0 was stopped, not left waiting


def test_a_launch_failure_is_written_once_by_the_first_process_to_fail(tmp_path):
    from kit.errors import NotFound
    from kit.runner.launch import LaunchFailure, failure_file

    path = failure_file(tmp_path / "grpo.launch.json")
    assert path == tmp_path / "grpo.failure.json" and LaunchFailure.read(path) is None
    first = LaunchFailure.of(NotFound("no data at /d\nmore lines"), rank=1, world=2)
    assert (first.error, first.message, first.user_error) == ("NotFound", "no data at /d", True)
    assert first.write(path) and not LaunchFailure.of(RuntimeError("peer gone"), 0, 2).write(path)
    assert LaunchFailure.read(path) == first and list(tmp_path.iterdir()) == [path]
    assert LaunchFailure.of(KeyError("x")).user_error is False


