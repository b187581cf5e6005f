"""The chip around the core: how many cores, the memory they share, and what fits on one core.

A config's pipelines and op map describe *one* core; an optional ``chip:``
section multiplies it into a chip: ``cores`` identical cores, a shared L2 and
HBM, and per-core limits from which occupancy follows (how many tile streams —
thread blocks / warp groups — run on one core at once).

Assumptions:
- Bandwidths are sustained figures shared by all cores (a fluid port each);
  latencies are the exposed latency of a unit's first access.
- Every byte a core reads or writes passes the L2 port; HBM sees only L2 misses
  and the bytes that bypass reuse (Q loads, O stores).
- A chip without ``l2`` and ``hbm`` has no shared memory limits: its cores are
  independent and loads cost only what the core's own data mover charges.
- A kernel style runs the core's ops at their configured rates, except that
  ``kernel_tuning.<style>.tensor_efficiency`` scales the tensor pipelines and
  ``unit_overhead_cycles`` (fitted; absent: the kernel tile's measured ``cta_cycles``, times a fitted
  ``cta_cycles_scale`` when given) adds a fixed exposed cost to every work unit; a style
  whose warps read their matmul operands from shared memory (``fa2``) also pays
  those reads at ``core_limits.shared_read_bytes_per_cycle`` (``chip.styles``).
- ``register_bytes``, when given, holds a stream's score, P and O-accumulator
  tiles (GPU register file / tensor memory); otherwise those tiles count
  against ``buffer_bytes`` too (a unified buffer, Ascend-like).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

BYTES_PER_GB = 1e9
#: plausible ranges: beyond them a chip is no chip, and the event loop's arrays would not fit in memory
MAX_CORES = 65536
MAX_STREAMS = 1024  # tile streams per core
MAX_BYTES = 2**50
MAX_CYCLES = 10**9


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MemorySpec(_Strict):
    bandwidth_gb_per_s: float = Field(strict=True, gt=0, le=1e9, allow_inf_nan=False,
                                      description="Sustained bandwidth shared by all cores, GB/s (1e9 B)")
    latency_cycles: int = Field(strict=True, ge=0, le=MAX_CYCLES,
                                description="Exposed latency of a unit's first access, core cycles")


class HbmSpec(MemorySpec):
    per_unit_gb_per_s: float | None = Field(
        default=None, strict=True, gt=0, le=1e9, allow_inf_nan=False,
        description="The most one work unit (a CTA) streams from HBM on its own, GB/s: its loads in flight over the "
                    "latency (Little's law); absent: no limit")


class L2Spec(MemorySpec):
    capacity_bytes: int = Field(strict=True, gt=0, le=MAX_BYTES,
                                description="Bytes the L2 holds for reuse across work units")
    unpipelined_bytes_per_cycle: float | None = Field(
        default=None, strict=True, gt=0, le=1e9, allow_inf_nan=False,
        description="What one core's loads get from the L2 in a loop that is not software-pipelined (each load "
                    "issued in the iteration that uses it), every core loading, bytes per core cycle; absent: the "
                    "core's share of bandwidth_gb_per_s")
    dirty_bytes: int | None = Field(
        default=None, strict=True, gt=0, le=MAX_BYTES,
        description="Dirty lines the L2 holds when a call starts, as after the usual flush that writes a buffer larger "
                    "than the L2 (and after a previous kernel's writes): the call's first reads from the HBM evict "
                    "them, each write-back crossing the HBM beside the reads; absent: a clean L2")
    dirty_writeback_per_byte: float | None = Field(
        default=None, strict=True, gt=0, le=1, allow_inf_nan=False,
        description="Bytes written back per byte read from the HBM while dirty lines last (needs dirty_bytes)")

    @model_validator(mode="after")
    def _dirty_pair(self) -> L2Spec:
        if (self.dirty_bytes is None) != (self.dirty_writeback_per_byte is None):
            raise ValueError("l2.dirty_bytes and l2.dirty_writeback_per_byte go together: give both or neither")
        return self

    def writeback_bytes(self, read_bytes: float) -> float:
        """Bytes of dirty lines a launch reading ``read_bytes`` from the HBM writes back."""
        if self.dirty_bytes is None or self.dirty_writeback_per_byte is None:
            return 0.0
        return min(self.dirty_writeback_per_byte * read_bytes, float(self.dirty_bytes))


class CoreLimits(_Strict):
    buffer_bytes: int = Field(strict=True, gt=0, le=MAX_BYTES, description="On-chip shared memory per core usable by "
                                                                          "tile streams (Q tile and K/V buffers)")
    register_bytes: int | None = Field(
        default=None, strict=True, gt=0, le=MAX_BYTES,
        description="Per-core registers for score, P and O tiles; absent: they use buffer_bytes")
    max_streams: int = Field(strict=True, gt=0, le=MAX_STREAMS,
                             description="Tile streams (thread blocks / warp groups) a core may run at once")
    shared_read_bytes_per_cycle: float | None = Field(
        default=None, strict=True, gt=0, le=1e9, allow_inf_nan=False,
        description="Shared-memory read bandwidth per core, bytes per cycle: what a kernel style whose warps each "
                    "read their matmul operands from shared memory (fa2) pays for them; absent: no such reads")
    tensor_partitions: int | None = Field(
        default=None, strict=True, gt=0, le=64,
        description="Sub-partitions of a core with a tensor unit each (an SM's four processing blocks): a warp issues "
                    "its mma.sync to its own, so a per-stream mma kernel's stream of w warps alone reaches at most "
                    "w / tensor_partitions of the tensor pipes; absent: a stream alone may take them all")


class KernelTuning(_Strict):
    """What a kernel style reaches on this chip beyond the modelled ops (fitted or sourced per chip)."""

    tensor_efficiency: float = Field(default=1.0, strict=True, gt=0, le=1, description="Fraction of the tensor "
                                     "pipeline's peak rate the style's matmul instructions sustain (e.g. mma.sync on "
                                     "Hopper)")
    unit_overhead_cycles: int | None = Field(
        default=None, strict=True, ge=0, le=MAX_CYCLES, description="Fixed cycles per work unit beyond its ops (block "
        "launch, prologue, epilogue), exposed like a latency, fitted; absent: the kernel tile's measured cta_cycles "
        "(none where it gives none)")
    cta_cycles_scale: float | None = Field(
        default=None, strict=True, ge=0, le=4, allow_inf_nan=False, description="Factor on the kernel tile's measured "
        "cta_cycles, fitted in place of a flat unit_overhead_cycles for a kernel whose every tile carries a measured "
        "figure (it keeps their spread over head dims and formats); absent: 1")

    @model_validator(mode="after")
    def _one_overhead(self) -> KernelTuning:
        if self.unit_overhead_cycles is not None and self.cta_cycles_scale is not None:
            raise ValueError("give unit_overhead_cycles or cta_cycles_scale, not both (the flat figure would replace "
                             "the scaled one)")
        return self

    def overhead(self, cta_cycles: int | None) -> int:
        """A unit's fixed cycles: the fitted flat figure, else the tile's measured ``cta_cycles`` (times
        ``cta_cycles_scale`` when given), else none."""
        if self.unit_overhead_cycles is not None:
            return self.unit_overhead_cycles
        return int(round((cta_cycles or 0) * (1.0 if self.cta_cycles_scale is None else self.cta_cycles_scale)))


class ChipSpec(_Strict):
    cores: int = Field(strict=True, gt=0, le=MAX_CORES, description="Identical cores, each the config's core")
    l2: L2Spec | None = Field(default=None, description="Shared L2 (needs hbm behind it)")
    hbm: HbmSpec | None = Field(default=None, description="Off-chip memory shared by all cores")
    core_limits: CoreLimits = Field(description="What fits on one core")
    mma_efficiency: dict[Literal["per_stream", "shared"], Annotated[float, Field(strict=True, gt=0, le=1)]] = Field(
        default_factory=dict, description="Fraction of the tensor pipes' datasheet rate each MMA path sustains in a "
        "microbenchmark (per_stream: mma.sync issued by a block's own warps; shared: warp-group MMAs such as "
        "wgmma); a kernel with no kernel_tuning entry runs at its path's figure (absent: 1.0)")
    launch_overhead_us: float = Field(
        default=0.0, strict=True, ge=0, le=1e3, allow_inf_nan=False, description="Fixed time each kernel launch adds, as a "
        "back-to-back empty-kernel microbenchmark measures it (launch, first-block start, drain): a call's first")
    next_launch_us: float | None = Field(
        default=None, strict=True, ge=0, le=1e3, allow_inf_nan=False, description="What each further kernel of a call "
        "adds beside its own work (an empty kernel queued behind the call's first), measured; absent: "
        "launch_overhead_us")
    kernel_tuning: dict[str, KernelTuning] = Field(
        default_factory=dict, description="Kernel style name -> its tuning on this chip (absent: peak, no overhead)")

    @model_validator(mode="after")
    def _l2_needs_hbm(self) -> ChipSpec:
        if self.l2 is not None and self.hbm is None:
            raise ValueError("l2 needs hbm behind it (give hbm, or neither)")
        return self

    def launches_us(self, launches: int, first_priced: bool = False) -> float:
        """What ``launches`` kernels of one call add beside their work: the first its launch_overhead_us (unless
        ``first_priced``: a launch before them paid it), each further one next_launch_us."""
        further = self.launch_overhead_us if self.next_launch_us is None else self.next_launch_us
        return (further if first_priced else self.launch_overhead_us) + max(0, launches - 1) * further

    @property
    def has_memory(self) -> bool:
        return self.hbm is not None

    def bytes_per_cycle(self, spec: MemorySpec, clock_ghz: float) -> float:
        """A port's bandwidth in bytes per core cycle at ``clock_ghz``."""
        return spec.bandwidth_gb_per_s * BYTES_PER_GB / (clock_ghz * 1e9)
