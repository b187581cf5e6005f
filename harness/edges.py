"""Lengths on and just off a tile edge: ``python3 -m harness.edges --out DIR [--quick]``.

Why: SDPA's flash backend runs causal prefill at lengths that are not a multiple of its tile (257, 700, 1,000 tokens)
25-39% slower than the model prices it, while the same lengths without a mask, and causal lengths that are a multiple
of the tile (256, 384, 1,024), agree within a few per cent. This campaign times each kernel at pairs of lengths, one
on a multiple of 128 and the next ones past it, causal and not, at the same batch and heads, so that what one extra
token costs can be read from the table and not guessed.

Kernels: SDPA's flash, efficient and cuDNN backends and this project's Triton FA2 (``harness.kernels``), fp16, head
dims 64 and 128, 16 x 32 heads (one K/V head per query head: the efficient backend refuses GQA) and, for flash, 16 x
32/8 (GQA). Output in ``--out``: ``attention.csv`` (the validation schema; CUDA events, L2 flushed, median),
``profile.csv`` (every CUDA kernel each case launches, from ``torch.profiler``, with its template name: it says which
instantiation ran), ``skipped.csv``, sidecars with the provenance, ``clocks_trace.txt``, ``command.txt``, ``log.txt``.
"""

from __future__ import annotations

import argparse
import os
import sys

from harness.rows import ATTENTION, PROFILE, SKIPPED, CampaignLog, Table, chip_name, write_sidecar

#: on a multiple of 128, one past it, and lengths of the other campaigns that are on no tile edge
LENGTHS = (256, 257, 320, 384, 385, 512, 513, 700, 1000, 1024, 1025, 3000, 3072)
QUICK_LENGTHS = (256, 257)
KERNELS = ("sdpa_flash", "sdpa_efficient", "sdpa_cudnn", "triton_fa2")


def grid(quick: bool = False) -> list[tuple[str, int, int, int, int, int, bool]]:
    """Cases as (kernel, batch, heads, kv_heads, seq_len, head_dim, causal), the lengths of one shape in a row so a
    budget cut keeps whole pairs."""
    lengths = QUICK_LENGTHS if quick else LENGTHS
    shapes = [(kern, 16, 32, 32) for kern in KERNELS] + [("sdpa_flash", 16, 32, 8)]
    return [(kern, b, h, hk, n, d, c) for d in (64, 128) for c in (True, False) for kern, b, h, hk in shapes
            for n in lengths]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(prog="python3 -m harness.edges", description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for the tables (created)")
    ap.add_argument("--quick", action="store_true", help="two lengths only (smoke run)")
    ap.add_argument("--budget-s", type=float, default=300.0, help="wall-clock budget; later cases go to skipped.csv")
    a = ap.parse_args(argv)

    import torch

    from harness import kernels
    from harness.attention import Case, Inputs, sdpa_call
    from harness.bench import ClockSampler, Timer, cuda_kernels, provenance

    log = CampaignLog(a.out, "harness.edges", ["", *argv])
    chip = chip_name(torch.cuda.get_device_name(0))
    timer = Timer(flush=True)
    clocks = ClockSampler(os.path.join(a.out, "clocks_trace.txt"))
    tables = {"attention": Table(os.path.join(a.out, "attention.csv"), ATTENTION),
              "profile": Table(os.path.join(a.out, "profile.csv"), PROFILE),
              "skipped": Table(os.path.join(a.out, "skipped.csv"), SKIPPED)}
    note = {"method": "CUDA events around each call (harness/bench.py Timer: L2 flushed before every call)",
            "warmups": timer.warmups, "statistic": "median; spread_pct = (p80 - p20) / median * 100"}
    base = provenance(["", *argv], note, {"chip": chip})
    base["command"] = log.command
    about = {"attention": "forward latency per call (us), fp16, seq_len_q = seq_len",
             "profile": "torch.profiler around 3 calls of each case after its timing (warm L2): every CUDA kernel "
                        "launched, launches and GPU us per call",
             "skipped": "cases not run and why"}

    def sidecars(finished: bool) -> None:
        for name, t in tables.items():
            t.flush()
            write_sidecar(t.path, {"table": f"{name}.csv", **base, "finished": finished, "rows": len(t.rows),
                                   "about": about[name]})

    cases = grid(a.quick)
    sidecars(False)
    log(f"{chip}: {len(cases)} cases; torch {torch.__version__}")
    try:
        for i, (kern, b, h, hk, n, d, c) in enumerate(cases):
            row = {"dtype": "fp16", "head_dim": d, "causal": c, "seq_len": n, "batch": b, "heads": h,
                   "kv_heads": hk, "seq_len_q": n}
            if log.elapsed() > a.budget_s:
                tables["skipped"].add({"table": "attention", "kernel": kern, **row, "mode": "prefill",
                                       "reason": f"over the run's budget of {a.budget_s:.0f} s"})
                continue
            q, k, v = Inputs(Case(b, h, hk, n, n, d, c, "edges"), 5000 + i).get("fp16")
            try:
                if kern == "triton_fa2":
                    out = torch.empty_like(q)

                    def fn():
                        return kernels.attention(q, k, v, c, "fa2", out=out)
                    fn()
                else:
                    fn = sdpa_call(kern, q, k, v, c)
                t = timer.time(fn)
            except Exception as e:  # noqa: BLE001 (a refused shape is recorded, the run goes on)
                tables["skipped"].add({"table": "attention", "kernel": kern, **row, "mode": "prefill",
                                       "reason": f"{type(e).__name__}: {str(e).splitlines()[0][:250]}"})
                log(f"case {i} {kern}: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
                continue
            tables["attention"].add({"chip": chip, "kernel": kern, **row, "mode": "prefill", "metric": "latency",
                                     "value": round(t.median_us, 3), "unit": "us",
                                     "spread_pct": round(t.spread_pct, 2), "reps": t.reps})
            case = {k_: row[k_] for k_ in ("batch", "heads", "kv_heads", "head_dim", "seq_len_q", "seq_len", "causal")}
            for launched in cuda_kernels(fn, calls=3):
                tables["profile"].add({"kernel": kern, **case, **launched})
            log(f"case {i} {kern} b{b} h{h}/{hk} n{n} d{d} {'causal' if c else 'full'}: {t.median_us:.1f} us")
            if i % 10 == 9:
                sidecars(False)
    finally:
        clocks.stop()
        sidecars(True)
        log.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
