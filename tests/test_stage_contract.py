"""Every stage's `run` returns its own `Outputs` (kit/stages/__init__.py's contract), and what a stage
keeps for display in this process (the evaluation's episodes, the built report) stays out of stage.json."""

from __future__ import annotations

import typing

import pandas as pd
import pytest

from kit.stages import MODULES, module


@pytest.mark.parametrize("stage", sorted(MODULES))
def test_run_is_declared_to_return_the_stages_outputs(stage):
    mod = module(stage)
    assert typing.get_type_hints(mod.run)["return"] is mod.Outputs, stage


def test_in_process_results_are_not_recorded():
    from kit.stages import evaluate, report

    ev = evaluate.Outputs(label="x", passk={"1": 0.5}, model="m", user_model="u", tasks=2, trials=1)
    ev._result = pd.DataFrame({"reward": [1.0, 0.0]})
    assert ev.result is not None and "result" not in ev.summary() and "_result" not in ev.summary()
    assert evaluate.Outputs.from_stage_json({"summary": ev.summary(), "outputs": {}}).result is None
    rep = report.Outputs(html="r.html", figures=0)
    rep._report = object()
    assert rep.report is not None and set(rep.summary()) == {"html", "figures"}
