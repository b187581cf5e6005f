"""One prefill campaign's loop, shared by ``harness.edges`` and ``harness.occupancy``: each case timed (CUDA events, L2
flushed, median) into ``attention.csv`` in the validation schema, the CUDA kernels it launches into ``profile.csv``
(``torch.profiler``, template names included), refusals and budget cuts into ``skipped.csv``, sidecars with the
provenance, ``clocks_trace.txt``, ``command.txt`` and ``log.txt``. ``measurement`` opens and ``Measurement.finish``
closes a folder of tables written at the end (``harness.dispatch``, ``harness.launches``, ``harness.prepass``).

Cases are (kernel, batch, heads, kv_heads, seq_len, head_dim, causal): fp16, as many queries as keys. Kernels: SDPA's
``sdpa_flash``, ``sdpa_efficient`` and ``sdpa_cudnn`` backends and this project's ``triton_fa2``.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from harness.rows import ATTENTION, PROFILE, SKIPPED, CampaignLog, Table, chip_name, write_rows, write_sidecar

Case = tuple[str, int, int, int, int, int, bool]


@dataclass
class Measurement:
    """A folder being measured into: its log, the clocks sampled, the provenance every table's sidecar holds."""

    out: str
    log: CampaignLog
    clocks: Any  # harness.bench.ClockSampler
    base: dict

    def finish(self, tables: Iterable[tuple[str, list[Mapping[str, Any]], list[str] | None]]) -> int:
        """Stop the clocks, write each (name, rows, columns) table with its sidecar, close the log; 0."""
        self.clocks.stop()
        for name, rows, cols in tables:
            path = os.path.join(self.out, name)
            write_rows(path, rows, cols)
            write_sidecar(path, {"table": name, **self.base, "finished": True, "rows": len(rows),
                                 "elapsed_s": round(self.log.elapsed(), 1)})
        self.log(f"done in {self.log.elapsed():.0f} s")
        self.log.close()
        return 0


def measurement(out: str, module: str, argv: list[str], note: dict, extra: dict) -> Measurement | None:
    """``out`` opened for ``module``'s run (``command.txt``, ``log.txt``), the clocks sampled and the provenance taken
    (``note``: how it times, ``extra``: what it ran); None, logged, without a CUDA device."""
    import torch

    from harness.bench import ClockSampler, provenance

    log = CampaignLog(out, module, argv)
    if not torch.cuda.is_available():
        log("no CUDA device")
        log.close()
        return None
    clocks = ClockSampler(os.path.join(out, "clocks_trace.txt"))
    base = provenance(argv, note, extra)
    base["command"] = log.command
    log(f"device {base['gpu']}, {base['sm_count']} SMs; driver {base['driver']}, torch {base['torch']}, "
        f"triton {base['triton']}")
    return Measurement(out, log, clocks, base)


def campaign_main(module: str, doc: str, grid: Callable[[bool], list[Case]], seed: int, quick_help: str,
                  argv: list[str]) -> int:
    """``python3 -m <module> --out DIR [--quick] [--budget-s S]``: the campaign of ``grid`` (``doc``'s first line its
    description), timed by ``prefill_campaign``."""
    ap = argparse.ArgumentParser(prog=f"python3 -m {module}", description=doc.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for the tables (created)")
    ap.add_argument("--quick", action="store_true", help=quick_help)
    ap.add_argument("--budget-s", type=float, default=300.0, help="wall-clock budget; later cases go to skipped.csv")
    a = ap.parse_args(argv)
    return prefill_campaign(module, argv, a.out, a.budget_s, grid(a.quick), seed=seed)


def prefill_campaign(prog: str, argv: list[str], out: str, budget_s: float, cases: list[Case], seed: int) -> int:
    """Time ``cases`` in order into ``out``; a case past ``budget_s`` seconds of the run, or one a kernel refuses,
    goes to ``skipped.csv`` with its reason. Case i draws its inputs from seed ``seed + i``."""
    import torch

    from harness import kernels
    from harness.attention import Case as Shape
    from harness.attention import Inputs, sdpa_call
    from harness.bench import ClockSampler, Timer, cuda_kernels, provenance

    log = CampaignLog(out, prog, ["", *argv])
    chip = chip_name(torch.cuda.get_device_name(0))
    timer = Timer(flush=True)
    clocks = ClockSampler(os.path.join(out, "clocks_trace.txt"))
    tables = {"attention": Table(os.path.join(out, "attention.csv"), ATTENTION),
              "profile": Table(os.path.join(out, "profile.csv"), PROFILE),
              "skipped": Table(os.path.join(out, "skipped.csv"), SKIPPED)}
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

    sidecars(False)
    log(f"{chip}: {len(cases)} cases; torch {torch.__version__}")
    try:
        for i, (kern, b, h, hk, n, d, c) in enumerate(cases):
            row = {"dtype": "fp16", "head_dim": d, "causal": c, "seq_len": n, "batch": b, "heads": h,
                   "kv_heads": hk, "seq_len_q": n}
            if log.elapsed() > budget_s:
                tables["skipped"].add({"table": "attention", "kernel": kern, **row, "mode": "prefill",
                                       "reason": f"over the run's budget of {budget_s:.0f} s"})
                continue
            q, k, v = Inputs(Shape(b, h, hk, n, n, d, c, prog.rsplit(".", 1)[-1]), seed + i).get("fp16")
            try:
                if kern == "triton_fa2":
                    out_ = torch.empty_like(q)

                    def fn():
                        return kernels.attention(q, k, v, c, "fa2", out=out_)
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
