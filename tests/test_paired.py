"""Paired comparison of two arms on the same tasks (kit/eval/paired.py): hand-computed p-values,
intervals and MDEs; the report's "Paired comparisons" table and `kit compare`'s, on run folders
written by the kit's own writers (tests/_fake_run.py), carry the numbers paired_difference gives."""

from __future__ import annotations

import math
import re

import pytest
from _fake_run import fake_eval_run

from kit.cli import main
from kit.eval.paired import (
    MdeBasis,
    PairedTest,
    mcnemar_exact_p,
    min_detectable_difference,
    outcomes_by_task,
    paired_difference,
    sign_flip_p,
)
from kit.files import read_json
from kit.report.build import build_comparison, build_report
from kit.report.paired import MAX_PAIRS, paired_section
from kit.report.run_data import collect

Z_975, Z_80 = 1.959963984540054, 0.8416212335729143  # standard normal quantiles (tables)


def _arms(a: list[float], b: list[float]) -> tuple[dict, dict]:
    return {f"t{i}": [x] for i, x in enumerate(a)}, {f"t{i}": [x] for i, x in enumerate(b)}


# ----- the statistics ------------------------------------------------------------------------------


def test_six_discordant_wins_for_b_give_the_exact_p_of_two_in_64():
    a, b = _arms([0.0] * 10, [1.0] * 6 + [0.0] * 4)
    res = paired_difference(a, b, "base", "RL")
    # only the 6 discordant tasks carry a sign: all + or all − reach |sum| = 6, 2 of 2^6 vectors
    assert res.p_value == pytest.approx(2 / 2 ** 6) and res.test == PairedTest.SIGN_FLIP_EXACT
    assert res.mcnemar_p == pytest.approx(0.03125)  # 2 · P(Binomial(6, 1/2) <= 0)
    assert (res.n_tasks, res.wins_b, res.wins_a, res.ties, res.unmatched) == (10, 6, 0, 4, 0)
    assert (res.pass1_a, res.pass1_b, res.diff) == (0.0, pytest.approx(0.6), pytest.approx(0.6))
    assert 0.0 < res.ci95[0] < 0.6 < res.ci95[1] <= 1.0


def test_identical_arms_differ_by_nothing():
    a = {f"t{i}": [float(i % 3 == 0), float(i % 2 == 0)] for i in range(12)}
    res = paired_difference(a, {t: list(r) for t, r in a.items()})
    assert (res.diff, res.ci95, res.p_value) == (0.0, (0.0, 0.0), 1.0)
    assert (res.wins_b, res.wins_a, res.ties) == (0, 0, 12)
    assert res.mde_basis == MdeBasis.PLANNING and res.mde_sd == pytest.approx(math.sqrt(0.5))  # observed sd 0


def test_every_task_improved_by_one_gives_a_point_interval_at_one():
    res = paired_difference(*_arms([0.0] * 10, [1.0] * 10), n_boot=500)
    assert res.diff == 1.0 and res.ci95 == (1.0, 1.0)  # every resample of tasks has mean difference 1
    assert res.p_value == pytest.approx(2 / 2 ** 10) and res.mcnemar_p == pytest.approx(2 / 2 ** 10)


def test_sign_flip_on_unequal_differences_counts_sign_vectors_by_hand():
    # d = (0.5, 0.5, 1): |sum| = 2 only for (+,+,+) and (−,−,−); the other six give 0 or 1
    assert sign_flip_p([0.5, 0.5, 1.0]) == (pytest.approx(0.25), PairedTest.SIGN_FLIP_EXACT)
    assert sign_flip_p([0.5, -0.5, 0.0]) == (1.0, PairedTest.SIGN_FLIP_EXACT)  # observed sum 0: every vector reaches it


def test_many_differing_tasks_use_a_seeded_monte_carlo_close_to_the_exact_sign_test():
    d = [1.0] * 20 + [-1.0] * 12  # 32 nonzero: past the exact limit
    p, test = sign_flip_p(d)
    assert test == PairedTest.SIGN_FLIP_MC and sign_flip_p(d) == (p, test)  # fixed seed: the same p
    exact = mcnemar_exact_p(20, 12)  # with |d| = 1 the sign-flip test is the sign test
    assert exact == pytest.approx(2 * sum(math.comb(32, k) for k in range(13)) / 2 ** 32)
    assert abs(p - exact) < 0.015  # 20000 draws: Monte Carlo sd about 0.003 here


def test_mde_is_2_8_sd_over_root_n_and_falls_back_to_the_planning_sd():
    d = [1.0] * 8 + [0.0] * 8
    sd = math.sqrt(16 / 15 * 0.25)  # ddof 1
    mde, used, basis = min_detectable_difference(d)
    assert basis == MdeBasis.OBSERVED and used == pytest.approx(sd)
    assert mde == pytest.approx((Z_975 + Z_80) * sd / 4)
    mde, used, basis = min_detectable_difference([1.0, 0.0, 1.0])  # 3 tasks: too few for an observed sd
    assert basis == MdeBasis.PLANNING and mde == pytest.approx((Z_975 + Z_80) * math.sqrt(0.5) / math.sqrt(3))


def test_only_tasks_in_both_arms_count_and_the_rest_are_counted_as_unmatched():
    a, b = _arms([0.0, 1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 1.0, 0.0, 0.0])
    res = paired_difference({**a, "only_a": [1.0]}, {**b, "only_b1": [0.0], "only_b2": [1.0], "empty": []})
    assert (res.unmatched_a, res.unmatched_b, res.unmatched) == (1, 2, 3)  # a task with no trial is absent
    assert res.model_dump(exclude={"unmatched_a", "unmatched_b", "unmatched"}) == \
        paired_difference(a, b).model_dump(exclude={"unmatched_a", "unmatched_b", "unmatched"})
    with pytest.raises(ValueError, match="share no task"):
        paired_difference({"x": [1.0]}, {"y": [1.0]})


def test_multi_trial_outcomes_are_averaged_per_task_and_mcnemar_is_left_out():
    a = {"t0": [1.0, 0.0, 0.0, 1.0], "t1": [0.0, 0.0, 0.0, 0.0], "t2": [1.0, 1.0, 1.0, 1.0]}
    b = {"t0": [1.0, 1.0, 1.0, 1.0], "t1": [0.0, 1.0, 0.0, 0.0], "t2": [1.0, 1.0, 1.0, 1.0]}
    res = paired_difference(a, b)
    assert res.pass1_a == pytest.approx(1.5 / 3) and res.pass1_b == pytest.approx(2.25 / 3)
    assert res.diff == pytest.approx((0.5 + 0.25) / 3) and (res.wins_b, res.wins_a, res.ties) == (2, 0, 1)
    assert res.p_value == pytest.approx(2 / 4)  # d = (0.5, 0.25): only all + and all − reach 0.75
    assert res.mcnemar_p is None  # four trials per task: not McNemar's 0/1 design


def test_outcomes_from_episodes_use_taus_success_test_in_trial_order():
    rows = [{"task_id": "t0", "trial": 1, "reward": 0.0}, {"task_id": "t0", "trial": 0, "reward": 1.0 - 1e-9},
            {"task_id": "t1", "trial": 0, "reward": 0.5}, {"task_id": 7, "trial": 0, "reward": float("nan")},
            {"task_id": "t2", "trial": 0, "reward": None}]
    assert outcomes_by_task(rows) == {"t0": [1.0, 0.0], "t1": [0.0]}  # no verdict: no outcome


def test_summary_line_and_row_carry_the_numbers():
    res = paired_difference(*_arms([0.0] * 10, [1.0] * 6 + [0.0] * 4), "SFT", "RL")
    line = res.summary_line()
    assert line.startswith("RL − SFT: +0.600 [") and "p=0.03125 (sign-flip, exact; McNemar exact 0.03125)" in line
    assert "n=10 tasks: RL wins 6, SFT wins 0, ties 4" in line
    row = res.to_row()
    assert (row["A"], row["B"], row["tasks"], row["B wins / A wins / ties"]) == ("SFT", "RL", 10, "6 / 0 / 4")
    assert row["p"] == res.p_value and row["MDE"] == res.mde


# ----- the report and `kit compare` ----------------------------------------------------------------


TASKS = [f"heldout-{i:03d}" for i in range(10)]


def _rewards(pattern: list[int], trials: int = 2, drop: int = 0) -> dict[str, list[float]]:
    return {t: [float((p >> k) & 1) for k in range(trials)] for t, p in zip(TASKS[drop:], pattern[drop:])}


def _section_rows(page: str) -> list[list[str]]:
    """The cells of the Paired comparisons table, row by row (header first)."""
    part = page.split("<h2>Paired comparisons</h2>", 1)[1].split("<h2>", 1)[0]
    return [[re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", tr, re.DOTALL)]
            for tr in re.findall(r"<tr.*?</tr>", part, re.DOTALL)]


def _cells(row: dict, header: list[str]) -> list[str]:
    """A to_row() dict as the report renders it under `header`: 4 significant digits, – for none (the
    McNemar column is there only when some pair has one 0/1 trial per task)."""
    return [("–" if row[k] is None else f"{row[k]:.4g}" if isinstance(row[k], float) else str(row[k]))
            for k in header if k != "referee"]


def _outcomes(run, sid: str) -> dict:
    return outcomes_by_task(read_json(run / sid / "eval.json")["episodes"])


def test_report_shows_each_pair_of_evaluations_with_the_numbers_paired_difference_gives(tmp_path, capsys):
    run = fake_eval_run(tmp_path, "paired", [
        ("eval_base", "base", _rewards([0, 1, 0, 0, 3, 0, 0, 2, 0, 1]), "user-ft"),
        ("eval_sft", "SFT agent", _rewards([1, 3, 0, 2, 3, 0, 1, 3, 0, 1]), "user-ft"),
        ("eval_rl", "RL", _rewards([3, 3, 1, 3, 3, 0, 3, 3, 2, 1], drop=1), "user-ft"),  # one task left out
        ("eval_rl_raw", "RL, raw referee", _rewards([3, 3, 3, 3, 3, 3, 3, 3, 0, 0]), "user-raw"),
    ])
    assert main(["report", str(run), "--out", str(tmp_path / "rep"), "--bootstrap", "300"]) == 0
    page = (tmp_path / "rep" / "index.html").read_text(encoding="utf-8")
    rows = _section_rows(page)
    # base / SFT against the others first, then pairs judged by a different referee
    order = [("eval_base", "eval_sft"), ("eval_base", "eval_rl"), ("eval_sft", "eval_rl"),
             ("eval_base", "eval_rl_raw"), ("eval_sft", "eval_rl_raw"), ("eval_rl", "eval_rl_raw")]
    labels = {"eval_base": "base", "eval_sft": "SFT agent", "eval_rl": "RL", "eval_rl_raw": "RL, raw referee"}
    assert len(rows) == 1 + len(order)
    for cells, (a, b) in zip(rows[1:], order):
        want = paired_difference(_outcomes(run, a), _outcomes(run, b), labels[a], labels[b], n_boot=300).to_row()
        referee = "user-ft" if "eval_rl_raw" not in (a, b) else "differs: user-ft (kit, T=0.6) vs user-raw (kit, T=0.6)"
        assert cells == [*_cells(want, rows[0]), referee], (a, b)
    assert rows[2][rows[0].index("unmatched")] == "1"  # base vs RL: RL skipped one task
    assert rows[0][-1] == "referee" and "MDE" in rows[0] and "McNemar p" not in rows[0]  # 2 trials each
    assert "paired: SFT agent − base: " in capsys.readouterr().out  # `kit report` prints the same lines


def test_a_run_with_one_evaluation_or_disjoint_task_sets_has_no_paired_table(tmp_path):
    one = fake_eval_run(tmp_path, "one", [("evaluate", "base", _rewards([1, 0, 3]), "u")])
    rep = build_report(one, tmp_path / "rep1", bootstrap=50)
    assert rep.data["paired"] == [] and "Paired comparisons" not in rep.html_path.read_text(encoding="utf-8")
    other = {f"other-{i}": [1.0] for i in range(3)}
    two = fake_eval_run(tmp_path, "disjoint", [("a", "base", _rewards([1, 0, 3]), "u"), ("b", "RL", other, "u")])
    assert paired_section(collect(two), 50, 0.95) is None


def test_many_evaluations_are_capped_and_the_rest_counted(tmp_path):
    evals = [(f"eval_{k}", f"arm {k}", _rewards([(i + k) % 4 for i in range(10)]), "u") for k in range(6)]
    data = collect(fake_eval_run(tmp_path, "many", evals))
    sec = paired_section(data, 50, 0.95)
    assert len(data["paired"]) == MAX_PAIRS
    assert ("text", f"{6 * 5 // 2 - MAX_PAIRS} more pairs not shown (the first {MAX_PAIRS} above).") in sec.items


def test_kit_compare_pairs_the_same_evaluation_across_runs(tmp_path, capsys):
    one_trial = _rewards([0, 1, 0, 0, 1, 0, 0, 1, 0, 1], trials=1)  # McNemar's design: one 0/1 trial per task
    before = fake_eval_run(tmp_path / "x", "before", [("eval_base", "base", one_trial, "u"),
                                                      ("eval_rl", "RL", _rewards([1, 1, 0, 2, 3, 0, 0, 2, 0, 1]), "u")])
    after = fake_eval_run(tmp_path / "y", "after", [("eval_base", "base", {**one_trial, TASKS[0]: [1.0]}, "u"),
                                                    ("eval_rl", "RL", _rewards([3, 3, 2, 3, 3, 1, 0, 3, 3, 1]), "u")])
    assert main(["compare", str(before), str(after), "--out", str(tmp_path / "cmp"), "--bootstrap", "200"]) == 0
    rows = _section_rows((tmp_path / "cmp" / "index.html").read_text(encoding="utf-8"))
    first = [(r[0], r[1]) for r in rows[1:3]]
    assert first == [("before: base", "after: base"), ("before: RL", "after: RL")]  # the same stage id first
    base = paired_difference(_outcomes(before, "eval_base"), _outcomes(after, "eval_base"), "before: base",
                             "after: base", n_boot=200)
    want = paired_difference(_outcomes(before, "eval_rl"), _outcomes(after, "eval_rl"), "before: RL", "after: RL",
                             n_boot=200)
    assert base.mcnemar_p == 1.0 and want.mcnemar_p is None  # one discordant task; two trials per task
    assert rows[1] == [*_cells(base.to_row(), rows[0]), "u"] and rows[2] == [*_cells(want.to_row(), rows[0]), "u"]
    assert rows[2][rows[0].index("McNemar p")] == "–"
    assert len(rows) == 1 + 4  # then the cross pairs on the same tasks; never two stages of one run
    assert f"paired: {want.summary_line()}" in capsys.readouterr().out
    rep = build_comparison([before], tmp_path / "cmp1", bootstrap=50)  # one run: nothing across runs
    assert rep.data["paired"] == []


def test_slices_pair_within_each_phrasing_and_shape(tmp_path):
    """The by-slice rows are paired_difference on the tasks of each phrasing / shape that eval.json's
    episodes carry; a one-task slice is left out."""
    import json

    from kit.report.paired import slice_rows

    a = {t: [float(i % 3 == 0)] for i, t in enumerate(TASKS)}
    b = {t: [1.0] for t in TASKS}
    run = fake_eval_run(tmp_path, "slices", [("eval_sft", "SFT agent", a, "u"), ("eval_rl", "RL", b, "u")])
    phrasing = {t: ("free_form" if i < 6 else "template") for i, t in enumerate(TASKS)}
    shape = {t: ("create" if i < 9 else "update") for i, t in enumerate(TASKS)}  # 'update' has one task: left out
    for sid in ("eval_sft", "eval_rl"):
        path = run / sid / "eval.json"
        ev = json.loads(path.read_text())
        for r in ev["episodes"]:
            r["phrasing"], r["shape"] = phrasing[r["task_id"]], shape[r["task_id"]]
        path.write_text(json.dumps(ev))
    table = slice_rows(collect(run)["evals"], n_boot=200)
    assert list(table["slice"]) == ["phrasing: free_form", "phrasing: template", "shape: create"]
    for _, row in table.iterrows():
        key, v = row["slice"].split(": ")
        tasks = [t for t in TASKS if (phrasing if key == "phrasing" else shape)[t] == v]
        want = paired_difference({t: a[t] for t in tasks}, {t: b[t] for t in tasks}, n_boot=200).to_row()
        assert row["tasks"] == len(tasks) and row["Δ (B−A)"] == want["Δ (B−A)"] and row["p"] == want["p"]


def test_tasks_needed_inverts_the_mde():
    """tasks_needed is the MDE formula solved for n: at the n it returns, the MDE is at most the difference,
    one task fewer and it is above; a difference of 0 needs no finite number."""
    import math

    from kit.eval.paired import tasks_needed

    z = 2.8015852  # z_0.975 + z_0.8
    for diff, sd in ((0.021, 0.145), (0.063, 0.275), (0.3, 0.5)):
        n = tasks_needed(diff, sd)
        assert z * sd / math.sqrt(n) <= diff < z * sd / math.sqrt(n - 1)
    assert tasks_needed(-0.063, 0.275) == tasks_needed(0.063, 0.275)
    assert tasks_needed(0.0, 0.3) is None
