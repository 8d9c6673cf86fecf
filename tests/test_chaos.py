"""kit chaos (kit/runner/chaos.py): what it compares, and that the comparison can fail; the whole-chain kill
test; and what chaos found: a task digest that depended on the process (tau2's load-time timestamps)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kit.runner.chaos import compare, digests

ROOT = Path(__file__).resolve().parents[1]


def test_the_same_tasks_digest_alike_in_two_processes():
    """tau2 stamps a task's initial message history with the time it loaded it; the memo keys of GRPO's step 0
    and of an evaluation digest tasks, and differed in every process (a memo never found again; chaos saw an
    extra memo file after a rerun)."""
    code = ("from kit.envs import load_domain; from kit.files import task_digest; "
            "print(task_digest([t.model_dump(mode='json') for t in load_domain('mock').tasks('default')]))")
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
            for _ in range(2)]
    assert runs[0] == runs[1] and len(runs[0].strip()) == 64


def _run_folder(root: Path, reward: float = 1.0, weights: bytes = b"\x00\x01", started: str = "T1") -> Path:
    run = root / "runs" / "chaos"
    (run / "evaluate").mkdir(parents=True)
    (run / "sft" / "model").mkdir(parents=True)
    (run / "sft" / "model" / "model.safetensors").write_bytes(weights)
    (run / "evaluate" / "stage.json").write_text(json.dumps(
        {"status": "complete", "started": started, "wall_s": 3.2, "out_dir": str(run / "evaluate"),
         "summary": {"pass1": reward}}))
    ids = ["0" * 31 + "a", "f" * 32] if started == "T1" else ["1" * 32, "2" * 32]  # random uuids, same references
    (run / "evaluate" / "trajectories.jsonl").write_text("".join(
        json.dumps({"id": i, "task_id": "t", "reward": reward, "start_time": started, "ref": i}) + "\n" for i in ids))
    (run / "evaluate" / "episodes.csv").write_text(f"task_id,reward,wall_s\nt,{reward},{len(started)}\n")
    (run / "evaluate" / "evaluate.ipynb").write_text(started)  # executed notebooks hold times: not compared
    (run / ".kit.lock").write_text(started)
    return run


def test_digests_ignore_times_paths_and_random_ids_but_not_weights_or_verdicts(tmp_path):
    ref = digests(_run_folder(tmp_path / "a"))
    assert "evaluate/evaluate.ipynb" not in ref and ".kit.lock" not in ref
    same = digests(_run_folder(tmp_path / "b", started="T2-later"))
    assert set(compare(ref, same).values()) == {"identical"}
    worse = compare(ref, digests(_run_folder(tmp_path / "c", reward=0.0)))
    assert worse["evaluate/trajectories.jsonl"] == worse["evaluate/episodes.csv"] == "differs"
    assert worse["evaluate/stage.json"] == "differs" and worse["sft/model/model.safetensors"] == "identical"
    other = compare(ref, digests(_run_folder(tmp_path / "d", weights=b"\x00\x02")))
    assert other["sft/model/model.safetensors"] == "differs"
    gone = _run_folder(tmp_path / "e")
    (gone / "evaluate" / "episodes.csv").unlink()
    (gone / "evaluate" / "extra.json").write_text("{}")
    verdicts = compare(ref, digests(gone))
    assert verdicts["evaluate/episodes.csv"] == "missing" and verdicts["evaluate/extra.json"] == "extra"


@pytest.mark.slow  # a tiny chain with a model (tests/_tiny_chain.py's first stages), run three times (~1.5 min)
def test_kit_chaos_kills_the_tiny_chain_reruns_it_and_finds_every_artifact_identical(tmp_path):
    """`kit chaos` as a user runs it, on a tiny chain with a model (synthesize, sft_agent, evaluate on a
    random-weight Llama): one kill (seed 0: late in the chain), the rerun resumes, and every artifact equals the
    uninterrupted run's. The 20-kill table of the whole tiny chain: reports/chaos/."""
    from _tiny_chain import TINY
    from _tiny_model import tiny_model_folder

    # the tiny chain less sft_user, grpo and report (make test's time): an engine round, SFT, an evaluation
    keep = [blk for blk in TINY.split("  - stage: ") if not blk.startswith(("sft_user", "grpo", "report"))]
    recipe = tmp_path / "tiny.yaml"
    recipe.write_text("  - stage: ".join(keep).replace("{base_model}", str(tiny_model_folder(tmp_path / "tiny-model"))))
    r = subprocess.run([sys.executable, "-m", "kit.cli", "chaos", str(recipe), "--kills", "1", "--seed", "0",
                        "--runs-dir", str(tmp_path / "runs")], capture_output=True, text=True, cwd=ROOT, timeout=1200)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    root = tmp_path / "runs" / "tiny-notebooks-chaos"
    saved = json.loads((root / "chaos.json").read_text())
    assert saved["identical"] and len(saved["kills"]) == 1 and saved["kills"][0]["stage"] is not None
    assert all(r["rc"] == 0 and len(r["verdicts"]) >= 30 for r in saved["rounds"])
    assert "| kill | round | attempt | at second | stage running | second of stage |" in r.stdout
    assert "every artifact identical to the uninterrupted run" in r.stdout
    for folder in ["reference"] + [f"round-{x['round']}" for x in saved["rounds"]]:
        m = json.loads((root / folder / "runs" / "chaos" / "manifest.json").read_text())
        assert m["status"] == "complete" and [s["key"] for s in m["stages"]] == ["synthesize", "sft_agent", "evaluate"]
        assert (root / folder / "runs" / "chaos" / "sft_agent" / "model" / "model.safetensors").exists()
