"""Timing, the run budget, the clock sampler and the provenance record (torch needed, no vfasim).

Timing method (``Timer.time``): CUDA events around each call. Before every timed call the L2 is
flushed by zeroing a buffer of 4x the L2 size, then the GPU is held by ``torch.cuda._sleep``
so that the host has queued the timed call before the GPU reaches it (so the events measure the
GPU, not the Python launch path). Warm-up calls first; the median of ``reps`` calls is reported
with the spread (p80 - p20) / median.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from harness.rows import MICRO, Table, chip_name, summarize, write_sidecar


class Budget:
    """Wall-clock budget of one run: phases ask before each case whether it still fits."""

    def __init__(self, seconds: float) -> None:
        self.t0 = time.monotonic()
        self.seconds = seconds

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def left(self) -> float:
        return self.seconds - self.elapsed()

    def fits(self, estimate_s: float) -> bool:
        return self.left() > estimate_s


@dataclass
class Timing:
    median_us: float
    spread_pct: float
    reps: int


def reps_for(t_us: float) -> int:
    """>= 20 reps below 5 ms a call, fewer (>= 5) for long calls."""
    if t_us < 1000:
        return 30
    if t_us < 5000:
        return 20
    return max(5, min(20, int(100_000 / t_us)))


class Timer:
    def __init__(self, flush: bool = True) -> None:
        props = torch.cuda.get_device_properties(0)
        self.l2 = int(getattr(props, "L2_cache_size", 50 << 20))
        self.flush = flush
        self.buf = torch.empty(max(4 * self.l2, 64 << 20) // 4, dtype=torch.int32, device="cuda")
        self.sleep_cycles = 100_000  # ~50-70 us at 1.4-2 GHz
        self.warmups = 3

    def _one(self, fn, start, end):
        if self.flush:
            self.buf.zero_()
        torch.cuda._sleep(self.sleep_cycles)
        start.record()
        fn()
        end.record()

    def time(self, fn, reps: int | None = None, warmups: int | None = None) -> Timing:
        """Median per-call GPU time of ``fn`` (µs); ``reps`` None: chosen from the warm-up time."""
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(warmups or self.warmups)]
        for s, e in ev:
            self._one(fn, s, e)
        torch.cuda.synchronize()
        est = min(s.elapsed_time(e) for s, e in ev) * 1000.0
        n = reps or reps_for(est)
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
        torch.cuda._sleep(2_000_000)  # ~1 ms head start for the host
        for s, e in ev:
            self._one(fn, s, e)
        torch.cuda.synchronize()
        med, spread = summarize([s.elapsed_time(e) * 1000.0 for s, e in ev])
        return Timing(med, spread, n)


def cuda_kernels(call, calls: int) -> list[dict]:
    """``torch.profiler`` around ``calls`` calls of ``call``: one row per CUDA kernel launched, its name
    (``cuda_kernel``), launches and GPU microseconds per call."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
    return [{"cuda_kernel": ev.key[:200], "launches_per_call": ev.count / calls,
             "us_per_call": ev.device_time_total / calls}
            for ev in prof.key_averages() if ev.device_type.name == "CUDA" and ev.count]


@dataclass
class PairTiming:
    a: Timing
    b: Timing
    ratio: float  # median over reps of (a's time / b's time) in that rep
    ratio_spread_pct: float


def time_pair(timer: "Timer", fa, fb, reps: int | None = None) -> PairTiming:
    """Two calls timed in alternation, each rep one of each (order swapped every rep, so a clock drift weighs on both
    alike), L2 flushed before every call; the ratio of the two in each rep, summarized as ``Timer.time`` does."""
    first_a, first_b = timer.time(fa, reps=1), timer.time(fb, reps=1)  # warm-ups and compiles
    n = reps or reps_for(max(first_a.median_us, first_b.median_us))
    ev = [[(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(2)]
          for _ in range(n)]
    torch.cuda._sleep(2_000_000)
    for i, (ea, eb) in enumerate(ev):
        for fn, (s, e) in ((fa, ea), (fb, eb)) if i % 2 == 0 else ((fb, eb), (fa, ea)):
            timer._one(fn, s, e)
    torch.cuda.synchronize()
    ta = [s.elapsed_time(e) * 1000.0 for (s, e), _ in ev]
    tb = [s.elapsed_time(e) * 1000.0 for _, (s, e) in ev]
    med_a, spread_a = summarize(ta)
    med_b, spread_b = summarize(tb)
    ratio, spread = summarize([x / y for x, y in zip(ta, tb)])
    return PairTiming(Timing(med_a, spread_a, n), Timing(med_b, spread_b, n), ratio, spread)


class ClockSampler:
    """nvidia-smi sampled every 200 ms in the background; lines kept with host times."""

    FIELDS = "clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu"

    def __init__(self, path: str) -> None:
        self.samples: list[tuple[float, list[str]]] = []
        self.path = path
        self.proc = None
        try:
            self.proc = subprocess.Popen(["nvidia-smi", f"--query-gpu={self.FIELDS}", "--format=csv,noheader,nounits",
                                          "-lms", "200"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError:
            return
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        with open(self.path, "w") as log:
            log.write(f"# host_time_s,{self.FIELDS}  (nvidia-smi -lms 200; host_time_s = time.time())\n")
            for line in self.proc.stdout:
                t = time.time()
                parts = [p.strip() for p in line.strip().split(",")]
                self.samples.append((t, parts))
                log.write(f"{t:.3f}," + ",".join(parts) + "\n")
                log.flush()

    def sm_clocks(self, t0: float, t1: float) -> list[float]:
        out = []
        for t, parts in list(self.samples):
            if t0 <= t <= t1:
                try:
                    out.append(float(parts[0]))
                except (ValueError, IndexError):
                    pass
        return out

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def _smi(fields: str) -> dict[str, str]:
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=20).stdout.strip().splitlines()[0]
        return dict(zip(fields.split(","), [p.strip() for p in out.split(",")]))
    except Exception as e:  # noqa: BLE001 - provenance is best effort, and says so
        return {"error": f"{type(e).__name__}: {e}"}


def provenance(argv: list[str], timing_note: dict, extra: dict | None = None) -> dict:
    """Everything a table's sidecar records about where and how it was measured."""
    import triton

    props = torch.cuda.get_device_properties(0)
    clocks = _smi("clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,clocks.applications.graphics,"
                  "clocks.applications.memory")
    state = _smi("driver_version,persistence_mode,compute_mode,power.limit,temperature.gpu,pstate")
    state["clocks_event_reasons_active"] = _smi("clocks_event_reasons.active").get("clocks_event_reasons.active",
                                                                                  "unavailable")
    return {
        "gpu": torch.cuda.get_device_name(0),
        "sm_count": props.multi_processor_count,
        "l2_bytes": int(getattr(props, "L2_cache_size", 0)),
        "memory_bytes": int(props.total_memory),
        "compute_capability": f"{props.major}.{props.minor}",
        "clocks": {"read_at_start": clocks, "note": "read with nvidia-smi, not set; see clocks_trace.txt"},
        "clocks_locked": False,
        "gpu_state": state,
        "driver": state.get("driver_version", "?"),
        "cuda": torch.version.cuda,
        "cudnn": str(torch.backends.cudnn.version()),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": sys.version.split()[0],
        "host": platform.platform(),
        "date_utc": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": " ".join(["python", "-m", "harness.run", *argv[1:]]),
        "outer_command": os.environ.get("HARNESS_OUTER_COMMAND", "not given"),
        "timing": timing_note,
        **(extra or {}),
    }


def micro_table(out: str, argv: list[str], log, note: dict, extra: dict, about: str) -> tuple[Table, Callable]:
    """``micro.csv`` (schema ``MICRO``) in ``out``, and the function that writes its sidecar (``sidecar(finished)``:
    ``provenance`` with ``extra``, the GPU's chip name and the log's command, ``about``, the rows so far and the
    seconds since the log began); logs the device line first."""
    dev = torch.cuda.get_device_name(0)
    base = provenance(argv, note, {**extra, "chip": chip_name(dev)})
    base["command"] = log.command
    log(f"device {dev}, {base['sm_count']} SMs; driver {base['driver']}, cuda {base['cuda']}, torch {base['torch']}, "
        f"triton {base['triton']}")
    table = Table(os.path.join(out, "micro.csv"), MICRO)

    def sidecar(finished: bool) -> None:
        table.flush()
        write_sidecar(table.path, {"table": "micro.csv", **base, "finished": finished, "rows": len(table.rows),
                                   "elapsed_s": round(log.elapsed(), 1), "about": about})

    return table, sidecar
