"""A sweep's outputs: its table (one row per point), results.csv and .parquet, text, plots (PNG + SVG).

Plots, each against the swept value (x) with one line or panel per series (hw, algo and the
other swept values): latency, speedup against the series' first x value, and stacked
tensor/vector/exp shares. Marker shapes give the bottleneck's role; where it changes along a
line, the point is annotated with the new role. Figures are drawn without pyplot (no global
backend state): PNG through Agg, SVG through matplotlib's SVG writer.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import TypedDict

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.typing import ColorType

from vfasim.io.outputs import save_figure, write_with
from vfasim.runner.row import result_row

ROLE_MARKERS = {"tensor": "o", "vector": "s", "exp": "^", "vector+exp": "P", "memory": "D", "launch": "X"}
SHARE_COLORS = {"tensor": "#4c72b0", "vector": "#dd8452", "exp": "#55a868"}
#: every file ``write_sweep`` writes into its folder
SWEEP_FILES = ("results.csv", "results.parquet", *(f"{s}.{e}" for s in ("latency", "speedup", "shares")
                                                   for e in ("png", "svg")))
TABLE_FIGURES = ("latency_cycles", "speedup", "verdict", "rel_err_vs_fp64", "bound", "bottleneck",
                 "share_tensor", "share_vector", "share_exp")


def sweep_row(record: dict) -> dict:
    """One row: a point's inputs, then its result's row (``vfasim.runner.row``: the same as ``RunResult.to_row``)."""
    row = result_row(record["result"])
    return {**record["inputs"], **{k: v for k, v in row.items() if k not in record["inputs"]}, "key": record["key"]}


def sweep_frame(records: list[dict], series: list[str]) -> pd.DataFrame:
    """Rows in the given order plus ``speedup``: each series' first latency over the row's."""
    frame = pd.DataFrame([sweep_row(r) for r in records])
    if frame.empty:
        return frame
    latency = frame["latency_cycles"]
    first = frame.groupby(series, sort=False, dropna=False)["latency_cycles"].transform("first") if series \
        else latency.iloc[0]
    return frame.assign(speedup=first / latency)


def format_sweep(frame: pd.DataFrame, inputs: list[str]) -> str:
    """The inputs and the headline figures of every point, one line each."""
    if frame.empty:
        return "(no finished points)"
    cols = [c for c in (*inputs, *TABLE_FIGURES) if c in frame]
    return frame[cols].to_string(index=False, float_format=lambda v: f"{v:.3g}")


def write_sweep(frame: pd.DataFrame, x: str, series: list[str], out: Path) -> list[Path]:
    """results.csv, results.parquet and the three plots in ``out``; returns the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    written = [write_with(out / "results.csv", lambda tmp: frame.to_csv(tmp, index=False)),
               write_with(out / "results.parquet", lambda tmp: _parquet_safe(frame).to_parquet(tmp, index=False))]
    written += plot_metric(frame, x, series, "latency_cycles", out / "latency", "latency (cycles)")
    written += plot_metric(frame, x, series, "speedup", out / "speedup", f"speedup vs first {x}")
    written += plot_shares(frame, x, series, out / "shares")
    if "verdict" in frame and frame["verdict"].isin(CHECKED).any():
        written += plot_pareto(frame, series + [x], out / "pareto")
    return written


def _parquet_safe(frame: pd.DataFrame) -> pd.DataFrame:
    """Columns mixing Python types (e.g. str and bool values of one axis) become text for Parquet."""
    mixed = [c for c in frame if frame[c].dtype == object and frame[c].dropna().map(type).nunique() > 1]
    return frame.astype({c: str for c in mixed})


def plot_metric(frame: pd.DataFrame, x: str, series: list[str], y: str, stem: Path, ylabel: str,
                reference: tuple[float, str] | None = None) -> list[Path]:
    """``y`` against ``x``, one line per series, bottleneck changes marked; PNG and SVG."""
    fig = Figure(figsize=(7, 4.5))
    ax = fig.subplots()
    positions, labels = _x_positions(frame[x])
    for name, group in _groups(frame, series):
        xs = [positions[v] for v in group[x]]
        line, = ax.plot(xs, group[y], label=name, lw=1.5)
        _mark_bottlenecks(ax, xs, list(group[y]), list(group["bound"]), line.get_color())
        _mark_verdicts(ax, xs, list(group[y]), list(group.get("verdict", [])))
    if reference is not None:
        ax.axhline(reference[0], color="grey", ls="--", lw=1)
        ax.annotate(reference[1], (0.01, reference[0]), xycoords=("axes fraction", "data"), va="bottom",
                    fontsize=8, color="grey")
    _x_scale(ax, frame[x], positions, labels)
    ax.set(xlabel=x, ylabel=ylabel)
    ax.grid(alpha=0.3)
    ax.legend(handles=ax.get_legend_handles_labels()[0] + _role_handles(frame) + _verdict_handles(frame), fontsize=8)
    return _save(fig, stem)


CHECKED = ("ok", "degraded", "broken")  # verdicts of runs whose numerics were checked


class PointStyle(TypedDict, total=False):
    """Keyword arguments of one plotted point (matplotlib's short names)."""

    marker: str
    color: ColorType
    mfc: str
    ms: float
    ls: str


VERDICT_STYLE: dict[str, PointStyle] = {"broken": {"marker": "X", "color": "#c00000", "ms": 12, "ls": ""},
                 "degraded": {"marker": "o", "mfc": "none", "color": "#e08000", "ms": 14, "ls": ""}}


def _mark_verdicts(ax: Axes, xs: list, ys: list, verdicts: list[str]) -> None:
    """Broken points get a red cross, degraded ones an orange ring: never hidden, never plain."""
    for xv, yv, verdict in zip(xs, ys, verdicts):
        if verdict in VERDICT_STYLE:
            ax.plot([xv], [yv], zorder=5, **VERDICT_STYLE[verdict])


def _verdict_handles(frame: pd.DataFrame) -> list:
    present = set(frame.get("verdict", []))
    return [Line2D([], [], label=f"numerics {v}", **VERDICT_STYLE[v]) for v in VERDICT_STYLE if v in present]


def plot_pareto(frame: pd.DataFrame, series: list[str], stem: Path) -> list[Path]:
    """Latency against output error, one point per run; broken runs drawn in a band above the rest.

    Error is the relative error vs the float64 oracle (log scale). A broken run's error may be
    NaN (non-finite outputs): it is drawn at the top band with a red cross and named, never
    dropped. The dashed line joins the runs no other non-broken run beats on both axes. Runs
    whose numerics were not checked (``--numerics off``) have no error: the title counts them.
    """
    fig = Figure(figsize=(7.5, 5))
    ax = fig.subplots()
    unchecked = int((~frame["verdict"].isin(CHECKED)).sum())
    frame = frame[frame["verdict"].isin(CHECKED)]
    err = pd.to_numeric(frame["rel_err_finite_only"], errors="coerce").where(
        frame["verdict"] != "broken", other=pd.to_numeric(frame["rel_err_vs_fp64"], errors="coerce"))
    finite = err[frame["verdict"] != "broken"].dropna()
    top = (finite.max() if not finite.empty else 1.0) * 4
    for (name, group), color in zip(_groups(frame, [c for c in series if c in frame]), _colors()):
        for (_, row), e in zip(group.iterrows(), err.loc[group.index]):
            broken = row["verdict"] == "broken"
            y = top if broken or not math.isfinite(e) else e
            style: PointStyle = {**VERDICT_STYLE.get(row["verdict"], {"marker": "o", "ls": "", "ms": 7}),
                                 "color": "#c00000" if broken else color}
            ax.plot([row["latency_cycles"]], [y], **style)
            ax.annotate(name, (row["latency_cycles"], y), xytext=(4, 3), textcoords="offset points", fontsize=6,
                        color="#c00000" if broken else color)
    _frontier(ax, frame[frame["verdict"] != "broken"], err)
    ax.axhline(top / 2, color="#c00000", lw=0.8, ls=":")
    ax.annotate("broken (NaN/Inf or wrong rows) above this line", (0.01, top / 2), xycoords=("axes fraction", "data"),
                va="bottom", fontsize=8, color="#c00000")
    ax.set(xlabel="latency (cycles)", ylabel="relative error vs float64", yscale="log")
    if unchecked:
        ax.set_title(f"{unchecked} point(s) without checked numerics not shown", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(handles=_verdict_handles(frame), fontsize=8, loc="lower right")
    return _save(fig, stem)


def _frontier(ax: Axes, ok: pd.DataFrame, err: pd.Series) -> None:
    points = sorted((lat, e) for lat, e in zip(ok["latency_cycles"], err.loc[ok.index]) if math.isfinite(e))
    front, best = [], math.inf
    for lat, e in points:
        if e < best:
            front.append((lat, e))
            best = e
    if len(front) > 1:
        ax.plot(*zip(*front), color="black", ls="--", lw=1, label="Pareto front")


def _colors() -> Iterator[str]:
    from itertools import cycle
    from matplotlib import rcParams
    return cycle(rcParams["axes.prop_cycle"].by_key()["color"])


def plot_shares(frame: pd.DataFrame, x: str, series: list[str], stem: Path) -> list[Path]:
    """Stacked tensor/vector/exp shares per point, one panel per series; PNG and SVG."""
    groups = list(_groups(frame, series))
    cols = min(len(groups), 3)
    rows = math.ceil(len(groups) / cols)
    fig = Figure(figsize=(4.2 * cols, 3.4 * rows))
    axes = fig.subplots(rows, cols, sharey=True, squeeze=False)
    for ax, (name, group) in zip(axes.flat, groups):
        _share_bars(ax, group, x)
        ax.set_title(name, fontsize=9)
    for ax in list(axes.flat)[len(groups):]:
        ax.set_visible(False)
    axes.flat[0].legend(fontsize=7, loc="upper center", ncol=3)
    for ax in axes[:, 0]:  # an axis label, so tight_layout keeps it inside the figure
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


def _mark_bottlenecks(ax: Axes, xs: list, ys: list, roles: list[str], color: ColorType) -> None:
    for i, (xv, yv, role) in enumerate(zip(xs, ys, roles)):
        ax.plot([xv], [yv], ROLE_MARKERS.get(role, "x"), color=color, ms=7)
        if i and role != roles[i - 1]:
            ax.annotate(f"→ {role}-bound", (xv, yv), xytext=(6, 8), textcoords="offset points", fontsize=8,
                        color=color, arrowprops={"arrowstyle": "-", "color": color, "lw": 0.8})


def _role_handles(frame: pd.DataFrame) -> list:
    roles = [r for r in ROLE_MARKERS if r in set(frame["bound"])]
    return [Line2D([], [], color="black", marker=ROLE_MARKERS[r], ls="", label=f"{r}-bound") for r in roles]


def _x_positions(values: pd.Series) -> tuple[dict, list]:
    """Numeric x values plot at their value; anything else at 0, 1, 2, … in order of appearance."""
    uniq = list(dict.fromkeys(values))
    if all(_is_number(v) for v in uniq):
        return {v: v for v in uniq}, []
    return {v: i for i, v in enumerate(uniq)}, [_label(v) for v in uniq]


def _x_scale(ax: Axes, values: pd.Series, positions: dict, labels: list) -> None:
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
    fig.tight_layout()
    return save_figure(fig, [stem.with_suffix(".png"), stem.with_suffix(".svg")], dpi=120)
