"""mma.sync issue rate by warps per block, blocks per SM and independent MMAs per warp:
``python3 -m harness.mma --out DIR [--iters N]``.

Builds ``harness/mma_sync.cu`` with the machine's ``nvcc`` for the GPU present (``-arch=native``), keeps its SASS
instruction counts (``cuobjdump``: the MMAs must show as HMMA/QMMA), runs it and writes ``mma.csv`` (schema ``MMA`` in
``harness/rows.py``) with a provenance sidecar. Each row: one instruction shape and dtype, ILP independent
accumulators per warp, ``warps`` warps a block, ``blocks_per_sm`` blocks an SM (grid = SMs x that); the rate is MMAs
per SM clock cycle (the SM's ``clock64``), so it does not depend on the clock the GPU ran at.

What it grounds: the rate a kernel whose own warps issue ``mma.sync`` (FlashAttention-2, the memory-efficient
backend, a Triton decode tile) reaches with few warps resident, against the tensor pipes' datasheet rate
(``flops_per_sm_per_clk`` against the dense peak: 4,096 16-bit FLOPs per SM per clock on an H100/H200).
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import shutil
import subprocess
import sys
import tempfile
import time

from harness.rows import MMA, Table, chip_name, write_sidecar

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mma_sync.cu")
#: FLOPs of one warp-level MMA of each instruction mma_sync.cu runs (2 x M x N x K)
FLOPS = {"m16n8k16.f32.f16.f16.f32": 2 * 16 * 8 * 16, "m16n8k16.f32.bf16.bf16.f32": 2 * 16 * 8 * 16,
         "m16n8k32.f32.e4m3.e4m3.f32": 2 * 16 * 8 * 32, "m16n8k16.f16.f16.f16.f16": 2 * 16 * 8 * 16}


def rows_from_output(text: str) -> list[dict]:
    """The benchmark's CSV on stdout as MMA rows (``flops_*`` added); raises ValueError on a line it cannot read."""
    out = []
    for r in csv.DictReader(io.StringIO(text)):
        if r.get("inst") not in FLOPS:
            raise ValueError(f"mma_sync output: unknown instruction {r.get('inst')!r}")
        flops = FLOPS[r["inst"]]
        out.append({**r, "flops_per_mma": flops, "flops_per_sm_per_clk": float(r["mma_per_sm_per_clk"]) * flops})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m harness.mma", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="folder for mma.csv and its sidecar (created)")
    ap.add_argument("--iters", type=int, default=4096, help="loop trips per warp (each ILP MMAs; default 4096)")
    a = ap.parse_args(argv)
    if a.iters < 1:
        ap.error(f"--iters must be positive, got {a.iters}")
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise SystemExit("harness.mma: nvcc not found on PATH (it builds harness/mma_sync.cu)")
    os.makedirs(a.out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        exe = os.path.join(tmp, "mma_sync")
        build = [nvcc, "-O3", "-arch=native", "-o", exe, SOURCE]
        subprocess.run(build, check=True)
        sass = subprocess.run(["cuobjdump", "--dump-sass", exe], capture_output=True, text=True).stdout \
            if shutil.which("cuobjdump") else ""
        counts = {op: sass.count(op) for op in ("HMMA", "QMMA", "HGMMA")}
        t0 = time.time()
        run = subprocess.run([exe, str(a.iters)], capture_output=True, text=True, check=True)
        wall = time.time() - t0
    table = Table(os.path.join(a.out, "mma.csv"), MMA)
    for r in rows_from_output(run.stdout):
        table.add(r)
    table.flush()
    import torch  # the provenance helper reads the device through torch

    from harness.bench import provenance
    note = {"method": "clock64() at each block's start and end (after __syncthreads), %smid; per SM: MMAs of its "
                      "blocks / (last end - first start); median over SMs. kernel_us: CUDA events, median of 5 "
                      "launches after 1 warm-up", "warmups": 1, "statistic": "median over SMs"}
    base = provenance(["harness.mma", *(argv if argv is not None else sys.argv[1:])], note,
                      {"chip": chip_name(torch.cuda.get_device_name(0)),
                       "build": " ".join(["nvcc", *build[1:-3], "mma_sync.cu"]),
                       "sass_counts": counts, "run_wall_s": round(wall, 1)})
    base["command"] = "python3 -m harness.mma " + " ".join(argv if argv is not None else sys.argv[1:])
    write_sidecar(table.path, {"table": "mma.csv", **base, "finished": True, "rows": len(table.rows),
                               "about": "mma.sync issue rate per SM clock by instruction, ILP, warps a block and "
                                        "blocks an SM (register operands, no shared memory)"})
    print(f"harness.mma: {len(table.rows)} rows in {wall:.0f} s; SASS {counts}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
