"""Chrome / Perfetto trace of a chip run: work units on a sample of cores, plus memory tracks.

Layout: process 1 "memory" holds two counter tracks, the HBM and L2-port
bandwidth in use (TB/s) between events of the chip's event loop; then one
process per sampled core — the first ``CORE_SAMPLE`` cores, which the process
names state — with one thread per unit slot (a unit holds one or more tile streams). Each work unit is a complete
("X") event named ``b{batch} h{head} q{query block} s{split}`` (combine units
``combine``), with its bound, HBM bytes and L2-hit bytes as args. Time in
microseconds at the config's clock, as in ``perfetto.py``.
"""

from __future__ import annotations

import numpy as np

from vfasim.chip.fluid import BOUNDS, LaunchTimes
from vfasim.chip.run import ChipResult
from vfasim.hw.config import HardwareConfig

CORE_SAMPLE = 8
MEMORY_PID = 1


def chip_trace(res: ChipResult, hw: HardwareConfig) -> dict:
    us = 1.0 / (hw.clock_ghz * 1e3)
    cores = hw.chip.cores if hw.chip is not None else 1
    shown = min(cores, CORE_SAMPLE)
    out = [_meta(MEMORY_PID, 0, "process_name", "memory")]
    for c in range(shown):
        out.append(_meta(2 + c, 0, "process_name", f"core {c} (cores 0-{shown - 1} of {cores} shown)"))
        out += [_meta(2 + c, s, "thread_name", f"slot {s}") for s in range(res.slots_per_core)]
    names = [f"b{b} h{h} q{q} s{s}" for b, h, q, s in res.launch.label.tolist()]
    out += _units(res.times, names, shown, cores, us)
    if res.combine is not None:
        out += _units(res.combine, ["combine"] * res.combine.end.size, shown, cores, us)
    for times in (t for t in (res.times, res.combine) if t is not None):
        out += _counters(times, hw.clock_ghz, us)
    return {"traceEvents": out, "displayTimeUnit": "ns"}


def _meta(pid: int, tid: int, what: str, name: str) -> dict:
    return {"ph": "M", "name": what, "pid": pid, "tid": tid, "args": {"name": name}}


def _units(times: LaunchTimes, names: list[str], shown: int, cores: int, us: float) -> list[dict]:
    pick = np.flatnonzero(times.core < shown)
    return [{"ph": "X", "name": names[u], "cat": "unit", "pid": 2 + int(times.core[u]),
             "tid": int(times.slot[u]) // cores, "ts": float(times.start[u]) * us,
             "dur": float(times.end[u] - times.start[u]) * us,
             "args": {"bound": BOUNDS[int(times.bound[u])], "hbm_bytes": float(times.hbm_bytes[u]),
                      "l2_hit_bytes": float(times.l2_hit_bytes[u])}} for u in pick.tolist()]


def _counters(times: LaunchTimes, clock_ghz: float, us: float) -> list[dict]:
    tbps = clock_ghz * 1e9 / 1e12  # bytes per cycle -> TB/s
    return [{"ph": "C", "name": "bandwidth", "pid": MEMORY_PID, "tid": 0, "ts": t * us,
             "args": {"HBM TB/s": hbm * tbps, "L2 port TB/s": l2 * tbps}} for t, hbm, l2 in times.samples]
