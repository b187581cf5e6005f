"""VFA's key-summary pre-pass launch, measured from one program to 32 an SM and modelled.

Usage: python experiments/real_chips/prepass.py [--table validation/prepass_h200_2026_11/prepass.csv] [--out DIR]
       python experiments/real_chips/prepass.py --rates

Reads the table ``harness.prepass`` writes (one K/V head of P key blocks: P programs of ``krepr_kernel``, each call
timed as the campaigns time one) and runs the model's pre-pass launch for each row on the table's chip with the
``triton`` kernel: VFA on P heads of one key block each (the same programs and elements as one head of P blocks, and an
attention launch of P small units instead of a long one), numerics off, the pre-pass launch's cycles
(``prepass_cycles``) at the config's clock. Writes DIR/prepass.csv and .md (default DIR: experiments/real_chips/out).

``--rates`` prints, for every pre-pass launch Nsight Compute counted (``validation/ncu_h100_2026_11``, an H100, the
caches flushed before it), the issue rate the kernel's ``prepass_rates`` take from it: warp instructions over the
cores and the part of the launch's duration the model prices at that rate, i.e. the duration less the matching rule's
``program_us`` and the blocks of the programs resident at the start (``programs_per_core`` a core) at the H100's HBM
bandwidth, times c/(c - 1) for c programs a core; beside it, the rate over the whole duration.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

from vfasim import run
from vfasim.formats import BITS, MATMUL_FORMATS, format_class
from vfasim.hw import load_hw
from vfasim.kernel import load_kernel
from vfasim.report.tables import write_table
from vfasim.validate import CHIPS, FORMATS

HERE = Path(__file__).resolve().parent
TABLE = HERE.parents[1] / "validation" / "prepass_h200_2026_11" / "prepass.csv"
CHIP = "H200"  # the campaign's GPU (prepass.yaml: NVIDIA H200)
COLUMNS = ("head_dim", "dtype", "block_k", "programs", "call_us", "model_us", "error")
NCU = HERE.parents[1] / "validation" / "ncu_h100_2026_11"
NCU_CHIP = "H100"  # where the pre-pass was counted (a CHIPS key)


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


def issue_rates(folder: Path = NCU) -> list[dict]:
    """A row per profiled pre-pass launch of ``folder``'s ncu tables: its rule's rate and the two derivations."""
    hw, kernel = load_hw(CHIPS[NCU_CHIP]), load_kernel("triton")
    chip, clock = hw.chip, hw.clock_ghz * 1e9
    out = []
    for name in ("ncu.csv", "ncu_krepr.csv"):
        with open(folder / name, newline="") as f:
            launches = [r for r in csv.DictReader(f) if r["kernel"] == "krepr_kernel" and r["launch"] == "profiled"]
        for r in launches:
            blocks, kv_heads, batch = (int(x) for x in r["grid"].strip("()").split(","))
            head_dim, programs = int(r["head_dim"]), blocks * kv_heads * batch
            block_k = int(r["seq_len"]) // blocks
            dtype = MATMUL_FORMATS[FORMATS[r["dtype"]]]
            rate = kernel.prepass_rate(head_dim, format_class(dtype), block_k)
            seconds, inst = float(r["duration_ns"]) * 1e-9, int(r["inst_executed"])
            each = -(-programs // chip.cores)
            burst = (rate.resident(programs, chip.cores) - 1) * block_k * head_dim * BITS[dtype] / 8 / (
                chip.hbm.bandwidth_gb_per_s * 1e9)
            issue_bound = (seconds - rate.program_us * 1e-6 - burst) * each / (each - 1)
            out.append({"table": name, "case": r["case"], "dtype": r["dtype"], "head_dim": head_dim,
                        "block_k": block_k, "programs": programs, "whole_duration": round(inst / (
                            chip.cores * seconds * clock), 3), "issue_bound": round(inst / (
                            chip.cores * issue_bound * clock), 3), "rule": rate.instructions_per_cycle})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", type=Path, default=TABLE, help="harness.prepass's prepass.csv")
    parser.add_argument("--out", type=Path, default=HERE / "out", help="folder for prepass.csv and .md")
    parser.add_argument("--max-rows", type=int, default=None, help="the table's first N rows only (a smoke run)")
    parser.add_argument("--rates", action="store_true", help="print the pre-pass issue rates from the ncu counts")
    args = parser.parse_args(argv)
    if args.rates:
        for r in issue_rates():
            print(", ".join(f"{k} {v}" for k, v in r.items()))
        return 0
    rows = compare(args.table, max_rows=args.max_rows)
    write_table(rows, COLUMNS, args.out / "prepass")
    errors = [abs(r["error"]) for r in rows]
    print((args.out / "prepass.md").read_text())
    print(f"{len(rows)} calls: mean |error| {100 * sum(errors) / len(errors):.1f}%, worst "
          f"{100 * max(errors):.1f}%" if rows else "no call of the kernel's own key blocks")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
