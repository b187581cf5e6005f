"""Traces of the paper's six cores at two granularities, and what each config makes of them.

Granularities:
- ``block`` (the paper's unit, Table 1): one query block against a stream of
  ``STREAM_BLOCKS`` key blocks, not causal. FA's tiles are all alike; VFA
  visits the sink and the local block first, then only frozen tiles. Busy
  cycles are those of one steady tile (the mean over tiles STEADY[0]+1 …
  STEADY[1]), and the overlapped latency is the steady period: how far the end
  of a tile moves per tile once the software pipeline is full. VFA's prelude
  (key summaries, m-init) is left out, as the paper leaves it out.
- ``sequence``: one causal head of ``seq_len`` tokens; busy cycles and latency
  of the whole run, sink, local and masked tiles included.

Two latencies per bar: *stacked* = tensor + vector + exp busy (the height of
the paper's stacked bar; pipelines never overlap) and *overlapped* = the
simulated time of the pipelined schedule.

Assumptions: the llm-like workload, seed 0; FA and VFA traces do not depend on
the data, FA4's rescale skips do.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from vfasim.errors import VfasimError
from vfasim.runner.api import engine_precision
from vfasim.functional import Policy, Tiling, policy_for, run_engine
from vfasim.functional.trace_only import data_independent, trace_only
from vfasim.hw import HardwareConfig
from vfasim.sim import Timeline, simulate
from vfasim.sim.engine import op_cycles
from vfasim.sim.stats import SHARE_CLASSES
from vfasim.trace import KIND_NAMES, OP_KINDS, Trace
from vfasim.workloads import Workload, make_workload

PAPER_CONFIGS = ("C16V32", "C8V32", "C4V32", "C8V16", "C4V16", "C4V16-2xexp")
GRANULARITIES = ("block", "sequence")
HEAD_DIMS = (64, 128)
BLOCK = 128
STREAM_BLOCKS = 16
STEADY = (6, 14)  # steps bounding the steady tiles of the block stream (sink and local are steps 1, 2)
EXP_SCALES = (1.0, 2.0, 4.0, 8.0, 16.0, 64.0, float("inf"))  # the curve at block granularity; sequence: inf
SEQUENCE_VARIANTS = ("fa2", "vfa")  # FA4 is compared per block only
UNBOUNDED_EXP = 1e6  # an exp rate this many times the config's stands in for unbounded exp capacity
#: per op kind code, its class's index in SHARE_CLASSES (len(SHARE_CLASSES): memory, in no share)
_CLASS = np.array([(*SHARE_CLASSES, OP_KINDS[k][0]).index(OP_KINDS[k][0]) for k in KIND_NAMES])


def variant_policy(name: str, emulation: float = 0.0) -> Policy:
    algo = {"fa2": "fa2", "vfa": "vfa", "fa4": "fa4", "fa4+emul": "fa4", "vfa+emul": "vfa"}[name]
    return policy_for(algo, exp_emulation=emulation) if emulation else policy_for(algo)


def _tiling(granularity: str, head_dim: int, seq_len: int) -> Tiling:
    if granularity == "block":
        return Tiling(BLOCK, STREAM_BLOCKS * BLOCK, head_dim, BLOCK, BLOCK, False)
    return Tiling(seq_len, seq_len, head_dim, BLOCK, BLOCK, True)


@lru_cache(maxsize=8)
def _workload(granularity: str, head_dim: int, seq_len: int) -> tuple[Workload, np.ndarray]:
    """The llm-like workload of the granularity's tiling, and its queries (the block stream: the last block's)."""
    tiling = _tiling(granularity, head_dim, seq_len)
    wl = make_workload("llm-like", tiling.kv_len, head_dim, 1, 0)
    return wl, wl.q[:, -tiling.seq_len:]


def make_trace(hw: HardwareConfig, variant: str, granularity: str, head_dim: int, seq_len: int,
               emulation: float = 0.0) -> Trace:
    """The engine's trace of ``variant`` at one granularity on ``hw``'s formats (``trace_only``'s where it does
    not depend on the data: the same trace, without the arithmetic)."""
    tiling, policy = _tiling(granularity, head_dim, seq_len), variant_policy(variant, emulation)
    precision = engine_precision(hw)
    if data_independent(policy):
        return trace_only(tiling, policy, precision, o_in_place=hw.o_in_place)
    wl, q = _workload(granularity, head_dim, seq_len)
    return run_engine(q, wl.k, wl.v, tiling, policy, precision, o_in_place=hw.o_in_place).traced()


def _selection(trace: Trace, granularity: str) -> tuple[np.ndarray, int]:
    if granularity == "sequence":
        return np.ones(len(trace), bool), 1
    lo, hi = STEADY
    return (trace.kblock >= 0) & (trace.step > lo) & (trace.step <= hi), hi - lo


def busy(trace: Trace, hw: HardwareConfig, granularity: str, timeline: Timeline | None = None) -> dict:
    """Busy cycles per op class and per pipeline (per steady tile at block granularity); ``timeline``: the trace's
    on ``hw``, whose ops' pipelines and durations are their prices."""
    pipe, cycles = op_cycles(trace, hw) if timeline is None else (timeline.pipeline, timeline.durations)
    sel, n = _selection(trace, granularity)
    pipe, cycles = pipe[sel], cycles[sel]
    if int(cycles.sum()) >= 2**53:  # below it, float64 sums of the integer cycles are exact: the integer sums
        raise VfasimError(f"{hw.name}: busy cycles past 2^53 would not sum exactly in float64")
    by_class = np.bincount(_CLASS[trace.kind[sel]], weights=cycles, minlength=len(SHARE_CLASSES) + 1)
    by_pipe = np.bincount(pipe[pipe >= 0], weights=cycles[pipe >= 0], minlength=len(hw.pipelines))
    out: dict[str, Any] = {c: float(by_class[i]) / n for i, c in enumerate(SHARE_CLASSES)}
    out["pipelines"] = {name: float(by_pipe[p]) / n / spec.units for p, (name, spec) in enumerate(hw.pipelines.items())}
    out["stacked"] = sum(out[c] for c in SHARE_CLASSES)
    return out


def overlapped(trace: Trace, hw: HardwareConfig, granularity: str, timeline: Timeline | None = None) -> float:
    """Simulated latency of the pipelined schedule (the steady period per tile at block granularity); ``timeline``:
    the trace's on ``hw``, when already simulated."""
    timeline = simulate(trace, hw, waits=False) if timeline is None else timeline
    if granularity == "sequence":
        return float(timeline.total_cycles)
    lo, hi = STEADY
    ends = [timeline.end_cycles[(trace.step == s) & (trace.kblock >= 0)].max() for s in (lo, hi)]
    return float(ends[1] - ends[0]) / (hi - lo)


def measure(trace: Trace, hw: HardwareConfig, granularity: str, with_latency: bool = True) -> dict:
    timeline = simulate(trace, hw, waits=False) if with_latency else None
    m = busy(trace, hw, granularity, timeline)
    m["overlapped"] = overlapped(trace, hw, granularity, timeline) if timeline is not None else float("nan")
    m["bottleneck"] = max(m["pipelines"], key=m["pipelines"].get)
    m["vector_share"] = m["vector"] / m["stacked"]
    return m


def with_exp_scale(hw: HardwareConfig, scale: float) -> HardwareConfig:
    """``hw`` with every exp-pipeline rate multiplied by ``scale`` (inf: ``UNBOUNDED_EXP``)."""
    doc = hw.model_dump()
    factor = UNBOUNDED_EXP if scale == float("inf") else scale
    for spec in doc["pipelines"].values():
        if spec["role"] == "exp":
            spec["throughput"] = {k: v * factor for k, v in spec["throughput"].items()}
    return HardwareConfig.model_validate(doc)


class Study:
    """Traces of every (granularity, head dim, config, variant), computed once and re-timed per config set."""

    def __init__(self, configs: dict[str, HardwareConfig], seq_len: int = 1024,
                 variants: tuple[str, ...] = ("fa2", "vfa", "fa4"),
                 granularities: tuple[str, ...] = GRANULARITIES, head_dims: tuple[int, ...] = HEAD_DIMS,
                 emulation: dict[tuple[str, str], float] | None = None) -> None:
        self.configs, self.seq_len, self.variants = configs, seq_len, variants
        self.granularities, self.head_dims = granularities, head_dims
        self.emulation = emulation or {}
        cache: dict[tuple, Trace] = {}
        self.traces: dict[tuple, Trace] = {}
        for g, d, name, v in itertools.product(granularities, head_dims, PAPER_CONFIGS, variants):
            if g != "block" and v not in SEQUENCE_VARIANTS:
                continue
            hw, emul = configs[name], self.emulation.get((name, v), 0.0)
            key = (g, d, v, emul, hw.precision.model_dump_json())
            if key not in cache:
                cache[key] = make_trace(hw, v, g, d, seq_len, emul)
            self.traces[g, d, name, v] = cache[key]

    def measurements(self, configs: dict[str, HardwareConfig] | None = None, with_latency: bool = True,
                     only: tuple[str, int] | None = None, variants: tuple[str, ...] | None = None) -> dict:
        """(granularity, head dim, config, variant) -> measure() for the configs given; ``only``: one (g, d)."""
        configs = configs or self.configs
        out = {}
        for (g, d, name, v), trace in self.traces.items():
            wanted = name in configs and (variants is None or v in variants)
            if wanted and (only is None or (g, d) == only):
                out[g, d, name, v] = measure(trace, configs[name], g, with_latency)
        return out

    def exp_curve(self, configs: dict[str, HardwareConfig] | None = None, scales: Sequence[float] = EXP_SCALES,
                  with_latency: bool = True, only: tuple[str, int] | None = None) -> dict[tuple, dict]:
        """(g, d, variant, exp scale) -> measure() of C4V16 with its exp rate scaled."""
        configs = configs or self.configs
        out = {}
        for s in scales:
            hw = with_exp_scale(configs["C4V16"], s)
            for (g, d, name, v), trace in self.traces.items():
                wanted = name == "C4V16" and v in ("fa2", "vfa") and (g == "block" or s == float("inf"))
                if wanted and (only is None or (g, d) == only):
                    out[g, d, v, s] = measure(trace, hw, g, with_latency)
        return out
