"""A sweep's outputs: results.csv and .parquet, and plots (PNG + SVG), drawn to read at a glance.

Plots, each against the swept value (x) with one line per series (hw, algo and the other swept
values): latency, ``latency_vs_first_x``, ``speedup_vs_<base>`` (the baseline algorithm at the
same point, where the sweep holds several algorithms) and stacked tensor/vector/exp shares; the
Pareto plot of latency against error. Every series has its own colour and marker (10 colours
times 7 markers: unique up to 70 series), the legend stands outside the data and is left out
when it would be empty, a series whose x does not apply to it (``n/a``: the option is not its
algorithm's) is a dashed line at its one value, and where the bound changes along a line the
point is annotated with the new role (each series' first role is in its legend entry, or the
title when every point has one bound). Figures
are drawn without pyplot (no global backend state): PNG through Agg, SVG through matplotlib's
SVG writer.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TypedDict

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.typing import ColorType

from vfasim.io.extras import has, hint
from vfasim.io.outputs import save_figure, write_with
from vfasim.sweep.table import FIRST_X, NA, speedup_column

COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
          "#17becf")
MARKERS = ("o", "s", "^", "D", "v", "P", "*")  # 7 and 10 are coprime: (colour, marker) repeats after 70 series
SHARE_COLORS = {"tensor": "#4c72b0", "vector": "#dd8452", "exp": "#55a868"}
BROKEN = "#c00000"
#: every file ``write_sweep`` may write into its folder
SWEEP_FILES = ("results.csv", "results.parquet", *(f"{s}.{e}" for s in ("latency", FIRST_X, "speedup_vs_baseline",
                                                                          "shares", "pareto") for e in ("png", "svg")))
CHECKED = ("ok", "degraded", "broken")  # verdicts of runs whose numerics were checked


class PointStyle(TypedDict, total=False):
    """Keyword arguments of one plotted point (matplotlib's short names)."""

    marker: str
    color: ColorType
    mfc: str
    ms: float
    ls: str
    mew: float


VERDICT_STYLE: dict[str, PointStyle] = {"broken": {"marker": "X", "color": BROKEN, "ms": 11, "ls": ""},
                                        "degraded": {"marker": "o", "mfc": "none", "color": "#e08000", "ms": 15,
                                                     "ls": ""}}


def write_sweep(frame: pd.DataFrame, x: str, series: list[str], out: Path) -> list[Path]:
    """results.csv, results.parquet and the plots in ``out``; returns the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    written = [write_with(out / "results.csv", lambda tmp: frame.to_csv(tmp, index=False))]
    if has("parquet"):
        written.append(write_with(out / "results.parquet", lambda tmp: _parquet(frame, tmp)))
    else:
        warnings.warn(f"results.parquet not written: {hint('parquet', 'Parquet output')}", stacklevel=2)
    written += plot_metric(frame, x, series, "latency_cycles", out / "latency", "latency (cycles)")
    first = _label(next((v for v in frame[x] if v != NA), "")) if not frame.empty else ""
    written += plot_metric(frame, x, series, FIRST_X, out / FIRST_X, f"latency / latency at {x}={first}",
                           reference=(1.0, f"{x}={first}"))
    speedup = speedup_column(frame)
    if speedup is not None:
        base = speedup.removeprefix("speedup_vs_")
        written += plot_metric(frame[frame["algo"] != base], x, series, speedup, out / "speedup_vs_baseline",
                               f"speedup vs {base} at the same point (×)", reference=(1.0, f"{base} = 1"))
    written += plot_shares(frame, x, series, out / "shares")
    if "verdict" in frame and frame["verdict"].isin(CHECKED).any():
        written += plot_pareto(frame, series + [x], out / "pareto")
    return written


def _parquet(frame: pd.DataFrame, tmp: Path) -> None:
    """Parquet through pyarrow (the ``parquet`` extra); columns mixing Python types become text."""
    mixed = [c for c in frame if frame[c].dtype == object and frame[c].dropna().map(type).nunique() > 1]
    frame.astype({c: str for c in mixed}).to_parquet(tmp, index=False)


def series_styles(names: list[str]) -> dict[str, tuple[str, str]]:
    """Series name -> (colour, marker), distinct for the first 70 series."""
    return {n: (COLORS[i % len(COLORS)], MARKERS[i % len(MARKERS)]) for i, n in enumerate(names)}


def plot_metric(frame: pd.DataFrame, x: str, series: list[str], y: str, stem: Path, ylabel: str,
                reference: tuple[float, str] | None = None) -> list[Path]:
    """``y`` against ``x``, one line per series, bound changes marked; PNG and SVG."""
    return _save(metric_figure(frame, x, series, y, ylabel, reference), stem)


def metric_figure(frame: pd.DataFrame, x: str, series: list[str], y: str, ylabel: str,
                  reference: tuple[float, str] | None = None) -> Figure:
    """The figure of ``plot_metric``."""
    fig = Figure(figsize=(7.5, 4.8), layout="constrained")
    ax = fig.subplots()
    positions, labels = _x_positions(frame.loc[frame[x] != NA, x])
    groups = list(_groups(frame, series))
    styles = series_styles([name for name, _ in groups])
    one_bound = frame["bound"].nunique() == 1  # said once in the title, not in every legend entry
    for name, group in groups:
        color, marker = styles[name]
        label = name if one_bound else f"{name} [{group['bound'].iloc[0]}-bound]"
        if (group[x] == NA).all():  # x is an option this series' algorithm does not take: one run
            ax.axhline(group[y].iloc[0], color=color, ls="--", lw=1.2, label=f"{label} ({x} n/a)")
            continue
        group = group[group[x] != NA]
        xs, ys = [positions[v] for v in group[x]], list(group[y])
        ax.plot(xs, ys, color=color, marker=marker, mfc="none", ms=7, lw=1.5, label=label)
        _mark_bound_changes(ax, xs, ys, list(group["bound"]), color)
        _mark_verdicts(ax, xs, ys, list(group.get("verdict", [])))
    if reference is not None:
        ax.axhline(reference[0], color="grey", ls=":", lw=1)
        ax.annotate(reference[1], (0.01, reference[0]), xycoords=("axes fraction", "data"), va="bottom",
                    fontsize=8, color="grey")
    if positions:
        _x_scale(ax, positions, labels)
    ax.set(xlabel=x, ylabel=ylabel)
    if one_bound and not frame.empty:
        ax.set_title(f"every point {frame['bound'].iloc[0]}-bound", fontsize=9)
    ax.grid(alpha=0.3)
    _legend(fig, ax.get_legend_handles_labels()[0] + _verdict_handles(frame))
    return fig


LEGEND_ROWS = 22  # entries per legend column
CHAR_INCHES = 0.058  # width of a legend character at 7.5 pt


def _legend(fig: Figure, handles: list) -> None:
    """The legend outside the axes, on the right, the figure widened to hold it; none when there is nothing
    to name."""
    if not handles:
        return
    cols = math.ceil(len(handles) / LEGEND_ROWS)
    width = cols * (0.6 + CHAR_INCHES * max(len(h.get_label()) for h in handles))
    fig.set_size_inches(fig.get_figwidth() + width, fig.get_figheight())
    fig.legend(handles=handles, loc="outside right upper", fontsize=7.5, ncols=cols)


def _mark_verdicts(ax: Axes, xs: list, ys: list, verdicts: list[str]) -> None:
    """Broken points get a red cross, degraded ones an orange ring: never hidden, never plain."""
    for xv, yv, verdict in zip(xs, ys, verdicts):
        if verdict in VERDICT_STYLE:
            ax.plot([xv], [yv], zorder=5, **VERDICT_STYLE[verdict])


def _verdict_handles(frame: pd.DataFrame) -> list:
    present = set(frame.get("verdict", []))
    return [Line2D([], [], label=f"numerics {v}", **VERDICT_STYLE[v]) for v in VERDICT_STYLE if v in present]


def plot_pareto(frame: pd.DataFrame, series: list[str], stem: Path) -> list[Path]:
    """``pareto_figure`` as PNG and SVG."""
    return _save(pareto_figure(frame, series), stem)


def pareto_figure(frame: pd.DataFrame, series: list[str]) -> Figure:
    """Latency against output error, one point per run; broken runs in a band of their own above.

    Error is the relative error vs the float64 oracle (log scale when it spans a decade). Broken runs (their error may
    be NaN: non-finite outputs) sit in a band with no numeric scale, at their latency, in their
    series' colour and marker: never dropped, never at a made-up error. Degraded runs are ringed.
    Points at the same place are drawn hollow, so each marker shows, and the count is written
    beside them. The dashed line joins the runs no other non-broken run beats on both axes.
    Runs whose numerics were not checked (``--numerics off``) have no error: the title counts them.
    """
    unchecked = int((~frame["verdict"].isin(CHECKED)).sum())
    frame = frame[frame["verdict"].isin(CHECKED)]
    err = pd.to_numeric(frame["rel_err_finite_only"], errors="coerce")
    broken = (frame["verdict"] == "broken") | ~err.map(math.isfinite)
    fig = Figure(figsize=(6.5, 5.5), layout="constrained")
    band, ax = fig.subplots(2, 1, sharex=True, height_ratios=[1, 5]) if broken.any() else (None, fig.subplots())
    groups = list(_groups(frame, [c for c in series if c in frame]))
    styles = series_styles([name for name, _ in groups])
    for i, (name, group) in enumerate(groups):
        color, marker = styles[name]
        ok = group[~broken.loc[group.index]]
        ax.plot(ok["latency_cycles"], err.loc[ok.index], ls="", marker=marker, color=color, mfc="none", ms=8,
                mew=1.5, label=name)
        _mark_verdicts(ax, list(ok["latency_cycles"]), list(err.loc[ok.index]), list(ok["verdict"]))
        bad = group[broken.loc[group.index]]
        if band is not None and not bad.empty:  # spread over the band's height so coincident series both show
            band.plot(bad["latency_cycles"], [(i % 5 + 1) / 6] * len(bad), ls="", marker=marker, color=color,
                      mfc="none", ms=8, mew=1.5)
    _count_coincident(ax, frame[~broken], err)
    _frontier(ax, frame[~broken], err)
    if band is not None:
        band.set(ylim=(0, 1), yticks=[])
        band.set_ylabel("broken\n(NaN/Inf or\nwrong rows)", rotation=0, ha="right", va="center", fontsize=8,
                        color=BROKEN)
        band.grid(alpha=0.3, axis="x")
    finite = err[~broken]
    wide = not finite.empty and finite.min() > 0 and finite.max() / finite.min() >= 10
    ax.set(xlabel="latency (cycles)", ylabel="relative error vs float64", yscale="log" if wide else "linear")
    if unchecked:
        fig.suptitle(f"{unchecked} point(s) without checked numerics not shown", fontsize=9)
    ax.grid(alpha=0.3)
    _legend(fig, ax.get_legend_handles_labels()[0] + _verdict_handles(frame[frame["verdict"] == "degraded"]))
    return fig


def _count_coincident(ax: Axes, ok: pd.DataFrame, err: pd.Series) -> None:
    """Beside points drawn at the same place (same latency, error within 1%), how many runs are there."""
    spots: dict[tuple[float, float], list[float]] = {}
    for lat, e in zip(ok["latency_cycles"], err.loc[ok.index]):
        if e > 0:
            spots.setdefault((float(lat), round(math.log10(e), 2)), []).append(e)
    for (lat, _), errors in spots.items():
        if len(errors) > 1:
            ax.annotate(f"×{len(errors)}", (lat, errors[0]), xytext=(8, 4), textcoords="offset points", fontsize=8)


def _frontier(ax: Axes, ok: pd.DataFrame, err: pd.Series) -> None:
    points = sorted((lat, e) for lat, e in zip(ok["latency_cycles"], err.loc[ok.index]) if math.isfinite(e))
    front, best = [], math.inf
    for lat, e in points:
        if e < best:
            front.append((lat, e))
            best = e
    if len(front) > 1:
        ax.plot(*zip(*front), color="black", ls="--", lw=1, label="Pareto front", zorder=1)


def plot_shares(frame: pd.DataFrame, x: str, series: list[str], stem: Path) -> list[Path]:
    """Stacked tensor/vector/exp shares per point, one panel per series; PNG and SVG."""
    groups = list(_groups(frame, series))
    cols = min(len(groups), 3)
    rows = math.ceil(len(groups) / cols)
    fig = Figure(figsize=(4.2 * cols, 3.4 * rows + 0.4), layout="constrained")
    axes = fig.subplots(rows, cols, sharey=True, squeeze=False)
    for ax, (name, group) in zip(axes.flat, groups):
        _share_bars(ax, group, x)
        ax.set_title(name, fontsize=9)
    for ax in list(axes.flat)[len(groups):]:
        ax.set_visible(False)
    fig.legend(handles=axes.flat[0].get_legend_handles_labels()[0], loc="outside upper center", ncols=3, fontsize=8)
    for ax in axes[:, 0]:
        ax.set_ylabel("share of tensor + vector\n+ exp busy cycles")
    return _save(fig, stem)


def _share_bars(ax: Axes, group: pd.DataFrame, x: str) -> None:
    pos = range(len(group))
    bottom = [0.0] * len(group)
    for role, color in SHARE_COLORS.items():
        values = list(group.get(f"share_{role}", [0.0] * len(group)))
        ax.bar(pos, values, bottom=bottom, color=color, label=role, width=0.7)
        bottom = [b + v for b, v in zip(bottom, values)]
    roles = list(group["bound"])
    verdicts = list(group.get("verdict", [""] * len(group)))
    for i, role in enumerate(roles):
        ax.text(i, 1.01, role, ha="center", va="bottom", fontsize=7)
        if verdicts[i] in VERDICT_STYLE:
            ax.text(i, 1.12, verdicts[i], ha="center", va="bottom", fontsize=7, color=VERDICT_STYLE[verdicts[i]]["color"])
        if i and role != roles[i - 1]:
            ax.axvline(i - 0.5, color="black", ls="--", lw=1)
    ax.set_xticks(list(pos), [_label(v) for v in group[x]], fontsize=8)
    ax.set(xlabel=x, ylim=(0, 1.3))


def _groups(frame: pd.DataFrame, series: list[str]) -> Iterator[tuple[str, pd.DataFrame]]:
    if not series:
        yield "all", frame
        return
    for key, group in frame.groupby(series, sort=False, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        yield " ".join(_label(v) if c in ("hw", "algo") else f"{c}={_label(v)}" for c, v in zip(series, key)), group


def _mark_bound_changes(ax: Axes, xs: list, ys: list, roles: list[str], color: ColorType) -> None:
    for i in range(1, len(roles)):
        if roles[i] != roles[i - 1]:
            ax.annotate(f"→ {roles[i]}-bound", (xs[i], ys[i]), xytext=(6, 8), textcoords="offset points", fontsize=8,
                        color=color, arrowprops={"arrowstyle": "-", "color": color, "lw": 0.8})


def _x_positions(values: pd.Series) -> tuple[dict, list]:
    """Numeric x values plot at their value; anything else at 0, 1, 2, … in order of appearance."""
    uniq = list(dict.fromkeys(values))
    if all(_is_number(v) for v in uniq):
        return {v: v for v in uniq}, []
    return {v: i for i, v in enumerate(uniq)}, [_label(v) for v in uniq]


def _x_scale(ax: Axes, positions: dict, labels: list) -> None:
    if labels:
        ax.set_xticks(range(len(labels)), labels)
        return
    nums = sorted(positions.values())
    if nums[0] > 0 and nums[-1] / nums[0] >= 8:
        ax.set_xscale("log", base=2)
    ax.set_xticks(nums, [_label(v) for v in nums])
    ax.minorticks_off()


def _is_number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _label(v: object) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def _save(fig: Figure, stem: Path) -> list[Path]:
    return save_figure(fig, [stem.with_suffix(".png"), stem.with_suffix(".svg")], dpi=120)
