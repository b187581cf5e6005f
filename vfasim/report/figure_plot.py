"""Drawing the latency-ratio figure (consumes a ``vfasim.figure.LatencyRatio``).

The figure has to tell the truth by itself: bars stack busy time (their height is
a latency only if nothing overlaps) and the overlapped latency is a separate
marker; every bar carries its vector share; the six bars the paper quotes carry
the paper's value, hatched when outside tolerance; a panel shows the bars the
quoted shares imply, one the exp-scale curve, one the claims with their verdicts.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from vfasim.figure.claims import PRIMARY
from vfasim.figure.params import describe
from vfasim.io.outputs import save_figure

if TYPE_CHECKING:
    from vfasim.figure import LatencyRatio

COLORS = {"tensor": "#4c72b0", "vector": "#dd8452", "exp": "#55a868"}
CROWDED = 14  # more bars than this: upright one-line labels
YLABEL = "stacked busy time (= latency only if nothing overlaps)\nFA tensor on C16V32 = 1"
SHORT_CLASS = {"impossible in any fixed-schedule model": "impossible (any model)",
               "impossible with plausible costs": "impossible (plausible costs)",
               "met only under another reading": "met under another reading",
               "not classified (no search)": "not classified (no search)", "": ""}


def plot_latency_ratio(result: LatencyRatio, out: Path, stem: str = "latency_ratio") -> list[Path]:
    """PNG + SVG of the four panels and the caption line."""
    fig = latency_ratio_figure(result)
    out.mkdir(parents=True, exist_ok=True)
    return save_figure(fig, [out / f"{stem}.{ext}" for ext in ("png", "svg")], dpi=110)


def latency_ratio_figure(result: LatencyRatio) -> Figure:
    """The four panels and the caption line."""
    fig = Figure(figsize=(15, 9.5))  # no pyplot: no global backend or state
    grid = fig.add_gridspec(2, 3, height_ratios=(1.25, 1), width_ratios=(2.2, 1, 1.2))
    bars = fig.add_subplot(grid[0, :2])
    implied = fig.add_subplot(grid[0, 2], sharey=bars)  # one quantity, one scale
    top = max(_bars(bars, result), _implied(implied, result))
    bars.set_ylim(0, top * 1.25)
    _curve(fig.add_subplot(grid[1, 0]), result)
    _claims(fig.add_subplot(grid[1, 1:]), result)
    fig.text(0.01, 0.005, caption(result), fontsize=7.5, va="bottom", wrap=True)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return fig


def caption(result: LatencyRatio) -> str:
    ratios = ", ".join(f"{r:.2f} at head dim {d}" for d, r in result.exp_over_tensor.items())
    return (f"Granularity {result.granularity}, head dim {result.head_dim}; exp time / FP16 tensor time per tile: "
            f"{ratios}. Reading: {PRIMARY.latency} latency, speedups vs {PRIMARY.baseline}, P6 '{PRIMARY.quantifier}', "
            f"P7 {PRIMARY.exp} exp. Configs' parameters: {describe(result.params)}.")


def _cell(result: LatencyRatio, rows: list[dict]) -> list[dict]:
    return [r for r in rows if (r["granularity"], r["head_dim"]) == (result.granularity, result.head_dim)]


def _bars(ax: Axes, result: LatencyRatio) -> float:
    """The bars of ``result``'s cell; returns the tallest stack. Plain FA4 is drawn when the FA4 variants were
    asked for (``--fa4``: ``result.emulation`` is filled); they are measured at block granularity only."""
    with_fa4 = bool(result.emulation)
    bars = [r for r in _cell(result, result.rows) if r["algo"] != "fa4" or with_fa4]
    share_claims = {(c["_hw"], c["_algo"]): c for c in _cell(result, result.claims) if c["kind"] == "share"}
    x = range(len(bars))
    bottom = [0.0] * len(bars)
    for cls, color in COLORS.items():
        heights = [r[cls] for r in bars]
        hatches = [_hatch(share_claims.get((r["hw"], r["algo"]))) if cls == "vector" else "" for r in bars]
        ax.bar(x, heights, bottom=bottom, color=color, label=f"{cls} busy", width=0.7, hatch=None)
        for i, h in enumerate(hatches):
            if h:
                ax.bar(i, heights[i], bottom=bottom[i], width=0.7, fill=False, hatch=h, edgecolor="black")
        bottom = [b + h for b, h in zip(bottom, heights)]
    ax.scatter(x, [r["overlapped"] for r in bars], marker="D", s=18, color="black", zorder=3,
               label="overlapped latency (pipelined schedule)")
    crowded = len(bars) > CROWDED  # --fa4: labels upright, one line each, so neighbours do not overprint
    for i, r in enumerate(bars):
        text = f"{r['vector_share']:.0%}" if crowded else f"v {r['vector_share']:.0%}"
        claim = share_claims.get((r["hw"], r["algo"]))
        if claim:
            text += f"\np {claim['paper_value']:.0%}" + ("" if claim["met"] else "✗")
        ax.text(i, bottom[i] * 1.01, text, ha="center", va="bottom", fontsize=5.5 if crowded else 6.5)
    sep = " " if crowded else "\n"
    names = [f"{r['hw']}{sep}{r['algo']}" + (f" {r['exp_emulation']:.0%}" if "emul" in r["algo"] else "")
             for r in bars]
    ax.set_xticks(list(x), names, fontsize=6.5, rotation=90 if crowded else 35, ha="center" if crowded else "right")
    ax.set_ylabel(YLABEL, fontsize=8)
    no_fa4 = with_fa4 and not any(r["algo"].startswith("fa4") for r in bars)
    ax.set_title("Figure 1 rebuilt: busy time per pipeline class; hatched = vector share outside ±3 points"
                 + ("\n(the FA4 variants are measured at block granularity only)" if no_fa4 else ""), fontsize=9)
    ax.legend(fontsize=7, loc="upper right", ncol=2)
    return max(bottom)


def _hatch(claim: dict | None) -> str:
    return "///" if claim is not None and not claim["met"] else ""


def _implied(ax: Axes, result: LatencyRatio) -> float:
    """The bars the quoted shares imply, on the main bars' scale; returns the tallest stack."""
    rows = result.implied
    bottom = [0.0] * len(rows)
    for cls, color in COLORS.items():
        heights = [r[cls] for r in rows]
        ax.bar(range(len(rows)), heights, bottom=bottom, color=color, width=0.7)
        bottom = [b + h for b, h in zip(bottom, heights)]
    for i, r in enumerate(rows):
        text = f"{r['share']:.0%}\n×{r['stacked_vs_vfa_c16v32']:.2f}"
        if r["hw"] == "C4V16":
            text += f"\n∞ exp ×{r['stacked_unbounded_exp']:.2f}"
        ax.text(i, bottom[i] * 1.01, text, ha="center", va="bottom", fontsize=6.5)
    ax.set_xticks(range(len(rows)), [f"{r['hw']}\n{r['algo']}" for r in rows], fontsize=6.5, rotation=35, ha="right")
    ax.set_ylabel(YLABEL, fontsize=8)
    ax.set_title(f"What the quoted shares imply (block, head dim {result.head_dim}):\nV = s/(1-s)·(T+E); "
                 "×speedup vs VFA on C16V32, stacked", fontsize=8)
    return max(bottom)


def _curve(ax: Axes, result: LatencyRatio) -> None:
    rows = [r for r in result.curve if (r["granularity"], r["head_dim"]) == ("block", result.head_dim)]
    xs = [r["exp_scale"] if r["exp_scale"] != float("inf") else 256.0 for r in rows]
    styles = {"stacked_vs_vfa_c16v32": ("-", "stacked, vs VFA C16V32 (primary)"),
              "overlapped_vs_vfa_c16v32": ("--", "overlapped, vs VFA C16V32"),
              "stacked_vs_fa_c16v32": ("-.", "stacked, vs FA C16V32"),
              "overlapped_vs_fa_c16v32": (":", "overlapped, vs FA C16V32")}
    for key, (style, name) in styles.items():
        ax.plot(xs, [r[key] for r in rows], style, marker="o", markersize=3, label=name)
    sequence = [r for r in result.curve if (r["granularity"], r["head_dim"]) == ("sequence", result.head_dim)]
    if result.granularity == "sequence" and sequence:  # the sequence run is measured at unbounded exp only
        ax.plot([256.0] * len(sequence), [r["stacked_vs_vfa_c16v32"] for r in sequence], "*", ms=11, color="black",
                label="sequence run, stacked vs VFA C16V32 (∞ exp only)")
    ax.axhspan(6 * 0.85, 6 * 1.15, color="grey", alpha=0.2, label="P7: 6× ±15%")
    ax.axvline(2, color="grey", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xticks([1, 2, 4, 8, 16, 64, 256], ["1", "2\n(2xexp)", "4", "8", "16", "64", "∞"], fontsize=7)
    ax.set_xlabel("exp16 rate × (C4V16, block granularity)", fontsize=8)
    ax.set_ylabel("VFA speedup on C4V16", fontsize=8)
    ax.set_title("P7: the exp-scale curve (block granularity" + ("; the sequence run: ∞ exp only)"
                 if result.granularity == "sequence" else ")"), fontsize=9)
    ax.legend(fontsize=6.5)


def _claims(ax: Axes, result: LatencyRatio) -> None:
    rows = [c for c in result.claims if c["primary"]]
    ax.axis("off")
    cells = [[c["claim"], f"{c['paper_value']:.3g}", f"{c['model_value']:.3g}", "met" if c["met"] else "MISS",
              SHORT_CLASS[c["miss_class"]]] for c in rows]
    table = ax.table(cellText=cells, colLabels=["claim", "paper", "model", "", "why a miss"], loc="center",
                     colWidths=(0.09, 0.1, 0.1, 0.09, 0.45))
    table.auto_set_font_size(False)
    table.set_fontsize(7)
    met = sum(c["met"] for c in rows)
    ax.set_title(f"Claims at the primary reading: {met} of {len(rows)} met (details in claims.md)", fontsize=9)
