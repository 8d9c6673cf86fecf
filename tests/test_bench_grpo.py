"""`kit bench grpo`: GRPO steps of the real trainer on the embedded model and mock, timed by part.
The end-to-end test is slow (the 135M model: one step of two 4-message episodes and their update
took 90-150 s on a shared 2-core CPU); the others check the arithmetic and the refusals."""

from __future__ import annotations

import json

import pytest

from kit.bench.grpo import StepTimes, bench_tasks
from kit.checkers.checker import CheckedTask
from kit.cli import main
from kit.envs import load_domain
from kit.errors import NotFound

FIELDS = {"step", "rollout_s", "score_s", "update_s", "step_s", "episodes", "episodes_per_s", "rows", "tokens",
          "skip_reason", "turns", "passes", "peak_rss_gib"}


@pytest.mark.slow
def test_bench_grpo_writes_each_steps_times_and_the_parts_fit_in_the_step(tmp_path, capsys, monkeypatch):
    from kit.llm import precision

    monkeypatch.delenv(precision.ENV, raising=False)
    out = tmp_path / "bench.json"
    # float32: these two short episodes are known to give the update rows (with --cpu-bf16 the samples differ, and
    # at 8 new tokens both episodes can end as user faults, leaving nothing to train)
    argv = ["bench", "grpo", "--steps", "1", "--group", "2", "--tasks-per-step", "1", "--max-new-tokens", "8",
            "--max-messages", "4", "--threads", "1", "--out", str(out)]
    assert main(argv) == 0
    res = json.loads(out.read_text())
    assert res["settings"]["group"] == 2 and res["settings"]["tasks"] == "split:heldout"
    assert res["settings"]["lora"] is False  # full fine-tuning unless --lora
    assert res["settings"]["cpu_bf16"] is False  # float32 unless --cpu-bf16
    assert len(res["steps"]) == 1 and set(res["steps"][0]) == FIELDS and set(res["total"]) == FIELDS
    step = res["steps"][0]
    assert step["rollout_s"] + step["score_s"] + step["update_s"] <= step["step_s"]
    assert step["rollout_s"] > 0 and step["update_s"] > 0  # filtering off: the update ran and was timed
    assert step["episodes"] == 2 and step["rows"] > 0 and step["tokens"] > 0 and step["skip_reason"] == ""
    assert step["turns"] >= step["rows"] and res["settings"]["pack_turns"] is True  # turns packed into rows
    assert step["passes"] >= 1 and step["peak_rss_gib"] > 0  # the update ran at least one forward/backward pass
    assert step["episodes_per_s"] == pytest.approx(2 / step["step_s"])
    assert res["total"]["step_s"] == step["step_s"]
    printed = capsys.readouterr().out
    assert "step 0: rollout" in printed and "total: rollout" in printed and f"wrote {out}" in printed


def test_totals_sum_the_steps_and_episodes_per_second_is_over_the_step_time():
    a = StepTimes(0, 2.0, 0.5, 1.0, 4.0, 8, 10, 300)
    b = StepTimes(1, 1.0, 0.5, 0.0, 2.0, 4, 0, 0, skip_reason="all_groups_filtered")
    total = StepTimes.sum([a, b])
    assert (total.rollout_s, total.update_s, total.step_s, total.episodes, total.rows, total.tokens) == \
        (3.0, 1.0, 6.0, 12, 10, 300)
    assert total.episodes_per_s == 2.0 and a.episodes_per_s == 2.0
    assert b.line() == ("step 1: rollout 1.00 s, score 0.50 s, update 0.00 s, step 2.00 s; 4 episodes, "
                        "2.00 episodes/s; 0 turns in 0 rows (0 passes), 0 tokens trained; peak RSS 0.00 GiB SKIPPED: "
                        "all_groups_filtered")


def test_tasks_come_from_the_split_or_a_checked_task_file(tmp_path):
    dom = load_domain("mock")
    tasks, checked = bench_tasks(dom, "heldout")
    assert [t.id for t in tasks] == [t.id for t in dom.tasks("heldout")] and checked == {}
    f = tmp_path / "rl_tasks.jsonl"  # as the engine writes its RL pool: one CheckedTask per line
    f.write_text("".join(CheckedTask(task=t).model_dump_json() + "\n" for t in dom.tasks()[:3]))
    tasks, checked = bench_tasks(dom, "heldout", str(f))
    assert [t.id for t in tasks] == [t.id for t in dom.tasks()[:3]] == list(checked)
    with pytest.raises(NotFound, match="no tasks file"):
        bench_tasks(dom, tasks_file=str(tmp_path / "missing.jsonl"))


def test_bad_sizes_are_usage_errors_before_anything_loads(capsys):
    with pytest.raises(SystemExit):
        main(["bench", "grpo", "--steps", "0"])
    assert "must be >= 1" in capsys.readouterr().err
