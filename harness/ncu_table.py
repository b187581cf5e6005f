"""Join an Nsight Compute raw CSV page with ``harness.probe``'s manifest: one row per profiled launch, chosen columns.

Usage (anywhere; standard library only)::

    python3 -m harness.ncu_table --raw ncu_raw.txt --manifest manifest.csv --kernel attn_fwd --out ncu.csv

Columns: the manifest's case, the launch's duration, GPC clock, warp instructions, registers, dynamic shared memory,
warps active per SM, tensor-pipe and XU (MUFU) activity, and the warp-state stall reasons as ncu's
``smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio`` (warps stalled for that reason per issued
instruction).
"""

from __future__ import annotations

import argparse
import csv

from harness.rows import write_rows

METRICS = {"duration_ns": "gpu__time_duration.sum", "gpc_clock_hz": "gpc__cycles_elapsed.avg.per_second",
           "inst_executed": "smsp__inst_executed.sum", "registers_per_thread": "launch__registers_per_thread",
           "shared_mem_per_block": "launch__shared_mem_per_block_dynamic",
           "warps_active_per_cycle": "sm__warps_active.avg.per_cycle_active",
           "tensor_pipe_active_pct": "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
           "xu_inst_pct": "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active"}
STALLS = ("barrier", "long_scoreboard", "gmma", "wait", "short_scoreboard", "math_pipe_throttle", "mio_throttle",
          "lg_throttle", "not_selected", "selected", "branch_resolving", "dispatch_stall", "no_instruction")
MANIFEST = ("case", "mode", "dtype", "head_dim", "causal", "batch", "heads", "seq_len", "launch")
OPTIONAL = ("seq_len_q", "kv_heads")


def rows(raw: str, manifest: str, kernel: str, extra: tuple[str, ...] = (), per_launch: int = 1,
         present_only: bool = False) -> list[dict[str, str]]:
    """The manifest's launches of ``kernel`` beside ncu's rows, in launch order; an error if the counts differ.
    ``extra``: more of ncu's metrics, each a column under its own name. ``per_launch``: CUDA kernels each manifest
    launch makes (an SDPA call's split and combine kernels: 2), each a row with its name (``cuda_kernel``).
    ``present_only``: only the standard columns whose metric the raw page holds (a run profiled with fewer
    sections)."""
    with open(raw) as f:
        lines = f.read().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise SystemExit(f"{raw}: no ncu raw CSV header (a line starting with \"ID\")")
    table = list(csv.reader(lines[start:]))
    header, data = table[0], table[2:]  # the second line holds units
    with open(manifest) as f:
        launches = [r for r in csv.DictReader(f) if r["kernel"] == kernel for _ in range(per_launch)]
    if len(launches) != len(data):
        raise SystemExit(f"{manifest} lists {len(launches) // per_launch} {kernel} launches of {per_launch} kernels "
                         f"but {raw} has {len(data)} rows")
    columns = METRICS | {f"stall_{s}": f"smsp__average_warps_issue_stalled_{s}_per_issue_active.ratio" for s in STALLS} \
        | {m: m for m in extra}
    if present_only:
        columns = {k: m for k, m in columns.items() if m in header or m in extra}
    missing = [m for m in columns.values() if m not in header]
    if missing:
        raise SystemExit(f"{raw}: metric {missing[0]} missing (profile with the sections ncu_table's docstring names)")
    keep = MANIFEST + tuple(k for k in OPTIONAL if launches and k in launches[0])  # older manifests lack them
    name = {"cuda_kernel": "Kernel Name"} if per_launch > 1 else {}
    return [{k: launch[k] for k in keep} | {k: r[header.index(m)][:120] for k, m in name.items()}
            | {k: r[header.index(m)].replace(",", "") for k, m in columns.items()} for launch, r in zip(launches, data)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--raw", required=True, help="ncu's --page raw --csv output")
    ap.add_argument("--manifest", required=True, help="harness.probe's --manifest")
    ap.add_argument("--kernel", default="attn_fwd", help="the kernel ncu was filtered to")
    ap.add_argument("--per-launch", type=int, default=1, help="CUDA kernels each manifest launch makes (default 1)")
    ap.add_argument("--present-only", action="store_true", help="leave out the standard columns whose metric the raw "
                    "page lacks (profiled with fewer sections) instead of refusing it")
    ap.add_argument("--out", required=True)
    ap.add_argument("--extra", default="", help="more metrics of the raw page, comma-separated (e.g. "
                    "lts__t_sector_hit_rate.pct): each a column under its own name")
    a = ap.parse_args(argv)
    if a.per_launch < 1:
        ap.error(f"--per-launch must be 1 or more, got {a.per_launch}")
    got = rows(a.raw, a.manifest, a.kernel, tuple(m for m in a.extra.split(",") if m), a.per_launch, a.present_only)
    write_rows(a.out, got)
    print(f"{len(got)} launches -> {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
