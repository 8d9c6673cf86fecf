"""Rewrite each stage notebook's parameters cell from its stage Config (kit/stages/<module>.py).

    python scripts/sync_notebook_params.py          # rewrites notebooks/*.py in place
    python scripts/sync_notebook_params.py --check  # exit 1 if a notebook is out of date

The cell lists every Config field as `name = default  # description`, in the Config's field order,
then the runner's fields (kit.runner.stage.RUNNER_FIELDS); tests/test_notebooks.py checks the same.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def cell_lines(config, old: dict[str, str]) -> list[str]:
    """Every field as a line; the cell's present order is kept, a new field goes after the field
    that precedes it in the Config; a required field keeps the value the cell gives it."""
    fields = config.model_fields
    order = [n for n in old if n in fields]
    for i, name in enumerate(fields):
        if name not in order:
            prev = [n for n in list(fields)[:i] if n in order]
            order.insert(order.index(prev[-1]) + 1 if prev else 0, name)
    from kit.runner.stage import cell_comment

    return [f"{n} = {old[n] if fields[n].is_required() else repr(fields[n].default)}  # "
            f"{cell_comment(fields[n].description)}" for n in order]


def sync(path: Path, config) -> str:
    text = path.read_text(encoding="utf-8")
    head = re.search(r'(# %% tags=\["parameters"\]\n# Parameters of [^\n]*\n)(.*?)(\n\n# --- set by `kit run`)', text, re.S)
    if head is None:
        raise SystemExit(f"{path}: no parameters cell in the expected form")
    old = dict(line.split("  # ")[0].split(" = ", 1) for line in head.group(2).splitlines() if " = " in line)
    return text[: head.start(2)] + "\n".join(cell_lines(config, old)) + text[head.end(2):]


def main() -> int:
    sys.path.insert(0, str(ROOT))
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    from kit.runner.stages import STAGES  # stage name -> its Config
    from kit.stages import MODULES

    stale = []
    done = set()
    for stage, config in STAGES.items():
        nb = ROOT / "notebooks" / f"{MODULES[stage]}.py"
        if nb in done:
            continue
        done.add(nb)
        new = sync(nb, config)
        if new != nb.read_text(encoding="utf-8"):
            stale.append(nb)
            if not args.check:
                nb.write_text(new, encoding="utf-8")
    for nb in stale:
        print(("stale: " if args.check else "rewrote: ") + str(nb.relative_to(ROOT)))
    return 1 if (args.check and stale) else 0


if __name__ == "__main__":
    raise SystemExit(main())
