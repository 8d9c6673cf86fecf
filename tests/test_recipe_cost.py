"""A recipe's cost from nothing, read from a hand-made run folder (kit/report/cost.py): every distinct stage
once, stages shared with another run and kept from an earlier one at the wall time they took where they ran,
a stage resumed in place found by its older files, a stage with no wall time named."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from kit.report.cost import RecipeCost, recipe_cost


def _stage(folder: Path, wall: float | None, started: str, **extra) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    doc = {"status": "complete", "started": started, **({"wall_s": wall} if wall is not None else {}), **extra}
    (folder / "stage.json").write_text(json.dumps(doc))


def test_cost_counts_each_stage_once_where_it_ran_and_says_when_it_is_a_lower_bound(tmp_path):
    other, run = tmp_path / "other-run", tmp_path / "run"
    now = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())
    _stage(other / "a" / "grpo", 300.0, "2026-12-05T10:00:00+00:00")       # shared from another run
    _stage(run / "a" / "synthesize", 600.0, now)
    _stage(run / "a" / "evaluate", 120.0, "2026-12-04T09:00:00+00:00", kept_from=["0123"])
    _stage(run / "b" / "evaluate", 60.0, now)
    old = run / "b" / "evaluate" / "partial.jsonl"                            # an earlier attempt's file
    old.write_text("{}\n")
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    (other / "a" / "sft").mkdir(parents=True)                                 # shared, but its stage.json is gone
    stages = [
        {"key": "a/synthesize", "status": "complete", "wall_s": 600.0, "started": now},
        {"key": "a/sft", "status": "shared", "shared_with": str(other / "a" / "sft")},
        {"key": "a/grpo", "status": "shared", "shared_with": str(other / "a" / "grpo")},
        {"key": "a/evaluate", "status": "complete", "wall_s": 120.0, "started": "2026-12-04T09:00:00+00:00",
         "kept_from": ["0123"]},
        {"key": "b/synthesize", "status": "shared", "shared_with": str(run / "a" / "synthesize")},  # same run
        {"key": "b/evaluate", "status": "complete", "wall_s": 60.0, "started": now},
        {"key": "report", "status": "pending"},                              # not run yet: nothing to count
    ]
    (run / "manifest.json").write_text(json.dumps({"stages": stages}))
    cost = recipe_cost(run)
    assert list(cost.table["stage"]) == ["a/synthesize", "a/grpo", "a/evaluate", "b/evaluate"]
    assert cost.total_min == round((600 + 300 + 120 + 60) / 60, 1)
    where = dict(zip(cost.table["stage"], cost.table["ran in"]))
    assert where["a/grpo"].startswith("another run: ") and where["a/evaluate"].startswith("kept")
    assert where["a/synthesize"] == "this run" == where["b/evaluate"]
    assert cost.missing == ["a/sft"] and cost.resumed == ["b/evaluate"]
    assert cost.days == sorted({"2026-12-05", "2026-12-04", now[:10]})
    assert "at least" in cost.line and "a/sft" in cost.line and "b/evaluate" in cost.line
    back = RecipeCost.from_dict(json.loads(json.dumps(cost.as_dict())))       # as a saved page keeps it
    assert back.total_min == cost.total_min and back.line == cost.line and len(back.table) == 4


def test_a_run_with_nothing_finished_has_no_cost_yet(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps({"stages": [{"key": "synthesize", "status": "running"}]}))
    cost = recipe_cost(tmp_path)
    assert cost.total_min is None and cost.missing == [] and "no stage has a wall time" in cost.line


def test_every_attempt_at_a_stage_is_counted_a_killed_one_up_to_its_newest_file(tmp_path):
    """kit/runner/attempts.py as the runner drives it: a failed attempt, a killed one (it never ended: closed at
    its newest file's time), then the one that completes; stage.json's fields sum all three, and the recipe's
    cost reads them instead of the last attempt's wall time."""
    from kit.runner.attempts import Attempts

    sdir = tmp_path / "run" / "grpo"
    a = Attempts(sdir)
    a.begin()
    a.end(100.0, "failed")
    assert a.fields() == {}  # one attempt: stage.json carries nothing more
    a = Attempts(sdir)
    a.begin()                                        # the killed attempt: it wrote a file 40 s after it started
    items = json.loads((sdir / "attempts.json").read_text())
    items[-1]["started"] = "2026-12-06T05:00:00+00:00"
    (sdir / "attempts.json").write_text(json.dumps(items))
    ckpt = sdir / "checkpoints" / "step-2.pt"
    ckpt.parent.mkdir(parents=True)
    ckpt.write_text("x")
    t = __import__("datetime").datetime.fromisoformat("2026-12-06T05:00:40+00:00").timestamp()
    os.utime(ckpt, (t, t))
    a = Attempts(sdir)                               # the rerun: no end was ever written for the killed one
    a.begin()
    a.end(60.0, "complete")
    kinds = [x["how"] for x in json.loads((sdir / "attempts.json").read_text())]
    assert kinds == ["failed", "killed: ended at its newest file (an estimate)", "complete"]
    assert a.fields() == {"attempts": 3, "wall_s_attempts": 200.0}   # 100 + 40 + 60
    _stage(sdir, 60.0, "2026-12-06T05:10:00+00:00", **a.fields())
    (tmp_path / "run" / "manifest.json").write_text(json.dumps({"stages": [
        {"key": "grpo", "status": "complete", "wall_s": 60.0, "started": "2026-12-06T05:10:00+00:00"}]}))
    cost = recipe_cost(tmp_path / "run")
    assert cost.total_s == 200.0 and cost.resumed == [] and "3 attempts, all counted" in cost.table["resumed"][0]
