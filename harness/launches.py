"""What each further kernel of a call costs, and which kernels each attention call launches.

Usage on the GPU machine (repository root)::

    python3 -m harness.launches --out DIR [--quick]

Why: the chip model prices a call's first launch at the chip's ``launch_overhead_us`` (one empty kernel between two
events) and each further kernel of the call (a split's combine, a side launch such as cuDNN's Memset, the attention
kernel after VFA's key-summary pre-pass) at ``next_launch_us``, the GPU time of an empty kernel queued behind others.
This campaign measures both under the campaigns' own timing, and lists the kernels each attention call launches.

- ``calls.csv``: calls of k = 1, 2, 3, 4 empty Triton kernels, and of a 4 KiB fill (``torch.Tensor.zero_``) then
  one empty kernel, each timed as the campaigns time a call (``harness.bench.Timer``: L2 flushed, a sleep kernel
  ahead so the host runs ahead, CUDA events, median): the slope over k is what a further kernel adds.
- ``profile.csv``: SDPA's flash, efficient and cuDNN backends and this project's Triton FA2 and VFA (pre-pass and
  attention kernel, as ``harness.attention.triton_calls`` times them) at prefill and decode shapes, fp16 and bf16:
  every CUDA kernel a call launches (``torch.profiler`` around 5 calls after 3 warm-ups: launches and GPU
  microseconds per call), and the call timed as above (``call_us``), so that what a call costs beyond its kernels'
  GPU time can be read beside its launch count.
"""

from __future__ import annotations

import argparse
import sys

#: (batch, heads, kv_heads, head_dim, seq_len_q, seq_len, causal) of the profiled calls: prefill small and large,
#: causal and not; decode of one and of four queries, short and long K/V, GQA and not
SHAPES = ((1, 8, 8, 128, 512, 512, False), (1, 8, 8, 128, 512, 512, True), (4, 32, 32, 64, 2048, 2048, True),
          (2, 16, 16, 128, 4096, 4096, False), (1, 32, 8, 128, 1, 2048, False), (8, 32, 32, 128, 1, 512, False),
          (8, 32, 8, 128, 4, 8192, False), (32, 12, 12, 128, 2, 1500, False), (1, 8, 1, 128, 1, 65536, False))
QUICK_SHAPES = SHAPES[:1] + SHAPES[4:5]
KERNELS = ("sdpa_flash", "sdpa_efficient", "sdpa_cudnn", "triton_fa2", "triton_vfa")
DTYPES = ("fp16", "bf16")
CALL_COLUMNS = ["case", "kernels", "median_us", "spread_pct", "reps"]
PROFILE_COLUMNS = ["kernel", "dtype", "batch", "heads", "kv_heads", "head_dim", "seq_len_q", "seq_len", "causal",
                   "call_us", "call_spread_pct", "cuda_kernel", "launches_per_call", "us_per_call"]


def empty_calls(timer, log) -> list[dict]:
    """Calls of 1-4 empty kernels, and a fill then an empty kernel, timed as the campaigns time a call."""
    import torch

    from harness.micro import _empty_kernel

    y = torch.zeros(1, device="cuda", dtype=torch.float32)
    small = torch.empty(1024, device="cuda", dtype=torch.float32)

    def empties(k: int):
        def fn():
            for _ in range(k):
                _empty_kernel[(1,)](y)
        return fn

    def fill_then_empty():
        small.zero_()
        _empty_kernel[(1,)](y)

    rows = []
    for case, kernels, fn in [(f"empty_x{k}", k, empties(k)) for k in (1, 2, 3, 4)] \
            + [("fill_then_empty", 2, fill_then_empty)]:
        fn()
        t = timer.time(fn, reps=200)
        rows.append({"case": case, "kernels": kernels, "median_us": round(t.median_us, 4),
                     "spread_pct": round(t.spread_pct, 2), "reps": t.reps})
        log(f"{case}: {t.median_us:.3f} us (spread {t.spread_pct:.1f}%)")
    return rows


def profiled_calls(timer, log, shapes) -> list[dict]:
    """Every CUDA kernel each attention call launches, and the call's time."""
    import torch

    from harness.attention import Case, Inputs, sdpa_call, triton_calls
    from harness.bench import cuda_kernels

    rows = []
    for i, (b, h, hk, d, sq, sk, causal) in enumerate(shapes):
        inputs = Inputs(Case(b, h, hk, sq, sk, d, causal, "launches"), 9000 + i)
        for dtype in DTYPES:
            q, k, v = inputs.get(dtype)
            for kern in KERNELS:
                try:
                    if kern.startswith("sdpa"):
                        call = sdpa_call(kern, q, k, v, causal)
                    else:
                        call = triton_calls(kern.split("_")[1], q, k, v, causal)[kern]
                    for _ in range(3):
                        call()
                    torch.cuda.synchronize()
                    launched = cuda_kernels(call, calls=5)
                    t = timer.time(call)
                except Exception as e:  # noqa: BLE001 - a refused backend or shape is logged, the run goes on
                    log(f"{kern} {dtype} {(b, h, hk, d, sq, sk, causal)} failed: {type(e).__name__}: {e}"[:300])
                    continue
                for r in launched:
                    rows.append({"kernel": kern, "dtype": dtype, "batch": b, "heads": h, "kv_heads": hk,
                                 "head_dim": d, "seq_len_q": sq, "seq_len": sk, "causal": str(causal).lower(),
                                 "call_us": round(t.median_us, 3), "call_spread_pct": round(t.spread_pct, 2),
                                 "cuda_kernel": r["cuda_kernel"], "launches_per_call": r["launches_per_call"],
                                 "us_per_call": round(r["us_per_call"], 4)})
                log(f"{kern} {dtype} {(b, h, hk, d, sq, sk, causal)}: call {t.median_us:.1f} us; "
                    + "; ".join(f"{r['cuda_kernel'][:40]} x{r['launches_per_call']:g} {r['us_per_call']:.1f}us"
                                for r in launched))
            inputs.drop(dtype)
        del inputs
        torch.cuda.empty_cache()
    return rows


def split_calls(evs: list[tuple[str, float, float]], pre_names: list[str], calls: int) -> list[dict] | None:
    """``calls`` calls' device events (name, start, end; in start order), each call's first ones named ``pre_names``:
    per kernel after those, its name, its start after the last of them ends and its duration (medians over the
    calls); None where the calls did not run the same kernels (the split cannot be read)."""
    import statistics

    if not pre_names or not evs or len(evs) % calls:
        return None
    m = len(evs) // calls
    per_call = [evs[i * m:(i + 1) * m] for i in range(calls)]
    names = [n for n, _, _ in per_call[0][len(pre_names):]]
    if not names or any([n for n, _, _ in c] != pre_names + names for c in per_call):
        return None
    out = []
    for j, name in enumerate(names):
        starts = [c[len(pre_names) + j][1] - c[len(pre_names) - 1][2] for c in per_call]
        durs = [c[len(pre_names) + j][2] - c[len(pre_names) + j][1] for c in per_call]
        out.append({"order": j, "cuda_kernel": name[:200], "start_us": max(0.0, statistics.median(starts)),
                    "us": statistics.median(durs)})
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv if argv is None else argv
    ap = argparse.ArgumentParser(prog="python -m harness.launches", description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for calls.csv, profile.csv and the rest (created)")
    ap.add_argument("--quick", action="store_true", help="two shapes (smoke run)")
    a = ap.parse_args(argv[1:])
    from harness.bench import Timer
    from harness.campaign import measurement

    note = {"method": "harness.bench.Timer (L2 flushed, sleep kernel ahead, CUDA events, median); kernels per call: "
                      "torch.profiler around 5 calls after 3 warm-ups",
            "inputs": "standard normal (seeded), fp16 and bf16"}
    m = measurement(a.out, "harness.launches", argv, note, {"quick": a.quick})
    if m is None:
        return 1
    timer = Timer()
    return m.finish((("calls.csv", empty_calls(timer, m.log), CALL_COLUMNS),
                     ("profile.csv", profiled_calls(timer, m.log, QUICK_SHAPES if a.quick else SHAPES),
                      PROFILE_COLUMNS)))

if __name__ == "__main__":
    raise SystemExit(main())
