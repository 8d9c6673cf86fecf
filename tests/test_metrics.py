"""One name per metric (kit/metrics.py): no other kit module spells a shared metric as a string."""

import re
from pathlib import Path

from kit import metrics as M

KIT = Path(__file__).resolve().parents[1] / "kit"
SHARED = [M.PASS_RATE, M.USER_DEVIATION_RATE, M.REQUEST_STATED_RATE, M.PROPER_END_RATE, M.PASS1_CI95,
          M.REWARD_MEAN, M.FILTERED_FRAC, M.GROUPS_KEPT, M.STEP_TIME]


def test_shared_metric_names_are_spelled_only_in_the_metrics_module():
    offenders = []
    for path in KIT.rglob("*.py"):
        if path.name == "metrics.py" and path.parent == KIT:
            continue
        text = path.read_text()
        for name in SHARED + ["user/deviation_rate"]:  # the old GRPO spelling of the deviation rate
            if re.search(r"""["']""" + re.escape(name) + r"""["']""", text):
                offenders.append(f"{path.relative_to(KIT.parent)}: {name!r}")
    assert offenders == []


def test_wandb_keys_prefix_numbers_and_drop_the_rest():
    keys = M.wandb_keys("grpo", {M.REWARD_MEAN: 0.5, "step": 3, "skipped": False, "skip_reason": None})
    assert keys == {"grpo/reward/mean": 0.5, "grpo/step": 3}
    assert M.label(M.USER_DEVIATION_RATE) == "user deviation rate" and M.label("lr") == "lr"
