"""`kit bench sft` (kit/bench/sft.py) and `--against REV` (kit/bench/against.py).

A tiny real run: the embedded model, 2 steps on the first 2 gold dialogues of the mock domain, 1 thread
(~30 s on a shared 2-core CPU). max_seq_len is 1024, not less: a mock agent prompt is ~800 tokens, and a
turn joins its dialogue's row only when the whole row fits (a shorter cap cuts every prompt from the
left and every turn gets its own row). The `--against HEAD` run starts two processes that each load the
model (~45 s): slow. The rest checks the arithmetic, the child's argument filtering and the refusals.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from kit.bench import against
from kit.bench.sft import AGENT_SAMPLES, first_dialogues, resolve_data
from kit.cli import main
from kit.errors import BadInput, NotFound

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # ~28 s on 2 cores: in `make test`, not the fast lane
def test_a_tiny_run_counts_consistent_tokens(tmp_path, capsys):
    out = tmp_path / "sft.json"
    argv = ["bench", "sft", "--steps", "2", "--batch-size", "4", "--max-seq-len", "1024", "--dialogues", "2",
            "--threads", "1", "--out", str(out)]
    assert main(argv) == 0
    res = json.loads(out.read_text())
    assert res["steps"] == 2 and res["seconds"] > 0 and res["load_s"] > 0
    assert res["settings"]["whole_dialogues"] is True and res["settings"]["config_dropped"] == []
    assert res["rows"] < res["turns"] == 4  # two dialogues of two turns: one row each
    assert 0 < res["tokens_trained"] < res["tokens_seen"]
    # the two rows share the system prompt: its tokens run once per micro-batch
    assert res["tokens_computed"] is not None and res["tokens_computed"] < res["tokens_seen"]
    assert res["tokens_computed"] <= res["positions_computed"]
    assert res["forward_calls"] == 2 * 2  # per step: the shared prefix, then the rows' suffixes
    assert res["s_per_trained_token"] == pytest.approx(res["seconds"] / res["tokens_trained"])
    assert res["peak_rss_gib"] > 0 and res["machine"]["kit"] == str(ROOT / "kit" / "__init__.py")
    printed = capsys.readouterr().out
    assert "whole_dialogues True" in printed and "ms per trained token" in printed and f"wrote {out}" in printed


@pytest.mark.slow
def test_against_head_runs_both_trees_side_by_side(tmp_path, capsys):
    out = tmp_path / "ab.json"
    argv = ["bench", "sft", "--against", "HEAD", "--repeats", "1", "--steps", "1", "--max-seq-len", "256",
            "--dialogues", "1", "--batch-size", "2", "--threads", "1", "--out", str(out)]
    assert main(argv) == 0
    ab = json.loads(out.read_text())
    cur, rev = ab["arms"]["current"]["results"], ab["arms"]["against"]["results"]
    assert len(cur) == len(rev) == 1
    assert cur[0]["kit_file"] == str(ROOT / "kit" / "__init__.py")
    tree = Path(ab["arms"]["against"]["tree"])
    assert Path(rev[0]["kit_file"]) == tree / "kit" / "__init__.py" and tree != ROOT
    assert not tree.exists()  # the temporary worktree is gone
    assert str(tree) not in subprocess.run(["git", "worktree", "list"], cwd=ROOT, capture_output=True,
                                           text=True, check=True).stdout
    assert cur[0]["tokens_trained"] == rev[0]["tokens_trained"] > 0  # the same data in both arms
    printed = capsys.readouterr().out
    assert "current/HEAD" in printed and "ms / trained token: current/HEAD = " in printed
    assert f"HEAD: kit from {rev[0]['kit_file']}" in printed and f"wrote {out}" in printed


def _sft_result(seconds: float, tokens: int, computed: int | None = None, **settings) -> dict:
    return {"seconds": seconds, "steps": 2, "rows": 2, "turns": 4, "tokens_trained": tokens, "tokens_seen": 10 * tokens,
            "tokens_computed": computed, "positions_computed": computed, "peak_rss_gib": 3.0, "load_s": 4.0,
            "settings": settings, "kit_file": "/x/kit/__init__.py"}


def test_the_table_gives_medians_ratios_and_dashes():
    cur = [_sft_result(s, 100, 500, whole_dialogues=True) for s in (1.0, 3.0, 2.0)]
    old = [_sft_result(s, 50, None, config_dropped=["whole_dialogues"]) for s in (4.0, 5.0, 6.0)]
    m = against.medians(against.SFT, cur)
    assert m["train s"] == 2.0 and m["ms / trained token"] == 20.0 and against.medians(against.SFT, old)["tokens computed"] is None
    ab = {"sha": "b7d8fc2" + "0" * 33, "headline": {"label": "ms / trained token", "ratio": 0.2, "rounds": [0.1, 0.3]},
          "arms": {"current": {"name": "current", "tree": "/a", "results": cur},
                   "against": {"name": "b7d8fc2", "tree": "/b", "results": old}}}
    lines = against.table(against.SFT, ab)
    row = {ln.split("  ")[0]: ln.split() for ln in lines}
    assert row["ms / trained token"][-3:] == ["20.000", "100.000", "0.20"]
    assert row["tokens computed"][-3:] == ["500", "—", "—"] and row["whole_dialogues"][-2:] == ["True", "—"]
    assert "  b7d8fc2 has no whole_dialogues: left out" in lines
    assert lines[-1] == "ms / trained token: current/b7d8fc2 = 0.20 (rounds: 0.10–0.30)"


def test_grpo_rows_give_seconds_per_training_episode_and_update_over_rollout():
    r = {"total": {"rollout_s": 6.0, "score_s": 1.0, "update_s": 3.0, "step_s": 11.0, "episodes": 4, "rows": 4,
                   "turns": 8, "tokens": 900, "passes": 1}, "peak_rss_gib": 2.5, "load_s": 5.0}
    m = against.medians(against.GRPO, [r])
    assert m["s / training episode"] == 9.0 / 4 and m["update / rollout"] == 0.5 and m["peak RSS GiB"] == 2.5


def test_the_grpo_child_passes_only_the_arguments_its_tree_accepts(monkeypatch, capsys):
    from kit.bench import grpo

    seen = {}

    class Fake:
        def to_json(self):
            return {"total": {}}

    def old_bench_grpo(group=4, steps=2):  # an older signature: no pack_turns, no log
        seen.update(group=group, steps=steps)
        return Fake()

    monkeypatch.setattr(grpo, "bench_grpo", old_bench_grpo)
    against.child({"kind": against.GRPO, "kwargs": {"group": 2, "steps": 1, "pack_turns": True, "threads": None}})
    line = capsys.readouterr().out.strip()
    assert line.startswith(against.MARK) and seen == {"group": 2, "steps": 1}
    out = json.loads(line[len(against.MARK):])
    assert out["args_dropped"] == ["pack_turns"] and out["kit_file"].endswith("kit/__init__.py")


def test_data_is_a_file_or_a_run_folder_and_dialogues_keep_whole_dialogues(tmp_path):
    run = tmp_path / "run"
    (run / AGENT_SAMPLES).parent.mkdir(parents=True)
    (run / AGENT_SAMPLES).write_text("")
    assert resolve_data(str(run)) == str((run / AGENT_SAMPLES).resolve()) == resolve_data(str(run / AGENT_SAMPLES))
    assert resolve_data(None) is None
    with pytest.raises(NotFound, match="no SFT data"):
        resolve_data(str(tmp_path / "nothing"))

    class S:
        def __init__(self, t):
            self.trajectory_id = t

    samples = [S("a"), S("a"), S("b"), S("c"), S("b")]
    assert [s.trajectory_id for s in first_dialogues(samples, 2)] == ["a", "a", "b", "b"]
    assert first_dialogues(samples, None) == samples


def test_bad_revisions_and_lone_repeats_are_refused_before_anything_loads(capsys):
    with pytest.raises(BadInput, match="no such git revision"):
        against.resolve_rev("no-such-rev-anywhere")
    assert main(["bench", "sft", "--against", "no-such-rev-anywhere"]) == 2
    assert "no such git revision" in capsys.readouterr().err
    assert main(["bench", "grpo", "--repeats", "2"]) == 2
    assert "--repeats counts the rounds" in capsys.readouterr().err
