"""The matmul efficiency at which the model's own no-softmax loop runs as fast as the measured one.

The campaign's microbenchmark ``tl_dot_fa_loop_<format>_d<d>_tflops`` (``micro.csv``) times the Triton kernel's
loop with its softmax removed (P = scale·S cast to the input format). Its TFLOP/s over the datasheet peak is not the
efficiency of the matmuls alone: the loop also scales S, casts P and waits on its loads, and the model charges those
ops itself, so taking the loop's fraction of peak as the matmuls' efficiency counts them twice. This script runs the
model's same loop — the ``triton`` kernel on the chip, every softmax op but the scale and the cast fused away, no
per-unit overhead — at the microbenchmark's shape and bisects the tensor efficiency until the model's TFLOP/s equals
the measured one: the matmuls' efficiency with everything else priced as the model prices it in every run.

    python experiments/real_chips/loop_efficiency.py                       # H100 campaign, ~10 s
    python experiments/real_chips/loop_efficiency.py --chip H200 --micro validation/gpu_h200_2026_11/micro.csv
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # softmax_share.py, the no-softmax loop
from softmax_share import no_softmax_loop  # noqa: E402
from vfasim import run
from vfasim.formats import MATMUL_FORMATS, TABLE_NAMES
from vfasim.hw import load_hw
from vfasim.hw.chip import KernelTuning
from vfasim.hw.config import HardwareConfig
from vfasim.kernel import load_kernel
from vfasim.report.tables import write_table

HERE = Path(__file__).resolve().parent
MICRO = HERE.parents[1] / "validation" / "gpu_h100_2026_11" / "micro.csv"
METRIC = re.compile(r"tl_dot_fa_loop_(.+)_d(\d+)_tflops")
SHAPE = re.compile(r"seq (\d+), batch (\d+), heads (\d+)")
COLUMNS = ("chip", "metric", "format", "head_dim", "seq_len", "batch", "heads", "measured_tflops",
           "fraction_of_peak", "matmul_efficiency", "model_tflops")
TOLERANCE = 1e-4  # bisection stops when the bracket is this narrow


def loop_config(hw: HardwareConfig, efficiency: float) -> HardwareConfig:
    """``hw`` with the triton kernel's matmuls at ``efficiency``, no per-CTA cost (a fitted 0, which the tiles'
    measured ``cta_cycles`` do not replace: the efficiency was set so, before they were measured, and they were
    measured at it)."""
    if hw.chip is None:
        raise SystemExit(f"{hw.name} has no chip section")
    tuning = {**hw.chip.kernel_tuning, "triton": KernelTuning(tensor_efficiency=efficiency, unit_overhead_cycles=0)}
    return hw.model_copy(update={"chip": hw.chip.model_copy(update={"kernel_tuning": tuning})})


def model_tflops(hw: HardwareConfig, case: dict, efficiency: float) -> float:
    """The model's no-softmax loop (``softmax_share.no_softmax_loop``: its scale and cast kept, as in the harness's
    dots mode) at the case's shape, in TFLOP/s."""
    res = run(loop_config(hw, efficiency), "fa2", seq_len=case["seq_len"], head_dim=case["head_dim"],
              heads=case["heads"], batch=case["batch"], causal=False, kernel=no_softmax_loop(load_kernel("triton")),
              matmul_format=TABLE_NAMES[case["format"]], numerics_heads=0)
    return float(res.chip["tflops"])  # type: ignore[arg-type]


def solve(hw: HardwareConfig, case: dict) -> float:
    """The efficiency at which the model's loop reaches the case's measured TFLOP/s (upper end of the final bracket);
    a one-line error when even peak matmuls are too slow (the rest of the loop alone takes longer than measured)."""
    lo, hi = 0.0, 1.0
    if model_tflops(hw, case, hi) < case["measured_tflops"]:
        raise SystemExit(f"{case['metric']}: the model's loop is slower than measured even at peak matmul rate")
    while hi - lo > TOLERANCE:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if model_tflops(hw, case, mid) < case["measured_tflops"] else (lo, mid)
    return round(hi, 4)


def cases(micro: Path) -> list[dict]:
    """The no-softmax loop rows of a campaign's micro.csv, with the shape their notes give."""
    out = []
    with micro.open() as f:
        for r in csv.DictReader(f):
            m = METRIC.fullmatch(r["name"])
            if m:
                shape = SHAPE.search(r["notes"])
                if shape is None:
                    raise SystemExit(f"{micro}: {r['name']} gives no 'seq N, batch N, heads N' in its notes")
                seq, batch, heads = map(int, shape.groups())
                out.append({"metric": r["name"], "format": m.group(1), "head_dim": int(m.group(2)), "seq_len": seq,
                            "batch": batch, "heads": heads, "measured_tflops": float(r["value"])})
    return out


def datasheet_tflops(hw: HardwareConfig, case: dict) -> float:
    """The chip's dense matmul peak in the case's format: MACs per cycle x 2 x cores x clock."""
    rate = max(p.throughput.get(MATMUL_FORMATS[TABLE_NAMES[case["format"]]], 0.0) for p in hw.pipelines.values()
               if p.role == "tensor")
    cores = hw.chip.cores if hw.chip is not None else 1
    return rate * 2 * cores * hw.clock_ghz * 1e9 / 1e12


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--chip", default="H100-SXM", help="built-in chip the campaign ran on")
    p.add_argument("--micro", type=Path, default=MICRO, help="a campaign's micro.csv")
    p.add_argument("--metric", action="append", help="only these metrics (repeatable; default every loop row)")
    p.add_argument("--out", type=Path, default=HERE / "out")
    args = p.parse_args(argv)
    hw = load_hw(args.chip)
    rows = []
    for case in cases(args.micro):
        if args.metric and case["metric"] not in args.metric:
            continue
        eff = solve(hw, case)
        fraction = case["measured_tflops"] / datasheet_tflops(hw, case)
        rows.append({"chip": args.chip, **case, "fraction_of_peak": fraction, "matmul_efficiency": eff,
                     "model_tflops": model_tflops(hw, case, eff)})
        print(f"{case['metric']}: measured {case['measured_tflops']:.1f} TFLOP/s, {rows[-1]['fraction_of_peak']:.3f} "
              f"of peak -> matmul efficiency {eff:.4f}")
    write_table(rows, COLUMNS, args.out / f"loop_efficiency_{args.chip.lower()}")
    return rows


if __name__ == "__main__":
    main()
