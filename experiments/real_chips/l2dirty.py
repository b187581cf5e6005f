"""The L2's dirty lines after the campaigns' flush: what a read stream pays for them, from ``harness.l2dirty``.

Usage: python experiments/real_chips/l2dirty.py [--table validation/l2dirty_h200_2026_11/l2dirty.csv] [--out DIR]

The table times one read stream of R bytes after the flush (``dirty``), after reading the flush buffer instead
(``clean``) and after the flush and 10 ms idle (``dirty_idle``). The clean stream's time is a line in R from
``LINE_FROM`` up (its slope: the HBM's read bandwidth); the penalty is dirty less clean at each R. Where it no longer
grows (R at or above ``SATURATED``) it is the write-back of every dirty line, ``l2.dirty_bytes`` = penalty x
bandwidth (the median); below, it grows with R, ``l2.dirty_writeback_per_byte`` = penalty x bandwidth / R (the
median over ``RAMP``). Writes DIR/l2dirty.csv and .md (default DIR experiments/real_chips/out): a row per R.
"""

from __future__ import annotations

import argparse
import csv
import statistics
from pathlib import Path

import numpy as np

from vfasim.report.tables import write_table

HERE = Path(__file__).resolve().parent
TABLE = HERE.parents[1] / "validation" / "l2dirty_h200_2026_11" / "l2dirty.csv"
MIB = 1 << 20
LINE_FROM = 128  # MiB: the clean stream's time is a line from here up
SATURATED = 128  # MiB: the dirty lines are all written back by here (the penalty stops growing)
RAMP = (16, 64)  # MiB: the penalty still grows with R here and is well above the timings' spread
COLUMNS = ("read_mib", "clean_us", "dirty_us", "dirty_idle_us", "penalty_us", "written_back_mb")


def derive(table: Path) -> tuple[list[dict], dict[str, float]]:
    """A row per read size and the derived figures: bandwidth (GB/s), the clean line's intercept (us), dirty bytes
    and write-back bytes per byte read."""
    with open(table, newline="") as f:
        t = {(r["prelude"], int(r["read_mb"])): float(r["median_us"]) for r in csv.DictReader(f)}
    sizes = sorted({mb for _, mb in t})
    line = [mb for mb in sizes if mb >= LINE_FROM]
    slope, intercept = np.polyfit([mb * MIB for mb in line], [t[("clean", mb)] for mb in line], 1)
    bw = 1e-3 / slope  # bytes per us -> GB/s
    rows = []
    for mb in sizes:
        penalty = t[("dirty", mb)] - t[("clean", mb)]
        rows.append({"read_mib": mb, "clean_us": t[("clean", mb)], "dirty_us": t[("dirty", mb)],
                     "dirty_idle_us": t[("dirty_idle", mb)], "penalty_us": round(penalty, 3),
                     "written_back_mb": round(penalty * bw * 1e3 / 1e6, 2)})
    dirty = statistics.median(r["written_back_mb"] * 1e6 for r in rows if r["read_mib"] >= SATURATED)
    per_byte = statistics.median(r["written_back_mb"] * 1e6 / (r["read_mib"] * MIB) for r in rows
                                 if RAMP[0] <= r["read_mib"] <= RAMP[1])
    return rows, {"bandwidth_gb_per_s": bw, "intercept_us": float(intercept), "dirty_bytes": dirty,
                  "dirty_writeback_per_byte": per_byte}


def main(argv: list[str] | None = None) -> dict[str, float]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--table", default=str(TABLE))
    ap.add_argument("--out", default=str(HERE / "out"))
    a = ap.parse_args(argv)
    rows, fig = derive(Path(a.table))
    write_table(rows, COLUMNS, Path(a.out) / "l2dirty")
    print(f"clean read: {fig['intercept_us']:.2f} us + R at {fig['bandwidth_gb_per_s']:,.0f} GB/s (from {LINE_FROM} MiB)")
    print(f"l2.dirty_bytes {fig['dirty_bytes']:,.0f} (median written back from {SATURATED} MiB); "
          f"l2.dirty_writeback_per_byte {fig['dirty_writeback_per_byte']:.3f} (median over {RAMP[0]}-{RAMP[1]} MiB)")
    return fig


if __name__ == "__main__":
    main()
