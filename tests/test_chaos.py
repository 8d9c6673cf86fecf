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
TESTS = Path(__file__).resolve().parent


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


@pytest.mark.slow  # a chain of papermill kernels, run 1 + kills + rounds times (~2 min)
def test_kit_chaos_kills_a_chain_reruns_it_and_finds_every_artifact_identical(tmp_path):
    from kit.runner.chaos import chaos
    from test_runner import CHAIN, stub_notebooks

    nbs = stub_notebooks(tmp_path / "nbs")
    recipe = tmp_path / "chain.yaml"
    recipe.write_text(CHAIN)
    said: list[str] = []
    res = chaos(recipe, kills=3, seed=1, runs_dir=tmp_path / "runs", say=said.append,
                kit=[sys.executable, str(TESTS / "_kit_with_notebooks.py"), str(nbs)])
    assert len(res.kills) == 3 and [k.n for k in res.kills] == [1, 2, 3]
    assert all(0 < k.at_s <= res.reference_s + 30 for k in res.kills) and res.outlived >= 0
    assert res.rounds and all(r.rc == 0 for r in res.rounds) and sum(r.kills for r in res.rounds) == 3
    assert res.identical, res.table()
    table = res.table()
    assert "| kill | round | attempt | at second | stage running | second of stage |" in table
    assert "every artifact identical to the uninterrupted run" in table
    root = tmp_path / "runs" / "stubchain-chaos"
    saved = json.loads((root / "chaos.json").read_text())
    assert saved["identical"] and len(saved["kills"]) == 3 and (root / "chaos.md").exists()
    assert (root / "reference" / "runs" / "chaos" / "manifest.json").exists()
    for r in res.rounds:  # every round's run ended complete, with the reference's artifacts
        m = json.loads((root / f"round-{r.round}" / "runs" / "chaos" / "manifest.json").read_text())
        assert m["status"] == "complete" and len(r.verdicts) >= 10
