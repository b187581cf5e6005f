"""What a read stream pays after the campaigns' L2 flush, which leaves the L2 full of dirty lines.

Usage on the GPU machine (repository root)::

    python3 -m harness.l2dirty --out DIR

Why: every campaign flushes the L2 before a timed call by zeroing a buffer of four times its size
(``harness.bench.Timer``, as ``triton.testing.do_bench`` does). The L2 writes back, so after the flush it holds
the buffer's last lines, dirty; a kernel's first reads from the HBM then each evict one, and its write-back crosses
the HBM beside the read. This times one read stream (a Triton kernel summing R bytes of its own buffer, 4 programs an
SM) after three preludes, each then the campaigns' sleep (~60 us) so the host has queued the read:

- ``dirty``: the campaigns' flush (the 4 x L2 buffer zeroed);
- ``clean``: the same buffer summed (read), which leaves the L2 holding clean lines;
- ``dirty_idle``: the flush, then a sleep of ~10 ms before the timed read (whether an idle L2 cleans itself).

``l2dirty.csv``: a row per (prelude, R): the median of 30 CUDA-event timings, its spread, and R over it.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import triton
import triton.language as tl

from harness.bench import Timer, provenance
from harness.rows import summarize, write_rows, write_sidecar

SIZES_MB = (4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024)
PRELUDES = ("dirty", "clean", "dirty_idle")
COLUMNS = ["prelude", "read_mb", "median_us", "spread_pct", "reps", "read_tbps"]
BLOCK = 4096


@triton.jit
def _sum_kernel(X, OUT, N, BLOCK: tl.constexpr):
    pid, progs = tl.program_id(0), tl.num_programs(0)
    acc = tl.zeros((BLOCK,), dtype=tl.int32)
    for start in range(pid * BLOCK, N, progs * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(X + offs, mask=offs < N, other=0)
    tl.store(OUT + pid, tl.sum(acc, axis=0))


def read_call(x: torch.Tensor, programs: int):
    out = torch.empty(programs, dtype=torch.int32, device=x.device)
    return lambda: _sum_kernel[(programs,)](x, out, x.numel(), BLOCK=BLOCK, num_warps=8)


def time_after(prelude, fn, reps: int = 30, sleep_cycles: int = 100_000) -> tuple[float, float]:
    """Median and spread of ``fn``'s CUDA-event time, each rep after ``prelude()`` and a sleep."""
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps + 3)]
    for s, e in ev:
        prelude()
        torch.cuda._sleep(sleep_cycles)
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return summarize([s.elapsed_time(e) * 1000.0 for s, e in ev[3:]])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    timer = Timer(flush=True)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    clean_read = read_call(timer.buf, 4 * sms)
    preludes = {"dirty": timer.buf.zero_, "clean": clean_read,
                "dirty_idle": lambda: (timer.buf.zero_(), torch.cuda._sleep(20_000_000))}
    rows = []
    for mb in SIZES_MB:
        x = torch.ones(mb * (1 << 20) // 4, dtype=torch.int32, device="cuda")
        fn = read_call(x, 4 * sms)
        fn()
        for name in PRELUDES:
            med, spread = time_after(preludes[name], fn)
            rows.append({"prelude": name, "read_mb": mb, "median_us": round(med, 3), "spread_pct": round(spread, 2),
                         "reps": 30, "read_tbps": round(mb * (1 << 20) / med / 1e6, 3)})
            print(f"{name:10} {mb:5d} MB {med:9.2f} us {rows[-1]['read_tbps']:.2f} TB/s", file=sys.stderr, flush=True)
        del x
    path = os.path.join(a.out, "l2dirty.csv")
    write_rows(path, rows, COLUMNS)
    prov = provenance(
        ["", *sys.argv[1:]],
        {"method": "CUDA events around each read, 3 warm-ups then 30 reps, each after its prelude and a ~60 us sleep",
         "statistic": "median; spread_pct = (p80 - p20) / median * 100"},
        {"l2_bytes": timer.l2, "flush_bytes": timer.buf.numel() * 4, "programs": 4 * sms})
    prov["command"] = " ".join(["python3", "-m", "harness.l2dirty", *sys.argv[1:]])
    write_sidecar(path, {"table": "l2dirty.csv", "finished": True, "rows": len(rows), **prov})
    return 0


if __name__ == "__main__":
    sys.exit(main())
