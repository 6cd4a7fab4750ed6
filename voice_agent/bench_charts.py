"""The latency histogram `run.py bench voice --out DIR` writes: one panel per stage, from the
per-turn milliseconds the benchmark measured, with its p50 and p95 marked."""
from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

from kb.measure import percentile

if TYPE_CHECKING:  # typing only: matplotlib is imported when the chart is drawn
    from matplotlib.axes import Axes


class LatencyChartError(ValueError):
    """No latency to draw: the message says what was missing."""


def finite_samples(samples: Mapping[str, Sequence[float]]) -> dict[str, list[float]]:
    """The stages that have at least one finite measurement, in the order given."""
    out = {stage: [float(v) for v in xs if math.isfinite(v)] for stage, xs in samples.items()}
    return {stage: xs for stage, xs in out.items() if xs}


def _panel(ax: Axes, stage: str, xs: list[float]) -> None:
    from matplotlib.ticker import MaxNLocator  # matplotlib is loaded already; drawing needs it

    ax.hist(xs, bins=min(20, max(5, len(xs) // 2)), color="#1f6feb")
    for q, style in ((50, "-"), (95, "--")):
        v = percentile(xs, q)
        if v is not None:
            ax.axvline(v, color="#cf222e", ls=style, lw=1, label=f"p{q} {v:.0f} ms" if v >= 10 else f"p{q} {v:.1f} ms")
    ax.set_title(f"{stage} (n={len(xs)})", fontsize=9)
    ax.set_xlabel("ms", fontsize=8)
    ax.set_ylabel("turns", fontsize=8)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # counts of turns: no half turns
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=7)


def save_latency_histograms(samples: Mapping[str, Sequence[float]], path: Path, title: str) -> Path:
    """One histogram per stage (milliseconds per turn); NaNs (a stage a turn did not have) are left out."""
    stages = finite_samples(samples)
    if not stages:
        raise LatencyChartError("latency chart: no stage has a measured turn")
    import matplotlib  # heavy, optional: only when a chart is asked for

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # heavy, optional: same

    cols = min(3, len(stages))
    rows = math.ceil(len(stages) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 2.8 * rows), squeeze=False)
    flat = [ax for row in axes for ax in row]
    for ax, (stage, xs) in zip(flat, stages.items()):
        _panel(ax, stage, xs)
    for ax in flat[len(stages):]:
        ax.set_visible(False)
    fig.suptitle(title, fontsize=10)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
