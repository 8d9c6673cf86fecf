"""A report is one self-contained HTML file: figures inlined, no local paths; `kit report RUN`
re-renders it, `kit compare` renders one page over several runs (tests/_fake_run.py builds the
runs with the stages' own writers). Headless Chromium opens the page copied alone into an empty
folder and finds every figure drawn."""

from __future__ import annotations

import re
import shutil

import pytest
from _fake_run import fake_run
from test_report_browser import browse, chromium

from kit.cli import main


def _no_local_paths(page: str, *roots) -> None:
    for root in roots:
        assert str(root) not in page, f"the page names a local path under {root}"
    assert not re.search(r'src="(?!data:)', page), "a figure is not inlined"


def test_kit_report_rerenders_one_self_contained_file(tmp_path, capsys):
    run = fake_run(tmp_path / "a", arms=False)
    assert main(["report", str(run), "--out", str(tmp_path / "rep"), "--bootstrap", "100"]) == 0
    page = (tmp_path / "rep" / "index.html").read_text(encoding="utf-8")
    assert page.count('<img src="data:image/png;base64,') >= 4
    _no_local_paths(page, tmp_path)
    assert "runs/fake" in page  # the run folder, named relative to the project
    assert "one self-contained file" in capsys.readouterr().out
    assert main(["report", str(tmp_path / "nothing")]) == 2  # not a run: a user error


def test_kit_compare_puts_runs_side_by_side(tmp_path):
    a, b = fake_run(tmp_path / "a", arms=False), fake_run(tmp_path / "b", arms=True)
    assert main(["compare", str(a), str(b), "--out", str(tmp_path / "cmp"), "--bootstrap", "100"]) == 0
    page = (tmp_path / "cmp" / "index.html").read_text(encoding="utf-8")
    for title in ("Runs", "Evaluation: pass^k", "Data engine: yield per round", "SFT: loss curves",
                  "GRPO: reward and dynamic filtering"):
        assert f"<h2>{title}</h2>" in page, title
    assert "fake/" in page and "fake-ablation/" in page  # both runs' stages, keyed by run id
    _no_local_paths(page, tmp_path)
    twice = tmp_path / "twice"  # two runs of one name (other folders): the second is numbered
    assert main(["compare", str(a), str(fake_run(tmp_path / "c", arms=False)), "--out", str(twice)]) == 0
    assert "fake#2/" in (twice / "index.html").read_text(encoding="utf-8")


@pytest.mark.parametrize("kind", ["report", "compare"])
def test_the_page_alone_opens_with_every_figure_drawn(tmp_path, kind):
    binary = chromium()
    if binary is None:
        pytest.skip("no Chromium found (apt-get install -y chromium, or set KIT_CHROMIUM)")
    a = fake_run(tmp_path / "a", arms=False)
    argv = ["report", str(a)] if kind == "report" else ["compare", str(a), str(fake_run(tmp_path / "b", arms=True))]
    assert main([*argv, "--out", str(tmp_path / "rep"), "--bootstrap", "100"]) == 0
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(tmp_path / "rep" / "index.html", alone / "page.html")  # the page only: no PNG, no manifest
    dom = browse(binary, (alone / "page.html").as_uri(), tmp_path / "profile", "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    tag = re.search(r"<body[^>]*>", dom.stdout).group(0)
    assert 'data-loaded="true"' in tag and 'data-broken-figures=""' in tag, tag
    assert int(re.search(r'data-figures="(\d+)"', tag).group(1)) >= 4, tag
