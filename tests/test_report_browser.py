"""A rendered report opens in headless Chromium without errors; its screenshot is kept as a test artifact.

Chromium comes from Debian's `chromium` package (`make test` installs it when it is missing and
it runs as root, as CI does). The test skips, saying why, only when no Chromium can be found.
The screenshot is written to tests/artifacts/report.png (git-ignored) and its path printed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ARTIFACTS = Path(__file__).resolve().parent / "artifacts"


def chromium() -> str | None:
    for name in (os.environ.get("KIT_CHROMIUM"), "chromium", "chromium-browser", "google-chrome", "chrome"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def browse(binary: str, url: str, profile: Path, *args: str) -> subprocess.CompletedProcess:
    """Chromium headless on `url`; `profile` is this test's own (two at once cannot share one: its lock)."""
    return subprocess.run([binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                           "--hide-scrollbars", "--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000",
                           "--user-data-dir=" + str(profile), *args, url],
                          capture_output=True, text=True, timeout=180)


@pytest.mark.parametrize("arms", [False, True], ids=["run", "ablation"])
def test_report_opens_in_headless_chromium_without_errors(tmp_path, arms):
    binary = chromium()
    if binary is None:
        pytest.skip("no Chromium found (apt-get install -y chromium, or set KIT_CHROMIUM); `make test` installs "
                    "it when it runs as root")
    from _fake_run import fake_run

    from kit.report.build import build_report

    rep = build_report(fake_run(tmp_path, arms=arms), tmp_path / "reports" / "r", bootstrap=200)
    url = rep.html_path.resolve().as_uri()
    ARTIFACTS.mkdir(exist_ok=True)

    dom = browse(binary, url, tmp_path / "chromium-profile", "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    body = re.search(r"<body[^>]*>", dom.stdout)
    assert body, dom.stdout[:500]
    tag = body.group(0)
    assert 'data-loaded="true"' in tag, tag  # the page's own check ran after load
    assert 'data-broken-figures=""' in tag, tag  # every figure decoded
    n = int(re.search(r'data-figures="(\d+)"', tag).group(1))
    assert n == len(rep.figures) >= 4
    console = [line for line in dom.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line
               or "Failed to load resource" in line]
    assert not console, console
    for title in ("Evaluation: pass^k", "Manifest", "Warnings"):
        assert title in dom.stdout

    shot = ARTIFACTS / f"report-{'ablation' if arms else 'run'}.png"
    shot.unlink(missing_ok=True)
    r = browse(binary, url, tmp_path / "chromium-profile", "--window-size=1200,2400", f"--screenshot={shot}")
    assert r.returncode == 0 and shot.exists() and shot.stat().st_size > 20_000, r.stderr[-2000:]
    print(f"screenshot: {shot}")


def test_the_browser_script_is_a_real_js_file_that_node_parses():
    """kit/report/browser.js is the episode browser's script as a file of its own: Node parses it."""
    from kit.report.browser import SCRIPT_FILE

    assert SCRIPT_FILE.is_file(), SCRIPT_FILE
    node = shutil.which("node")
    if node is None:
        pytest.skip("no Node.js found (apt-get install -y nodejs): `node --check` cannot parse kit/report/browser.js")
    r = subprocess.run([node, "--check", str(SCRIPT_FILE)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_the_browser_script_ships_as_package_data_and_the_page_inlines_it(tmp_path):
    import tomllib

    from _fake_run import fake_run

    from kit.report.browser import SCRIPT_FILE, script
    from kit.report.build import build_report

    root = Path(__file__).resolve().parents[1]
    patterns = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["kit"]
    shipped = {p.resolve() for pattern in patterns for p in (root / "kit").glob(pattern)}
    assert SCRIPT_FILE.resolve() in shipped, f"pyproject.toml's package-data does not ship {SCRIPT_FILE}"

    rep = build_report(fake_run(tmp_path, arms=False), tmp_path / "reports" / "r", bootstrap=100)
    page = rep.html_path.read_text(encoding="utf-8")
    assert f"<script>{script()}</script>" in page
    assert 'root.setAttribute("data-eb-ready", "true")' in page  # the script's last line, not a stub
