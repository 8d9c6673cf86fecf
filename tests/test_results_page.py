"""`kit results` (kit/report/results.py): the README's numbers come from run folders, so the page must
hold what the run folders hold. The run folder is tests/_fake_run.py's (written by the kit's own
writers; only the numbers are made up)."""

from __future__ import annotations

from _fake_run import fake_provenance_run

from kit.cli import main
from kit.report.build import eval_table
from kit.report.run_data import collect


def test_the_page_holds_each_evaluation_the_grpo_story_and_the_commit(tmp_path, capsys):
    run = fake_provenance_run(tmp_path)
    out = tmp_path / "RESULTS.md"
    assert main(["results", str(run), "--out", str(out), "--bootstrap", "200"]) == 0
    page = out.read_text()
    data = collect(run)
    assert page.startswith("# Results") and f"`kit results {run}`" in page
    assert f"## {data['manifest'].get('run_id', run.name)}" in page and "commit `" in page and "tau2 " in page
    for _, row in eval_table(data["evals"], 200, 0.95).iterrows():  # every evaluation with its pass^1
        line = next(x for x in page.splitlines() if x.startswith(f"| {row['evaluation']} |"))
        assert f"| {row['pass^1']:.2f} |" in line
    for g in data["grpo_runs"]:  # what each GRPO stage trained, in the stage's own words
        assert g["outputs"].what_happened() in page
    assert "Paired differences" in page and " − " in page


def test_two_runs_get_their_paired_differences_across_runs(tmp_path):
    """Two run folders evaluated on the same tasks (two `kit eval` runs both named 'cli', say): the page pairs
    the first run's evaluation with the second's, with the numbers paired_difference gives."""
    from _fake_run import fake_eval_run

    from kit.eval.paired import outcomes_by_task, paired_difference
    from kit.files import read_json
    from kit.report.results import results_page

    tasks = [f"heldout-{i:03d}" for i in range(8)]
    a = fake_eval_run(tmp_path / "a", "cli", [("evaluate", "SFT agent", {t: [float(i % 2)] * 2 for i, t in enumerate(tasks)}, "u")])
    b = fake_eval_run(tmp_path / "b", "cli", [("evaluate", "GRPO agent", {t: [1.0, 0.0] for t in tasks}, "u")])
    page = results_page([a, b], n_boot=200)
    part = page.split("## Across runs", 1)[1]
    want = paired_difference(outcomes_by_task(read_json(a / "evaluate" / "eval.json")["episodes"]),
                             outcomes_by_task(read_json(b / "evaluate" / "eval.json")["episodes"]),
                             "cli: SFT agent", "cli#2: GRPO agent", n_boot=200)
    assert f"- {want.summary_line()}" in part
    assert "## Across runs" not in results_page([a], n_boot=200)
