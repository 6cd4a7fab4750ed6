"""The charts `run.py eval --out` writes beside its results: the confusion matrix, accuracy per
bucket, and (with `--compare`) accuracy, unsafe answers and cost per policy side by side.

Each function draws from finished metrics only and refuses empty input with a `ChartError`
saying what was missing, rather than writing a blank picture."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Literal, Mapping

from .metrics import Metrics, RateKey, Summary

if TYPE_CHECKING:  # typing only: matplotlib is imported when a chart is drawn
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


class ChartError(ValueError):
    """Nothing to draw: the message names the chart and what it lacked."""


def chart_path(out: Path, kind: str) -> Path:
    """Beside the results file: `<stem>.confusion.png`, `<stem>_buckets.png`, `<stem>_compare.png`."""
    return out.with_name(f"{out.stem}.confusion.png" if kind == "confusion" else f"{out.stem}_{kind}.png")


def warn_if_empty(draw: Callable[[], Path]) -> str:
    """The chart's path; a chart with nothing to draw is a warning on stderr (the results are still
    written) and an empty path."""
    try:
        return str(draw())
    except ChartError as exc:
        print(f"warning: {exc}", file=sys.stderr)
        return ""


def _figure(width: float, height: float, panels: int = 1) -> tuple[Figure, list[Axes]]:
    import matplotlib  # heavy, optional: only when a chart is asked for

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # heavy, optional: same

    fig, axes = plt.subplots(1, panels, figsize=(width, height), squeeze=False)
    return fig, list(axes[0])


def _save(fig: Figure, path: Path) -> Path:
    import matplotlib.pyplot as plt  # loaded by _figure already; closing frees the figure

    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def save_confusion_png(metrics: Metrics, path: Path, title: str) -> Path:
    """Expected action (rows) against the action taken (columns), with the counts written in."""
    confusion = metrics.get("confusion")
    if not confusion or not sum(map(sum, confusion["rows_expected_cols_actual"])):
        raise ChartError("confusion chart: no scored turns to count")
    labels = confusion["labels"]
    m = confusion["rows_expected_cols_actual"]
    fig, [ax] = _figure(5, 4.4)
    ax.imshow(m, cmap="Blues")
    ax.set_xticks(range(len(labels)), labels)
    ax.set_yticks(range(len(labels)), labels)
    ax.set_xlabel("actual")
    ax.set_ylabel("expected")
    ax.set_title(title, fontsize=10)
    top = max(max(r) for r in m) or 1
    for i, row in enumerate(m):
        for j, v in enumerate(row):
            ax.text(j, i, str(v), ha="center", va="center", color="white" if v > top / 2 else "black")
    return _save(fig, path)


def _label_bars(ax: Axes, values: list[float | None], positions: list[float], fmt: str, *,
                horizontal: bool = False) -> None:
    for pos, v in zip(positions, values):
        text = "n/a" if v is None else format(v, fmt)
        if horizontal:
            ax.text((v or 0) + 0.01, pos, text, va="center", fontsize=7)
        else:
            ax.text(pos, v or 0, text, ha="center", va="bottom", fontsize=8)


def save_bucket_chart(buckets: Mapping[str, Summary], path: Path, title: str) -> Path:
    """Action accuracy and case pass rate per bucket, one row each (n = the bucket's cases)."""
    if not buckets:
        raise ChartError("bucket chart: no buckets (no case was scored)")
    names = sorted(buckets)
    fig, [ax] = _figure(7, 1.2 + 0.42 * len(names))
    height = 0.38
    series: list[tuple[RateKey, str, str]] = [("action_accuracy", "action accuracy (share of turns)", "#1f6feb"),
                                              ("case_pass_rate", "case pass (share of cases)", "#2da44e")]
    for k, (key, label, colour) in enumerate(series):
        ys = [i + (k - 0.5) * height for i in range(len(names))]
        values = [buckets[n][key] for n in names]
        ax.barh(ys, [v or 0.0 for v in values], height, label=label, color=colour)
        _label_bars(ax, values, ys, ".2f", horizontal=True)
    ax.set_yticks(range(len(names)), [f"{n} (n={buckets[n]['cases']})" for n in names], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 1.12)
    ax.set_title(f"accuracy per bucket: {title}", fontsize=10)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.04), ncol=2, frameon=False)
    return _save(fig, path)


CompareKey = Literal["action_accuracy", "unsafe_answers", "cost"]
_COMPARE: list[tuple[CompareKey, str, str]] = [  # metric, panel title, number format
    ("action_accuracy", "action accuracy (higher is better)", ".3f"),
    ("unsafe_answers", "unsafe answers (lower is better)", "d"),
    ("cost", "mean cost per turn (lower is better)", ".3f"),
]


def save_compare_chart(per_policy: Mapping[str, Metrics], path: Path, title: str) -> Path:
    """One panel per measure (accuracy, unsafe answers, cost), the policies side by side in each."""
    if not per_policy:
        raise ChartError("compare chart: no policies to compare")
    names = list(per_policy)
    fig, axes = _figure(4 + 1.6 * len(names), 3.6, len(_COMPARE))
    colours = ["#1f6feb", "#bf8700", "#8c959f", "#8250df", "#cf222e"]
    for ax, (key, label, fmt) in zip(axes, _COMPARE):
        values: list[float | None] = [per_policy[n][key] for n in names]
        xs = list(range(len(names)))
        ax.bar(xs, [v or 0 for v in values], 0.6, color=[colours[i % len(colours)] for i in xs])
        _label_bars(ax, values, [float(x) for x in xs], fmt)
        ax.set_xticks(xs, names, fontsize=8)
        ax.set_title(label, fontsize=9)
        ax.margins(y=0.15)
    fig.suptitle(title, fontsize=10)
    return _save(fig, path)
