"""A whole launch on a chip: occupancy, work units, their compute times, shared memory, totals.

``simulate_chip`` takes a trace whose rows are (head, query block) units and
the launch's geometry. With ``representative`` the trace holds the first head
of one K/V-head group of one batch element: valid when the trace does not
depend on the data, since then a unit's ops depend only on its query block and
whether its head is the first of its group. That head's units also carry the
ops done once per K/V head (VFA's key summaries); the group's other heads run
the same units less those ops (``units.build_launch``: rows past the trace's
own), which is what tracing them would give (a test compares the two).
Otherwise the trace holds all batch × heads rows, or, for a launch too large to trace whole
(``sampled_kv_heads``), the representative heads of a sample of K/V heads, each drawn on its own
data: the launch's K/V heads take them in turn (their units are the sample's units; their bytes
stay their own). The sample stands for the rest when heads are independent draws of one
distribution, as the generated workloads' are.

Chip-level figures:
- busy cycles per pipeline = sum over units of their ops' cycles (each unit
  counted once, decode splits repeating their prelude and epilogue);
  utilisation = busy / (pipeline units × cores × latency).
- bound: the highest of tensor, vector and exp utilisation (per role), of each
  stream pipelines share (``shares_issue_with``: their roles joined by "+", e.g.
  ``vector+exp``, utilisations summed) and memory utilisation (the busier of the
  HBM and L2 ports: bytes / (bytes per cycle × latency)); ``launch`` when none
  reaches 50% — too few units, a long tail or exposed latency, not a resource,
  bounds the chip (the per-unit bounds then say what held each unit).
- FLOPs = 4 · head_dim · visible query-key pairs · heads · batch (causal pairs
  counted exactly), the convention of published attention throughput.
- Each launch adds to the latency what a microbenchmark measures: the call's first its chip's ``launch_overhead_us``
  (one empty kernel between two events), each further one (a split's combine, the kernels a call launches beside
  them, ``Kernel.side_launches``, the attention kernel after VFA's pre-pass) ``next_launch_us`` (an empty kernel
  queued behind another).
- A call's first launch (the pre-pass, else the attention kernel) waits for the L2's dirty lines its HBM reads evict
  (``L2Spec.dirty_bytes``: the usual flush leaves them, as a previous kernel's writes do), in the share of its span it
  keeps the HBM port busy (``_writeback``); they count in the HBM bytes.
- A kernel whose key loop is not software-pipelined (``Kernel.loop_pipelined`` false, or its tile's
  ``TileRule.loop_pipelined``), or not when it carries a block test (``Kernel.skip_loop_pipelined`` false; a trace
  with skip tests), has its units timed in program order per stream (``in_order_core``): each K/V load moves its
  bytes through the core's load port, in issue order with the other streams' loads, at what one core's loads get
  from the L2 in such a loop, and its data arrive a memory latency later; then the tile's compute runs, then the next
  load. The latency is the L2's where a K/V head's tiles are read by several units (its query blocks, its GQA heads:
  after the first they mostly hit) and the HBM's where one unit alone reads them (a decode step of one unit per K/V
  head: nothing brought them into the L2).
- A kernel whose warps issue their own MMAs (``Kernel.mma`` per_stream) has its tensor pipes dealt among the streams
  a core holds when each unit kind is timed (``StreamMma``): k sharing a core get 1/k each, a stream alone no more
  than its warps reach (``CoreLimits.tensor_partitions``), not its slot's share of the launch's occupancy.
- A kernel with no ``kernel_tuning`` entry runs its matmuls at the chip's microbenchmark ceiling for its
  MMA path (``mma_efficiency``), or at the datasheet rate where none is given.
- A launch with splits > 1 adds a combine launch after the main one: each CTA
  merges the kernel's ``combine_rows`` query rows, reading the fp32 partial O and
  log-sum-exp of every split through the L2 port (just written, assumed
  resident) one dependent round trip per split (the source loads a split's
  partial, then accumulates it), and writes O to HBM. Splits are the kernel's own
  rule's (a ``wave_efficiency`` rule decides before the tiles are chosen) or fill
  every slot (``fill_slots``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np

from vfasim.chip.fluid import BOUNDS, LaunchTimes, Ports, run_launch
from vfasim.chip.memory import UnitMemory
from vfasim.chip.occupancy import TileShape, occupancy
from vfasim.chip.units import (
    Launch,
    StreamMma,
    UnitTimer,
    UnitTiming,
    build_launch,
    busy_by_pipeline,
    replace_buffers,
    split_count,
)
from vfasim.errors import VfasimError
from vfasim.formats import format_class
from vfasim.hw.chip import BYTES_PER_GB, ChipSpec, CoreLimits, KernelTuning
from vfasim.hw.config import FUSED, HardwareConfig
from vfasim.kernel import Kernel, TileRule
from vfasim.reuse import cached, reusing
from vfasim.trace import KIND_CODE, KIND_NAMES, Trace

ROLES = ("tensor", "vector", "exp")
BUSY_ENOUGH = 0.5  # below this utilisation no resource bounds the chip: the launch itself does
#: where a unit's fixed cycles come from: the chip's kernel_tuning, the kernel tile's measured cta_cycles, or nowhere
OverheadFrom = Literal["tuning", "scaled", "measured", "none"]


@dataclass(frozen=True)
class Geometry:
    batch: int
    heads: int
    kv_heads: int
    n_qblocks: int
    n_kblocks: int
    decode: bool
    causal: bool
    flops: float
    representative: bool
    kv_len: int = 0  # keys per K/V head (0: n_kblocks whole blocks)
    splits: int = 0  # K/V splits the kernel's own rule picked (0: the chip model picks, as the kernel's rule says)
    rows: int = 0  # valid query rows per (batch, unit head): packed heads × queries in decode (0: unknown)
    sampled_kv_heads: int = 0  # a data-dependent trace of this many K/V heads' representative heads (0: every head)
    per_kv_head_ops: bool = True  # with ``representative``: the traced head carries ops done once per K/V head
    main_path: bool = False  # a decode step the kernel's main (prefill) kernel runs (``DecodeRule.runs``)
    uneven: bool = False  # the launch runs the kernel's uneven code (``Kernel.uneven``)
    masked_loop: bool = False  # a causal launch whose CTAs walk their masked blocks in a loop of their own
    bounds_masked: bool = False  # every key block masked at the tile's bounds_mask_work (``Kernel.bounds_masked``)


@dataclass(frozen=True)
class ChipResult:
    latency_cycles: int
    streams_per_core: int
    slots_per_core: int  # units a core runs at once (streams / streams per unit)
    splits: int
    launch: Launch
    times: LaunchTimes
    combine: LaunchTimes | None
    busy_cycles: dict[str, float]
    kind_cycles: dict[str, float]
    utilization: dict[str, float]
    bound: str
    flops: float
    hbm_bytes: float
    l2_bytes: float
    l2_port_bytes: float
    prepass_cycles: int = 0  # the key-summary launch before the main one (VFA with a prepass kernel)
    writeback_cycles: float = 0.0  # the main launch's wait for the dirty L2 lines its first reads evict
    alone_cycles: int = 0  # the launches after the pre-pass as a call of their own (the latency where none)
    unit_timing: UnitTiming | None = None  # how a unit's ops were timed on its core (``core_ops`` repeats it)
    unit_overhead_cycles: int = 0  # the fixed cycles each unit paid beyond its ops
    # the chip's kernel_tuning (fitted or sourced), the tile's measured cycles times the chip's fitted scale, or as is
    unit_overhead_from: OverheadFrom = "none"


@dataclass(frozen=True)
class CoreOps:
    """The ops of the main launch's units on some cores (``core_ops``), each op a span of chip cycles."""

    unit: np.ndarray  # the unit (index into the launch) each op belongs to
    kind: np.ndarray  # op kind codes (``trace.KIND_NAMES``)
    pipeline: np.ndarray  # index into ``pipeline_names``; -1: fused (no pipeline time)
    pipeline_names: tuple[str, ...]
    start: np.ndarray  # float cycles on the chip
    end: np.ndarray


def core_ops(trace: Trace, res: ChipResult, cores: Sequence[int]) -> CoreOps:
    """The ops of every main-launch unit run on ``cores``, by pipeline.

    A unit's ops are its kind's streams timed alone on the core, as the unit timer times them with one unit per
    core; the chip model times units, not ops (its units share a core's pipelines and wait on memory), so the
    ops are stretched evenly from that timeline's length to the unit's span on the chip, and what they show is
    the unit's order and overlap of work, not the exact cycle of each op under contention.
    """
    assert res.unit_timing is not None
    picked = np.flatnonzero(np.isin(res.times.core, cores))
    timed = {int(k): res.unit_timing.timeline(trace, res.launch.kinds[k].streams) for k in
             np.unique(res.launch.kind[picked])}
    parts = [(np.empty(0, np.int64), np.empty(0, np.int8), np.empty(0, np.int64), np.empty(0), np.empty(0))]
    for u in picked.tolist():
        merged, line = timed[int(res.launch.kind[u])]
        t0, scale = res.times.start[u], (res.times.end[u] - res.times.start[u]) / max(line.total_cycles, 1)
        parts.append((np.full(len(merged), u), merged.kind, line.pipeline, t0 + line.start_cycles * scale,
                      t0 + line.end_cycles * scale))
    unit, kind, pipeline, start, end = (np.concatenate(column) for column in zip(*parts))
    return CoreOps(unit, kind, pipeline, tuple(res.unit_timing.core.pipelines), start, end)


@dataclass(frozen=True)
class _Plan:
    """What a launch runs on: the core as the kernel sets it, the chip, occupancy, ports."""

    core: HardwareConfig
    chip: ChipSpec
    streams: int  # tile streams per core
    slots: int  # units per core at once
    splits: int
    ports: Ports
    overhead: int = 0  # the kernel's fixed cycles per unit on this chip


def simulate_chip(trace: Trace, hw: HardwareConfig, kernel: Kernel, rule: TileRule, geo: Geometry,
                  shape: TileShape, policy: str = "waves", schedule: str = "pipelined",
                  samples: bool = False) -> ChipResult:
    """The launch on the chip; ``samples``: its ports' throughput recorded at every event (a trace's counters)."""
    chip = hw.chip
    if chip is None:
        raise VfasimError(f"hw config {hw.name} has no chip section")
    if geo.decode and not chip.has_memory:
        raise VfasimError(f"hw config {hw.name}: decode on a chip needs memory figures (chip.hbm, chip.l2)")
    tuning = chip.kernel_tuning.get(kernel.name) or KernelTuning(
        tensor_efficiency=chip.mma_efficiency.get(kernel.mma, 1.0))
    if tuning.cta_cycles_scale is not None and not rule.cta_cycles:
        raise VfasimError(f"hw config {hw.name}: kernel_tuning.{kernel.name}.cta_cycles_scale scales the tile's "
                          f"measured cta_cycles, and kernel {kernel.name}'s tile (block_q {rule.block_q}, block_k "
                          f"{rule.block_k}) gives none; give the tile its cta_cycles or the chip a flat "
                          "unit_overhead_cycles")
    mask_work = kernel.causal_mask_work(rule, geo.uneven) if geo.causal else \
        rule.bounds_mask_work if geo.bounds_masked and rule.bounds_mask_work is not None else 1.0
    core = tuned_core(replace_buffers(hw, kernel.score_buffers), tuning, kernel, mask_work)
    streams = occupancy(kernel, rule, shape, chip.core_limits)
    group = kernel.streams_per_cta(rule) if geo.n_qblocks > 1 or kernel.pad_streams else 1
    rows, kv_key, label = _units(geo, group)
    slots = streams // group
    full = None  # the core where units share it and fill each other's tensor gaps (``Kernel.gaps_filled_by_ctas``)
    if format_class(hw.precision.matmul) in kernel.gaps_filled_by_ctas and slots > 1 \
            and tuning.tensor_efficiency != 1.0:
        full = tuned_core(replace_buffers(hw, kernel.score_buffers),
                          tuning.model_copy(update={"tensor_efficiency": 1.0}), kernel, mask_work)
    split = geo.decode and kernel.decode is not None and kernel.decode.split_kv == "fill_slots"
    splits = min(geo.splits, geo.n_kblocks) or split_count(split, rows.shape[0], chip.cores * slots, geo.n_kblocks)
    cta_cycles = rule.bounds_cta_cycles if geo.bounds_masked and rule.bounds_cta_cycles is not None \
        else rule.cta_cycles  # a launch off the kernel's lengths: its variant's measured figure
    overhead = tuning.overhead(cta_cycles) + (rule.masked_loop_cycles or 0 if geo.masked_loop else 0)
    plan = _Plan(core, chip, streams, slots, splits, _ports(chip, hw.clock_ghz), overhead)
    digest = trace.digest() if reusing() else ""  # the trace's identity in the keys of what is reused (``reuse``)
    strip = geo.n_qblocks if geo.representative and geo.per_kv_head_ops else None
    launch = cached(("launch", digest, geo, group, splits, kernel.pad_streams),
                    lambda: build_launch(trace, rows, kv_key, label, splits, kernel.pad_streams, strip))
    # every op by its own dtype (refusing one the config has no rate for), as units sharing a core run it
    busy = busy_by_pipeline(trace, core if full is None else full, launch)
    warps = rule.warps or kernel.warps
    operands = OperandReads(*(rule.warp_grid or (warps, 1)), kernel.p_in == "shared") \
        if kernel.operands_from_shared else None
    prepass = kernel.minit == "prepass" and bool(np.any(trace.kind == KIND_CODE["key_summary"]))
    mma = stream_mma(plan.core, warps, operands, shape, chip.core_limits) if kernel.mma == "per_stream" else None
    pipelined = kernel.loop_pipelined if rule.loop_pipelined is None else rule.loop_pipelined
    in_order = not pipelined or not kernel.skip_loop_pipelined and bool(np.any(trace.kind == KIND_CODE["skip_test"]))
    alone = geo.n_qblocks * geo.heads // geo.kv_heads == 1  # each K/V head's tiles read by one unit: from HBM
    unit_core = (rule, chip, hw.clock_ghz, in_order, alone, prepass)
    timing = UnitTiming(_unit_core(plan.core, *unit_core), 1 if in_order else kernel.score_buffers, schedule, mma=mma,
                        shared_core=None if full is None else _unit_core(full, *unit_core))
    timer = UnitTimer(trace, timing, launch.kinds, digest, rule.block_floor if rule.block_cycles else None,
                      rule.bounds_block_cycles or 0 if geo.bounds_masked else 0)
    times = _main_launch(launch, timer, plan, policy, geo, samples)
    first, evicted = _prepass_cycles(hw, plan, geo, shape, kernel) if prepass else (0, 0.0)
    main_end = float(times.end.max(initial=0))
    writeback, written = _writeback(plan, float(times.hbm_bytes.sum()), main_end, evicted)
    combine = _combine(plan, geo, shape, main_end + writeback, kernel, samples)
    launches = (1 if combine is None else 2) + kernel.side_launch_count(geo.causal, geo.decode and not geo.main_path)
    end = (combine.end.max() if combine is not None else main_end + writeback) \
        + chip.launches_us(launches, first_priced=prepass) * hw.clock_ghz * 1e3 + first
    # the launches after the pre-pass called on their own: the first launch's overhead, every dirty line theirs
    called_alone = end - first + (_writeback(plan, float(times.hbm_bytes.sum()), main_end, 0.0)[0] - writeback
                                  + (chip.launches_us(launches) - chip.launches_us(launches, True)) * hw.clock_ghz
                                  * 1e3 if prepass else 0.0)
    origin: OverheadFrom = "tuning" if tuning.unit_overhead_cycles is not None else "none" if not cta_cycles \
        else "measured" if tuning.cta_cycles_scale is None else "scaled"
    return replace(_totals(plan, launch, busy, times, combine, int(np.ceil(end - 1e-9)), geo.flops, written),
                   prepass_cycles=first, writeback_cycles=writeback, alone_cycles=int(np.ceil(called_alone - 1e-9)),
                   unit_timing=timing,
                   unit_overhead_cycles=plan.overhead, unit_overhead_from=origin)


def _prepass_cycles(hw: HardwareConfig, plan: _Plan, geo: Geometry, shape: TileShape,
                    kernel: Kernel) -> tuple[int, float]:
    """VFA's key-summary launch: one program per key block of each K/V head reads its block once from HBM and
    reduces it; the work is the slower of that read (at the HBM bandwidth) and the compute. After a launch, a core's
    first program takes its measured time (``PrepassRate.program_us``, one program alone), the blocks of the other
    programs resident at the start (``PrepassRate.programs_per_core`` a core, one without it) arrive behind its own at
    the HBM bandwidth (each program loads its whole block before reducing it, so they all read at once), and its
    further programs take the rest of the work; without ``program_us``, one exposed memory latency and the work. The
    summaries written are negligible. Compute: the kernel's counted instructions at its measured issue rate
    (``prepass_rates``) on the cores the programs occupy, else one vector operation per element. The call's first
    launch, it also waits for the dirty L2 lines its reads evict (``_writeback``). Returns its cycles and the bytes
    it wrote back."""
    chip = plan.chip
    kv_len = geo.kv_len or geo.n_kblocks * shape.block_k
    elements = geo.batch * geo.kv_heads * kv_len * shape.head_dim
    rate = kernel.prepass_rate(shape.head_dim, format_class(hw.precision.matmul), shape.block_k)
    programs = geo.batch * geo.kv_heads * -(-kv_len // shape.block_k)
    if rate is not None:
        compute = elements * rate.warp_instructions_per_element / (rate.instructions_per_cycle
                                                                    * min(chip.cores, programs))
    else:
        vec = next(p for p in hw.pipelines.values() if p.role == "vector")
        compute = elements / (chip.cores * vec.units * vec.throughput[hw.precision.vector])
    read = elements * shape.kv_bytes
    work = max(compute, read / plan.ports.hbm if plan.ports.hbm else 0.0)
    if rate is not None and rate.program_us is not None:  # a core's first program alone, the rest at the rate
        each = -(-programs // chip.cores)
        burst = (rate.resident(programs, chip.cores) - 1) * elements / programs * shape.kv_bytes / plan.ports.hbm \
            if plan.ports.hbm else 0.0
        body = rate.program_us * hw.clock_ghz * 1e3 + burst + work * (each - 1) / each
    else:
        body = (chip.hbm.latency_cycles if chip.hbm is not None else 0) + work
    writeback, evicted = _writeback(plan, read, work, 0.0)
    return int(np.ceil(chip.launch_overhead_us * hw.clock_ghz * 1e3 + body + writeback)), evicted


def _writeback(plan: _Plan, read: float, span: float, evicted: float) -> tuple[float, float]:
    """(cycles, bytes): what a launch that reads ``read`` bytes from the HBM over ``span`` cycles waits for the L2's
    dirty lines its reads evict (``L2Spec.dirty_bytes``, less the ``evicted`` bytes an earlier launch of the call
    wrote back): their write-back time at the HBM port, in the share of the span the launch keeps that port busy
    with its reads (assumed, because the write-backs take port time beside the first reads, which a launch that
    leaves the port idle hides)."""
    l2, port = plan.chip.l2, plan.ports.hbm
    if l2 is None or l2.dirty_bytes is None or not port or span <= 0:
        return 0.0, 0.0
    written = min(l2.writeback_bytes(read), l2.dirty_bytes - evicted)
    return written / port * min(1.0, read / (port * span)), written


def tuned_core(hw: HardwareConfig, tuning: KernelTuning, kernel: Kernel, mask_work: float = 1.0) -> HardwareConfig:
    """The core as a kernel sees it: tensor pipelines at the kernel's efficiency on this chip, exps holding a shared
    issue stream for the kernel's share (``Kernel.exp_issue_share``), matmuls and exps taking turns when the kernel
    runs its softmax in phase (``Kernel.exp_beside_mma`` false), the op kinds its source folds into others at nothing
    (``Kernel.fused_ops``), its masks at ``mask_work`` operations per element (``Kernel.causal_mask_work``)."""
    update: dict = {} if kernel.exp_beside_mma else {"take_turns": ("tensor", "exp")}
    if kernel.fused_ops:
        update["op_map"] = {**hw.op_map, **dict.fromkeys(kernel.fused_ops, FUSED)}
    if mask_work != 1.0:
        update["work_factor"] = {**hw.work_factor, "mask": hw.work_factor.get("mask", 1.0) * mask_work}
    share, eff = kernel.exp_issue_share, tuning.tensor_efficiency
    pipes = {name: p.model_copy(update={"throughput": {d: r * eff for d, r in p.throughput.items()}})
             if p.role == "tensor" and eff != 1.0
             else p.model_copy(update={"issue_share": share})
             if p.role == "exp" and share is not None and p.shares_issue_with is not None else p
             for name, p in hw.pipelines.items()}
    if any(pipes[n] is not p for n, p in hw.pipelines.items()):
        update["pipelines"] = pipes
    return hw.model_copy(update=update) if update else hw


def tile_core(core: HardwareConfig, rule: TileRule) -> HardwareConfig:
    """The core as ``rule``'s tile runs on it: its measured op latencies, and with ``program_order`` its ops taking
    turns within each stream."""
    update: dict = {}
    if rule.result_latency:
        update["result_latency"] = {**core.result_latency, **rule.result_latency}
    if rule.program_order:
        present = {p.role for p in core.pipelines.values()}
        roles = tuple(r for r in ("tensor", "vector", "exp", "memory") if r in present)
        update.update(take_turns=roles if len(roles) > 1 else (), turns_within="row" if len(roles) > 1 else "core")
    return core.model_copy(update=update) if update else core


def _unit_core(core: HardwareConfig, rule: TileRule, chip: ChipSpec, clock_ghz: float, in_order: bool, alone: bool,
               prepass: bool) -> HardwareConfig:
    """The core as the launch's units run on it: ``rule``'s tile (``tile_core``), a loop that is not
    software-pipelined (``in_order_core``; ``alone``: its tiles come from the HBM), the pre-pass's key summaries
    only read."""
    core = tile_core(core, rule)
    if in_order:
        core = in_order_core(core, chip, clock_ghz, alone)  # no tile loaded ahead: one buffer (the caller)
    if prepass:  # the summaries come from the prepass launch: the main kernel only reads them
        core = core.model_copy(update={"op_map": {**core.op_map, "key_summary": FUSED}})
    return core


def in_order_core(core: HardwareConfig, chip: ChipSpec, clock_ghz: float, from_hbm: bool = False) -> HardwareConfig:
    """The core as a loop that is not software-pipelined runs: every op of a stream after the one before it (all
    roles take turns within each row, beside the other rows), and its loads through the core's memory pipes in issue
    order, each at what one core's loads get from the L2 in such a loop (``l2.unpipelined_bytes_per_cycle``, measured;
    else the core's share of the L2 bandwidth) and no faster than the pipe, its data arriving the L2's latency after
    its bytes have crossed (the HBM's with ``from_hbm``: tiles no other unit reads first; ``load_latency_cycles``)
    while the pipe moves the other streams' loads."""
    if chip.l2 is None:
        raise VfasimError(f"{core.name}: a loop that is not software-pipelined is timed with the chip's L2 latency "
                          "and bandwidth, and its chip section gives no l2")
    share = chip.l2.unpipelined_bytes_per_cycle or chip.bytes_per_cycle(chip.l2, clock_ghz) / chip.cores
    pipes = {name: p.model_copy(update={"units": 1, "units_by": "issue",  # one port, the streams' loads in issue order
                                        "throughput": {"bytes": min(p.throughput["bytes"] * p.units, share)}})
             if p.role == "memory" else p for name, p in core.pipelines.items()}
    roles = tuple(dict.fromkeys(p.role for p in pipes.values()))
    latency = chip.hbm.latency_cycles if from_hbm and chip.hbm is not None else chip.l2.latency_cycles
    return core.model_copy(update={"pipelines": pipes, "take_turns": roles if len(roles) > 1 else (),
                                   "turns_within": "row", "load_latency_cycles": latency})


def _check_dealable(core: HardwareConfig, role: str, what: str) -> None:
    """A one-line error (``what`` names the kernel trait) where a pipe of ``role`` shares an issue stream: it cannot
    be dealt by stream."""
    for name, p in core.pipelines.items():
        if p.role == role and (p.shares_issue_with or any(q.shares_issue_with == name
                                                          for q in core.pipelines.values())):
            raise VfasimError(f"{what} gives each stream its own queue on {core.name}'s {role} pipe {name!r}, which "
                              "shares an issue stream")


@dataclass(frozen=True)
class OperandReads:
    """How a per-stream mma kernel's warps read their matmul operands from shared memory: ``rows`` x ``cols`` warps
    tile each matmul's output (``TileRule.warp_grid``), each reading its rows of A and its columns of B; P read from
    shared memory too where ``p_shared`` (``Kernel.p_in``)."""

    rows: int
    cols: int
    p_shared: bool = False

    def bytes_per_mac(self, shape: TileShape) -> dict[str, float]:
        """Shared-memory bytes the warps read per multiply-accumulate of each matmul: A's bytes over a warp tile's
        width plus B's over its height (QK: Q and K, its columns the keys; PV: P where it is in shared memory and V,
        its columns the head dim, in chunks of at most a key block)."""
        k_rows = self.rows * shape.kv_bytes / shape.block_q
        pv_cols = min(shape.head_dim, shape.block_k)
        return {"qk_matmul": self.cols * shape.q_bytes / shape.block_k + k_rows,
                "pv_matmul": (self.cols * shape.p_bytes / pv_cols if self.p_shared else 0.0) + k_rows}


def stream_mma(core: HardwareConfig, warps: int, operands: OperandReads | None, shape: TileShape,
               limits: CoreLimits) -> StreamMma:
    """How the unit timer deals a per-stream mma kernel's tensor pipes (``StreamMma``): a stream of ``warps`` warps
    alone reaches ``warps / tensor_partitions`` of them at most; ``operands`` given, with a shared-memory read rate,
    the QK and PV matmuls also take the time of their operand reads. A one-line error where a tensor pipe shares an
    issue stream (it cannot be dealt by stream)."""
    _check_dealable(core, "tensor", "a per-stream mma kernel")
    cap = min(1.0, warps / limits.tensor_partitions) if limits.tensor_partitions else 1.0
    if operands is None or limits.shared_read_bytes_per_cycle is None:
        return StreamMma(cap)
    reads = tuple((kind, b) for kind, b in operands.bytes_per_mac(shape).items() if core.op_map[kind] != FUSED)
    return StreamMma(cap, reads, limits.shared_read_bytes_per_cycle)


def _units(geo: Geometry, streams: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(trace rows [U, streams], global K/V head, label [batch, head, qblock, split]) of every unit.

    A unit takes ``streams`` consecutive query blocks of one head (-1 past the last); dispatch order.
    """
    q_units = -(-geo.n_qblocks // streams)
    grid = np.meshgrid(np.arange(geo.batch), np.arange(geo.heads), np.arange(q_units), indexing="ij")
    b, h, q = grid[0].ravel(), grid[1].ravel(), grid[2].ravel() * streams
    group = geo.heads // geo.kv_heads
    trace_head = b * geo.heads + h
    if geo.representative:  # one traced head; the group's other heads run its units less its once-per-K/V-head ops
        trace_head = np.where((h % group > 0) & geo.per_kv_head_ops, 1, 0)  # 1: the rows past the trace's own
    if geo.sampled_kv_heads:  # the sampled K/V heads in turn, each holding its first head and one other
        r = representative_heads(group)
        trace_head = (b * geo.kv_heads + h // group) % geo.sampled_kv_heads * r + np.minimum(h % group, r - 1)
    blocks = q[:, None] + np.arange(streams)
    rows = np.where(blocks < geo.n_qblocks, (trace_head * geo.n_qblocks)[:, None] + blocks, -1)
    return rows, b * geo.kv_heads + h // group, np.stack([b, h, q, np.zeros_like(q)], axis=1)


def representative_heads(group: int) -> int:
    """Heads a data-dependent trace samples of a K/V-head group of ``group`` query heads: its first, and one other
    head standing for the rest (see the module notes)."""
    return min(group, 2)


def _ports(chip: ChipSpec, clock_ghz: float) -> Ports:
    l2 = chip.bytes_per_cycle(chip.l2, clock_ghz) if chip.l2 is not None else None
    hbm = chip.bytes_per_cycle(chip.hbm, clock_ghz) if chip.hbm is not None else None
    unit = chip.hbm.per_unit_gb_per_s if chip.hbm is not None else None
    return Ports(l2=l2, hbm=hbm, unit_hbm=unit * BYTES_PER_GB / (clock_ghz * 1e9) if unit else None)


def _main_launch(launch: Launch, timer: UnitTimer, plan: _Plan, policy: str, geo: Geometry,
                 samples: bool) -> LaunchTimes:
    chip = plan.chip
    memory = UnitMemory(launch, chip.l2.capacity_bytes if chip.l2 else None, chip.has_memory, geo.n_kblocks)
    latency = (chip.hbm.latency_cycles if chip.hbm is not None else 0) + plan.overhead

    def on_start(u: int) -> tuple[float, float, float, float]:
        return (latency, *memory.on_start(u))

    order = np.arange(launch.kind.size)
    if policy == "persistent" and geo.causal:
        single = np.array([timer.cycles(k, 1) for k in range(len(launch.kinds))])
        order = np.argsort(-single[launch.kind], kind="stable")
    return run_launch(launch.kind, chip.cores, plan.slots, policy, order, timer.cycles, on_start, plan.ports,
                      samples=samples)


def _combine(plan: _Plan, geo: Geometry, shape: TileShape, t0: float, kernel: Kernel,
             samples: bool) -> LaunchTimes | None:
    """The split-KV combine launch: each CTA merges ``combine_rows`` query rows, reading the log-sum-exps of every
    split (one memory round trip), then each split's fp32 partial O in turn (one dependent round trip per split,
    as the source's loop over splits loads then accumulates: ``combine_reads: per_split``), and writes O; with
    ``parallel`` reads, the log-sum-exps and every partial in one round trip. Partials were just written: L2. Each
    CTA also pays the kernel's measured ``combine_cycles``."""
    hw, splits, memory = plan.core, plan.splits, plan.chip.l2 or plan.chip.hbm
    if splits == 1 or memory is None:
        return None
    rows = kernel.decode.combine_block(shape.head_dim) if kernel.decode is not None else shape.block_q
    vec = next(p for p in hw.pipelines.values() if p.role == "vector")
    step = np.ceil(2 * rows * shape.head_dim / vec.throughput[hw.precision.vector])
    lat = memory.latency_cycles
    chain = kernel.decode is None or kernel.decode.combine_reads == "per_split"
    fixed = kernel.decode.combine_cycles or 0 if kernel.decode is not None else 0
    cycles = vec.startup_cycles + vec.issue_overhead_cycles + splits * step + (1 + splits if chain else 1) * lat \
        + fixed
    partial = splits * rows * (shape.head_dim + 1) * 4.0
    out = rows * shape.head_dim * (4 if hw.precision.vector == "float32" else 2)
    valid = geo.rows or geo.n_qblocks * shape.block_q
    n = -(-geo.batch * geo.heads * valid // rows)
    return run_launch(np.zeros(n, np.int64), plan.chip.cores, _combine_slots(plan.chip), "greedy", np.arange(n),
                      lambda kind, k: float(cycles), lambda u: (lat, out, partial + out, partial), plan.ports, t0,
                      samples=samples)


def _combine_slots(chip: ChipSpec) -> int:
    """Combine CTAs a core runs at once: its stream limit, at most 16 (assumed, because the source's combine CTAs
    are 128 threads and use little shared memory: 16 of them fill an SM's 2048 threads)."""
    return min(16, chip.core_limits.max_streams) if chip.core_limits is not None else 1


def _totals(plan: _Plan, launch: Launch, busy_cycles: tuple[np.ndarray, np.ndarray], times: LaunchTimes,
            combine: LaunchTimes | None, latency: int, flops: float, written: float = 0.0) -> ChipResult:
    """The result, from the busy cycles per pipeline and per op kind (``busy_by_pipeline``) and the launches;
    ``written``: dirty L2 lines written back, HBM traffic beside the launches' own bytes."""
    core, ports = plan.core, plan.ports
    busy, by_kind = busy_cycles
    cores = plan.chip.cores
    names = list(core.pipelines)
    util = {n: busy[i] / (core.pipelines[n].units * cores * latency) for i, n in enumerate(names)}
    runs = [t for t in (times, combine) if t is not None]
    hbm = sum(float(t.hbm_bytes.sum()) for t in runs) + written  # the dirty lines written back cross it too
    hits = sum(float(t.l2_hit_bytes.sum()) for t in runs)
    port = hbm + hits if ports.l2 is not None else 0.0
    classes = {r: max((util[n] for n in names if core.pipelines[n].role == r), default=0.0) for r in ROLES}
    classes.update(_shared_streams(core, util))
    classes["memory"] = max([b / (c * latency) for b, c in ((hbm, ports.hbm), (port, ports.l2)) if c] or [0.0])
    return ChipResult(
        latency_cycles=latency, streams_per_core=plan.streams, slots_per_core=plan.slots, splits=plan.splits,
        launch=launch, times=times,
        combine=combine, busy_cycles=dict(zip(names, busy.tolist())),
        kind_cycles={KIND_NAMES[i]: float(c) for i, c in enumerate(by_kind) if c},
        utilization={**util, **{f"class_{k}": v for k, v in classes.items()}},
        bound=_bound(classes), flops=flops, hbm_bytes=hbm, l2_bytes=hits, l2_port_bytes=port)


def _shared_streams(core: HardwareConfig, util: dict[str, float]) -> dict[str, float]:
    """Utilisation of each stream several pipelines share, and of the roles that take turns on the core
    (``take_turns``), named by their roles joined by "+" (e.g. vector+exp, tensor+exp)."""
    shared = [s for s in core.issue_streams() if len(s) > 1]
    out = {"+".join(core.pipelines[n].role for n in s): sum(util[n] for n in s) for s in shared}
    if core.take_turns:
        out["+".join(core.take_turns)] = sum(u for n, u in util.items() if core.pipelines[n].role in core.take_turns)
    return out


def _bound(classes: dict[str, float]) -> str:
    top = max(classes, key=lambda k: classes[k])
    return top if classes[top] >= BUSY_ENOUGH else "launch"


def unit_bound_counts(times: LaunchTimes) -> dict[str, int]:
    counts = np.bincount(times.bound, minlength=len(BOUNDS))
    return {name: int(c) for name, c in zip(BOUNDS, counts)}
