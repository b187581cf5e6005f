"""What a timeline says: busy cycles and utilisation per pipeline, cycles per op kind, shares.

Definitions:
- busy cycles of a pipeline = sum of the durations of the ops it ran;
  utilisation = busy / (units × total cycles).
- bottleneck = the busiest in-order instruction stream: the pipeline with the
  highest utilisation, or, for pipelines sharing one stream (``shares_issue_with``),
  their names joined by "+" (e.g. ``vector+exp``) with their utilisations summed.
- shares = busy cycles by op class (tensor, vector, exp) over their sum: the
  quantities the VFA paper's latency-ratio figure stacks. Classing by op (not
  by pipeline) keeps exp work counted as exp even on a core whose exp runs on
  the vector unit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from vfasim.hw.config import HardwareConfig
from vfasim.sim.engine import Timeline
from vfasim.sim.schedule import EDGE_KINDS
from vfasim.sim.sums import sums_by
from vfasim.trace import KIND_NAMES, OP_KINDS, Trace

if TYPE_CHECKING:
    import pandas as pd

SHARE_CLASSES = ("tensor", "vector", "exp")


@dataclass(frozen=True)
class TimingStats:
    latency_cycles: int
    pipelines: dict[str, dict[str, float]]  # name -> busy_cycles, utilization
    ops: dict[str, int]  # op kind -> cycles
    shares: dict[str, float]  # tensor / vector / exp
    bottleneck: str


def timing_stats(trace: Trace, timeline: Timeline, hw: HardwareConfig) -> TimingStats:
    by_kind = sums_by(trace.kind, timeline.durations, len(KIND_NAMES))
    present = sums_by(trace.kind, None, len(KIND_NAMES)) > 0
    return stats_of(timeline.total_cycles, timeline.busy_cycles, by_kind, present, timeline.pipeline_names, hw)


def stats_of(total: int, busy: tuple[int, ...], by_kind: np.ndarray, present: np.ndarray,
             names: tuple[str, ...], hw: HardwareConfig) -> TimingStats:
    """The statistics of a timeline of ``total`` cycles from its sums: busy cycles per pipeline (as ``names``),
    cycles per op kind and which kinds it holds."""
    pipelines = {}
    for name, cycles in zip(names, busy):
        capacity = hw.pipelines[name].units * total
        pipelines[name] = {"busy_cycles": cycles, "utilization": cycles / capacity if capacity else 0.0}
    ops = {KIND_NAMES[k]: c for k, c in enumerate(by_kind.tolist()) if present[k]}
    by_class = {c: sum(v for k, v in ops.items() if OP_KINDS[k][0] == c) for c in SHARE_CLASSES}
    denom = sum(by_class.values())
    shares = {c: (v / denom if denom else 0.0) for c, v in by_class.items()}
    bottleneck = busiest_stream({n: p["utilization"] for n, p in pipelines.items()}, hw)
    return TimingStats(total, pipelines, ops, shares, bottleneck)


def busiest_stream(utilization: dict[str, float], hw: HardwareConfig) -> str:
    """The stream of ``hw.issue_streams()`` with the highest summed utilisation, its pipelines joined by "+"."""
    streams = {"+".join(s): sum(utilization[n] for n in s) for s in hw.issue_streams()}
    return max(streams, key=lambda n: streams[n])


def spans_frame(trace: Trace, timeline: Timeline) -> "pd.DataFrame":
    """One row per op: kind, pipeline, row, step, key block, start, end, and what the start waited
    for (``waited_on`` op id or -1, ``wait`` edge kind or empty), built once, on demand."""
    names = np.array([*timeline.pipeline_names, "fused"])
    import pandas as pd  # only when a frame is asked for

    frame = pd.DataFrame({
        "op": np.array(KIND_NAMES)[trace.kind],
        "pipeline": names[timeline.pipeline],
        "row": trace.row, "step": trace.step, "kblock": trace.kblock,
        "start_cycles": timeline.start_cycles, "end_cycles": timeline.end_cycles,
    })
    if timeline.waited_on is not None and timeline.wait_kind is not None:
        frame["waited_on"] = timeline.waited_on
        frame["wait"] = np.array([*EDGE_KINDS, ""])[timeline.wait_kind]
    return frame
