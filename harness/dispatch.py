"""When and where each program of the Triton attention kernel runs: dispatch order, time per program, the tail.

Usage on the GPU machine (repository root)::

    python3 -m harness.dispatch --out DIR [--quick]

Each case (fp16, ``harness/kernels.py`` ``attn_fwd`` with the campaigns' tiles, the FA3 paper's shapes of 16K
tokens at batch 1 and 4K at batch 4, causal and not; FA2 at head dims 64, 128 and 256, VFA's attention kernel at
256; and FA2 at 64 and 256, 16K tokens, with each program walking its key blocks from its own starting block, so
the programs of a wave do not read the same K/V tile at the same time) is first timed as the campaigns time a call
(``harness.bench.Timer``: L2 flushed, a sleep kernel before, CUDA events, median), then called ``--calls`` times
with stamps: every program writes its SM (``%smid``), ``%globaltimer`` at its start and after its O store is issued,
and the ``%clock64`` cycles between the two (``kernels.attention(stamps=...)``; without stamps the kernel compiles
as before: the stamping code is a compile-time branch).

Output (``--out DIR``): ``programs.csv`` (the first stamped call of each case, a row per program: case, mode,
causal, head_dim, seq_len, batch, heads, pid_m, pid_bh, sm, start_ns, end_ns, times from the call's first start,
and sm_cycles, the ``%clock64`` cycles between the same two points: their ratio is the SM's clock over the program),
``calls.csv`` (per case: the timed median and spread, and each stamped call's span from first start to last end),
their provenance sidecars, ``log.txt``, ``command.txt``, ``clocks_trace.txt``.
"""

from __future__ import annotations

import argparse
import sys

#: (mode, head_dim, seq_len, batch, heads, rotate): FA3-regime shapes (heads x head dim = 2048, batch x seq = 16K);
#: rotate: each program walks its unmasked key blocks from its own starting block (``kernels.attention``)
CASES = tuple(("fa2", d, 16384, 1, 2048 // d, False) for d in (64, 128, 256)) + (("vfa", 256, 16384, 1, 8, False),) \
    + tuple(("fa2", d, 4096, 4, 2048 // d, False) for d in (128, 256)) \
    + tuple(("fa2", d, 16384, 1, 2048 // d, True) for d in (64, 256))
QUICK = (("fa2", 256, 4096, 4, 8, False), ("fa2", 256, 4096, 4, 8, True))
PROGRAM_COLUMNS = ["case", "mode", "causal", "head_dim", "seq_len", "batch", "heads", "pid_m", "pid_bh", "sm",
                   "start_ns", "end_ns", "sm_cycles"]


def stamped(q, k, v, causal: bool, mode: str, kr, n_programs: int, rotate: bool):
    """One call with stamps: an int64 array [programs, 4] of (SM, start, end, SM cycles), times from the first
    start."""
    import torch

    from harness import kernels

    st = torch.full((n_programs * 4,), -1, dtype=torch.int64, device="cuda")
    kernels.attention(q, k, v, causal, mode, kr=kr, stamps=st, rotate=rotate)
    torch.cuda.synchronize()
    out = st.view(n_programs, 4).cpu().numpy()
    if (out < 0).any():
        raise RuntimeError("a program wrote no stamp")
    out[:, 1:3] -= out[:, 1].min()
    return out


def _shape(text: str) -> tuple:
    """``mode:dtype:D:seq_len:batch:heads`` as a case (mode, head_dim, seq_len, batch, heads, rotate, dtype)."""
    parts = text.split(":")
    if len(parts) != 6 or parts[0] not in ("fa2", "vfa") or parts[1] not in ("fp16", "bf16", "fp8_e4m3"):
        raise ValueError(f"expected mode:dtype:D:seq_len:batch:heads (fa2|vfa, fp16|bf16|fp8_e4m3), got {text!r}")
    d, n, b, h = (int(x) for x in parts[2:])
    return parts[0], d, n, b, h, False, parts[1]


def run_case(i: int, spec: tuple, causal: bool, timer, calls: int) -> tuple[list[dict], dict]:
    import torch

    from harness import kernels
    from harness.attention import Case, Inputs

    mode, d, n, b, h, rotate, *rest = spec
    dtype = rest[0] if rest else "fp16"
    q, k, v = Inputs(Case(b, h, h, n, n, d, causal, "dispatch"), 4000 + i).get(dtype)
    bm, bn = kernels.config_for(d, n)[:2]
    kr = kernels.krepr(k, bn) if mode == "vfa" else None
    timing = timer.time(lambda: kernels.attention(q, k, v, causal, mode, kr=kr, rotate=rotate))
    change = 0.0
    if rotate:  # the same blocks in another order: the output moves by rounding only
        ref = kernels.attention(q, k, v, causal, mode, kr=kr).float()
        change = float((kernels.attention(q, k, v, causal, mode, kr=kr, rotate=True).float() - ref).abs().max()
                       / ref.abs().max())
    n_m = -(-n // bm)
    spans, first = [], None
    for _ in range(calls):
        st = stamped(q, k, v, causal, mode, kr, n_m * b * h, rotate)
        spans.append(int(st[:, 2].max()))
        first = st if first is None else first
    label = (f"{mode}{'_rotated' if rotate else ''}{'' if dtype == 'fp16' else '_' + dtype}_d{d}_s{n}_b{b}_"
             f"{'causal' if causal else 'full'}")
    rows = [{"case": label, "mode": mode, "causal": str(causal).lower(), "head_dim": d, "seq_len": n, "batch": b,
             "heads": h, "pid_m": p % n_m, "pid_bh": p // n_m, "sm": int(sm), "start_ns": int(t0), "end_ns": int(t1),
             "sm_cycles": int(c)} for p, (sm, t0, t1, c) in enumerate(first)]
    call = {"case": label, "programs": len(rows), "timed_median_us": round(timing.median_us, 3),
            "timed_spread_pct": round(timing.spread_pct, 2), "timed_reps": timing.reps,
            "stamped_spans_us": " ".join(f"{s / 1000:.3f}" for s in spans),
            "rotated_max_change": f"{change:.2e}" if rotate else ""}
    if change > 1e-2:
        raise RuntimeError(f"{label}: the rotated walk changed the output by {change:.2e} of its largest value")
    del q, k, v, kr
    torch.cuda.empty_cache()
    return rows, call


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv if argv is None else argv
    ap = argparse.ArgumentParser(prog="python -m harness.dispatch", description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for programs.csv, calls.csv and the rest (created)")
    ap.add_argument("--quick", action="store_true", help="one small case (smoke run)")
    ap.add_argument("--calls", type=int, default=3, help="stamped calls per case (default 3)")
    ap.add_argument("--shapes", default="", help="instead of the built-in cases, 'mode:dtype:D:seq_len:batch:heads,...' "
                    "(mode fa2 or vfa, dtype fp16, bf16 or fp8_e4m3), each causal and not")
    a = ap.parse_args(argv[1:])
    if a.calls < 1:
        ap.error("--calls must be at least 1")
    try:
        shapes = [_shape(text) for text in a.shapes.split(",") if text]
    except ValueError as exc:
        ap.error(f"--shapes: {exc}")
    from harness import kernels
    from harness.bench import Timer
    from harness.campaign import measurement

    note = {"method": "each program's %smid and %globaltimer (ns) at its start and after its O store; timed "
                      "median: harness.bench.Timer (L2 flushed, sleep kernel, CUDA events)",
            "tiles": "64=128,64,8,3;128=128,128,8,3;256=128,64,8,2 (BLOCK_M, BLOCK_N, warps, stages), as the "
                     "campaigns", "stamped_calls": a.calls, "inputs": "standard normal fp16 (seeded)"}
    m = measurement(a.out, "harness.dispatch", argv, note, {"quick": a.quick})
    if m is None:
        return 1
    kernels.CONFIGS.update({64: (128, 64, 8, 3), 128: (128, 128, 8, 3), 256: (128, 64, 8, 2)})
    timer = Timer()
    programs, calls = [], []
    for i, spec in enumerate(shapes or (QUICK if a.quick else CASES)):
        for causal in (False, True):
            rows, call = run_case(2 * i + causal, spec, causal, timer, a.calls)
            programs += rows
            calls.append(call)
            m.log(f"{call['case']}: {call['programs']} programs, timed {call['timed_median_us']} us, stamped spans "
                  f"{call['stamped_spans_us']} us")
    return m.finish((("programs.csv", programs, PROGRAM_COLUMNS), ("calls.csv", calls, None)))

if __name__ == "__main__":
    raise SystemExit(main())
