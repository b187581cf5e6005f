"""A loop that is not software-pipelined: one CTA's synchronous K/V tile loads from a warm L2, in SM cycles.

Usage on the GPU machine (repository root)::

    python3 -m harness.tileload --out /tmp/tileload [--quick]

Each of P programs (1 alone on the GPU, one per SM, two per SM) of 8 warps (the prefill tiles' warps) runs STEPS
iterations of a loop Triton does not pipeline (``tl.range(..., num_stages=1)``, as Triton compiles the VSA mode's key
loop: its loads are plain ``tt.load`` s issued in the iteration that uses them). An iteration loads a K tile and a V
tile of [BN, D] elements of B bytes (2: fp16; 1: fp8's size, loaded and folded as [BN, D / 2] fp16 pairs, the same
bytes: a first run folding int8 elements was bound by the fold, its L1 control 2947 cycles at 128 x 128) of block
``t = (i + 7 * pid) mod NT`` and folds each into a running element-wise maximum of its own (one packed max per two
fp16 elements), so the next iteration's loads issue only after this iteration's data has arrived. The buffer (NT
blocks of K and of V, 8 MiB each) is read once before the timed launches, so it sits in the L2 (50 MiB on an H100);
loads use ``.cg`` (L2, not L1).

The control (``l1``) runs the same loop on one block (NT = 1, a run-time value, so nothing leaves the loop) loaded
with ``.ca``: the tile comes from the L1, and the iteration costs the loop, the folds and the L1 trip. ``l2`` less
``l1`` is what loading the tile from the L2 adds to an iteration of a loop that is not pipelined.

``%clock64`` is read before and after the loop by each program's first thread; cycles per iteration = span /
STEPS, the median over programs and launches (spread: the programs' and launches' 10th-90th percentile over the
median); the slope (span(STEPS) - span(STEPS / 2)) / (STEPS / 2) is recorded beside it.

Output (``--out DIR``): ``micro.csv`` (name, value, unit, notes) with its provenance sidecar ``micro.yaml``,
``log.txt``, ``command.txt``, ``clocks_trace.txt``. Rows ``tileload_{l2|l1}_bn{BN}_d{D}_{B}byte_{P}cta_cycles``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import torch
import triton
import triton.language as tl

from harness.micro import _clock

#: (BN, D, bytes per element): the prefill tiles' K/V blocks (harness/kernels.py CONFIGS at head dims 64/128/256,
#: block_n 64 or 128) in 16-bit and 8-bit elements
TILES = [(64, 64, 2), (128, 128, 2), (64, 256, 2), (64, 128, 2), (64, 64, 1), (128, 128, 1), (64, 256, 1)]
WARPS = 8
BUFFER_BYTES = 8 << 20  # each of K and V


@triton.jit(do_not_specialize=["STEPS", "NT"])
def _tile_kernel(K, V, OUT, T, STEPS, NT, BN: tl.constexpr, D: tl.constexpr, CACHE: tl.constexpr):
    pid = tl.program_id(0)
    offs = tl.arange(0, BN)[:, None] * D + tl.arange(0, D)[None, :]
    mk = tl.load(K + offs)
    mv = tl.load(V + offs)
    t0 = _clock()
    for i in tl.range(0, STEPS, num_stages=1):
        base = ((i + 7 * pid) % NT).to(tl.int64) * (BN * D)
        mk = tl.maximum(mk, tl.load(K + base + offs, cache_modifier=CACHE))
        mv = tl.maximum(mv, tl.load(V + base + offs, cache_modifier=CACHE))
    t1 = _clock()
    tl.store(OUT + pid * BN * D + offs, tl.maximum(mk, mv))
    tl.store(T + pid, t1 - t0)


def measure(bn: int, d: int, nbytes: int, programs: int, level: str, steps: int, reps: int) -> dict:
    cols = d * nbytes // 2  # the tile's bytes as fp16 pairs: an 8-bit tile folds as packed fp16 (an int8 fold bound it)
    nt = BUFFER_BYTES // (bn * cols * 2)
    k = torch.randint(-100, 100, (nt * bn * cols,), device="cuda").to(torch.float16)
    v = torch.randint(-100, 100, (nt * bn * cols,), device="cuda").to(torch.float16)
    out = torch.empty(programs * bn * cols, device="cuda", dtype=torch.float16)
    spans = torch.zeros(programs, device="cuda", dtype=torch.int64)
    cache, n = (".cg", nt) if level == "l2" else (".ca", 1)

    def launch(s: int) -> list[int]:
        kern = _tile_kernel[(programs,)](k, v, out, spans, s, n, BN=bn, D=cols, CACHE=cache, num_warps=WARPS)
        torch.cuda.synchronize()
        return kern, spans.tolist()

    kern, _ = launch(4)
    (k.float().sum() + v.float().sum()).item()  # warm the L2 with both buffers
    full, half = [], []
    for _ in range(reps):
        full += launch(steps)[1]
        half += launch(steps // 2)[1]
    full.sort()
    med = statistics.median(full)
    lo, hi = full[len(full) // 10], full[(len(full) * 9) // 10]
    res = {"cycles": med / steps, "spread_pct": (hi - lo) / med * 100, "slope": (med - statistics.median(half))
           / (steps - steps // 2), "regs": getattr(kern, "n_regs", "?"), "spills": getattr(kern, "n_spills", "?")}
    ptx = str(getattr(kern, "asm", {}).get("ptx", ""))
    res["ptx"] = (f"PTX: {ptx.count('ld.global')} ld.global, {ptx.count('cp.async')} cp.async, "
                  f"{ptx.count('st.shared')} st.shared")
    del k, v, out
    return res


def cases(quick: bool) -> list[tuple[int, int, int, str]]:
    tiles = TILES[:2] if quick else TILES
    return [(bn, d, b, level) for bn, d, b in tiles for level in ("l2", "l1")]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv if argv is None else argv
    ap = argparse.ArgumentParser(prog="python -m harness.tileload", description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for micro.csv and the rest (created)")
    ap.add_argument("--quick", action="store_true", help="two tiles, 256 steps, 2 launches (smoke run)")
    ap.add_argument("--steps", type=int, default=0, help="loop iterations per launch (default 1024; quick 256)")
    ap.add_argument("--reps", type=int, default=0, help="launches per kernel (default 3; quick 2)")
    a = ap.parse_args(argv[1:])
    steps = a.steps or (256 if a.quick else 1024)
    reps = a.reps or (2 if a.quick else 3)
    if steps < 2 or reps < 1:
        ap.error("--steps must be at least 2 and --reps at least 1")
    from harness.bench import ClockSampler, micro_table
    from harness.rows import CampaignLog

    log = CampaignLog(a.out, "harness.tileload", argv)
    if not torch.cuda.is_available():
        log("no CUDA device")
        return 1
    clocks = ClockSampler(os.path.join(a.out, "clocks_trace.txt"))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    note = {"method": "%clock64 read by each program's first thread before and after its loop (harness.micro._clock); "
                      "cycles per iteration = span / steps", "steps": steps, "launches_per_kernel": reps,
            "statistic": "median over programs and launches; spread_pct = (p90 - p10) / median * 100; slope = "
                         "(median span(steps) - median span(steps/2)) / (steps/2)",
            "grid": f"1, {sms} and {2 * sms} programs of {WARPS} warps",
            "inputs": f"K and V buffers of {BUFFER_BYTES >> 20} MiB each (random integers, fp16 or int8), read once "
                      "before the timed launches (warm L2)"}
    table, sidecar = micro_table(a.out, argv, log, note, {"quick": a.quick},
                                 "one row per (level, tile, programs): value = median SM cycles per iteration of a "
                                 "loop that is not pipelined and loads a K and a V tile of [BN, D] elements of B "
                                 "bytes; l1 rows are the control (one block, .ca) to subtract")
    sidecar(False)
    for bn, d, nbytes, level in cases(a.quick):
        for programs in (1, sms, 2 * sms):
            r = measure(bn, d, nbytes, programs, level, steps, reps)
            name = f"tileload_{level}_bn{bn}_d{d}_{nbytes}byte_{programs}cta_cycles"
            per_iter = 2 * bn * d * nbytes
            source = f"L2 (.cg), buffer of {BUFFER_BYTES >> 20} MiB each" if level == "l2" else \
                "L1 control (.ca, one block)"
            table.add({"name": name, "value": r["cycles"], "unit": "cycles per iteration",
                       "notes": f"{programs} programs of {WARPS} warps; {per_iter} bytes per iteration (K and V "
                                f"tiles {bn}x{d}, {nbytes} byte); {source}; "
                                f"spread {r['spread_pct']:.1f}%, slope {r['slope']:.1f}; {r['regs']} registers, "
                                f"{r['spills']} spills; {r['ptx']}"}, flush=True)
            log(f"{name}: {r['cycles']:.0f} (spread {r['spread_pct']:.1f}%, slope {r['slope']:.0f})")
        sidecar(False)
    clocks.stop()
    sidecar(True)
    log(f"done in {log.elapsed():.0f} s, {len(table.rows)} rows")
    log.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
