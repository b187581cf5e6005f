"""Speedup of FA (fa2) and VFA on C4V16 as its exp16 throughput goes ×0.5 … ×8 — the paper's what-if.

Usage: python experiments/exp_throughput/run.py [--seq-len 4096] [--out DIR] [--jobs N]
Speedup = latency of fa2 on C16V32 at the same size / latency of the point; its ceiling replaces
the point's latency by its busiest pipeline's busy cycles (per unit), a bound no schedule can beat.
Writes DIR/results.csv, DIR/results.parquet, DIR/speedup_vs_c16v32.png and the sweep's plots;
DIR/points.jsonl lets an interrupted run resume (default DIR: experiments/exp_throughput/out).
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import pandas as pd

from vfasim.hw import load_hw
from vfasim.sweep.plots import plot_metric, write_sweep
from vfasim.sweep import Axis, make_points, results_frame, run_sweep

HERE = Path(__file__).resolve().parent
HW, BASE_HW, BASE_ALGO = "C4V16", "C16V32", "fa2"
ALGOS = ("fa2", "vfa")
SCALES = (0.5, 1, 2, 4, 8)
SPEEDUP, CEILING = "speedup_vs_c16v32_fa2", "speedup_ceiling"
COLUMNS = ("hw", "algo", "exp_scale", "exp16_per_cycle", "latency_cycles", SPEEDUP, CEILING, "bound",
           "share_tensor", "share_vector", "share_exp")


def paper_claims() -> list[dict[str, str]]:
    with open(HERE / "paper_claims.csv", newline="") as f:
        return list(csv.DictReader(f))


def points(shape: dict) -> list:
    """C4V16 × {fa2, vfa} × exp scales, then the baseline: fa2 on C16V32 at ×1."""
    if load_hw(HW).rate_key("exp") != "float16":
        raise SystemExit(f"{HW} no longer prices exp at the exp16 rate; this study's premise is gone")
    return (make_points([HW], ALGOS, [Axis("exp_scale", SCALES)], shape)
            + make_points([BASE_HW], [BASE_ALGO], [Axis("exp_scale", (1,))], shape))


def study(shape: dict, out: Path, jobs: int | None = None, quiet: bool = True) -> pd.DataFrame:
    pts = points(shape)
    result = run_sweep(pts, out, jobs=jobs, progress=not quiet)
    frame = results_frame(result)
    base = frame.loc[(frame.hw == BASE_HW) & (frame.algo == BASE_ALGO), "latency_cycles"].iloc[0]
    exp16 = {p.key: _exp16_rate(p.hw_doc) for p in pts}
    busiest = frame[[c for c in frame if c.endswith("_utilization")]].max(axis=1) * frame["latency_cycles"]
    frame = frame.assign(**{SPEEDUP: base / frame["latency_cycles"], CEILING: base / busiest,
                            "exp16_per_cycle": frame.key.map(exp16)})
    write_sweep(frame, "exp_scale", ["hw", "algo"], out)
    what_if = frame[frame.hw == HW]
    plot_metric(what_if, "exp_scale", ["hw", "algo"], SPEEDUP, out / "speedup_vs_c16v32",
                f"speedup vs {BASE_ALGO} on {BASE_HW}", reference=(_claim_value(), "paper: up to ≈6× at ×2 exp16"))
    return frame


def _exp16_rate(hw_doc: dict) -> float:
    return sum(p["throughput"].get("float16", 0) * p["units"] for p in hw_doc["pipelines"].values()
               if p["role"] == "exp")


def _claim_value() -> float:
    return float(next(c["paper_value"] for c in paper_claims() if c["claim_id"] == "P7"))


def table(frame: pd.DataFrame) -> str:
    claim = frame[(frame.hw == HW) & (frame.algo == "vfa") & (frame.exp_scale == 2)][SPEEDUP].iloc[0]
    body = frame[list(COLUMNS)].to_string(index=False, float_format=lambda v: f"{v:.3g}")
    return f"{body}\n\nP7 (VFA paper Conclusion): C4V16 vfa at ×2 exp16 — paper ≈{_claim_value():g}×, ours {claim:.2f}×"


def main(argv: list[str] | None = None) -> pd.DataFrame:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seq-len", type=int, default=4096)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--block", type=int, default=128)
    p.add_argument("--jobs", type=int, default=None, help="local processes (default: CPU count)")
    p.add_argument("--out", type=Path, default=HERE / "out")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    shape = {"seq_len": args.seq_len, "head_dim": args.head_dim, "block_q": args.block, "block_k": args.block}
    frame = study(shape, args.out, args.jobs, quiet=args.quiet)
    print(table(frame))
    return frame


if __name__ == "__main__":
    main()
