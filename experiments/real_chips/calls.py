"""What an SDPA decode call's time is made of, measured kernel by kernel and modelled launch by launch.

Usage: python experiments/real_chips/calls.py [--table validation/calls_h200_2026_11/calls.csv] [--out DIR]

Reads the table ``python -m harness.run --phases calls`` writes (each call's CUDA kernels in launch order, with their
start and duration as a timed call runs them, beside the call's CUDA-event time) and runs the model on the table's
chip for each call (the row's backend as ``vfasim validate`` describes it, timing only), whose ``launch_us`` splits
the latency the same way: the attention kernel, the split's combine (FA2's combine kernel, cuDNN's
``lean_reduction_kernel``) and what the model charges for launches. Measured, the launches are the call's time
outside its kernels (``call_us`` less their durations; cuDNN's ``Memset`` counted with them). A call whose time
outside its kernels is above ``HOST_US`` was held by the host (its launches outran the sleep ahead of it, as the
campaigns time calls too): it is listed, marked, and left out of the summary.

Writes DIR/calls.csv (a row per call) and DIR/calls_summary.csv and .md (per backend and path: the mean
measured-over-model ratio of each part and the mean error of the whole call); default DIR experiments/real_chips/out.
"""

from __future__ import annotations

import argparse
import csv
import statistics
from collections import defaultdict
from pathlib import Path

from vfasim import run
from vfasim.hw import load_hw
from vfasim.report.tables import write_table
from vfasim.validate import CHIPS, FORMATS, kernel_for

HERE = Path(__file__).resolve().parent
TABLE = HERE.parents[1] / "validation" / "calls_h200_2026_11" / "calls.csv"
CHIP = "H200"  # the campaign's GPU (calls.yaml: NVIDIA H200)
HOST_US = 20.0  # time outside a call's kernels above which the host, not the GPU, held the call
COLUMNS = ("kernel", "batch", "heads", "kv_heads", "head_dim", "seq_len_q", "seq_len", "splits", "call_us",
           "model_us", "error", "attention_us", "model_attention_us", "combine_us", "model_combine_us",
           "outside_us", "model_launches_us", "host_held", "cuda_kernels")
SUMMARY = ("kernel", "path", "calls", "model_path_differs", "attention_ratio", "combine_ratio", "outside_us",
           "model_launches_us", "call_mape", "call_bias")


def compare(table: Path, chip: str = CHIP, max_calls: int | None = None) -> list[dict]:
    """A row per measured call: its kernels' times beside the model's launches."""
    hw = load_hw(CHIPS[chip])
    calls: dict[tuple, list[dict]] = defaultdict(list)
    with open(table, newline="") as f:
        for r in csv.DictReader(f):
            calls[(r["kernel"], r["dtype"], *(int(r[c]) for c in ("batch", "heads", "kv_heads", "head_dim",
                                                                  "seq_len_q", "seq_len")), r["causal"])].append(r)
    rows = []
    for (kern, dtype, b, h, hk, d, q, n, causal), parts in list(calls.items())[:max_calls]:
        parts.sort(key=lambda r: int(r["order"]))
        kernels = [r for r in parts if not r["cuda_kernel"].startswith("Memset")]
        res = run(hw, "fa2", kernel=kernel_for(kern), seq_len=n, head_dim=d, causal=causal == "true", heads=h,
                  kv_heads=hk, batch=b, decode=True, queries=q, matmul_format=FORMATS[dtype], numerics_heads=0)
        model = res.chip["launch_us"]
        call = float(parts[0]["call_us"])
        outside = call - sum(float(r["us"]) for r in kernels)
        rows.append({"kernel": kern, "batch": b, "heads": h, "kv_heads": hk, "head_dim": d, "seq_len_q": q,
                     "seq_len": n, "splits": res.chip["splits"], "call_us": call,
                     "model_us": round(res.chip["latency_us"], 3),
                     "error": round(res.chip["latency_us"] / call - 1, 4),
                     "attention_us": float(kernels[0]["us"]),
                     "model_attention_us": round(model["attention_kernel"], 3),
                     "combine_us": sum(float(r["us"]) for r in kernels[1:]),
                     "model_combine_us": round(model["combine_kernel"], 3), "outside_us": round(outside, 3),
                     "model_launches_us": round(model["launch_overheads"], 3), "host_held": outside > HOST_US,
                     "cuda_kernels": " | ".join(r["cuda_kernel"][:60] for r in parts)})
    return rows


def summary(rows: list[dict]) -> list[dict]:
    """Per backend and path the GPU ran (one kernel, or a split kernel and its combine), over the calls the host did
    not hold: how many the model runs the other way, the mean measured-over-model ratio of the attention kernel and
    (where both have one) of the combine, the median time outside the kernels (long calls' profiled kernels run a
    few percent slower than their timed call, so a mean would be pulled below zero) beside the model's launch
    charge, and the whole call's mean |error| and mean error."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        if not r["host_held"]:
            groups[(r["kernel"], "split + combine" if r["combine_us"] else "one kernel")].append(r)
    out = []
    for (kern, path), rs in sorted(groups.items()):
        combined = [r for r in rs if r["model_combine_us"] > 0 and r["combine_us"] > 0]
        differs = sum((r["model_combine_us"] > 0) != (r["combine_us"] > 0) for r in rs)
        out.append({"kernel": kern, "path": path, "calls": len(rs), "model_path_differs": differs,
                    "attention_ratio": statistics.mean(r["attention_us"] / r["model_attention_us"] for r in rs),
                    "combine_ratio": statistics.mean(r["combine_us"] / r["model_combine_us"] for r in combined)
                    if combined else "",
                    "outside_us": statistics.median(r["outside_us"] for r in rs),
                    "model_launches_us": statistics.mean(r["model_launches_us"] for r in rs),
                    "call_mape": statistics.mean(abs(r["error"]) for r in rs),
                    "call_bias": statistics.mean(r["error"] for r in rs)})
    return out


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--table", default=str(TABLE))
    ap.add_argument("--out", default=str(HERE / "out"))
    ap.add_argument("--max-calls", type=int, default=None, help="the first N calls only (a smoke run)")
    a = ap.parse_args(argv)
    rows = compare(Path(a.table), max_calls=a.max_calls)
    write_table(rows, COLUMNS, Path(a.out) / "calls")
    lines = summary(rows)
    for path in write_table(lines, SUMMARY, Path(a.out) / "calls_summary"):
        print(f"wrote {path}")
    held = sum(r["host_held"] for r in rows)
    print(f"{len(rows)} calls, {held} held by the host (more than {HOST_US:.0f} us outside their kernels) left out")
    for line in lines:
        print(line)
    return rows


if __name__ == "__main__":
    main()
