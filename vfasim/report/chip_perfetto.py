"""Chrome / Perfetto trace of a chip run: work units on some cores, their ops by pipeline, memory tracks.

Layout: process 1 "memory" holds two counter tracks, the HBM and L2-port
bandwidth in use (TB/s) between events of the chip's event loop; then one
process per core shown — the first ``CORE_SAMPLE`` cores, or the cores asked
for, which the process names state — with one thread per unit slot (a unit
holds one or more tile streams). With the ops of the cores asked for
(``chip.run.core_ops``) each slot also has a thread per pipeline
(``slot 0 · vector``) holding its units' ops, named by op kind with the unit and
``cycles`` in args; fused ops (no pipeline time) are left out. Each work unit is a complete ("X") event named by what bounds it
(``tensor-bound unit``; combine units ``combine``), so Perfetto aggregates and
colours by bound, with ``batch``, ``head``, ``qblock``, ``split``,
``start_cycle``, ``cycles``, HBM bytes and L2-hit bytes as args. Time in integer
nanoseconds at the config's clock, mapped from cycles once per boundary, as in
``perfetto.py`` (the same size limit and window apply).
"""

from __future__ import annotations

import numpy as np

from vfasim.chip.fluid import BOUNDS, LaunchTimes
from vfasim.chip.run import ChipResult, CoreOps
from vfasim.hw.config import HardwareConfig
from vfasim.report.perfetto import Window, check_size, document, in_window, ns_of, us
from vfasim.trace import KIND_NAMES

CORE_SAMPLE = 8
MEMORY_PID = 1


def chip_trace(res: ChipResult, hw: HardwareConfig, window: Window | None = None, ops: CoreOps | None = None,
               cores: list[int] | None = None) -> dict:
    """The trace document of a chip run (see the module's note): ``cores`` shown (default: the first
    ``CORE_SAMPLE``), with ``ops`` on them if given."""
    total = hw.chip.cores if hw.chip is not None else 1
    shown = cores if cores is not None else list(range(min(total, CORE_SAMPLE)))
    which = f"cores {', '.join(map(str, shown))}" if cores is not None else f"cores 0-{shown[-1]}"
    launches = [(t, labels) for t, labels in ((res.times, res.launch.label), (res.combine, None)) if t is not None]
    picks = [np.flatnonzero(np.isin(t.core, shown) & in_window(t.start, t.end, window)) for t, _ in launches]
    samples = [s for t, _ in launches for s in t.samples if window is None or window[0] <= s[0] < window[1]]
    op_pick = np.flatnonzero((ops.pipeline >= 0) & in_window(ops.start, ops.end, window)) if ops else np.empty(0, int)
    check_size(sum(p.size for p in picks) + len(samples) + op_pick.size, window, res.latency_cycles)
    out = [_meta(MEMORY_PID, 0, "process_name", "memory")]
    for c in shown:
        out.append(_meta(2 + c, 0, "process_name", f"core {c} ({which} of {total} shown)"))
        out += [_meta(2 + c, s, "thread_name", f"slot {s}") for s in range(res.slots_per_core)]
        out += [_meta(2 + c, _op_tid(res, ops, s, p), "thread_name", f"slot {s} · {name}")
                for s in range(res.slots_per_core) for p, name in enumerate(ops.pipeline_names)] if ops else []
    for (times, labels), pick in zip(launches, picks):
        out += _units(times, labels, pick, total, hw.clock_ghz)
    out += _ops(res, ops, op_pick, total, hw.clock_ghz) if ops else []
    out += _counters(samples, hw.clock_ghz)
    return document(out, hw.clock_ghz)


def _op_tid(res: ChipResult, ops: CoreOps, slot: int, pipeline: int) -> int:
    """The thread of ``slot``'s ops on ``pipeline``: after the slots' own threads."""
    return res.slots_per_core + slot * len(ops.pipeline_names) + pipeline


def _ops(res: ChipResult, ops: CoreOps, pick: np.ndarray, cores: int, clock_ghz: float) -> list[dict]:
    """One X event per op in ``pick``, on its unit's core and slot, on its pipeline's thread."""
    t0, t1 = ns_of(ops.start[pick], clock_ghz).tolist(), ns_of(ops.end[pick], clock_ghz).tolist()
    out = []
    for i, a, b in zip(pick.tolist(), t0, t1):
        u = int(ops.unit[i])
        slot = int(res.times.slot[u]) // cores
        out.append({"ph": "X", "name": KIND_NAMES[int(ops.kind[i])], "cat": "op", "pid": 2 + int(res.times.core[u]),
                    "tid": _op_tid(res, ops, slot, int(ops.pipeline[i])), "ts": us(a), "dur": us(b - a),
                    "args": {"unit": u, "start_cycle": float(ops.start[i]), "cycles": float(ops.end[i] - ops.start[i])}})
    return out


def _meta(pid: int, tid: int, what: str, name: str) -> dict:
    return {"ph": "M", "name": what, "pid": pid, "tid": tid, "args": {"name": name}}


def _units(times: LaunchTimes, labels: np.ndarray | None, pick: np.ndarray, cores: int, clock_ghz: float) -> list[dict]:
    """One X event per unit in ``pick``; ``labels`` ([U, 4] batch, head, query block, split) or None: combine."""
    t0, t1 = ns_of(times.start[pick], clock_ghz).tolist(), ns_of(times.end[pick], clock_ghz).tolist()
    out = []
    for u, a, b in zip(pick.tolist(), t0, t1):
        bound = BOUNDS[int(times.bound[u])]
        args: dict[str, object] = {} if labels is None else dict(zip(("batch", "head", "qblock", "split"),
                                                                     labels[u].tolist()))
        args |= {"bound": bound, "start_cycle": float(times.start[u]),
                 "cycles": float(times.end[u] - times.start[u]), "hbm_bytes": float(times.hbm_bytes[u]),
                 "l2_hit_bytes": float(times.l2_hit_bytes[u])}
        out.append({"ph": "X", "name": "combine" if labels is None else f"{bound}-bound unit", "cat": "unit",
                    "pid": 2 + int(times.core[u]), "tid": int(times.slot[u]) // cores, "ts": us(a), "dur": us(b - a),
                    "args": args})
    return out


def _counters(samples: list[tuple[float, float, float]], clock_ghz: float) -> list[dict]:
    tbps = clock_ghz * 1e9 / 1e12  # bytes per cycle -> TB/s
    return [{"ph": "C", "name": "bandwidth", "pid": MEMORY_PID, "tid": 0, "ts": us(int(ns_of(t, clock_ghz))),
             "args": {"HBM TB/s": hbm * tbps, "L2 port TB/s": l2 * tbps}} for t, hbm, l2 in samples]
