"""The roofline view of a chip run: achieved TFLOP/s against the kernel's intensity, under every ceiling.

x is FLOPs per HBM byte, y TFLOP/s, both log. The HBM roof is the port's bandwidth times x; the L2
port's roof is drawn at this kernel's ratio of L2-port to HBM bytes (so both meet the run's x where
their ceilings are). The compute ceilings (tensor, vector, exp, a shared issue stream) are flat, at
the FLOP/s the kernel would reach with that resource busy all the time (``vfasim.chip.roofline``).
The run is the point; the title names the bound and how close the run comes to it. Drawn without
pyplot, written atomically (PNG or SVG by the file's suffix).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from vfasim.io.outputs import save_figure

COLORS = {"tensor": "#4c72b0", "vector": "#dd8452", "exp": "#55a868", "vector+exp": "#8172b3", "hbm": "#c44e52",
          "l2": "#937860"}
PORT_NAMES = {"hbm": "HBM", "l2": "L2 port"}


def roofline_figure(line: dict, title: str) -> Figure:
    """``line`` is a chip run's ``chip["roofline"]``."""
    fig = Figure(figsize=(9, 5), layout="constrained")
    ax = fig.subplots()
    x0, y0 = line["intensity_flop_per_hbm_byte"], line["tflops"]
    xs = np.geomspace(x0 / 100, x0 * 100, 200)
    for name, ceiling in line["ceilings_tflops"].items():
        color, width = COLORS.get(name, "grey"), 2.5 if name == line["bound"] else 1.2
        if name in PORT_NAMES:  # a roof through (x0, ceiling): bandwidth times intensity through that port
            ax.plot(xs, ceiling * xs / x0, color=color, lw=width,
                    label=f"{PORT_NAMES[name]} {line['peak_tbps'][name]:.2f} TB/s: {ceiling:,.0f} TFLOP/s here")
        else:
            ax.axhline(ceiling, ls="--", color=color, lw=width, label=f"{name} ceiling {ceiling:,.0f} TFLOP/s")
    ax.plot([x0], [y0], "o", color="black", ms=9, zorder=5, label=f"this run: {y0:,.1f} TFLOP/s")
    ax.axvline(x0, color="black", lw=0.6, ls=":")
    ax.set(xscale="log", yscale="log", xlabel="intensity (FLOP per HBM byte)", ylabel="TFLOP/s",
           ylim=(y0 / 10, max(line["ceilings_tflops"].values(), default=y0) * 3))
    ax.set_title(f"{title}: {line['bound']}-bound, {100 * line['achieved_fraction']:.0f}% of its ceiling",
                 fontsize=10)
    ax.grid(alpha=0.3, which="both")
    fig.legend(loc="outside right upper", fontsize=8)
    return fig


def write_roofline(path: str | Path, line: dict, title: str) -> Path:
    """The roofline figure to ``path`` (PNG or SVG by its suffix), atomically."""
    return save_figure(roofline_figure(line, title), [Path(path)], dpi=120)[0]
