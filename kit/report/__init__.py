"""Presentation of runs: what a finished (or half-finished) run folder shows, read from the files its
stages wrote. It never runs a stage; kit.runner (orchestration) does, and imports nothing from here.

    from kit.report.build import build_report       # kit report RUN: reports/<run-id>/index.html + figures
    from kit.report.browser import view             # kit view RUN --arm A --task T: one episode as text
    from kit.report.results import results_page     # kit results RUN...: the page of numbers

Read in this order: run_data.py (a run folder read back: `collect`, `Section`), build.py (the HTML report
and `kit compare`; the stage notebooks' fig_* figures), grpo.py and paired.py (its GRPO and paired
comparison sections), figures.py (figure helpers), episodes.py (the episodes as data) and browser.py with
browser.js (the episode browser: page and terminal), paper.py (the paper's numbers), results.py.
"""
