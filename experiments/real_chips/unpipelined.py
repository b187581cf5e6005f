"""The Triton kernel's loop without software pipelining: measured (compiled with one K/V stage) and modelled.

Usage: python experiments/real_chips/unpipelined.py [--table validation/floor_stages1_h200_2026_11/floor.csv]
       [--campaign validation/gpu_h200_2026_11/attention.csv] [--max-rows N] [--out DIR]

Triton compiles VSA's key loop without software pipelining whatever its stage count (``kernels/triton.yaml``
``skip_loop_pipelined``). The table times FA2's and VFA's loops compiled so (``--configs`` with one stage, the FA3-paper
regime's shapes, K/V read by many CTAs: from the L2). Per row (fp16 and fp8; bf16 is fp16's loop) it gives:

- ``model_error``: the model's ``triton`` kernel with its loop in program order (``loop_pipelined: false``, the
  ``in_order_core`` VSA's loop runs on) against the measured one-stage time;
- ``vsa_over_vfa_s1``: VSA's attention kernel as the campaign measured it on the same shape over VFA's one-stage loop
  (what the block test adds to a loop that is not pipelined), for the ``triton_vfa_attn`` rows.

Writes DIR/unpipelined.csv and .md (default DIR: experiments/real_chips/out); about half a minute on 2 cores.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

from vfasim.kernel import load_kernel
from vfasim.report.tables import write_table
from vfasim.validate import predict, table_row

HERE = Path(__file__).resolve().parent
TABLE = HERE.parents[1] / "validation" / "floor_stages1_h200_2026_11" / "floor.csv"
CAMPAIGN = HERE.parents[1] / "validation" / "gpu_h200_2026_11" / "attention.csv"
KERNELS = ("triton_fa2", "triton_vfa_attn")
COLUMNS = ("kernel", "dtype", "head_dim", "causal", "seq_len", "measured_us", "model_us", "model_error",
           "vsa_over_vfa_s1")
SHAPE = ("dtype", "head_dim", "causal", "seq_len", "batch", "heads")


def compare(table: Path = TABLE, campaign: Path = CAMPAIGN, max_rows: int | None = None) -> list[dict]:
    in_order = load_kernel("triton").model_copy(update={"loop_pipelined": False})
    with open(campaign, newline="") as f:
        vsa = {tuple(r[k] for k in SHAPE): float(r["value"]) for r in csv.DictReader(f)
               if r["kernel"] == "triton_vsa_attn" and r["mode"] == "prefill"}
    with open(table, newline="") as f:
        measured = [r for r in csv.DictReader(f) if r["kernel"] in KERNELS and r["dtype"] != "bf16"]
    rows = []
    for r in measured[:max_rows]:
        p = predict(table_row(table.parent.name + "/" + table.name, r), kernel=in_order)
        value, other = float(r["value"]), vsa.get(tuple(r[k] for k in SHAPE))
        rows.append({"kernel": r["kernel"], "dtype": r["dtype"], "head_dim": int(r["head_dim"]),
                     "causal": r["causal"], "seq_len": int(r["seq_len"]), "measured_us": value,
                     "model_us": round(p.predicted, 3), "model_error": round(p.predicted / value - 1, 4),
                     "vsa_over_vfa_s1": round(other / value, 3) if other and r["kernel"] == "triton_vfa_attn"
                     else ""})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", type=Path, default=TABLE, help="the one-stage floor table (floor.csv)")
    parser.add_argument("--campaign", type=Path, default=CAMPAIGN, help="the campaign holding VSA's rows")
    parser.add_argument("--max-rows", type=int, default=None, help="the table's first N rows of FA2 and VFA")
    parser.add_argument("--out", type=Path, default=HERE / "out")
    args = parser.parse_args(argv)
    rows = compare(args.table, args.campaign, args.max_rows)
    for path in write_table(rows, COLUMNS, args.out / "unpipelined"):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
