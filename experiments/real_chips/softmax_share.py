"""How much of the Triton FA2 kernel's time its softmax adds, and how much of that VFA removes: measured and modelled.

Usage: python experiments/real_chips/softmax_share.py [--table validation/floor_h200_2026_11/floor.csv] [--max-shapes N] [--out DIR]

Reads ``validation/floor_h100_2026_11/floor.csv``: per shape and format, ``triton_fa2``, ``triton_vfa_attn`` (VFA's
attention kernel alone) and ``triton_dots`` (the same FA2 loop with its softmax removed: P = scale·S, masked, cast),
timed back to back on an H100 (``--table``: the H200's, ``floor_h200_2026_11``). The model runs the same shapes on
the table's chip with the ``triton`` kernel: fa2, vfa
(its attention kernel, the pre-pass left out) and fa2 on a copy of the config whose softmax ops (``SOFTMAX``) are
fused away, which keeps what the no-softmax loop keeps (the MMAs, loads, scale, mask and cast of P). Per shape:
softmax share = (FA2 − no softmax) / FA2, and VFA recovers = (FA2 − VFA) / (FA2 − no softmax). Writes
DIR/softmax_share[_<chip>].csv and .md (default DIR: experiments/real_chips/out) and prints the medians per head dim and format.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import numpy as np

from vfasim import run
from vfasim.hw import load_hw
from vfasim.kernel import Kernel, load_kernel
from vfasim.report.tables import write_table
from vfasim.validate import CHIPS, FORMATS

HERE = Path(__file__).resolve().parent
TABLE = HERE.parents[1] / "validation" / "floor_h100_2026_11" / "floor.csv"
#: the ops the no-softmax loop leaves out (the harness's dots mode): row max, running max, the rescale factor,
#: subtract-and-exp, row sum, the l update and the O rescale
SOFTMAX = ("rowmax", "running_max", "rescale_factor", "sub", "exp", "rowsum", "accumulate_l", "rescale_o")
KEY = ("chip", "dtype", "head_dim", "causal", "seq_len", "batch", "heads")
COLUMNS = (*KEY, "fa2_us", "vfa_attn_us", "dots_us", "softmax_share", "vfa_recovers", "model_fa2_us",
           "model_vfa_attn_us", "model_dots_us", "model_softmax_share", "model_vfa_recovers")


def shapes(table: Path = TABLE) -> list[dict]:
    """The measured triples, one dict per (shape, format), in file order."""
    by: dict[tuple, dict] = {}
    with table.open() as f:
        for r in csv.DictReader(f):
            key = tuple(r[k] for k in KEY)
            by.setdefault(key, dict(zip(KEY, key)))[r["kernel"].removeprefix("triton_") + "_us"] = float(r["value"])
    return [s for s in by.values() if {"fa2_us", "vfa_attn_us", "dots_us"} <= set(s)]


def no_softmax_loop(kernel: Kernel) -> Kernel:
    """``kernel`` as the harness's dots mode runs it: the ``SOFTMAX`` ops folded away (free), and its score scale paid,
    since there P = scale * S is a multiply of its own, not the FFMA of a max subtraction that the kernel's own
    ``fused_ops`` fold the scale into; no tile's ``block_cycles``, measured with the softmax in the loop."""
    tiles = [t.model_copy(update={"block_cycles": {}}) for t in kernel.tiles]
    return kernel.model_copy(update={"fused_ops": list(SOFTMAX), "tiles": tiles})


def compare(s: dict) -> dict:
    hw = load_hw(CHIPS[s["chip"]])
    kw = dict(seq_len=int(s["seq_len"]), head_dim=int(s["head_dim"]), causal=s["causal"] == "true",
              heads=int(s["heads"]), batch=int(s["batch"]), kernel="triton", matmul_format=FORMATS[s["dtype"]],
              numerics_heads=0)
    fa2, vfa = run(hw, "fa2", **kw), run(hw, "vfa", **kw)
    dots = run(hw, "fa2", **(kw | {"kernel": no_softmax_loop(load_kernel("triton"))}))
    model = {"model_fa2_us": fa2.latency_us, "model_dots_us": dots.latency_us,
             "model_vfa_attn_us": float(vfa.chip["attention_call_us"])}  # type: ignore[arg-type]
    return {**s, **_ratios(s["fa2_us"], s["vfa_attn_us"], s["dots_us"], ""),
            **model, **_ratios(model["model_fa2_us"], model["model_vfa_attn_us"], model["model_dots_us"], "model_")}


def _ratios(fa2: float, vfa: float, dots: float, prefix: str) -> dict:
    return {f"{prefix}softmax_share": (fa2 - dots) / fa2,
            f"{prefix}vfa_recovers": (fa2 - vfa) / (fa2 - dots) if fa2 > dots else float("nan")}


def _name(stem: str, rows: list[dict]) -> str:
    """``stem`` for the H100's table, ``stem_<chip>`` for another chip's."""
    chip = CHIPS[rows[0]["chip"]] if rows else "H100-SXM"
    return stem if chip == "H100-SXM" else f"{stem}_{chip.lower()}"


def summary(rows: list[dict]) -> str:
    lines = ["head dim  format     shapes  softmax share (measured / model)  VFA recovers (measured / model)"]
    for d in sorted({r["head_dim"] for r in rows}, key=int):
        for dt in sorted({r["dtype"] for r in rows}):
            g = [r for r in rows if r["head_dim"] == d and r["dtype"] == dt]
            if g:
                med = {c: float(np.median([r[c] for r in g])) for c in
                       ("softmax_share", "model_softmax_share", "vfa_recovers", "model_vfa_recovers")}
                lines.append(f"{d:>8}  {dt:<9} {len(g):>6}  {med['softmax_share']:>15.3f} / {med['model_softmax_share']:.3f}"
                             f"  {med['vfa_recovers']:>15.3f} / {med['model_vfa_recovers']:.3f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--table", type=Path, default=TABLE, help="a floor table measured by the harness")
    p.add_argument("--max-shapes", type=int, default=None, help="compare at most N shapes (evenly spread)")
    p.add_argument("--out", type=Path, default=HERE / "out")
    args = p.parse_args(argv)
    rows = shapes(args.table)
    if args.max_shapes is not None and len(rows) > args.max_shapes:
        rows = [rows[i] for i in np.unique(np.linspace(0, len(rows) - 1, args.max_shapes).round().astype(int))]
    got = [compare(s) for s in rows]
    write_table([{c: r[c] for c in COLUMNS} for r in got], COLUMNS, args.out / _name("softmax_share", got))
    print(summary(got))
    return got


if __name__ == "__main__":
    main()
