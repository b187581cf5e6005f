"""What VFA buys on a real GPU: measured VFA/FA2 speedups of the project's Triton kernels beside the model's.

Usage: python experiments/real_chips/measured.py [--campaign gpu_h100_2026_11] [--max-shapes N] [--out DIR]

Reads ``validation/<campaign>/attention.csv`` (measured by ``harness/`` on the GPU) and pairs, per shape and
format, ``triton_fa2`` with ``triton_vfa`` (VFA with its key-summary pre-pass: what a user pays) and with
``triton_vfa_attn`` (the attention kernel alone: what the frozen max saves). The model runs the same shapes on the
campaign's chip with the ``triton`` kernel description (same tiles, VFA's pre-pass as its own launch):
speedup = FA2 latency / VFA latency, measured and predicted, and their difference. Rows whose spread (p80 - p20
over the median) exceeds 20% in any of the three measurements are left out and counted. Only the FlashAttention-3
paper's regime (16K tokens in all, hidden 2048) is compared by default: every shape of it was measured for every
format (``--all-shapes``: every prefill shape; a chunk of fewer queries than keys runs as the model's decode
convention does, the queries at the last of the keys' positions). Where the paired campaign
(``validation/pairs_<gpu>_2026_11/pairs.csv``) timed the same shape's FA2 kernel and VFA's kernel in alternation
(their speedup measured within each rep, so clock drift cancels; it repeats within 0.002), that speedup is set
beside the first and the prediction is scored against it too. Writes DIR/measured_<campaign>.csv and .md (default
DIR: experiments/real_chips/out).
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import numpy as np

from vfasim import run
from vfasim.report.tables import write_table
from vfasim.validate import CHIPS, FORMATS, UNSTABLE_SPREAD_PCT

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
COLUMNS = ("chip", "dtype", "causal", "head_dim", "seq_len", "seq_len_q", "batch", "heads", "kv_heads", "fa2_us",
           "vfa_us", "vfa_attn_us", "measured_speedup", "predicted_speedup", "speedup_error", "measured_attn_speedup",
           "predicted_attn_speedup", "attn_speedup_error", "paired_attn_speedup", "paired_error", "predicted_fa2_us",
           "fa2_error")
#: the same kernels timed in alternation on the same GPU model
PAIRED = {"gpu_h100_2026_11": "pairs_h100_2026_11/pairs.csv", "gpu_h200_2026_11": "pairs_h200_2026_11/pairs.csv"}
KEY = ("chip", "dtype", "head_dim", "causal", "seq_len", "batch", "heads", "kv_heads", "seq_len_q", "mode")


def pairs(table: Path, fa3_regime: bool = True,
          kernels: tuple[str, ...] = ("triton_fa2", "triton_vfa", "triton_vfa_attn")) -> tuple[list[dict], int]:
    """(measured latencies of every one of ``kernels`` per prefill shape, as ``<kernel without triton_>_us``; shapes
    left out for an unstable measurement)."""
    by: dict[tuple, dict[str, dict]] = {}
    with table.open() as f:
        for r in csv.DictReader(f):
            if r["kernel"] in kernels and r["mode"] == "prefill":
                by.setdefault(tuple(r[k] for k in KEY), {})[r["kernel"]] = r
    out, unstable = [], 0
    for key, ks in by.items():
        shape = dict(zip(KEY, key))
        if len(ks) < len(kernels) or (fa3_regime and not _fa3_regime(shape)):
            continue
        if any(float(k["spread_pct"]) > UNSTABLE_SPREAD_PCT for k in ks.values()):
            unstable += 1
            continue
        out.append({**shape, **{k.removeprefix("triton_") + "_us": float(v["value"]) for k, v in ks.items()}})
    return out, unstable


def paired(table: Path) -> dict[tuple, float]:
    """Speedup of VFA's kernel over FA2's (their per-rep ratio, median) per shape key, from a pairs table."""
    with table.open() as f:
        return {tuple(r[k] for k in KEY): float(r["ratio"]) for r in csv.DictReader(f)
                if (r["kernel_a"], r["kernel_b"]) == ("triton_fa2", "triton_vfa_attn")
                and float(r["ratio_spread_pct"]) <= UNSTABLE_SPREAD_PCT}


def _fa3_regime(s: dict) -> bool:
    return int(s["batch"]) * int(s["seq_len"]) == 16384 and int(s["heads"]) * int(s["head_dim"]) == 2048


def predict(row: dict) -> dict:
    """The model's FA2 and VFA latencies for a measured shape (timing only), and the speedups."""
    kw = dict(seq_len=int(row["seq_len"]), head_dim=int(row["head_dim"]), causal=row["causal"] == "true",
              heads=int(row["heads"]), kv_heads=int(row["kv_heads"]), batch=int(row["batch"]), kernel="triton",
              matmul_format=FORMATS[row["dtype"]], numerics_heads=0)
    if int(row["seq_len_q"]) < int(row["seq_len"]):  # a chunk of queries: the last of the keys' positions
        kw.update(decode=True, queries=int(row["seq_len_q"]))
    fa2 = run(CHIPS[row["chip"]], "fa2", **kw)
    vfa = run(CHIPS[row["chip"]], "vfa", **kw)
    vfa_attn = float(vfa.chip["attention_call_us"])  # type: ignore[arg-type]
    out = {"measured_speedup": row["fa2_us"] / row["vfa_us"], "predicted_speedup": fa2.latency_us / vfa.latency_us,
           "measured_attn_speedup": row["fa2_us"] / row["vfa_attn_us"],
           "predicted_attn_speedup": fa2.latency_us / vfa_attn, "predicted_fa2_us": fa2.latency_us,
           "fa2_error": (fa2.latency_us - row["fa2_us"]) / row["fa2_us"]}
    out["speedup_error"] = out["predicted_speedup"] - out["measured_speedup"]
    out["attn_speedup_error"] = out["predicted_attn_speedup"] - out["measured_attn_speedup"]
    return {**row, **out}


def _with_pair(row: dict, speedup: float | None) -> dict:
    if speedup is None:
        return {**row, "paired_attn_speedup": "", "paired_error": ""}
    return {**row, "paired_attn_speedup": speedup, "paired_error": row["predicted_attn_speedup"] - speedup}


def summary(rows: list[dict], unstable: int) -> str:
    if not rows:
        return "no measured shape to compare"
    err = np.array([r["speedup_error"] for r in rows])
    attn = np.array([r["attn_speedup_error"] for r in rows])
    within = int(np.sum(np.abs(attn) <= 0.03))
    return (f"{len(rows)} shapes ({unstable} left out: unstable measurement). VFA/FA2 speedup, predicted - measured: "
            f"with the pre-pass mean {err.mean():+.3f}, mean |.| {np.abs(err).mean():.3f}, "
            f"worst {err[np.abs(err).argmax()]:+.3f}; "
            f"attention kernel alone mean {attn.mean():+.3f}, mean |.| {np.abs(attn).mean():.3f}, "
            f"worst {attn[np.abs(attn).argmax()]:+.3f}; within 0.03 on {within} of {len(rows)}" + _against_pairs(rows))


def _against_pairs(rows: list[dict]) -> str:
    both = [r for r in rows if r["paired_attn_speedup"] != ""]
    if not both:
        return ""
    err = np.array([r["paired_error"] for r in both])
    moved = np.array([r["paired_attn_speedup"] - r["measured_attn_speedup"] for r in both])
    return (f". Against the paired measurement ({len(both)} of these shapes; FA2 and VFA's kernel timed in "
            f"alternation): mean {err.mean():+.3f}, mean |.| {np.abs(err).mean():.3f}, worst "
            f"{err[np.abs(err).argmax()]:+.3f}, within 0.03 on {int(np.sum(np.abs(err) <= 0.03))} of {len(both)} "
            f"(the two measurements differ by mean |.| {np.abs(moved).mean():.3f})")


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--campaign", default="gpu_h100_2026_11")
    p.add_argument("--max-shapes", type=int, default=None, help="compare at most N shapes (evenly spread)")
    p.add_argument("--out", type=Path, default=HERE / "out")
    p.add_argument("--all-shapes", action="store_true", help="every prefill shape the campaign measured with all "
                   "three kernels, not only the FlashAttention-3 paper's regime (e.g. for a blind_* campaign)")
    args = p.parse_args(argv)
    rows, unstable = pairs(ROOT / "validation" / args.campaign / "attention.csv", fa3_regime=not args.all_shapes)
    if args.max_shapes is not None and len(rows) > args.max_shapes:
        rows = [rows[i] for i in np.unique(np.linspace(0, len(rows) - 1, args.max_shapes).round().astype(int))]
    pairs_ = paired(ROOT / "validation" / PAIRED[args.campaign]) if args.campaign in PAIRED else {}
    got = [_with_pair(predict(r), pairs_.get(tuple(r[k] for k in KEY))) for r in rows]
    write_table([{c: r[c] for c in COLUMNS} for r in got], COLUMNS, args.out / f"measured_{args.campaign}")
    print(summary(got, unstable))
    return got


if __name__ == "__main__":
    main()
