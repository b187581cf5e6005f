"""What a key block of the Triton kernel costs each CTA, from the stamps of ``harness.dispatch``: the figures the
``triton`` kernel's ``block_cycles`` are read from, beside the shipped ones.

Usage: python experiments/real_chips/block_cycles.py [--tables A/programs.csv B/programs.csv ...] [--out DIR]

Every program of a stamped call wrote its SM cycles. A full launch's CTAs all walk a length's key blocks, so the
median CTA of each length is a point; the line through the two longest lengths of a (mode, format, head dim) gives
the cycles of one more key block (and the CTA's cost beside its blocks, its intercept). A causal launch's query
block ``pid_m`` walks ``(pid_m + 1) x block_q / block_k`` key blocks; the slope over its programs of the longer half
(those that start late enough to run beside few short ones) is its cost of a block. Tiles are the ``triton`` kernel's
own (``block_q``, ``block_k`` of the rule each run takes). Writes DIR/block_cycles.csv and .md (default DIR:
experiments/real_chips/out).
"""

from __future__ import annotations

import argparse
import csv
from collections import defaultdict
from pathlib import Path

import numpy as np

from vfasim.kernel import load_kernel
from vfasim.report.tables import write_table

HERE = Path(__file__).resolve().parent
VALIDATION = HERE.parents[1] / "validation"
TABLES = (VALIDATION / "dispatch_vfa_h200_2026_11" / "programs.csv",
          VALIDATION / "dispatch_long_h200_2026_11" / "programs.csv")
COLUMNS = ("mode", "format", "head_dim", "mask", "lengths", "ctas", "block_cycles", "cta_cycles", "shipped_floor")


def _programs(paths: list[Path]) -> dict[tuple, list[tuple[int, int]]]:
    """(mode, format, head dim, causal, seq_len) -> [(pid_m, sm_cycles)] of every program."""
    out: dict[tuple, list[tuple[int, int]]] = defaultdict(list)
    for path in paths:
        with open(path, newline="") as f:
            for r in csv.DictReader(f):
                fmt = "fp8_e4m3" if "fp8_e4m3" in r["case"] else "bf16" if "bf16" in r["case"] else "fp16"
                key = (r["mode"], fmt, int(r["head_dim"]), r["causal"] == "true", int(r["seq_len"]))
                out[key].append((int(r["pid_m"]), int(r["sm_cycles"])))
    return out


def block_costs(paths: list[Path]) -> list[dict]:
    """A row per (mode, format, head dim, mask) with its cost of a key block (None where one length was stamped)."""
    kernel = load_kernel("triton")
    progs = _programs(paths)
    rows = []
    for mode, fmt, head_dim, causal in sorted({k[:4] for k in progs}):
        cls = "8bit" if fmt.startswith("fp8") else "16bit"
        rule = kernel.tile(head_dim, cls, causal, algo=mode)
        lengths = sorted(k[4] for k in progs if k[:4] == (mode, fmt, head_dim, causal))
        ctas = sum(len(progs[(mode, fmt, head_dim, causal, n)]) for n in lengths)
        if causal:  # the longest length's programs, by the key blocks each walks
            p = np.array(progs[(mode, fmt, head_dim, causal, lengths[-1])])
            blocks = (p[:, 0] + 1) * rule.block_q // rule.block_k
            late = blocks >= blocks.max() / 2
            slope, icpt = np.polyfit(blocks[late], p[late, 1], 1) if np.ptp(blocks[late]) else (None, None)
        elif len(lengths) >= 2:
            pts = [(n // rule.block_k, float(np.mean([c for _, c in progs[(mode, fmt, head_dim, causal, n)]])))
                   for n in lengths[-2:]]
            slope = (pts[1][1] - pts[0][1]) / (pts[1][0] - pts[0][0])
            icpt = pts[1][1] - slope * pts[1][0]
        else:
            slope = icpt = None
        rows.append({"mode": mode, "format": fmt, "head_dim": head_dim, "mask": "causal" if causal else "full",
                     "lengths": " ".join(map(str, lengths)), "ctas": ctas,
                     "block_cycles": None if slope is None else round(float(slope)),
                     "cta_cycles": None if icpt is None else round(float(icpt)),
                     "shipped_floor": rule.block_floor(1) or None})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", nargs="+", type=Path, default=list(TABLES), help="harness.dispatch programs.csv")
    parser.add_argument("--out", type=Path, default=HERE / "out", help="folder for block_cycles.csv and .md")
    args = parser.parse_args(argv)
    rows = [{k: "" if v is None else v for k, v in r.items()} for r in block_costs(args.tables)]  # none: empty
    write_table(rows, COLUMNS, args.out / "block_cycles")
    print((args.out / "block_cycles.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
