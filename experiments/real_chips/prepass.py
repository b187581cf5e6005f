"""VFA's key-summary pre-pass launch, measured from one program to 32 an SM and modelled.

Usage: python experiments/real_chips/prepass.py [--table validation/prepass_h200_2026_11/prepass.csv] [--out DIR]

Reads the table ``harness.prepass`` writes (one K/V head of P key blocks: P programs of ``krepr_kernel``, each call
timed as the campaigns time one) and runs the model's pre-pass launch for each row on the table's chip with the
``triton`` kernel: VFA on P heads of one key block each (the same programs and elements as one head of P blocks, and an
attention launch of P small units instead of a long one), numerics off, the pre-pass launch's cycles
(``prepass_cycles``) at the config's clock. Writes DIR/prepass.csv and .md (default DIR: experiments/real_chips/out).
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

from vfasim import run
from vfasim.hw import load_hw
from vfasim.report.tables import write_table
from vfasim.validate import CHIPS, FORMATS

HERE = Path(__file__).resolve().parent
TABLE = HERE.parents[1] / "validation" / "prepass_h200_2026_11" / "prepass.csv"
CHIP = "H200"  # the campaign's GPU (prepass.yaml: NVIDIA H200)
COLUMNS = ("head_dim", "dtype", "block_k", "programs", "call_us", "model_us", "error")


def compare(table: Path, chip: str = CHIP, max_rows: int | None = None) -> list[dict]:
    """A row per measured call whose key blocks are the kernel's own (the model's pre-pass reads the tile's)."""
    hw = load_hw(CHIPS[chip])
    rows = []
    with open(table, newline="") as f:
        measured = list(csv.DictReader(f))
    for r in measured[:max_rows]:
        head_dim, block_k, programs = int(r["head_dim"]), int(r["block_n"]), int(r["programs"])
        res = run(hw, "vfa", kernel="triton", seq_len=block_k, head_dim=head_dim, heads=1, kv_heads=1, batch=programs,
                  causal=False, matmul_format=FORMATS[r["dtype"]], numerics_heads=0)
        if res.shape["block_k"] != block_k:
            continue  # another key-block size than the kernel's tile: not a pre-pass the model runs
        model_us = res.chip["prepass_cycles"] / (hw.clock_ghz * 1e3)
        rows.append({"head_dim": head_dim, "dtype": r["dtype"], "block_k": block_k, "programs": programs,
                     "call_us": float(r["call_us"]), "model_us": round(model_us, 3),
                     "error": round(model_us / float(r["call_us"]) - 1, 4)})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", type=Path, default=TABLE, help="harness.prepass's prepass.csv")
    parser.add_argument("--out", type=Path, default=HERE / "out", help="folder for prepass.csv and .md")
    parser.add_argument("--max-rows", type=int, default=None, help="the table's first N rows only (a smoke run)")
    args = parser.parse_args(argv)
    rows = compare(args.table, max_rows=args.max_rows)
    write_table(rows, COLUMNS, args.out / "prepass")
    errors = [abs(r["error"]) for r in rows]
    print((args.out / "prepass.md").read_text())
    print(f"{len(rows)} calls: mean |error| {100 * sum(errors) / len(errors):.1f}%, worst "
          f"{100 * max(errors):.1f}%" if rows else "no call of the kernel's own key blocks")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
