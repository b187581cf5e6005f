"""Timing model: the static schedule of a trace on a configured core's pipelines, in closed form."""

from vfasim.sim.engine import SCHEDULES, Timeline, op_cycles, simulate
from vfasim.sim.stats import TimingStats, busiest_stream, spans_frame, timing_stats

__all__ = ["SCHEDULES", "Timeline", "TimingStats", "busiest_stream", "op_cycles", "simulate", "spans_frame",
           "timing_stats"]
