"""The learning curve's warning when it never rose (kit.train.grpo_curve.flat_curve_warning): on hand-made
curves, as curve.jsonl holds them."""

from kit.train.grpo_curve import flat_curve_warning


def _pts(*rates):
    return [{"step": 2 * i, "pass1": r, "ci95": [0.0, 1.0]} for i, r in enumerate(rates)]


def test_a_curve_that_never_rose_above_its_start_is_named_and_one_that_rose_is_not():
    flat = flat_curve_warning(_pts(0.0, 0.0))
    assert flat.startswith("VALIDATION DID NOT RISE") and "0.000 at step 0, 0.000 after step 2" in flat
    assert "model_best/ is the start policy" in flat
    assert flat_curve_warning(_pts(0.05, 0.05, 0.0)) is not None     # ties and falls: the start is still the best
    assert flat_curve_warning(_pts(0.0, 0.15)) is None               # rose at the end
    assert flat_curve_warning(_pts(0.0, 0.25, 0.05)) is None         # rose, then fell: model_best/ is not the start
    assert flat_curve_warning(_pts(0.1)) is None and flat_curve_warning([]) is None  # nothing to compare
