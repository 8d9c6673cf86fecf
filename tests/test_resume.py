"""GRPO and SFT resume inside a stage (kit/train/checkpoints.py): a run killed with SIGKILL in the
middle of a step and rerun ends with the same weights as a run never interrupted, and its metrics
hold each step once; a damaged, half-written or foreign checkpoint is never loaded.

"The same weights" is bit-equal (torch.equal): a resumed run replays the uninterrupted one's
arithmetic exactly (same weights and optimizer state, same draws and seeds, same thread count, the
sampler's prefix cache emptied at each checkpoint in both), so any difference is a resume bug, not
float noise. The runs: tests/_resume_run.py (tiny models, 6 steps, a checkpoint every 2); the
uninterrupted run and the rerun run in this process, the killed run in a subprocess.
"""

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from kit.errors import BadInput
from kit.files import read_jsonl

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _resume_run import STEPS, grpo_run, sft_run  # noqa: E402
from test_grpo_learning import PromptTask, single_turn, small_cfg, tiny_llama, weights  # noqa: E402

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from kit.llm import ensure_embedded_model

    return AutoTokenizer.from_pretrained(ensure_embedded_model())


def _killed_during_a_step(*args: str) -> Path:
    """Run tests/_resume_run.py with --hold-at; SIGKILL it once it is inside that step."""
    out = Path(args[1])
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(HERE.parent), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, str(HERE / "_resume_run.py"), *args], env=env, cwd=HERE.parent,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while not (out / "held").exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.1)
    assert proc.poll() is None, f"the run ended before it could be killed:\n{proc.stderr.read()[-3000:]}"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    proc.stderr.close()
    return out


def _same_tensors(a: Path, b: Path) -> None:
    x, y = load_file(str(a)), load_file(str(b))
    assert x.keys() == y.keys()
    for k in x:
        assert torch.equal(x[k], y[k]), f"{k} differs from the uninterrupted run's"


@pytest.mark.slow
def test_grpo_killed_during_a_step_resumes_to_the_uninterrupted_runs_weights(tmp_path):
    straight, _ = grpo_run(tmp_path / "straight")
    assert [m["step"] for m in straight] == list(range(STEPS)) and sum(m["skipped"] for m in straight) < STEPS
    assert sum(m["groups/resamples"] for m in straight) > 0  # the per-process stream and its queue were used
    assert not (tmp_path / "straight" / "checkpoints").exists()  # removed once model/ was written

    out = _killed_during_a_step("grpo", str(tmp_path / "killed"), "--hold-at", "3")  # in step 3's rollouts
    assert [p.name for p in (out / "checkpoints").iterdir() if p.is_dir()] == ["step-000002"]
    assert [m["step"] for m in read_jsonl(out / "metrics.jsonl")] == [0, 1, 2]  # step 2 ran past the checkpoint

    again, resumed = grpo_run(out)
    assert resumed == 2
    lines = read_jsonl(out / "metrics.jsonl")
    assert [m["step"] for m in lines] == [m["step"] for m in again] == list(range(STEPS))  # each step once
    for key in ("reward/mean", "loss", "groups/resamples", "train/rows", "skip_reason"):
        assert [m.get(key) for m in lines] == [m.get(key) for m in straight], key
    _same_tensors(out / "model" / "model.safetensors", tmp_path / "straight" / "model" / "model.safetensors")
    assert not (out / "checkpoints").exists()


@pytest.fixture(scope="module")
def tiny_model_dir(tokenizer, tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny") / "model"
    tiny_llama(tokenizer, seed=0).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.mark.slow
def test_sft_killed_during_a_step_resumes_to_the_uninterrupted_runs_weights(tmp_path, tiny_model_dir):
    straight = sft_run(tmp_path / "straight", tiny_model_dir)
    assert straight["steps"] == STEPS and straight["resumed_from"] == 0
    assert not (tmp_path / "straight" / "checkpoints").exists()

    out = _killed_during_a_step("sft", str(tmp_path / "killed"), str(tiny_model_dir), "--hold-at", "5")
    assert sorted(p.name for p in (out / "checkpoints").iterdir() if p.is_dir()) == ["checkpoint-4"]
    # a kill while transformers was writing checkpoint-5: its trainer_state.json (written last) missing
    half = out / "checkpoints" / "checkpoint-5"
    shutil.copytree(out / "checkpoints" / "checkpoint-4", half)
    (half / "trainer_state.json").unlink()

    again = sft_run(out, tiny_model_dir)
    assert again["resumed_from"] == 4  # inside the second epoch (3 batches of 2, 2, 1 samples per epoch)
    assert [s for s, _ in again["loss_curve"]] == list(range(1, STEPS + 1))  # each step once
    assert again["loss_curve"] == straight["loss_curve"]
    assert (again["tokens_trained"], again["tokens_seen"]) == (straight["tokens_trained"], straight["tokens_seen"])
    assert json.loads((out / "model" / "loss_curve.json").read_text()) == [list(p) for p in straight["loss_curve"]]
    _same_tensors(out / "model" / "model.safetensors", tmp_path / "straight" / "model" / "model.safetensors")
    assert not (out / "checkpoints").exists() and not (out / "model" / "checkpoints").exists()


def _trainer(tokenizer, **kw):
    from kit.train.grpo import GRPOTrainer

    odd = lambda task, traj: float(traj.messages[-1].meta["token_ids"][-1] % 2)  # noqa: E731
    cfg = small_cfg(group_size=4, filter_mode="off", train_steps=3, save_every=1, keep_checkpoints=2, **kw)
    return GRPOTrainer(tiny_llama(tokenizer), tokenizer, [PromptTask("a", "Say hi."), PromptTask("b", "Say bye.")],
                       cfg, rollout_fn=single_turn(4), reward_fn=odd, agent_system="You are a helpful assistant.")


def test_a_damaged_half_written_or_foreign_checkpoint_is_never_loaded(tokenizer, tmp_path, caplog):
    root = tmp_path / "checkpoints"
    first = _trainer(tokenizer)
    initial = weights(first.policy)
    after = {}
    first.train(on_step=lambda m: after.setdefault(m["step"] + 1, weights(first.policy)), checkpoint_dir=root)
    assert sorted(p.name for p in root.iterdir()) == ["step-000001", "step-000002"]  # none after the last step
    assert json.loads((root / "step-000002" / "meta.json").read_text())["step"] == 2
    # a kill while writing step 3 leaves its staging folder: never read
    (root / ".tmp-step-000003").mkdir()
    (root / ".tmp-step-000003" / "trainable.safetensors").write_bytes(b"half")

    trainable = root / "step-000002" / "trainable.safetensors"
    trainable.write_bytes(trainable.read_bytes()[:-1])  # a lost write: shorter than meta.json says
    caplog.set_level(logging.WARNING)
    second = _trainer(tokenizer)
    assert second.resume(root) == 1 and second.step_idx == 1
    assert torch.equal(weights(second.policy), after[1])
    assert "step-000002 is incomplete (trainable.safetensors holds" in caplog.text

    opt = root / "step-000001" / "optimizer.pt"
    opt.write_bytes(b"\0" * opt.stat().st_size)  # the right size, unreadable
    third = _trainer(tokenizer)
    assert third.resume(root) == 0 and third.step_idx == 0  # nothing readable: from the start, said
    assert torch.equal(weights(third.policy), initial)
    assert "step-000001 is unreadable" in caplog.text

    # a checkpoint of other settings is refused by name; one of another tag (stage fingerprint) is removed
    tagged = tmp_path / "tagged"
    fourth = _trainer(tokenizer)
    assert fourth.resume(tagged, tag="fingerprint-a") == 0
    fourth.train(steps=2, checkpoint_dir=tagged)  # a checkpoint after step 1 (none after a train call's last)
    with pytest.raises(BadInput, match=r"other settings than this run has: \['lr'\]"):
        _trainer(tokenizer, lr=2e-3).resume(tagged, tag="fingerprint-a")
    assert _trainer(tokenizer).resume(tagged, tag="fingerprint-a") == 1
    # micro-batching is resumable (the same gradient cut differently): a memory fix needs no restart
    assert _trainer(tokenizer, micro_batch_tokens=64, micro_batch_size=1).resume(tagged, tag="fingerprint-a") == 1
    assert _trainer(tokenizer).resume(tagged, tag="fingerprint-b") == 0
    assert [p.name for p in tagged.iterdir()] == ["owner.json"] and "checkpoints of another run" in caplog.text
