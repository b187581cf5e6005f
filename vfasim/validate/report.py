"""``vfasim validate`` output: the MAPE table, the worst rows and why, the ratio checks, the scatter.

Consumes the groups and predictions of ``vfasim.validate.calibrate``; computes only summaries of
them (means, counts). Figures are drawn without pyplot and written atomically.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from vfasim.io.outputs import save_figure
from vfasim.validate import CHIPS, HELD_OUT_CAMPAIGNS

if TYPE_CHECKING:
    from vfasim.validate.calibrate import Group, Validation
    from vfasim.validate import Prediction, Row

CHIP_COLORS = {"H100-SXM": "#4c72b0", "H200": "#55a868", "B200": "#c44e52", "B300": "#8172b2",
               "Ascend-910B": "#dd8452"}
SCATTER_FILES = ("validate_scatter.png", "validate_scatter.svg")  # what --out holds
KERNEL_MARKERS = {"fa2": "o", "fa3": "s", "pto_manual_fa": "D", "pto_jit_flash": "^"}  # fp8 rows: "v"
OTHER_MARKERS = ("P", "*", "X", "h", "<", ">", "p", "d")  # filled markers (hollow ones show their edge) for the rest


def _mape(preds: list[Prediction]) -> float | None:
    return float(np.mean([abs(p.error) for p in preds])) if preds else None


def _bias(preds: list[Prediction]) -> float | None:
    """Mean signed error: > 0 when the model is too fast (TFLOP/s) or too slow (latency) on average."""
    return float(np.mean([p.error for p in preds])) if preds else None


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _spct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.0f}%"


def why(p: Prediction) -> str:
    """One line: model vs measured, and what the model says bounds the launch."""
    r = p.row
    unit = "TFLOP/s" if r.metric == "tflops" else "us"
    util = ", ".join(f"{k} {100 * v:.0f}%" for k, v in sorted(p.utilization.items(), key=lambda kv: -kv[1]))
    shape = f"{r.kernel} {r.dtype} d{r.head_dim} {'causal' if r.causal else 'non-causal'} seq {r.seq_len}"
    shape += f" q {r.seq_len_q} batch {r.batch} heads {r.heads}" + (" decode" if r.decode else "")
    return (f"{shape}: model {p.predicted:.1f} vs {r.value:.1f} {unit} ({100 * p.error:+.0f}%); "
            f"bound {p.bound} ({util}); {p.waves} wave(s)")


def to_doc(v: Validation, fit_seq_lens: Iterable[int]) -> dict:
    """The JSON document: errors are fractions, not percent."""
    groups, not_modelled = v.groups, v.not_modelled
    return {
        "groups": [{"chip": g.chip, "kernel": g.kernel, "dtype": g.dtype, "mode": g.mode, "regime": g.regime,
                    "style": g.style, "rows_fit": len(g.fit),
                    "rows_heldout": len(g.heldout), "mape_fit": _mape(g.fit), "mape_heldout": _mape(g.heldout),
                    "bias_heldout": _bias(g.heldout), "mape_spec": _mape(g.spec), "bias_spec": _bias(g.spec),
                    "worst": [{"row": _row_doc(p.row), "predicted": p.predicted, "error": p.error,
                               "bound": p.bound, "why": why(p)} for p in g.worst()]} for g in groups],
        "not_modelled": [{"chip": c, "kernel": k, "reason": why, "rows": n}
                         for (c, k, why), n in sorted(not_modelled.items())],
        "chips_without_rows": v.chips_without_rows,
        "ratios": v.ratios,
        "fit_seq_lens": list(fit_seq_lens),
        "tuning": v.tuning,
        "blind": _blind_doc(groups),
        "compared": [{"chip": c, "kernel": k, "dtype": f, "mode": m, "rows": n, "of": total}
                     for (c, k, f, m), (n, total) in sorted(v.compared.items())],
    }


def _blind_doc(groups: list) -> dict:
    """Both tiers over the compared rows of the blind campaigns (``validate.BLIND_PREFIX``)."""
    held = [p for g in groups for p in g.heldout if p.row.blind]  # a blind row is never a fit row
    spec = [p for g in groups for p in g.spec if p.row.blind]
    return {"rows": len(held), "mape_spec": _mape(spec), "bias_spec": _bias(spec), "mape_heldout": _mape(held),
            "bias_heldout": _bias(held)}


def _row_doc(r: Row) -> dict:
    return {k: getattr(r, k) for k in ("table", "chip", "kernel", "dtype", "head_dim", "causal", "seq_len",
                                       "seq_len_q", "batch", "heads", "kv_heads", "decode", "metric", "value")}


def format_report(doc: dict) -> str:
    lines = ["                                                                        | tier 1: spec only  | "
             "tier 2: calibrated",
             "chip         table kernel    format    mode     regime      described as | rows  MAPE   bias | "
             "fit rows  MAPE  held-out   MAPE   bias"]
    for g in doc["groups"]:
        lines.append(f"{g['chip']:<12} {g['kernel']:<15} {g['dtype']:<9} {g['mode']:<8} {g['regime']:<11} "
                     f"{g['style']:<12} | {g['rows_fit'] + g['rows_heldout']:>4} {_pct(g['mape_spec']):>6} "
                     f"{_spct(g['bias_spec']):>6} | {g['rows_fit']:>8} {_pct(g['mape_fit']):>6} "
                     f"{g['rows_heldout']:>9} {_pct(g['mape_heldout']):>6} {_spct(g['bias_heldout']):>6}")
    lines.append("")
    lines.append("error = (model - measured) / measured of the table's quantity (TFLOP/s or latency); MAPE = mean "
                 "|error|; bias = mean error")
    lines.append("tier 1 uses no fitted parameter (the configs' kernel_tuning removed but for measured figures; kernels' "
                 "measured per-CTA cycles stand in for a fitted overhead); tier 2 the configs as shipped")
    later = ", ".join(f"validation/{prefix}*" for prefix in HELD_OUT_CAMPAIGNS)
    lines.append(f"fit rows: seq_len in {doc['fit_seq_lens']} of verified tables, but for campaigns measured after the "
                 f"tuning was fitted ({later}, validation/blind_*) and kernels only predicted; every other row is "
                 "held out")
    lines.append(_compared_line(doc["compared"]))
    b = doc["blind"]
    lines.append(f"blind rows (validation/blind_*, measured after every description was final): {b['rows']} compared; "
                 f"tier 1 {_pct(b['mape_spec'])} (bias {_spct(b['bias_spec'])}), tier 2 {_pct(b['mape_heldout'])} "
                 f"(bias {_spct(b['bias_heldout'])}); every one held out")
    lines += [f"tuning in the configs: {chip} {style}: {vals}" for (chip, style), vals in _tuning_items(doc)]
    lines.append("")
    lines.append("not modelled: " + (", ".join(
        f"{n['chip']} {n['kernel']} ({n['rows']} rows: {n['reason']})" for n in doc["not_modelled"]) or "none"))
    lines.append("built-in chips with no published row: " + (", ".join(doc["chips_without_rows"]) or "none"))
    lines.append("")
    lines.append("worst rows and why:")
    for g in doc["groups"]:
        lines += [f"  {g['chip']} {w['why']}" for w in g["worst"]]
    lines.append("")
    lines += _ratio_lines(doc["ratios"])
    return "\n".join(lines)


def _compared_line(compared: list[dict]) -> str:
    n, total = sum(c["rows"] for c in compared), sum(c["of"] for c in compared)
    cut = [c for c in compared if c["rows"] < c["of"]]
    if not cut:
        return f"rows compared: all {total} modelled rows"
    return (f"rows compared: {n} of {total} modelled rows; {len(cut)} measurement groups on an evenly spread "
            f"subset ({min(c['rows'] for c in cut)}-{max(c['rows'] for c in cut)} of "
            f"{min(c['of'] for c in cut)}-{max(c['of'] for c in cut)} rows each; --rows N sets the cap, the "
            "JSON lists every group's count)")


def _tuning_items(doc: dict) -> Iterator[tuple[tuple[str, str], str]]:
    for key, vals in sorted(doc["tuning"].items()):
        chip, style = key.split("/")
        text = ", ".join(f"{k} {v:g}" for k, v in vals.items() if k != "at_bound" and v is not None)
        yield (chip, style), text + (f" (at bound: {', '.join(vals['at_bound'])})" if vals["at_bound"] else "")


def _ratio_lines(ratios: list[dict]) -> list[str]:
    if not ratios:
        return ["ratios: no pairs in the table"]
    out = ["ratio checks (model vs measured, worst per chip x kernel x ratio; target: within 5 points):"]
    worst: dict[tuple, dict] = {}
    for r in ratios:
        key = (r["chip"], r["kernel"], r["dtype"], r["ratio"])
        if key not in worst or r["points"] > worst[key]["points"]:
            worst[key] = r
    for (chip, kernel, dtype, name), r in sorted(worst.items()):
        mean = np.mean([x["points"] for x in ratios if (x["chip"], x["kernel"], x["dtype"], x["ratio"])
                        == (chip, kernel, dtype, name)])
        out.append(f"  {chip} {kernel} {dtype} {name}: mean {mean:.1f} points, worst {r['points']:.1f} "
                   f"(d{r['head_dim']} {'causal' if r['causal'] else 'non-causal'} seq {r['seq_len']}: "
                   f"model {r['model']:.3f} vs {r['measured']:.3f})")
    return out


def write_scatter(groups: list[Group], out: Path) -> list[Path]:
    """Predicted vs measured on log axes with y = x, one panel per quantity; PNG + SVG, atomically."""
    fig = scatter_figure([p for g in groups for p in g.fit + g.heldout])
    out.mkdir(parents=True, exist_ok=True)
    return save_figure(fig, [out / name for name in SCATTER_FILES], dpi=130)


def scatter_figure(preds: list[Prediction]) -> Figure:
    """One panel per quantity (TFLOP/s, latency), one legend for both outside them."""
    panels = [(m, [p for p in preds if p.row.metric == m]) for m in ("tflops", "latency_us")]
    panels = [(m, ps) for m, ps in panels if ps]
    fig = Figure(figsize=(5.2 * max(len(panels), 1) + 2.4, 5.2), layout="constrained")
    for i, (metric, ps) in enumerate(panels):
        _panel(fig.add_subplot(1, len(panels), i + 1), metric, ps)
    if preds:
        fig.legend(handles=_legend_handles(preds), loc="outside right upper", fontsize=7)
    return fig


def _panel(ax: Axes, metric: str, ps: list[Prediction]) -> None:
    """One quantity: colour = chip (by its config name), marker = kernel (fp8 rows "v"), filled = fit rows;
    the MAPE of the fit and held-out rows written on the panel, ticks as plain numbers."""
    meas = np.array([p.row.value for p in ps])
    pred = np.array([p.predicted for p in ps])
    lo, hi = min(meas.min(), pred.min()) / 1.3, max(meas.max(), pred.max()) * 1.3
    ax.plot([lo, hi], [lo, hi], color="black", lw=1)
    ax.fill_between([lo, hi], [lo * 0.9, hi * 0.9], [lo * 1.1, hi * 1.1], color="0.85")
    markers = _markers(ps)
    for p in ps:
        color = CHIP_COLORS.get(CHIPS.get(p.row.chip, p.row.chip), "0.3")
        ax.scatter(p.row.value, p.predicted, marker=markers[_marker_key(p)], s=24,
                   facecolors=color if p.row.fit else "none", edgecolors=color, linewidths=1.1)
    fit, held = [p for p in ps if p.row.fit], [p for p in ps if not p.row.fit]
    ax.text(0.03, 0.97, "\n".join(f"MAPE {_pct(_mape(rows))} on {len(rows)} {what}" for rows, what in
                                  ((fit, "fit rows"), (held, "held-out rows")) if rows),
            transform=ax.transAxes, va="top", fontsize=8, bbox={"facecolor": "white", "edgecolor": "0.7"})
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi))  # the scale first: it resets the ticks
    for axis in (ax.xaxis, ax.yaxis):  # 1-2-5 ticks as plain numbers: no "3×10²4×10²" collisions
        axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        axis.set_minor_formatter(NullFormatter())
    unit = "forward TFLOP/s" if metric == "tflops" else "latency (us)"
    ax.set_xlabel(f"measured {unit}")
    ax.set_ylabel(f"model {unit}")
    ax.set_title(unit, fontsize=10)


def _marker_key(p: Prediction) -> str:
    return "fp8" if p.row.dtype.startswith("fp8") else p.row.kernel


def _markers(ps: Iterable[Prediction]) -> dict[str, str]:
    """Marker per kernel (fp8 rows of any kernel "v"): the fixed ones, then the rest in name order."""
    keys = sorted({_marker_key(p) for p in ps})
    rest = iter(OTHER_MARKERS * 4)
    return {k: "v" if k == "fp8" else KERNEL_MARKERS.get(k) or next(rest) for k in keys}


def _legend_handles(ps: list[Prediction]) -> list[Artist]:
    """Chips by colour, kernels by marker, fit rows filled: one legend for every panel."""
    chips = sorted({CHIPS.get(p.row.chip, p.row.chip) for p in ps})
    handles: list[Artist] = [Line2D([], [], color="black", lw=1, label="y = x"), Patch(color="0.85", label="±10%")]
    handles += [Line2D([], [], ls="", marker="o", color=CHIP_COLORS.get(c, "0.3"), label=c) for c in chips]
    handles += [Line2D([], [], ls="", marker=m, color="black", mfc="none", label="fp8 (any kernel)" if k == "fp8" else k)
                for k, m in _markers(ps).items()]
    return handles + [Line2D([], [], ls="", marker="o", color="0.4", label="filled: fit rows"),
                      Line2D([], [], ls="", marker="o", color="0.4", mfc="none", label="hollow: held out")]
