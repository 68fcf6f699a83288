"""A run's plots, drawn by matplotlib and written as PNG and SVG each. matplotlib is the
operator's (the `fleet` extra), never a device's: this module is imported only by host-side
commands, and `require()` lets them refuse before a run rather than after it."""

from __future__ import annotations

from pathlib import Path

from edgegossip.errors import UsageError

FORMATS = ("png", "svg")
MISSING = "plots need matplotlib, which is the operator's extra: pip install 'edgegossip[fleet]'"


def require() -> None:
    """One line, before any work, when matplotlib is not installed."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError(MISSING) from None


def _figure(title: str, xlabel: str, ylabel: str):
    # a Figure of its own, not pyplot: no global state, no display, nothing left open
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.5, 4.2), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    return fig, ax


def _save(fig, stem: Path) -> list[str]:
    paths = []
    for fmt in FORMATS:
        path = stem.with_suffix(f".{fmt}")
        fig.savefig(path, format=fmt, metadata={"Date": None} if fmt == "svg" else None)
        paths.append(str(path))
    return paths


def lines(
    stem: Path,
    series: dict[str, list[tuple[float, float]]],
    xlabel: str,
    ylabel: str,
    title: str,
    marks: dict[str, tuple[float, float]] | None = None,
) -> list[str]:
    """One line per series (sorted by x), and a marker per entry of `marks`; the legend sits
    outside the axes so it never covers a line."""
    fig, ax = _figure(title, xlabel, ylabel)
    for name, pts in series.items():
        if pts:
            xs, ys = zip(*sorted(pts))
            ax.plot(xs, ys, linewidth=1.4, label=name)
    for name, (x, y) in (marks or {}).items():
        ax.plot([x], [y], marker="*", markersize=12, linestyle="none", color="black", label=name)
    if not any(series.values()) and not marks:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
    elif ax.get_legend_handles_labels()[0]:
        fig.legend(loc="outside right upper", fontsize="small")
    return _save(fig, stem)


def bars(stem: Path, values: dict[str, float], xlabel: str, ylabel: str, title: str) -> list[str]:
    fig, ax = _figure(title, xlabel, ylabel)
    if values:
        names = list(values)
        ax.bar(names, [values[n] for n in names], color="#4c72b0")
        ax.tick_params(axis="x", labelrotation=45 if len(names) > 6 else 0)
    else:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
    return _save(fig, stem)
