"""Every stage's `run` returns its own `Outputs` (kit/stages/__init__.py's contract), and what a stage
keeps for display in this process (the evaluation's episodes, the built report) stays out of stage.json.
Every stage module declares its CONTRACT (kit/stages/contract.py), and no stage name appears as a string
outside kit/stages: the rest of the kit loops over the registered stages."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import typing
from pathlib import Path

import pandas as pd
import pytest

from kit.stages import MODULES, STAGE_MODULES, Produces, contract, contracts, module, stage_names, summarizes_run


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


# ----- each stage declares its contract in its module (kit/stages/contract.py) ------------------------

STAGE_NAMES = ("synthesize", "sft_user", "sft_agent", "grpo", "evaluate", "report")
# a stage name as a quoted string literal
LITERAL = re.compile(r"""["'](""" + "|".join(STAGE_NAMES) + r""")["']""")
KIT = Path(__file__).resolve().parents[1] / "kit"
# (file under kit/, text of the line): where such a string is not a stage name. Keep it short: rename first.
ALLOWED = {
    ("cli.py", 'sub.add_parser("report"'): "the `kit report` command's name (it re-renders a run's report)",
    ("cli.py", 'bsub.add_parser("grpo"'): "the `kit bench grpo` command's name",
    ("metrics.py", 'AGENT_SAMPLES = "sft_agent"'): "rounds.csv's column, named after sft_agent.jsonl",
    ("metrics.py", 'USER_SAMPLES = "sft_user"'): "rounds.csv's column, named after sft_user.jsonl",
    ("metrics.py", 'WANDB_GRPO = "grpo"'): "W&B's section of GRPO metrics",
    ("metrics.py", 'WANDB_ENGINE_JOB = "synthesize"'): "W&B's job type of the engine",
    ("eval/__init__.py", '"evaluate"'): "the function kit.eval.evaluate",
}


def test_no_stage_name_outside_the_stage_modules_and_the_registry():
    """A stage's facts live in its module (its CONTRACT) and the registry: the rest of the kit loops
    over the registered stages and names none of them."""
    found, used = [], set()
    for path in sorted(KIT.rglob("*.py")):
        rel = path.relative_to(KIT).as_posix()
        if rel.startswith("stages/"):
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not LITERAL.search(line):
                continue
            allowed = [key for key in ALLOWED if key[0] == rel and key[1] in line]
            used.update(allowed)
            if not allowed:
                found.append(f"kit/{rel}:{n}: {line.strip()}")
    assert not found, "stage names outside kit/stages (ask the registry, kit.stages.contracts()):\n" + "\n".join(found)
    assert used == set(ALLOWED), f"allow-list entries that match nothing any more: {set(ALLOWED) - used}"


def test_every_stage_module_declares_a_consistent_contract():
    names = stage_names()
    assert set(names) == set(MODULES) and len(contracts()) == len(STAGE_MODULES)
    assert set(names) == set(STAGE_NAMES)  # the grep above looks for every registered stage
    for c in contracts():
        for name in c.names:
            assert contract(name) is c and module(name).CONTRACT is c
            fields = module(name).Config.model_fields
            for field_, ref in c.references.items():
                assert field_ in fields, (name, field_)
                for source in ref.wire_from:  # wired only to stages that produce what the field takes
                    assert contract(source).produces == ref.kind, (name, field_, source)
        assert c.produces in Produces
        if c.memory is not None:  # a memory estimate is for the training stages, which may be launched
            assert c.launchable, c.names
    assert [n for n in names if summarizes_run(n)] == [names[-1]]


def test_contracts_and_validation_import_no_torch():
    """`kit run --validate` reads every contract: declaring one must stay cheap."""
    code = ("import sys; from kit.runner.recipe import load_recipe; from kit.stages import contracts; contracts(); "
            "load_recipe('recipes/quickstart-cpu.yaml', check_gpu=False); "
            "assert 'torch' not in sys.modules, 'torch imported'")
    root = KIT.parent
    r = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(root)})
    assert r.returncode == 0, r.stderr[-2000:]


def test_choices_are_typed_once_and_old_run_folders_still_read():
    """GRPO's task source, its skip reasons and a trajectory's termination are typed values (enums or a
    pydantic model), parsed once; the text an older stage.json or trajectories.jsonl holds reads back."""
    from kit.stages.grpo import Outputs, TaskSource, leak_sources
    from kit.train.grpo_config import SkipReason
    from kit.trajectory import Termination, Trajectory

    old = {"engine": ("engine", None), "split:train": ("split", "train"), "fallback:split 'train'": ("fallback", "train"),
           "fallback:default set, no split 'train'": ("fallback", "default")}
    for text, (kind, split) in old.items():
        src = TaskSource.model_validate(text)
        assert (src.kind, src.split) == (kind, split)
        assert TaskSource.model_validate(src.model_dump()) == src and str(TaskSource.model_validate(str(src))) == str(src)
    assert leak_sources({"task_source": {"kind": "fallback", "split": "default"}}) == ["split:default"]
    assert leak_sources({"task_source": "fallback:split 'train'"}) == ["split:train"]
    assert leak_sources({"task_source": {"kind": "engine"}}) == [] and leak_sources({}) == []
    with pytest.raises(ValueError):
        TaskSource.model_validate("somewhere:else")
    out = Outputs(files={}, steps=2, tasks=3, task_source="engine", user_tag="raw",
                  skip_reasons={"all_groups_filtered": 1})
    assert out.skip_reasons == {SkipReason.ALL_GROUPS_FILTERED: 1} and out.task_source.kind == "engine"
    assert json.loads(out.model_dump_json())["skip_reasons"] == {"all_groups_filtered": 1}
    with pytest.raises(ValueError):
        Outputs(files={}, steps=1, tasks=1, task_source="engine", user_tag="raw", skip_reasons={"tired": 1})
    t = Trajectory.model_validate({"task_id": "x", "termination_reason": "max_steps"})
    assert t.termination_reason is Termination.MAX_STEPS and t.termination_reason == "max_steps"
    assert f"{t.termination_reason}" == "max_steps" and json.loads(t.model_dump_json())["termination_reason"] == "max_steps"
    assert t.to_tau2().termination_reason.value == "max_steps"
    with pytest.raises(ValueError):
        Trajectory.model_validate({"task_id": "x", "termination_reason": "bored"})


def test_a_data_source_is_parsed_once_into_its_kind():
    """'@<id>', 'split:<name>', 'gold' and a path: kit/sources.py types them; the stages' checks and the
    leak check read the typed form."""
    from kit.sources import GoldRef, PathRef, SplitRef, StageRef, parse_source

    cases = {"@synthesize": StageRef(id="synthesize"), "split:train": SplitRef(name="train"), "gold": GoldRef(),
             "runs/x/synthesize": PathRef(path="runs/x/synthesize")}
    for text, src in cases.items():
        assert parse_source(text) == src and src.text() == text and parse_source(src) is src
    from kit.stages.grpo import check as grpo_check
    from kit.stages.sft import check as sft_check

    class PS:  # the two fields of a planned stage these checks read
        def __init__(self, **params):
            self.params, self.refs = params, {}

    assert grpo_check(PS(tasks="split:train"), [], False) == []
    assert grpo_check(PS(tasks="@synthesize"), [], False) == []
    assert [f for f, _ in grpo_check(PS(tasks="/nowhere/rl.jsonl"), [], False)] == ["tasks"]
    assert [f for f, _ in grpo_check(PS(tasks="gold"), [], False)] == ["tasks"]
    assert sft_check(PS(data="gold"), [], False) == [] and sft_check(PS(data="@synthesize"), [], False) == []
    assert [f for f, _ in sft_check(PS(data="split:train"), [], False)] == ["data"]
