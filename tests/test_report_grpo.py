"""The report's GRPO section (what each stage trained, its time split, the learning curve, the
curriculum's probes) and the agent as it was trained beside every evaluation: an arm whose GRPO never
updated its weights is labelled so in every table. The run folders are written by the kit's own
writers (tests/_fake_run.py: Stage.finish with the stages' Outputs, Curriculum.probe,
LearningCurve.add_point); only the numbers are made up."""

from __future__ import annotations

import re

import pytest
from _fake_run import fake_provenance_run, fake_run

from kit.report.build import build_report
from kit.report.grpo import grpo_row, probe_rows, rate_histogram
from kit.report.run_data import agent_provenance, collect, eval_label
from kit.train.grpo_config import GRPOConfig
from kit.train.grpo_curve import LearningCurve

SKIPPED = "GRPO skipped: all groups filtered"


@pytest.fixture(scope="module")
def provenance(tmp_path_factory):
    run = fake_provenance_run(tmp_path_factory.mktemp("prov"))
    return run, collect(run)


def test_each_evaluated_agent_is_traced_to_the_stage_that_wrote_it_and_what_that_trained(provenance):
    run, data = provenance
    got = {ev["key"]: (ev["provenance"].text, ev["provenance"].untrained) for ev in data["evals"]}
    assert got == {
        "eval_base": ("base model", None),
        "sft/evaluate": ("SFT: 48 steps (sft_agent)", None),
        "rl/evaluate": (f"SFT: 48 steps (sft_agent); {SKIPPED}", SKIPPED),
        "eval_last": ("GRPO 5/6 steps trained on sft_agent, last; skipped: all groups filtered (1)", None),
        "eval_best": ("GRPO 5/6 steps trained on sft_agent, best (step 4); skipped: all groups filtered (1)", None),
        # the best validation point came before the first update: model_best/ holds the start's weights
        "eval_early": (("SFT: 48 steps (sft_agent); GRPO's best point (step 0) came before any update "
                        "(of 2/2 steps trained)"), "GRPO's best point (step 0) came before any update"),
    }
    # the function reads the folders themselves: a spec in any form, a bare folder, an endpoint
    assert agent_provenance(str(run / "grpo_skip" / "model")).untrained == SKIPPED
    assert agent_provenance(f"vllm:{run / 'grpo' / 'model'}").text.startswith("GRPO 5/6 steps trained")
    assert agent_provenance("openai:http://localhost:8000/v1#m").text == "served at openai:http://localhost:8000/v1#m (not traced)"
    assert agent_provenance(None).text == "base model"


def test_a_best_point_after_only_skipped_steps_is_the_start_too(tmp_path):
    """Best at step 2 while steps 0 and 1 were both skipped: no update reached model_best/."""
    from _fake_run import fake_grpo

    run = tmp_path / "runs" / "r"
    fake_grpo(run, "grpo", [0.0, 0.0, 0.5], skipped={0: "all_groups_filtered", 1: "no_trainable_tokens"},
              curve={0: {"a": [0.0]}, 2: {"a": [1.0]}})
    prov = agent_provenance(f"hf:{run / 'grpo' / 'model_best'}")
    assert prov.untrained == "GRPO's best point (step 2) came before any update"
    assert prov.text == f"base model; {prov.untrained} (of 1/3 steps trained)"  # no policy recorded: the base model
    last = agent_provenance(f"hf:{run / 'grpo' / 'model'}")
    assert last.untrained is None
    assert last.text == "GRPO 1/3 steps trained on the base model, last; skipped: all groups filtered (1), " \
        "no trainable tokens (1)"


def test_an_untrained_arm_is_labelled_so_in_the_evaluation_ablation_and_paired_tables(provenance, tmp_path):
    run, _ = provenance
    rep = build_report(run, tmp_path / "rep", bootstrap=100)
    table = rep.data["eval_table"].set_index("arm", drop=False)
    rl = table[table["arm"] == "rl"].iloc[0]
    assert rl["evaluation"] == f"RL, fine-tuned user — {SKIPPED}"
    assert rl["agent, as trained"] == f"SFT: 48 steps (sft_agent); {SKIPPED}"
    trained = rep.data["eval_table"].set_index("evaluation")["agent, as trained"]
    assert trained["GRPO last"].startswith("GRPO 5/6 steps trained on sft_agent, last")
    assert trained["SFT checkpoint"] == "SFT: 48 steps (sft_agent)" and trained["base"] == "base model"
    assert list(rep.data["ablation"]["arm"]) == ["SFT checkpoint", f"RL, fine-tuned user — {SKIPPED}"]
    names = {d.b_label for d in rep.data["paired"]} | {d.a_label for d in rep.data["paired"]}
    assert f"rl: RL, fine-tuned user — {SKIPPED}" in names and "rl: RL, fine-tuned user" not in names
    page = rep.html_path.read_text(encoding="utf-8")
    assert "<th>agent, as trained</th>" in page
    # no table cell names the arm by its claim alone
    assert not re.search(r"<td>RL, fine-tuned user</td>", page)


def test_labels_of_trained_agents_are_left_as_the_recipe_wrote_them(provenance):
    _, data = provenance
    labels = {ev["key"]: eval_label(ev) for ev in data["evals"]}
    assert labels["eval_last"] == "GRPO last" and labels["sft/evaluate"] == "SFT checkpoint"


def test_grpo_table_says_what_happened_and_where_the_time_went(tmp_path):
    data = collect(fake_run(tmp_path))
    row = grpo_row(data["grpo_runs"][0])
    # 4 steps, step 1 skipped (all groups filtered); curve points after 0, 2 and 4 steps: 1/3, 2/3, 2/3
    assert row["what happened"] == "GRPO 3/4 steps trained (fine-tuned user)"
    assert (row["trained steps"], row["skip reasons"]) == ("3/4", "all_groups_filtered: 1")
    assert (row["best step"], row["best val pass^1"], row["last val pass^1"]) == (2, pytest.approx(2 / 3),
                                                                                 pytest.approx(2 / 3))
    # totals over the run / 4 steps: rollout 2 s and score 0.5 s each, update 1 s on the 3 trained steps,
    # three learning-curve points of 4 s; a step's time is 3.5 s, 2.5 s when skipped
    assert (row["rollout s/step"], row["score s/step"], row["update s/step"]) == (2.0, 0.5, 0.75)
    assert (row["eval s/step"], row["step s (mean)"]) == (3.0, 3.25)
    assert row["probe s/step"] == pytest.approx(data["grpo_runs"][0]["probes"][0]["probe_s"] / 4)


def test_a_run_where_grpo_never_trained_says_so_with_no_update_time(provenance):
    _, data = provenance
    row = grpo_row(next(r for r in data["grpo_runs"] if r["key"] == "grpo_skip"))
    assert row["what happened"] == "GRPO skipped: all groups filtered (3); the weights are its start's"
    assert (row["trained steps"], row["update s/step"], row["best step"]) == ("0/3", 0.0, None)


def test_curriculum_tables_count_the_first_probes_tasks_per_pass_rate(tmp_path):
    data = collect(fake_run(tmp_path))
    r = data["grpo_runs"][0]
    # probe_k 4: t0 solved 0 times, t1 2, t2 4, t3 1; the band [0.05, 0.8] keeps t1 and t3
    probes = probe_rows(r)
    assert probes.iloc[0][["before step", "tasks probed", "band size", "always solved", "never solved"]].tolist() == \
        [0, 4, 2, 1, 1]
    assert probes.iloc[0]["mean rate"] == pytest.approx((0 + 0.5 + 1 + 0.25) / 4)
    hist = rate_histogram(r["probes"][0])
    assert hist.iloc[0].to_dict() == {"0/4": 1, "1/4*": 1, "2/4*": 1, "3/4*": 0, "4/4": 1}


def test_the_learning_curve_figure_is_drawn_only_for_stages_with_points(provenance, tmp_path):
    run, _ = provenance
    rep = build_report(run, tmp_path / "rep", bootstrap=50)
    names = [p.name for p in rep.figures if p.name.startswith("grpo")]
    assert names == ["grpo.png", "grpo_curve.png", "grpo_curve_2.png"]  # grpo and grpo_early; grpo_skip has none
    assert all((tmp_path / "rep" / n).stat().st_size > 1000 for n in names)
    sec = next(s for s in rep.sections if s.title.startswith("GRPO"))
    assert not any("Curriculum" in str(v) for k, v in sec.items if k == "text")  # no probes in this run


def test_the_best_point_of_the_learning_curve_is_the_earliest_highest():
    curve = LearningCurve([], GRPOConfig(eval_every=2), None)
    points = [curve.add_point(s, by_task, 1.0) for s, by_task in
              [(0, {"a": [0.0], "b": [0.0]}), (2, {"a": [1.0], "b": [0.0]}), (4, {"a": [0.0], "b": [1.0]})]]
    assert [p["best"] for p in points] == [True, True, False]  # a tie does not replace the earlier point
    assert curve.best["step"] == 2 and points[1]["pass1"] == 0.5
    assert points[1]["ci95"][0] <= 0.5 <= points[1]["ci95"][1] and points[1]["per_task"] == {"a": 1.0, "b": 0.0}


def test_task_rows_follow_each_drawn_task_over_its_draws():
    """The report's per-task table of a GRPO stage, from metrics.jsonl's `groups` lines by hand."""
    import pandas as pd

    from kit.report.grpo import task_rows

    h = pd.DataFrame([
        {"step": 0, "groups": [{"task": "a", "rewards": [0.0, 0.0, 1.0, 0.0], "kept": True}]},
        {"step": 1, "groups": [{"task": "b", "rewards": [0.0] * 4, "kept": False},
                               {"task": "a", "rewards": [1.0, 0.0, 1.0, 0.0], "kept": True}]},
        {"step": 2, "groups": [{"task": "a", "rewards": [1.0, 1.0, 1.0, 0.0], "kept": True}]},
        {"step": 3, "groups": [{"task": "a", "rewards": [1.0, 1.0, 1.0, 1.0], "kept": False}]},
    ])
    rows = task_rows({"history": h, "probes": [{"rates": {"a": 0.25, "b": 0.5}}]})
    assert list(rows["task"]) == ["a", "b"] and list(rows["draws"]) == [4, 1]
    a = rows.iloc[0]
    assert a["step: solved/G"] == "0: 1/4, 1: 2/4, 2: 3/4, [3: 4/4]" and a["probe rate"] == 0.25
    assert a["first half"] == 0.375 and a["second half"] == 0.875
    assert rows.iloc[1]["step: solved/G"] == "[1: 0/4]" and pd.isna(rows.iloc[1]["first half"])  # one draw: no first half
    assert task_rows({"history": h.drop(columns=["groups"]), "probes": []}).empty  # older runs: no table


def test_grpo_table_counts_the_episodes_left_out_server_failures_and_user_faults(tmp_path):
    """metrics.jsonl's per-step counts (kit/train/grpo_groups.py) summed over the run: the episodes a server
    failed, and the user-fault episodes with how many were masked and replaced and which rule found them."""
    from _fake_run import fake_grpo

    from kit import metrics as M
    from kit.report.grpo import task_rows

    run = tmp_path / "runs" / "r"
    counts = {M.INFRA_FAILED: 1, M.USER_FAULTS: 3, M.USER_FAULT_MASKED: 3, M.USER_FAULT_RESAMPLED: 2,
              M.user_fault_key("premature_stop"): 2, M.user_fault_key("request_not_stated"): 1,
              "groups": [{"task": "a", "rewards": [1.0, 0.0], "kept": True, "user_faults": 2, "masked": 2, "replaced": 1},
                         {"task": "b", "rewards": [], "kept": False, "user_faults": 1, "masked": 1, "replaced": 1}]}
    from kit.files import write_json

    entries = [fake_grpo(run, "grpo", [0.5, 0.5], extra=counts),
               fake_grpo(run, "grpo_keep", [0.5], extra={M.USER_FAULTS: 2, M.USER_FAULT_MASKED: 0,
                                                         M.USER_FAULT_RESAMPLED: 0, M.user_fault_key("early_end"): 2}),
               fake_grpo(run, "grpo_old", [0.5])]  # a run from before the counts
    write_json(run / "manifest.json", {"run_id": "r", "status": "complete", "stages": entries,
                                       "recipe": {"path": "r.yaml", "parsed": {"name": "r", "arms": []}, "text": ""}})
    rows = {r["key"]: (r, grpo_row(r)) for r in collect(run)["grpo_runs"]}
    row = rows["grpo"][1]
    assert row[M.label(M.INFRA_FAILED)] == 2
    assert row[M.label(M.USER_FAULTS)] == "6 (6 masked, 4 replaced; premature_stop 4, request_not_stated 2)"
    assert rows["grpo_keep"][1][M.label(M.USER_FAULTS)] == "2 (kept (trained on); early_end 2)"
    assert rows["grpo_old"][1][M.label(M.USER_FAULTS)] is None and rows["grpo_old"][1][M.label(M.INFRA_FAILED)] is None
    tasks = task_rows(rows["grpo"][0]).set_index("task")
    assert tasks.loc["a", "step: solved/G"] == "0: 1/2 (+2 user), 1: 1/2 (+2 user)" and "b" not in tasks.index
