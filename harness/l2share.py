"""Streaming K/V that a group of CTAs shares (GQA): what the L2 delivers when each line comes from HBM once and is
read by G CTAs.

Usage on the GPU machine (repository root)::

    python3 -m harness.l2share --out /tmp/l2share [--quick]

P programs of 4 warps (2, 4 and 8 an SM) each sum tiles of the buffer, one [64, 128] fp16 tile per step, pipelined
over 3 stages as Triton's attention loops are, loaded with ``.cg`` (the L2, not the L1). One program streams about
45 GB/s whether its bytes come from HBM or the L2, so several an SM are needed to load the L2.

Cold (the L2 flushed before each timed launch, ``harness.bench.Timer``): program ``pid`` reads region ``pid // G`` of
``--region-mib`` MiB. The G programs of a group are launched together and stream the same bytes at about the same time,
as the query heads of a GQA group (or a decode kernel's CTAs of one K/V head) do. Per case: delivered GB/s (P x region
/ kernel time) and distinct GB/s (bytes from HBM at least once, ceil(P / G) x region / kernel time). G = P (one region
for all) is the all-hit case.

Warm (a 24 MiB buffer read once before, so it sits in the L2): every program reads 1,024 tiles of it, either each from
its own place, spread evenly over the buffer (``spread``: the L2 serving different lines to every SM, as in
``harness.micro``'s ``l2_read_gbps``), or all on the same tile at the same time (``lockstep``: every SM asking for the
same lines, as a GQA group's CTAs do).

Output (``--out DIR``): ``micro.csv`` (name, value, unit, notes) with its provenance sidecar ``micro.yaml``,
``log.txt``, ``command.txt``, ``clocks_trace.txt``. Rows ``l2share_{P}cta_g{G}_delivered_gbps``,
``l2share_{P}cta_g{G}_distinct_gbps`` and ``l2share_{P}cta_warm_{spread|lockstep}_gbps``.
"""

from __future__ import annotations

import argparse
import math
import os
import sys

import torch
import triton
import triton.language as tl

ROWS, COLS, WARPS, STAGES = 64, 128, 4, 3
GROUPS = (1, 2, 3, 4, 5, 8, 16)


@triton.jit(do_not_specialize=["ITERS", "G", "NT", "SPREAD"])
def _shared_kernel(X, OUT, ITERS, G, NT, SPREAD, ROWS: tl.constexpr, COLS: tl.constexpr):
    """Program ``pid`` sums ITERS tiles: tile (pid * SPREAD // programs + i) mod NT of region pid // G (regions of NT
    tiles)."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    base = X + (pid // G).to(tl.int64) * NT * ROWS * COLS
    first = (pid.to(tl.int64) * SPREAD) // nprog
    offs = tl.arange(0, ROWS)[:, None] * COLS + tl.arange(0, COLS)[None, :]
    acc = tl.zeros([ROWS, COLS], dtype=tl.float32)
    for i in tl.range(0, ITERS, num_stages=3):
        tile = (first + i) % NT
        acc += tl.load(base + tile * ROWS * COLS + offs, cache_modifier=".cg").to(tl.float32)
    tl.store(OUT + pid * ROWS * COLS + offs, acc)


#: the warm controls' buffer: read once before the timed launches, it stays in the L2 (50 MiB on an H100)
WARM_MIB = 24
WARM_ITERS = 1024


def cases(sms: int, quick: bool) -> list[tuple[str, int, int]]:
    """(mode, programs, group): every group of ``GROUPS`` and one group of all (``cold``), and the two warm
    controls (``spread``: each program from its own place in the buffer; ``lockstep``: all on the same tile), at 2, 4
    and 8 programs an SM."""
    per_sm = (4,) if quick else (2, 4, 8)
    groups = (1, 4) if quick else GROUPS
    return [(mode, k * sms, g) for k in per_sm
            for mode, g in (*(("cold", g) for g in (*groups, k * sms)), ("spread", k * sms), ("lockstep", k * sms))]


def measure(x: torch.Tensor, mode: str, programs: int, group: int, region: int) -> tuple[float, float, int, int]:
    """(kernel µs, spread %, launches, bytes read) of one case: ``cold`` reads regions of ``region`` bytes from HBM
    (L2 flushed before each launch), the warm modes ``WARM_ITERS`` tiles a program from a buffer of ``WARM_MIB``."""
    from harness.bench import Timer

    tile = ROWS * COLS * 2
    cold = mode == "cold"
    nt = region // tile if cold else (WARM_MIB << 20) // tile
    iters = nt if cold else WARM_ITERS
    spread = nt if mode == "spread" else 0
    out = torch.empty(programs * ROWS * COLS, device="cuda", dtype=torch.float32)

    def fn():
        _shared_kernel[(programs,)](x, out, iters, group, nt, spread, ROWS=ROWS, COLS=COLS, num_warps=WARPS)

    fn()  # compiles, and warms the L2 for the warm modes
    t = Timer(flush=cold).time(fn, reps=20)
    del out
    return t.median_us, t.spread_pct, t.reps, programs * iters * tile


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv if argv is None else argv
    ap = argparse.ArgumentParser(prog="python -m harness.l2share", description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for micro.csv and the rest (created)")
    ap.add_argument("--quick", action="store_true", help="4 programs an SM, groups 1 and 4, the controls")
    ap.add_argument("--region-mib", type=int, default=8, help="MiB each group streams (default 8)")
    a = ap.parse_args(argv[1:])
    if a.region_mib < 1:
        ap.error("--region-mib must be at least 1")
    from harness.bench import ClockSampler, micro_table
    from harness.rows import CampaignLog

    log = CampaignLog(a.out, "harness.l2share", argv)
    if not torch.cuda.is_available():
        log("no CUDA device")
        return 1
    clocks = ClockSampler(os.path.join(a.out, "clocks_trace.txt"))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    region = a.region_mib << 20
    todo = cases(sms, a.quick)
    most = max(math.ceil(p / g) for mode, p, g in todo if mode == "cold")
    x = torch.empty(most * region // 2, device="cuda", dtype=torch.float16).normal_()
    note = {"method": "CUDA events around each launch (harness.bench.Timer), the L2 flushed before each cold launch",
            "launches_per_case": 20, "statistic": "median kernel time; spread = (p90 - p10) / median * 100",
            "grid": f"{2 * sms}, {4 * sms} and {8 * sms} programs of {WARPS} warps; groups "
                    f"{', '.join(map(str, GROUPS))} and all programs in one; two warm controls",
            "inputs": f"one fp16 buffer of {most} regions of {a.region_mib} MiB, standard normal; the warm controls "
                      f"read its first {WARM_MIB} MiB"}
    table, sidecar = micro_table(a.out, argv, log, note, {"quick": a.quick},
                                 "cold: two rows per (programs, group), the bytes the programs read per second and "
                                 "the bytes read from HBM (at least once) per second; group = programs is the "
                                 "all-hit control. warm: the bytes read per second from a warm L2, each program at "
                                 "its own place (spread) or all on the same tile (lockstep)")
    sidecar(False)
    for mode, programs, group in todo:
        us, spread, reps, nbytes = measure(x, mode, programs, group, region)
        read = nbytes / (us * 1e-6) / 1e9
        timing = f"kernel median {us:.1f} us over {reps} launches, spread {spread:.1f}%"
        if mode == "cold":
            distinct = math.ceil(programs / group)
            fresh = distinct * region / (us * 1e-6) / 1e9
            what = (f"{programs} programs of {WARPS} warps, program p sums region p // {group} ({distinct} regions of "
                    f"{a.region_mib} MiB) in {ROWS}x{COLS} fp16 tiles (.cg), {STAGES} stages; L2 flushed; {timing}")
            table.add({"name": f"l2share_{programs}cta_g{group}_delivered_gbps", "value": read, "unit": "GB/s",
                       "notes": f"bytes read by all programs / kernel time; {what}"}, flush=True)
            table.add({"name": f"l2share_{programs}cta_g{group}_distinct_gbps", "value": fresh, "unit": "GB/s",
                       "notes": f"distinct bytes / kernel time; {what}"}, flush=True)
            log(f"{programs} programs, group {group}: {us:.1f} us, delivered {read:.0f} GB/s, distinct {fresh:.0f} "
                f"GB/s (spread {spread:.1f}%)")
        else:
            where = "each from its own place, spread evenly" if mode == "spread" else "all on the same tile at once"
            table.add({"name": f"l2share_{programs}cta_warm_{mode}_gbps", "value": read, "unit": "GB/s",
                       "notes": f"bytes read / kernel time; {programs} programs of {WARPS} warps each sum "
                                f"{WARM_ITERS} {ROWS}x{COLS} fp16 tiles (.cg), {STAGES} stages, of a warm "
                                f"{WARM_MIB} MiB buffer, {where}; {timing}"}, flush=True)
            log(f"{programs} programs, warm {mode}: {us:.1f} us, {read:.0f} GB/s (spread {spread:.1f}%)")
        sidecar(False)
    clocks.stop()
    sidecar(True)
    log(f"done in {log.elapsed():.0f} s, {len(table.rows)} rows")
    log.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
