"""A kernel's time split into a cost per key-block tile and a cost per CTA: measured and modelled.

Usage: python experiments/real_chips/unit_cost.py [--table validation/units_h200_2026_11/units.csv] [--out DIR]

Reads ``validation/units_h100_2026_11/units.csv``: the Triton FA2 kernel with the same number of query rows (1,056
blocks of 128) at K/V lengths 128–4096, so each CTA walks 1–64 key blocks, per head dim (64, 128, 256) and format
(fp16, fp8_e4m3), timed on an H100 (``--table``: the H200's, ``units_h200_2026_11``; SDPA's flash and cuDNN backends
in fp16, ``units_sdpa_h100_2026_11``; the Triton decode tile, one query per head, ``units_decode_h100_2026_11``;
SDPA's efficient backend, ``units_efficient_h100_2026_11``; FlexAttention, ``flex_units_h100_2026_11``).
The model runs the same shapes on the table's chip with the kernel
description that claims each table kernel (``triton``, ``fa2``, ``cudnn``) twice: as shipped, and with its fitted
per-CTA overhead set to 0 (``unit_overhead_cycles``; its tensor efficiency kept). A line
fitted to latency against key blocks per CTA, over the lengths from ``FROM_SEQ`` on, gives a slope (the cost of one
more key block in every CTA: waves x the time of a tile) and an intercept (the launch plus waves x the per-CTA
cost beside the tiles). The gap between the measured intercept and the model's without its fitted overhead, over
the waves, is what a CTA costs beyond the ops the model prices, in cycles of the config's clock (``cta_cycles``: the
tile rules' ``cta_cycles``, ``kernels/*.yaml``). Writes DIR/<table folder>.csv and .md (default DIR:
experiments/real_chips/out; the H100 Triton table's stem stays ``unit_cost``).
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import numpy as np

from vfasim import run
from vfasim.formats import MATMUL_FORMATS, format_class
from vfasim.hw import load_hw
from vfasim.report.tables import write_table
from vfasim.validate import CHIPS, FORMATS, kernel_for, with_tuning

HERE = Path(__file__).resolve().parent
TABLE = HERE.parents[1] / "validation" / "units_h100_2026_11" / "units.csv"
FROM_SEQ = 512  # the line is fitted from here on: shorter runs have too little work per CTA to be on it
COLUMNS = ("kernel", "head_dim", "dtype", "block_k", "slope_us", "model_slope_us", "model0_slope_us", "intercept_us",
           "model_intercept_us", "model0_intercept_us", "waves", "cta_cycles", "errors")


def measured(table: Path = TABLE) -> dict[tuple[str, int, str], list[dict]]:
    """Rows per (table kernel, head dim, format), by K/V length; a table is one mode (prefill or decode)."""
    out: dict[tuple[str, int, str], list[dict]] = {}
    with table.open() as f:
        rows = list(csv.DictReader(f))
    if len({r["mode"] for r in rows}) > 1:
        raise SystemExit(f"{table}: rows of more than one mode; a units table is prefill or decode")
    for r in rows:
        out.setdefault((r["kernel"], int(r["head_dim"]), r["dtype"]), []).append(r)
    return {k: sorted(v, key=lambda r: int(r["seq_len"])) for k, v in out.items()}


def line(tiles: np.ndarray, us: np.ndarray, seq: np.ndarray) -> tuple[float, float]:
    """(slope, intercept) of latency against key blocks per CTA, over the lengths from FROM_SEQ."""
    slope, intercept = np.polyfit(tiles[seq >= FROM_SEQ], us[seq >= FROM_SEQ], 1)
    return float(slope), float(intercept)


def compare(head_dim: int, dtype: str, rows: list[dict]) -> dict:
    hw, kernel = load_hw(CHIPS[rows[0]["chip"]]), kernel_for(rows[0]["kernel"])
    if kernel is None:
        raise SystemExit(f"{rows[0]['kernel']}: no kernel description claims it")
    shipped = hw.chip.kernel_tuning.get(kernel.name)  # type: ignore[union-attr]
    # without a per-CTA cost: a tuned kernel keeps its efficiency with no overhead; an untuned one (efficient) runs at
    # its MMA path's ceiling as it does anyway, its tiles' measured cycles taken away
    no_overhead = hw if shipped is None else with_tuning(hw, kernel.name, tensor_efficiency=shipped.tensor_efficiency,
                                                         unit_overhead_cycles=0)
    bare = kernel if shipped is not None else _without_cta_cycles(kernel)
    decode = rows[0]["mode"] == "decode"
    block_k = kernel.tile(head_dim, format_class(MATMUL_FORMATS[FORMATS[dtype]]), False, decode).block_k
    seq = np.array([int(r["seq_len"]) for r in rows])
    tiles, us = np.ceil(seq / block_k), np.array([float(r["value"]) for r in rows])  # a last block in part: a whole one
    model, waves = {}, set()
    for name, cfg, k in (("model", hw, kernel), ("model0", no_overhead, bare)):
        runs = [run(cfg, "fa2", seq_len=int(r["seq_len"]), head_dim=head_dim, heads=int(r["heads"]), causal=False,
                    kernel=k, matmul_format=FORMATS[dtype], numerics_heads=0, decode=decode,
                    queries=int(r["seq_len_q"]) if decode else 1) for r in rows]
        model[name] = np.array([res.latency_us for res in runs])
        waves |= {int(res.chip["waves"]) for res in runs}  # type: ignore[call-overload]
    if len(waves) != 1:
        raise SystemExit(f"head dim {head_dim} {dtype}: the rows run in {sorted(waves)} waves, not one count")
    (s, i), (ms, mi), (zs, zi) = line(tiles, us, seq), line(tiles, model["model"], seq), line(tiles, model["model0"], seq)
    errors = " ".join(f"{n}:{(m - x) / x:+.2f}" for n, m, x in zip(seq, model["model"], us))
    n = waves.pop()
    return {"kernel": rows[0]["kernel"], "head_dim": head_dim, "dtype": dtype, "block_k": block_k, "slope_us": s, "model_slope_us": ms,
            "model0_slope_us": zs, "intercept_us": i, "model_intercept_us": mi, "model0_intercept_us": zi,
            "waves": n, "cta_cycles": int(round((i - zi) / n * hw.clock_ghz * 1e3)), "errors": errors}


def _without_cta_cycles(kernel):
    """``kernel`` with no tile giving a measured per-CTA cost (prefill and decode; nor the bounds-checked variant's
    per-CTA and per-block figures)."""
    none = {"cta_cycles": None, "bounds_cta_cycles": None, "bounds_block_cycles": None}
    bare = [t.model_copy(update=none) for t in kernel.tiles]
    decode = kernel.decode and kernel.decode.model_copy(update={"tiles": [
        t.model_copy(update=none) for t in kernel.decode.tiles]})
    return kernel.model_copy(update={"tiles": bare, "decode": decode})


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--table", type=Path, default=TABLE, help="a units table measured by the harness")
    p.add_argument("--out", type=Path, default=HERE / "out")
    args = p.parse_args(argv)
    groups = measured(args.table)
    got = [compare(d, dt, rows) for (_, d, dt), rows in sorted(groups.items())]
    chip = CHIPS[next(iter(groups.values()))[0]["chip"]]
    stem = "unit_cost" if args.table == TABLE else \
        f"unit_cost_{chip.lower()}" if args.table.parent.name == "units_h200_2026_11" else args.table.parent.name + (
            "" if args.table.stem == "units" else "_" + args.table.stem.removeprefix("units_"))
    write_table([{c: r[c] for c in COLUMNS} for r in got], COLUMNS, args.out / stem)
    for r in got:
        print(f"{r['kernel']} d{r['head_dim']} {r['dtype']:<9} per key block (all CTAs): measured {r['slope_us']:.2f} us, model "
              f"{r['model_slope_us']:.2f} | intercept: measured {r['intercept_us']:.1f} us, model {r['model_intercept_us']:.1f} "
              f"(no fitted overhead {r['model0_intercept_us']:.1f}; a CTA's cycles beyond the model's ops "
              f"{r['cta_cycles']}, {r['waves']} waves) | model error by K/V length {r['errors']}")
    return got


if __name__ == "__main__":
    main()
