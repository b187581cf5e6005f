"""VSA on a real GPU: the blocks the model's engine skips, and the measured VSA/VFA speedup beside the model's.

Usage: python experiments/real_chips/vsa.py [--campaign gpu_h100_2026_11] [--max-shapes N] [--out DIR]

Two comparisons, each written to DIR (default experiments/real_chips/out) as CSV and Markdown:

- ``vsa_skips``: the fraction of visited blocks VSA skips, the model's engine against the campaign's own count
  (the H100 campaign's log.txt: ``harness/reference.py`` vsa_emulated, VSA's block skipping in float64 with the
  kernel's tiles and rule, whose outputs the GPU kernel matches, NaN rows alike; the GPU kernel counts no skips
  itself), on the same inputs: ``harness/inputs.py`` make_inputs (as the harness's numerics phase draws them),
  NumPy-seeded standard normals ("normal") and the same with an attention sink ("sink"), redrawn here, two heads, seq 1024/2048, head dim 64/128, cast to the
  format. The engine runs vsa with the campaign's tiles (128 query rows; 64 keys at head dim 64, 128 at 128) in the
  chip's formats.
- ``vsa_speedup_<campaign>``: per shape of the FlashAttention-3 paper's regime (as ``measured.py``), the measured
  speedup of VSA over VFA (``triton_vfa_attn`` / ``triton_vsa_attn``: the attention kernels alone; and with the
  pre-pass, ``triton_vfa`` / ``triton_vsa``) beside the model's (the ``triton`` kernel on the campaign's chip, VSA
  on standard-normal Q/K/V as ``vfasim validate`` runs it, ``vfasim.validate.MEASURED_INPUTS``). Rows whose spread
  exceeds 20% in any of the four measurements are left out and counted.

Expected run time: about 30 s for the skips and 10-20 s per shape (VSA's trace reads the data) on 2 cores.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: harness/inputs.py, NumPy only
sys.path.insert(0, str(Path(__file__).resolve().parent))  # measured.py, its measured shapes
from harness.inputs import SEED, make_inputs  # noqa: E402
from measured import pairs  # noqa: E402
from vfasim import run
from vfasim.functional import Tiling, run_engine
from vfasim.hw import load_hw
from vfasim.hw.formats import with_matmul_format
from vfasim.report.tables import write_table
from vfasim.runner.prepare import engine_precision
from vfasim.validate import CHIPS, FORMATS, MEASURED_INPUTS

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
NUMERICS_LOG = ROOT / "validation" / "gpu_h100_2026_11" / "log.txt"
BLOCK_K = {64: 64, 128: 128}  # the campaign's --configs: 64=128,64,... and 128=128,128,...
LINE = re.compile(r"numerics (normal|sink)_(fp16|bf16|fp8_e4m3)_d(\d+)_n(\d+)_(full|causal): .*"
                  r"vsa skipped ([0-9.]+) of visited blocks \(emulation\)")
KERNELS = ("triton_vfa", "triton_vfa_attn", "triton_vsa", "triton_vsa_attn")
SKIP_COLUMNS = ("inputs", "dtype", "head_dim", "seq_len", "causal", "campaign_skipped", "model_skipped", "difference")
SPEEDUP_COLUMNS = ("chip", "dtype", "causal", "head_dim", "seq_len", "batch", "heads", "measured_attn_speedup",
                   "predicted_attn_speedup", "attn_speedup_error", "measured_speedup", "predicted_speedup",
                   "speedup_error", "vsa_attn_us", "predicted_vsa_attn_us", "vsa_attn_error")


def skips(log: Path = NUMERICS_LOG, limit: int | None = None) -> list[dict]:
    """Per numerics case of the campaign's log: its emulation's skipped fraction and the engine's."""
    cases = [m.groups() for m in map(LINE.search, log.read_text().splitlines()) if m]
    out = []
    for kind, dtype, d, n, mask, frac in cases[:limit]:
        d, n = int(d), int(n)
        q, k, v = (x[0] for x in make_inputs(n, d, 2, kind, SEED + n + d + (1000 if kind == "sink" else 0)))
        prec = engine_precision(with_matmul_format(load_hw("H100-SXM"), FORMATS[dtype]))
        t = Tiling(n, n, d, 128, BLOCK_K[d], mask == "causal", 2, 2)
        counts = run_engine(q, k, v, t, "vsa", prec, trace=False).counts
        model = counts["skipped_tiles"] / counts["visited_tiles"]
        out.append({"inputs": kind, "dtype": dtype, "head_dim": d, "seq_len": n, "causal": mask == "causal",
                    "campaign_skipped": float(frac), "model_skipped": model, "difference": model - float(frac)})
    return out


def speedup(row: dict) -> dict:
    """The model's VFA and VSA latencies for a measured shape, and the speedups of VSA over VFA."""
    kw = dict(seq_len=int(row["seq_len"]), head_dim=int(row["head_dim"]), causal=row["causal"] == "true",
              heads=int(row["heads"]), kv_heads=int(row["kv_heads"]), batch=int(row["batch"]), kernel="triton",
              matmul_format=FORMATS[row["dtype"]], numerics_heads=0)
    vfa = run(CHIPS[row["chip"]], "vfa", **kw)
    vsa = run(CHIPS[row["chip"]], "vsa", workload=MEASURED_INPUTS, **kw)
    attn = {name: float(r.chip["attention_call_us"])  # type: ignore[arg-type]
            for name, r in (("vfa", vfa), ("vsa", vsa))}
    out = {"measured_attn_speedup": row["vfa_attn_us"] / row["vsa_attn_us"],
           "predicted_attn_speedup": attn["vfa"] / attn["vsa"],
           "measured_speedup": row["vfa_us"] / row["vsa_us"], "predicted_speedup": vfa.latency_us / vsa.latency_us,
           "predicted_vsa_attn_us": attn["vsa"],
           "vsa_attn_error": (attn["vsa"] - row["vsa_attn_us"]) / row["vsa_attn_us"]}
    out["attn_speedup_error"] = out["predicted_attn_speedup"] - out["measured_attn_speedup"]
    out["speedup_error"] = out["predicted_speedup"] - out["measured_speedup"]
    return {**row, **out}


def summary(skipped: list[dict], rows: list[dict], unstable: int) -> str:
    lines = []
    if skipped:
        diff = np.array([r["difference"] for r in skipped])
        lines.append(f"skipped fraction, model - campaign, {len(skipped)} cases: mean {diff.mean():+.3f}, "
                     f"mean |.| {np.abs(diff).mean():.3f}, worst {diff[np.abs(diff).argmax()]:+.3f}")
    if rows:
        attn, total = (np.array([r[k] for r in rows]) for k in ("attn_speedup_error", "speedup_error"))
        med = {k: float(np.median([r[k] for r in rows])) for k in
               ("measured_attn_speedup", "predicted_attn_speedup", "measured_speedup", "predicted_speedup")}
        lines.append(f"{len(rows)} shapes ({unstable} left out: unstable). VSA/VFA speedup, kernel alone: measured "
                     f"median {med['measured_attn_speedup']:.3f}, predicted {med['predicted_attn_speedup']:.3f}, "
                     f"error mean {attn.mean():+.3f}, mean |.| {np.abs(attn).mean():.3f}; with the pre-pass: "
                     f"measured {med['measured_speedup']:.3f}, predicted {med['predicted_speedup']:.3f}, error mean "
                     f"{total.mean():+.3f}, mean |.| {np.abs(total).mean():.3f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> tuple[list[dict], list[dict]]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--campaign", default="gpu_h100_2026_11")
    p.add_argument("--max-shapes", type=int, default=12, help="compare at most N shapes (evenly spread)")
    p.add_argument("--max-skip-cases", type=int, default=None, help="compare at most N numerics cases")
    p.add_argument("--out", type=Path, default=HERE / "out")
    args = p.parse_args(argv)
    skipped = skips(limit=args.max_skip_cases)
    write_table(skipped, SKIP_COLUMNS, args.out / "vsa_skips")
    rows, unstable = pairs(ROOT / "validation" / args.campaign / "attention.csv", kernels=KERNELS)
    if len(rows) > args.max_shapes:
        rows = [rows[i] for i in np.unique(np.linspace(0, len(rows) - 1, args.max_shapes).round().astype(int))]
    got = [speedup(r) for r in rows]
    write_table([{c: r[c] for c in SPEEDUP_COLUMNS} for r in got], SPEEDUP_COLUMNS,
                args.out / f"vsa_speedup_{args.campaign}")
    print(summary(skipped, got, unstable))
    return skipped, got


if __name__ == "__main__":
    main()
