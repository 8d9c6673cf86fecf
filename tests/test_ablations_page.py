"""The ablation page (`kit ablations`, kit/report/ablations.py): every arm's pass^1, its paired difference
to the recipe's reference arm, the paper's direction and the verdict, from run folders written by the
kit's own writers (tests/_fake_run.py: the numbers are made up, the files are real)."""

from __future__ import annotations

import pytest

from kit.report.ablations import ablation_rows, ablations_page, default_reference, verdict
from tests._fake_run import fake_ablation_run, fake_provenance_run

N = 40  # tasks per arm


def _rewards(solved: set[int]) -> dict[str, list[float]]:
    return {f"t{i}": [1.0 if i in solved else 0.0] for i in range(N)}


def test_verdict_reads_sign_and_interval():
    assert verdict(-6.0, -0.30, (-0.45, -0.15)) == "reproduced"
    assert verdict(-6.0, +0.30, (+0.15, +0.45)) == "opposite"
    assert verdict(-6.0, -0.05, (-0.20, +0.10)) == "same sign, not significant"
    assert verdict(-6.0, +0.05, (-0.10, +0.20)) == "opposite sign, not significant"
    assert verdict(-6.0, 0.0, (0.0, 0.0)) == "no difference"
    assert verdict(None, -0.3, (-0.4, -0.2)) == "no paper number"
    # a bootstrap interval that excludes 0 on 4 discordant tasks of 189, where the exact sign-flip p is 0.125
    # (measured on the no_validation recipe's base and full arms): not significant
    assert verdict(-18.0, -0.021, (-0.042, -0.005), 0.125) == "same sign, not significant"
    assert verdict(-18.0, -0.30, (-0.45, -0.15), 0.001) == "reproduced"
    assert default_reference([{"name": "base", "paper": 38.0}, {"name": "full", "paper": 56.0}]) == "full"
    assert default_reference([{"name": "a"}, {"name": "b"}]) == "a"


def test_page_pairs_each_arm_with_the_reference_and_says_which_directions_reproduced(tmp_path):
    full = set(range(0, 30))                  # 30/40
    worse = set(range(0, 12))                 # 12/40, every task of it also solved by full: a clear drop
    close = set(range(0, 29)) | {35}          # 30/40, one task swapped: no difference
    arms = [({"name": "base", "label": "base", "paper": 38.0}, _rewards(set(range(5))), "sft_user"),
            ({"name": "full", "label": "full engine", "paper": 56.0}, _rewards(full), "sft_user"),
            ({"name": "no_validation", "label": "w/o validation", "paper": 50.0}, _rewards(worse), "sft_user"),
            ({"name": "few", "label": "4 plans", "paper": 42.5}, _rewards(close), "embedded")]
    run = fake_ablation_run(tmp_path, "ablation-x", arms, {"metric": "pass^1", "paper_metric": "airline pass^1",
                                                           "reference": "full"})
    spec, df, warnings = ablation_rows(run, n_boot=500)
    rows = df.set_index("arm")
    assert rows.loc["full engine", "verdict"] == "reference" and rows.loc["full engine", "pass^1"] == 0.75
    nv = rows.loc["w/o validation"]
    assert nv["Δ vs reference"] == pytest.approx(-18 / 40) and nv["paper Δ (points)"] == -6.0
    assert nv["verdict"] == "reproduced" and nv["p"] < 0.001 and nv["paired tasks"] == N
    assert rows.loc["base", "verdict"] == "reproduced"  # 5/40 vs 30/40, the paper's 38 < 56
    few = rows.loc["4 plans"]
    assert few["Δ vs reference"] == 0.0 and few["verdict"] == "no difference" and few["MDE"] > 0
    assert pd_isna(few["tasks this Δ needs"]) and 0 < nv["tasks this Δ needs"] <= N  # a clear drop: fewer than it had
    # the arm judged by another referee is flagged: its difference is not the agent's alone
    assert any("4 plans" in w and "referee user" in w for w in warnings)
    assert rows.loc["w/o validation", "referee user"] == "sft_user" and rows.loc["4 plans", "n tasks"] == N
    page = ablations_page([run], tmp_path / "reports" / "ablations", n_boot=200)
    text = page.read_text()
    assert "Which of the paper" in text and "reproduced" in text and "w/o validation" in text


def test_an_unfinished_arm_and_a_missing_reference_say_so(tmp_path):
    arms = [({"name": "a", "label": "A", "paper": 70.5}, _rewards({1, 2}), "u"),
            ({"name": "b", "label": "B", "paper": 65.0}, _rewards({1}), "u")]
    run = fake_ablation_run(tmp_path, "ablation-y", arms)
    # an arm the recipe declares but that has no evaluation yet (the batch was interrupted)
    import json

    m = json.loads((run / "manifest.json").read_text())
    m["recipe"]["parsed"]["arms"].insert(0, {"name": "c", "label": "C", "paper": 80.0})
    (run / "manifest.json").write_text(json.dumps(m))
    _, df, warnings = ablation_rows(run, n_boot=200)
    rows = df.set_index("arm")
    assert rows.loc["C", "verdict"] == "not evaluated yet"
    assert any("reference arm 'c' has no evaluation" in w for w in warnings)


def test_an_arm_whose_agent_never_trained_says_so_in_its_name(tmp_path):
    # the 'rl' arm's evaluation scores grpo_skip/model, a GRPO stage whose every step was skipped: the page names
    # what was evaluated, not only what the recipe's label intended
    run = fake_provenance_run(tmp_path)
    _, df, _ = ablation_rows(run, n_boot=200)
    names = list(df["arm"])
    assert names[0] == "SFT checkpoint"
    assert names[1].startswith("RL, fine-tuned user — ") and "GRPO skipped: all groups filtered" in names[1]


def test_replicate_arms_of_one_pool_get_a_pooled_row_paired_with_the_reference(tmp_path):
    """ArmSpec.pool: three GRPO seeds of one arm. The pooled row's pass^1 is the mean of its runs' (a task's
    rate is the mean over the replicates' trials), its paired difference the mean of theirs, over the same 40
    tasks; the pairs table pairs the pool with the other arms, never with its own replicates or them with each
    other. A one-arm pool is refused by name."""
    from kit.report.ablations import arm_pairs

    ref = set(range(10))
    seeds = [ref | set(range(10, 18)), ref | set(range(14, 22)), ref | set(range(18, 26))]  # 18 of 40 each
    arms = [({"name": "sft", "label": "SFT", "paper": 85.4}, _rewards(ref), "u")]
    arms += [({"name": f"s{i}", "label": f"seed {i}", "paper": 95.6, "pool": "grpo"}, _rewards(x), "u")
             for i, x in enumerate(seeds)]
    arms += [({"name": "raw", "label": "raw user", "paper": 75.6}, _rewards(ref | {39}), "u")]
    run = fake_ablation_run(tmp_path, "ablation-p", arms, {"metric": "pass^1", "reference": "sft"})
    _, df, warnings = ablation_rows(run, n_boot=300)
    rows = df.set_index("arm")
    pooled = rows.loc["grpo (pooled: 3 of 3 runs)"]
    assert pooled["pass^1"] == pytest.approx(18 / 40) and pooled["Δ vs reference"] == pytest.approx(8 / 40)
    assert pooled["paired tasks"] == N and pooled["pooled over"] == "s0, s1, s2" and pooled["verdict"] == "reproduced"
    assert pooled["trials"] == "3 runs x 1" and pooled["paper Δ (points)"] == pytest.approx(95.6 - 85.4)
    # tasks 10-25 are solved by one or two of the three seeds: each task's pooled rate is fractional
    assert rows.loc["seed 1", "Δ vs reference"] == pytest.approx(8 / 40) and not warnings
    pairs = arm_pairs(run, n_boot=300)
    named = set(zip(pairs["against"], pairs["arm"]))
    assert ("grpo (pooled: 3 runs)", "raw user") in named and ("seed 0", "raw user") in named
    assert not any({a, b} <= {"seed 0", "seed 1", "seed 2", "grpo (pooled: 3 runs)"} for a, b in named)
    raw_vs_pool = pairs[(pairs["against"] == "grpo (pooled: 3 runs)") & (pairs["arm"] == "raw user")].iloc[0]
    assert raw_vs_pool["Δ"] == pytest.approx(1 / 40 - 8 / 40)

    from kit.runner import load_recipe
    from kit.runner.recipe import RecipeError

    bad = tmp_path / "r.yaml"
    bad.write_text("name: x\ndomain: mock\nstages:\n  - stage: evaluate\narms:\n  - {name: a, pool: g}\n"
                   "  - {name: b}\n")
    with pytest.raises(RecipeError, match="pool 'g' has one arm"):
        load_recipe(bad)


def test_a_reference_that_is_not_an_arm_is_refused(tmp_path):
    from kit.runner import load_recipe
    from kit.runner.recipe import RecipeError

    bad = tmp_path / "r.yaml"
    bad.write_text("name: x\ndomain: mock\nstages:\n  - stage: evaluate\narms:\n  - {name: a}\n  - {name: b}\n"
                   "comparison: {reference: c}\n")
    with pytest.raises(RecipeError, match="comparison.reference 'c' is not an arm"):
        load_recipe(bad)


def test_kit_ablations_report_only_renders_the_page_from_the_runs_there_are(tmp_path, monkeypatch):
    """`kit ablations --report-only`: the five recipes validated, nothing run, the page built from the run
    folders that exist (here one, named as its recipe names its run)."""
    from pathlib import Path

    from kit.cli import main

    root = Path(__file__).resolve().parents[1]
    monkeypatch.chdir(root)
    arms = [({"name": "full", "label": "full engine", "paper": 56.0}, _rewards(set(range(30))), "u"),
            ({"name": "no_validation", "label": "w/o validation", "paper": 50.0}, _rewards(set(range(12))), "u")]
    fake_ablation_run(tmp_path, "ablation-no-validation", arms)
    reports = tmp_path / "reports"
    assert main(["ablations", "--report-only", "--runs-dir", str(tmp_path / "runs"), "--reports-dir", str(reports),
                 "--bootstrap", "200"]) == 0
    text = (reports / "ablations" / "index.html").read_text()
    assert "ablation-no-validation" in text and "not run (--report-only)" in text and "reproduced" in text


def test_rl_arms_show_what_their_grpo_saw_beside_pass1(tmp_path):
    """The user-model arms: each RL arm's row carries its GRPO stage's group signal and its rollout user's
    rates (a mute user: no request stated, no reward; a noisy one: some of each), the SFT arm none."""
    import kit.metrics as M

    arms = [({"name": "sft", "label": "SFT", "paper": 85.4}, _rewards(set(range(10))), "sft_user"),
            ({"name": "ft", "label": "RL fine-tuned user", "paper": 95.6}, _rewards(set(range(14))), "sft_user"),
            ({"name": "raw", "label": "RL raw user", "paper": 75.6}, _rewards(set(range(9))), "sft_user")]
    noisy = {M.REQUEST_STATED_RATE: 0.35, M.PROPER_END_RATE: 0.5, M.GROUPS_KEPT: 1, M.GROUPS_RESAMPLES: 2,
             M.REWARD_STD: 0.3}
    good = {M.REQUEST_STATED_RATE: 0.8, M.PROPER_END_RATE: 0.9, M.GROUPS_KEPT: 2, M.GROUPS_RESAMPLES: 1,
            M.REWARD_STD: 0.4}
    grpo = {"ft": {"rewards": [0.3, 0.5], "params": {"group_size": 8}, "extra": good},
            "raw": {"rewards": [0.1, 0.2], "params": {"group_size": 8}, "extra": noisy, "user_tag": "raw",
                    "skipped": {0: "all_groups_filtered"}}}
    run = fake_ablation_run(tmp_path, "ablation-user", arms, {"metric": "pass^1", "reference": "sft"}, grpo=grpo)
    _, df, _ = ablation_rows(run, n_boot=200)
    rows = df.set_index("arm")
    ft, raw = rows.loc["RL fine-tuned user"], rows.loc["RL raw user"]
    assert ft["RL user"] == "fine-tuned" and raw["RL user"] == "raw"
    assert ft["RL user request stated"] == pytest.approx(0.8) and raw["RL user request stated"] == pytest.approx(0.35)
    assert raw["RL user proper end"] == pytest.approx(0.5) and raw["RL reward (mean)"] == pytest.approx(0.15)
    assert ft["effective batch (episodes/step)"] == 16 and raw["effective batch (episodes/step)"] == 8
    assert ft["resamples"] == 2 and raw["resamples"] == 4
    assert raw["RL steps trained"] == "1/2" and ft["RL steps trained"] == "2/2"
    # fake_grpo's filtered fraction: 0.25 on a trained step, 1.0 on a skipped one
    assert ft["groups with signal"] == pytest.approx(0.75) and raw["groups with signal"] == pytest.approx(0.375)
    assert raw["groups filtered"] == pytest.approx(0.625)
    assert pd_isna(rows.loc["SFT"].get("RL user"))


def test_an_unfiltered_arms_groups_without_signal_are_counted_from_its_groups_not_its_filter(tmp_path):
    """An arm without dynamic filtering drops nothing (filtered 0) but still draws groups whose episodes all
    score the same: 'groups with signal' reads each group's scores (the advantage's input), not 1 - filtered."""
    import kit.metrics as M

    groups = [{"task": "a", "rewards": [0.0, 0.0, 1.0, 0.0], "kept": True},
              {"task": "b", "rewards": [0.0, 0.0, 0.0, 0.0], "kept": True},
              {"task": "c", "rewards": [1.0, 0.0, 1.0, 1.0], "scores": [0.75, 0.75, 0.75, 0.75], "kept": True},
              {"task": "d", "rewards": [1.0, 0.0, 0.0, 0.0], "kept": True}]
    arms = [({"name": "filtered", "label": "filtered"}, _rewards(set(range(10))), "u"),
            ({"name": "unfiltered", "label": "unfiltered"}, _rewards(set(range(9))), "u")]
    grpo = {"unfiltered": {"rewards": [0.3, 0.2], "params": {"group_size": 4},
                           "extra": {M.FILTERED_FRAC: 0.0, M.GROUPS_KEPT: 4, "groups": groups}}}
    run = fake_ablation_run(tmp_path, "ablation-f", arms, {"metric": "pass^1", "reference": "filtered"}, grpo=grpo)
    row = ablation_rows(run, n_boot=200)[1].set_index("arm").loc["unfiltered"]
    # a and d vary; b is all-fail; c's rewards vary but its penalized scores do not
    assert row["groups filtered"] == 0.0 and row["groups with signal"] == pytest.approx(0.5)


def pd_isna(x) -> bool:
    import pandas as pd

    return x is None or bool(pd.isna(x))


def test_data_arms_show_the_data_their_agent_trained_on(tmp_path):
    """A data-side arm differs first in its data: each arm's row carries its own engine run's totals and
    its realized task mix per round (the evolution arm's entropy rises, the frozen arm's stays)."""
    def rounds(entropies, accepted, unvalidated=0):
        return [{"round": i, "proposals": 24, "accepted": accepted, "sft_agent": 3 * accepted, "sft_ungrounded": 1,
                 "unvalidated": unvalidated, "pattern_entropy": h, "write_coverage": 0.5 + 0.25 * (h > 1)}
                for i, h in enumerate(entropies)]
    arms = [({"name": "base", "label": "base", "paper": 38.0}, _rewards(set()), "u"),
            ({"name": "full", "label": "full engine", "paper": 56.0, "validated_only": True}, _rewards(set(range(12))),
             "u"),
            ({"name": "frozen", "label": "w/o evolution", "paper": 44.0}, _rewards(set(range(8))), "u")]
    run = fake_ablation_run(tmp_path, "ablation-data", arms, {"metric": "pass^1", "reference": "full"},
                            engines={"full": rounds([0.9, 1.5, 2.0], 10), "frozen": rounds([0.9, 0.9, 0.9], 12, 2)})
    _, df, _ = ablation_rows(run, n_boot=200)
    rows = df.set_index("arm")
    full, frozen = rows.loc["full engine"], rows.loc["w/o evolution"]
    assert full["data: proposals"] == 72 and full["data: accepted"] == 30 and frozen["data: accepted"] == 36
    assert full["data: SFT samples"] == 90 and frozen["data: dropped ungrounded"] == 3
    assert full["data: pattern entropy per round (bits)"] == "0.90 -> 1.50 -> 2.00"
    assert frozen["data: pattern entropy per round (bits)"] == "0.90 -> 0.90 -> 0.90"
    assert frozen["data: unvalidated accepted"] == 6 and full["data: write-tool coverage per round"] == "0.50 -> 0.75 -> 0.75"
    assert pd_isna(rows.loc["base"].get("data: accepted"))  # no SFT, no data
    assert full["data: SFT samples trained"] == 10 and full["data: trained on"] == "validated samples"
    assert frozen["data: trained on"] == "every sample"


def test_a_referee_at_another_path_with_the_same_weights_is_the_same_referee(tmp_path):
    """A stage reused by `kit run --keep` names its first run's folder: the page compares the referees' weight
    files byte for byte, not their paths; different weights are flagged."""
    from kit.report.ablations import same_model

    a, b, c = (tmp_path / x for x in "abc")
    for d, payload in ((a, b"weights"), (b, b"weights"), (c, b"weightz")):
        d.mkdir()
        (d / "model.safetensors").write_bytes(payload)
    assert same_model(a, b) and same_model(str(a), str(a))
    assert same_model(f"hf:{a}", f"hf:{b}") and same_model(f"hf:{a}", b)  # as eval.json's meta names them
    assert not same_model(a, c) and not same_model(f"hf:{a}", f"hf:{c}") and not same_model(a, tmp_path / "missing")
    assert not same_model("embedded", a) and not same_model("openai:http://127.0.0.1:1/v1", a)


def test_each_arm_shows_its_pass_rate_where_the_referee_stated_the_request_and_where_it_did_not(tmp_path):
    """The user-model ablation's GRPO arm gained where the referee stated the request (0.126 -> 0.274 on
    2026-12-04's run) and not elsewhere: the page splits each arm's pass^1 by episodes.csv's request_stated
    (the fake run's referee states it in trial 0 of each task, not in trial 1)."""
    two = lambda stated, unstated: {f"t{i}": [float(i in stated), float(i in unstated)] for i in range(N)}
    arms = [({"name": "sft", "label": "SFT", "paper": 85.4}, two(set(range(4)), set(range(4))), "sft_user"),
            ({"name": "ft", "label": "RL", "paper": 95.6}, two(set(range(12)), set(range(5))), "sft_user")]
    run = fake_ablation_run(tmp_path, "ablation-user", arms, {"metric": "pass^1", "reference": "sft"})
    rows = ablation_rows(run, n_boot=200)[1].set_index("arm")
    assert rows.loc["SFT", "pass^1, request stated"] == "0.100 (40)"
    assert rows.loc["SFT", "pass^1, request not stated"] == "0.100 (40)"
    assert rows.loc["RL", "pass^1, request stated"] == "0.300 (40)"
    assert rows.loc["RL", "pass^1, request not stated"] == "0.125 (40)"


def test_a_later_page_carries_the_saved_rows_of_runs_it_was_not_given(tmp_path):
    """The batch in parts: a page saves each run's rows beside itself; a page built later over another run
    folder (the first run's folder gone, as on a fresh machine) still shows the first run's arms, labelled as
    saved rows; a run folder given again supersedes its saved rows; a broken saved file is named."""
    import json
    import shutil

    a = [({"name": "full", "label": "full engine", "paper": 56.0}, _rewards(set(range(30))), "u"),
         ({"name": "no_validation", "label": "w/o validation", "paper": 50.0}, _rewards(set(range(12))), "u")]
    b = [({"name": "filtered", "label": "filtered", "paper": 70.5}, _rewards(set(range(10))), "u"),
         ({"name": "unfiltered", "label": "unfiltered", "paper": 65.0}, _rewards(set(range(11))), "u")]
    run_a = fake_ablation_run(tmp_path / "one", "ablation-no-validation", a)
    run_b = fake_ablation_run(tmp_path / "two", "ablation-dynamic-filtering", b)
    reports = tmp_path / "reports" / "ablations"
    ablations_page([run_a], reports, n_boot=200)
    saved = json.loads((reports / "rows" / "ablation-no-validation.json").read_text())
    assert saved["run_dir"] == str(run_a) and [r["arm"] for r in saved["rows"]] == ["full engine", "w/o validation"]
    n_stages = len(json.loads((run_a / "manifest.json").read_text())["stages"])
    assert saved["cost"]["total_s"] == n_stages * 1.0 > 0  # each fake stage took 1 s
    shutil.rmtree(tmp_path / "one")                      # the first machine's run folder is gone
    text = ablations_page([run_b], reports, n_boot=200).read_text()
    assert "What each recipe cost" in text and text.count("cost from nothing: 0 min (the sum of") == 2  # the carried run's cost too
    assert "w/o validation" in text and "unfiltered" in text and "1 carried from saved rows" in text
    assert text.index("ablation-no-validation") < text.index("ablation-dynamic-filtering")  # the paper's order
    assert f"saved {saved['saved']}" in text             # the summary row says where it came from
    # given again (here: rerun elsewhere), a run folder supersedes its saved rows
    run_a2 = fake_ablation_run(tmp_path / "three", "ablation-no-validation", a[:1])
    text = ablations_page([run_a2, run_b], reports, n_boot=200).read_text()
    assert "w/o validation" not in text and "carried" not in text
    (reports / "rows" / "ablation-user-model.json").write_text("{not json")
    with pytest.raises(ValueError, match="ablation-user-model.json: not a saved ablation run"):
        ablations_page([run_b], reports, n_boot=200)


def test_the_papers_8x64_arm_is_one_stage_in_the_batch_size_filtering_and_user_model_recipes(tmp_path):
    """The paper's 8x64 run stands in its batch row, its filtering row and (its main RL run, against the
    fine-tuned user) its user-model row; the kit's CPU analogue (4x4, filtered, the SFT user) is the same GRPO
    and evaluation stage in all three recipes (same fingerprint), so `kit ablations` runs it once, and the
    recipes share their engine and SFT stages. The user-model recipe's raw-user arm differs in the user alone."""
    from pathlib import Path

    from kit.runner import load_recipe
    from kit.runner.execute import Runner

    root = Path(__file__).resolve().parents[1] / "recipes" / "ablations"
    fp = {}
    for name in ("batch_size", "dynamic_filtering", "user_model"):
        rec = load_recipe(root / f"{name}.yaml")
        fp[name] = Runner(rec, rec.name, tmp_path / "runs", tmp_path / "reports").fingerprints()
    b, d, u = fp["batch_size"], fp["dynamic_filtering"], fp["user_model"]
    for stage in ("synthesize", "sft_user", "sft_agent", "grpo", "evaluate"):
        assert b[f"g4xb4/{stage}"] == d[f"filtered/{stage}"] == u[f"finetuned_user/{stage}"], stage
    assert b["g4xb2/grpo"] != d["filtered/grpo"] and b["g4xb2/sft_agent"] == d["unfiltered/sft_agent"]
    assert u["raw_user/grpo"] != u["finetuned_user/grpo"] and u["raw_user/sft_agent"] == d["filtered/sft_agent"]
    # the masked raw-user arm: the same raw user (one stage), its own GRPO (user_faults mask, not keep)
    assert u["raw_user_masked/sft_user_raw"] == u["raw_user/sft_user_raw"]
    assert u["raw_user_masked/grpo"] not in (u["raw_user/grpo"], u["finetuned_user/grpo"])


def test_rl_arms_of_equal_cost_are_drawn_against_the_episodes_they_spent(tmp_path):
    """The batch-shape arms: each GRPO arm's validation curve is on its row (step: pass^1) and on one figure
    whose x axis is the rollout episodes scored by each point (16 a step for 4x4, 8 for 4x2), saved with the
    rows so a carried section draws it too."""
    import json

    arms = [({"name": "g4xb2", "label": "4x2", "paper": 64.0}, _rewards(set(range(10))), "u"),
            ({"name": "g4xb4", "label": "4x4", "paper": 70.5}, _rewards(set(range(12))), "u")]
    val = lambda n: {f"v{i}": [1.0 if i < n else 0.0] for i in range(10)}  # noqa: E731
    grpo = {"g4xb2": {"rewards": [0.3] * 4, "curve": {0: val(2), 2: val(3), 4: val(3)}, "episodes_per_step": 8},
            "g4xb4": {"rewards": [0.3] * 4, "curve": {0: val(2), 2: val(4), 4: val(5)}, "episodes_per_step": 16}}
    run = fake_ablation_run(tmp_path, "ablation-batch-size", arms, {"metric": "pass^1", "reference": "g4xb2"},
                            grpo=grpo)
    _, df, _ = ablation_rows(run, n_boot=200)
    rows = df.set_index("arm")
    assert rows.loc["4x4", "validation pass^1 by step"] == "0: 0.200 -> 2: 0.400 -> 4: 0.500"
    assert rows.loc["4x2", "_curve"] == [[0, 0.2], [16, 0.3], [32, 0.3]]
    assert rows.loc["4x4", "_curve"] == [[0, 0.2], [32, 0.4], [64, 0.5]]
    out = tmp_path / "reports" / "ablations"
    text = ablations_page([run], out, n_boot=200).read_text()
    assert (out / "ablation-batch-size-curve.png").stat().st_size > 1000 and "_curve" not in text
    saved = json.loads((out / "rows" / "ablation-batch-size.json").read_text())
    assert [r["_curve"] for r in saved["rows"]] == [[[0, 0.2], [16, 0.3], [32, 0.3]], [[0, 0.2], [32, 0.4], [64, 0.5]]]


def test_an_earlier_configuration_of_a_recipe_is_listed_right_after_the_recipe():
    """Saved rows renamed when a recipe changed shape ("ablation-user-model-30x2x8") stay beside the recipe's
    own section, in the paper's order; an unknown run goes last."""
    from kit.report.ablations import paper_rank

    names = ["ablation-dynamic-filtering", "my-ablation", "ablation-user-model-30x2x8", "ablation-no-validation",
             "ablation-user-model", "ablation-batch-size"]
    assert sorted(names, key=paper_rank) == ["ablation-no-validation", "ablation-user-model",
                                             "ablation-user-model-30x2x8", "ablation-batch-size",
                                             "ablation-dynamic-filtering", "my-ablation"]


def test_arms_other_than_the_reference_are_paired_with_each_other_too(tmp_path):
    """The paper's user-model row orders three arms (fine-tuned user 95.6 > SFT 85.4 > raw user 75.6): the main
    table pairs each arm with the reference (SFT), and the page pairs the rest among themselves (fine-tuned vs
    raw user), the paper's difference beside each, on the summary too and in the saved rows a later page carries."""
    import json

    from kit.report.ablations import arm_pairs

    arms = [({"name": "sft", "label": "SFT", "paper": 85.4}, _rewards(set(range(10))), "u"),
            ({"name": "ft", "label": "fine-tuned user", "paper": 95.6}, _rewards(set(range(30))), "u"),
            ({"name": "raw", "label": "raw user", "paper": 75.6}, _rewards(set(range(8))), "u"),
            ({"name": "base", "label": "base"}, _rewards(set()), "u")]
    run = fake_ablation_run(tmp_path / "runs", "ablation-user-model", arms,
                            {"metric": "pass^1", "reference": "sft"})
    pairs = arm_pairs(run, n_boot=200).set_index(["arm", "against"])
    assert len(pairs) == 3                                       # ft-raw, ft-base, raw-base: no pair with the reference
    fr = pairs.loc[("raw user", "fine-tuned user")]
    assert fr["Δ"] == pytest.approx(-22 / 40) and fr["paper Δ (points)"] == pytest.approx(-20.0)
    assert fr["verdict"] == "reproduced" and fr["p"] < 0.001
    assert pairs.loc[("base", "raw user"), "verdict"] == "no paper number"
    reports = tmp_path / "reports"
    text = ablations_page([run], reports, n_boot=200).read_text()
    assert "raw user vs fine-tuned user" in text                # on the summary of directions
    saved = json.loads((reports / "rows" / "ablation-user-model.json").read_text())
    assert {(p["arm"], p["against"]) for p in saved["pairs"]} == set(pairs.index)
    import shutil
    shutil.rmtree(tmp_path / "runs")                             # a later page without the folder still shows them
    assert "raw user vs fine-tuned user" in ablations_page([], reports, n_boot=200).read_text()


def test_engine_columns_total_the_rounds_and_count_the_rollouts_validation_would_have_dropped():
    """The data block of an engine arm's row, from its rounds.csv (a hand-made one): totals, rollouts with how
    many passed, the agent SFT samples from failed rollouts, per-round entropy; none where nothing rolled out."""
    import pandas as pd

    from kit.report.ablations import engine_columns

    rounds = pd.DataFrame({"proposals": [24, 24], "accepted": [20, 22], "sft_agent": [70, 80], "sft_ungrounded": [3, 1],
                           "unvalidated": [0, 1], "episodes": [20, 22], "pass_rate": [0.1, 0.0],
                           "unvalidated_samples": [40, 51], "pattern_entropy": [1.5, 1.75], "write_coverage": [1.0, 0.5]})
    cols = engine_columns({"rounds": rounds})
    assert cols["data: accepted"] == 42 and cols["data: SFT samples"] == 150 and cols["data: unvalidated accepted"] == 1
    assert cols["data: rollouts (passed)"] == "42 (2)" and cols["data: SFT samples from failed rollouts"] == 91
    assert cols["data: pattern entropy per round (bits)"] == "1.50 -> 1.75"
    none = engine_columns({"rounds": rounds.assign(episodes=[0, 0], pass_rate=[float("nan")] * 2)})
    assert none["data: rollouts (passed)"] is None
    assert engine_columns(None) == {}
