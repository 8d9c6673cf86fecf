"""Paired comparison of two arms on the same tasks (kit/eval/paired.py): hand-computed p-values,
intervals and MDEs."""

from __future__ import annotations

import math

import pytest

from kit.eval.paired import (
    MdeBasis,
    PairedTest,
    mcnemar_exact_p,
    min_detectable_difference,
    outcomes_by_task,
    paired_difference,
    sign_flip_p,
)

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
