# ---
# jupyter:
#   jupytext:
#     cell_metadata_filter: tags
#     formats: py:percent
#     notebook_metadata_filter: kernelspec,-jupytext.text_representation
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Stage `report`: the run's report
#
# Everything the run's stages wrote, rendered into `reports/<run-id>/index.html` with its figures:
# engine yield, SFT losses, GRPO curves, pass^k with intervals next to the paper's numbers, warnings,
# the manifest. What it reads: `kit/stages/report.py`. The same sections are shown below.
#
# Run by `kit run RECIPE` (papermill fills the parameters cell and writes the executed copy to
# `runs/<run-id>/<stage-id>/`), or by hand in JupyterLab with the defaults below.

# %% tags=["parameters"]
# Parameters of the `report` stage: kit/stages/report.py's Config (papermill overrides them).
seed = 0  # Seed of everything random in the stage.
threads = None  # torch CPU threads (None: torch's default).
title = None  # Report title (default: the recipe's name).
report_dir = None  # Default: reports/<run-id> beside runs/.
ci = 0.95  # Confidence of the pass^1 bootstrap intervals.
bootstrap = 2000  # Bootstrap resamples.

# --- set by `kit run` (leave as None when running this notebook by hand) ---
stage = None        # the recipe's stage name
run_id = None       # the run: runs/<run_id>/
stage_id = None     # this stage's id in the recipe
arm = None          # ablation arm, if any
out_dir = None      # where this stage writes (default: runs/<run_id>/<stage_id>)
run_dir = None      # runs/<run_id>
wandb_group = None  # W&B group: the run id
fingerprint = None  # the runner's hash of this stage's inputs (written to stage.json)
resume_tag = None  # what its in-stage checkpoints are tagged with: a rerun resumes only from its own

# %%
from kit.report.build import display_report
from kit.runner.stage import begin
from kit.stages import report

st = begin("report", globals())
out = report.run(st.config, st)
display_report(out.report)

# %%
st.finish(out)
