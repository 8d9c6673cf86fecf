"""The report's figure helpers: a matplotlib Figure (no pyplot state), integer step ticks, PNG out.

    fig = new_figure(10, 3.6); ax1, ax2 = fig.subplots(1, 2)
    int_ticks(ax1, steps); save(fig, out / "grpo.png")
"""

from __future__ import annotations

from pathlib import Path


def new_figure(w: float = 7.0, h: float = 3.6):
    from matplotlib.figure import Figure

    return Figure(figsize=(w, h), dpi=100)


def int_ticks(ax, values) -> None:
    """Integer x ticks at the data (a single round or step would otherwise get ticks like -0.04)."""
    from matplotlib.ticker import MaxNLocator

    vals = sorted({int(v) for v in values if v == v})
    if not vals:
        return
    if len(vals) <= 12:
        ax.set_xticks(vals)
        ax.set_xlim(vals[0] - 0.6, vals[-1] + 0.6)
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, format="png")
    return path
