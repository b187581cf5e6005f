"""The SM clock and power an attention kernel runs at when it runs back to back, not in timed bursts.

Usage on the GPU machine (repository root)::

    python3 -m harness.sustained --out /tmp/sustained --seconds 6

Each case calls one kernel in a tight loop (no L2 flush, no sleep between calls) for ``--seconds`` after a one-second
warm-up, while ``nvidia-smi`` samples the SM clock, power and temperature every 100 ms. ``sustained.csv`` has, per
case, the calls made, the mean time per call, and the median, 10th and 90th percentile SM clock and the median power
over the samples taken inside the loop. The campaigns' timed calls are short bursts between L2 flushes and host
gaps; this says whether the clock they ran at (``clocks_trace.txt``) holds under continuous load.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import threading
import time

from harness.rows import write_rows

FIELDS = "clocks.sm,power.draw,temperature.gpu"
#: (kernel, dtype, head_dim, batch, heads, kv_heads, query rows, keys): the FA3-regime shape at 8K tokens, non-causal,
#: and the chain phase's launch of one 128-row query block per SM on one K/V head of 16K keys (read from L2)
KERNELS = ("triton_fa2", "triton_vfa_attn", "sdpa_flash", "sdpa_cudnn")
CASES = [(k, "fp16", d, 2, 2048 // d, 2048 // d, 8192, 8192) for k in KERNELS for d in (128, 64)] + \
        [("triton_fa2", "fp8_e4m3", 128, 2, 16, 16, 8192, 8192), ("triton_fa2", "fp16", 128, 1, 132, 1, 128, 16384)]


class Sampler:
    def __init__(self) -> None:
        self.samples: list[tuple[float, float, float, float]] = []
        self.proc = subprocess.Popen(["nvidia-smi", f"--query-gpu={FIELDS}", "--format=csv,noheader,nounits",
                                      "-lms", "100"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                clock, power, temp = (float(p) for p in line.strip().split(","))
            except ValueError:
                continue
            self.samples.append((time.time(), clock, power, temp))

    def between(self, t0: float, t1: float) -> list[tuple[float, float, float, float]]:
        return [s for s in list(self.samples) if t0 <= s[0] <= t1]

    def stop(self) -> None:
        self.proc.terminate()


def call_for(kernel: str, dtype: str, d: int, b: int, h: int, hkv: int, nq: int, nk: int):
    from harness import attention as A

    q, k, v = A.Inputs(A.Case(b, h, hkv, nq, nk, d, False, "sustained"), seed=7).get(dtype)
    if kernel.startswith("sdpa"):
        return A.sdpa_call(kernel, q, k, v, False)
    mode = "fa2" if kernel == "triton_fa2" else "vfa"
    return A.triton_calls(mode, q, k, v, False)[kernel]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for sustained.csv (created)")
    ap.add_argument("--seconds", type=float, default=6.0, help="seconds of back-to-back calls per case")
    a = ap.parse_args(argv)
    if not a.seconds > 0:
        ap.error(f"--seconds must be above 0, got {a.seconds}")
    import torch

    os.makedirs(a.out, exist_ok=True)
    sampler = Sampler()
    rows = []
    for kernel, dtype, d, b, h, hkv, nq, nk in CASES:
        try:
            fn = call_for(kernel, dtype, d, b, h, hkv, nq, nk)
        except (RuntimeError, ValueError, NotImplementedError) as e:
            print(f"{kernel} {dtype} d{d}: refused ({str(e).splitlines()[0][:100]})", flush=True)
            continue
        fn()
        torch.cuda.synchronize()
        warm = time.time() + 1.0
        while time.time() < warm:
            fn()
        torch.cuda.synchronize()
        t0, calls = time.time(), 0
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        while time.time() - t0 < a.seconds:
            for _ in range(8):
                fn()
            calls += 8
            torch.cuda.synchronize()
        end.record()
        torch.cuda.synchronize()
        t1 = time.time()
        inside = sampler.between(t0 + 0.2, t1)
        clocks = sorted(s[1] for s in inside)
        row = {"kernel": kernel, "dtype": dtype, "head_dim": d, "batch": b, "heads": h, "kv_heads": hkv,
               "seq_len_q": nq, "seq_len": nk, "causal": False, "calls": calls,
               "us_per_call": round(start.elapsed_time(end) * 1e3 / calls, 3),
               "samples": len(clocks),
               "sm_clock_mhz_median": statistics.median(clocks) if clocks else "",
               "sm_clock_mhz_p10": clocks[len(clocks) // 10] if clocks else "",
               "sm_clock_mhz_p90": clocks[(9 * len(clocks)) // 10] if clocks else "",
               "power_w_median": statistics.median(s[2] for s in inside) if inside else "",
               "temperature_c_max": max(s[3] for s in inside) if inside else ""}
        rows.append(row)
        print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)
        del fn
        torch.cuda.empty_cache()
        time.sleep(1.0)
    sampler.stop()
    if not rows:
        raise SystemExit("every case was refused: nothing to write")
    write_rows(os.path.join(a.out, "sustained.csv"), rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
