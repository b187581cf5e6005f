"""``vfasim run`` on a config with a chip section: a whole launch over batch × heads on many cores.

Timing: an algorithm whose trace does not depend on the data (``fa2``, ``vfa``
and their ablations) is timed from ``trace_only`` — no Q, K or V, no arithmetic —
on the first head of one K/V-head group, which stands for every (batch, head): the group's other heads run its
units less the ops it does once for the group (VFA's key summaries; ``chip.run``'s notes). Other algorithms run
the functional engine's QK side on all batch × heads heads (``engine_trace``), as their trace needs the data;
a launch of more than ``TRACED_TILES`` tiles, on the representative heads of a sample of its K/V heads
(``sampled_kv_heads``, ``chip.run``'s notes), each K/V head drawn on its own.
A decode step with one query token packs the query heads of a GQA group into
the rows of one tile (as FlashDecoding and FA3 pack GQA): a unit is (batch, K/V
head, split) and reads its K/V once for the whole group. A decode tile computes
all its rows, valid or not (an MMA tile has no partial rows); its Q loads and O
stores move the valid rows only. Numerics are computed only when asked, on the first ``numerics_heads`` heads
(rounded up to whole GQA groups) of a workload with that many heads, and the
result names those heads; with more than one K/V head among them, in chunks of K/V heads on ``jobs`` local
processes or as tasks on a Dask cluster (``prepare.spread_numerics``: the same bits as one pass).
"""

from __future__ import annotations

import dataclasses
import math
import multiprocessing
import os
from dataclasses import asdict
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from vfasim import __version__
from vfasim.allocator import small_pages
from vfasim.chip.fluid import POLICIES
from vfasim.chip.run import ChipResult, Geometry, core_ops, representative_heads, simulate_chip, unit_bound_counts
from vfasim.chip.occupancy import TileShape
from vfasim.chip.roofline import roofline
from vfasim.errors import VfasimError
from vfasim.formats import format_class
from vfasim.functional import Policy, Precision, Tiling, engine_trace, policy_for
from vfasim.functional.trace_only import data_independent, trace_only
from vfasim.hw import HardwareConfig, builtin_names
from vfasim.kernel import GridSplit, Kernel, TileRule, WaveSplit
from vfasim.reuse import cached
from vfasim.sim import busiest_stream
from vfasim.runner.inputs import check_chip_plan
from vfasim.runner.options import Options
from vfasim.runner.prepare import (
    checked_queries,
    engine_precision,
    numerics_block,
    prepare,
    run_workload,
    spread_numerics,
)
from vfasim.runner.spec import RunInputs
from vfasim.trace import KIND_CODE as OP_CODES
from vfasim.trace import OP_KINDS, Trace
from vfasim.workloads import random_qk


SHARE_CLASSES = ("tensor", "vector", "exp")
TilingArgs = tuple[int, int, int, int, int, bool]  # Tiling's seq_len, kv_len, head_dim, block_q, block_k, causal
#: a launch whose trace depends on the data traces every (batch, head) while that is at most this many tiles; a
#: larger one traces a sample of its K/V heads (``sampled_kv_heads``): assumed, because 2^15 tiles of the engine's
#: QK side take about 10 s on one core (128-row tiles), and validate runs such launches by the hundred
TRACED_TILES = 1 << 15


def run_chip(config: HardwareConfig, inputs: RunInputs, k: Kernel) -> dict:
    """The RunResult fields of a chip run of ``inputs`` as kernel ``k`` (``api.run`` wraps them)."""
    algo, options, batch, heads, seq_len, head_dim, causal, decode, queries = (
        inputs.algo, inputs.options, inputs.batch, inputs.heads, inputs.seq_len, inputs.head_dim, inputs.causal,
        inputs.decode, inputs.queries)
    dispatch = inputs.dispatch or k.dispatch
    _check(batch, heads, inputs.kv_heads, dispatch, inputs.numerics_heads, inputs.qkv)
    _check_cores(config, inputs.trace_cores)
    kv_heads = inputs.kv_heads or heads
    policy = _policy(algo, options, k)
    if policy.skip == "topk":
        raise VfasimError(f"{algo} runs on one core only: its top-k thresholds are calibrated per (head, query "
                          "block) by the one-core run; give a config without a chip section")
    small_pages()  # its trace and launch arrays are as long as the traced heads (vfasim.allocator)
    precision = engine_precision(config)
    n_q = queries if decode else seq_len
    main_path = decode and k.decode is not None and not k.decode.runs(queries, heads // kv_heads)
    packs = decode and queries == 1 and k.decode is not None and k.decode.pack_gqa and not main_path
    group = heads // kv_heads if packs else 1  # query heads packed into one tile
    splits, split_tiles = kernel_splits(k, config, head_dim, causal, decode, batch * heads // group,
                                        group if packs else n_q, seq_len,
                                        inputs.block_q is None and inputs.block_k is None, main_path, algo)
    rule, block_q, block_k = kernel_tiles(k, config, head_dim, causal, split_tiles, inputs.block_q, inputs.block_k,
                                          algo)
    own = (inputs.block_q, inputs.block_k) == (None, None)  # blocks given: the diagonal's masks, the even code
    if not own and rule.block_cycles:  # measured with the kernel's own tile: no floor for blocks a user gave
        rule = rule.model_copy(update={"block_cycles": {}})
    uneven = own and k.uneven(rule, head_dim, n_q, seq_len)
    steps = k.mask_steps(rule, uneven) if own else 0
    bounds = own and k.bounds_masked(rule, causal, seq_len, n_q)  # every key block masked (Kernel.bounds_masked)
    tiling_args = (n_q, seq_len, head_dim, min(block_q, n_q) if decode else block_q, block_k, causal)
    t = Tiling(*tiling_args, heads, kv_heads, steps, bounds)
    rows = group if packs else n_q
    unit_args = (rows, seq_len, head_dim, min(block_q, rows), block_k, causal and group == 1) if decode \
        else tiling_args
    tu = Tiling(*unit_args, heads // group, kv_heads, steps, bounds)
    sample = sampled_kv_heads(policy, batch, tu)
    _check_size(config, policy, batch, heads // group, kv_heads, group, tu, splits, sample)
    trace, representative = _trace(policy, precision, unit_args, batch, heads // group, kv_heads, inputs.seed,
                                   inputs.workload, decode, queries, group, options.lam,
                                   pad_to=block_q if decode else 0, o_in_place=config.o_in_place, sample=sample,
                                   v_before_skip_test=k.v_before_skip_test, mask_steps=steps, mask_all=bounds)
    compute_dim = k.compute_head_dim(head_dim)
    trace = _padded_compute(trace, head_dim, compute_dim)
    if k.q_reread:
        trace = _q_with_every_key_block(trace)
    geo = Geometry(batch, heads // group, kv_heads, tu.n_qblocks, tu.n_kblocks, decode, causal,
                   _flops(t) * batch, representative, seq_len, splits, rows, sample, policy.minit, main_path,
                   uneven, masked_loop=causal and own and algo in k.masked_loop_apart, bounds_masked=bounds)
    tile = dataclasses.replace(tu, block_q=block_q, head_dim=compute_dim)  # whole rows, valid or not; padded columns
    res = simulate_chip(trace, config, k, rule, geo, _shape(tile, precision), dispatch, inputs.schedule,
                        samples=inputs.trace_out is not None)
    numerics, used = _numerics(config, inputs, policy, kv_heads, tiling_args)
    if inputs.trace_out is not None:
        from vfasim.report.chip_perfetto import chip_trace
        from vfasim.report.perfetto import write_chrome_trace

        cores = inputs.trace_cores
        ops = core_ops(trace, res, cores) if cores else None
        write_chrome_trace(inputs.trace_out,
                           chip_trace(res, config, inputs.trace_window, ops, list(cores or []) or None))
    return _fields(config, algo, res, trace, policy, k, dispatch, numerics, used, geo, t, inputs.seed,
                   inputs.workload if not representative or used else "timing-only", inputs.schedule)


def _check_cores(config: HardwareConfig, cores: tuple[int, ...] | None) -> None:
    assert config.chip is not None
    missing = [c for c in cores or () if c >= config.chip.cores]
    if missing:
        raise VfasimError(f"trace_cores: {config.name} has cores 0-{config.chip.cores - 1}, not {missing[0]}")


def _check(batch: int, heads: int, kv_heads: int | None, dispatch: str, numerics_heads: int,
           qkv: str | Path | None) -> None:
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise VfasimError(f"batch must be a positive integer, got {batch!r}")
    if kv_heads is not None and (kv_heads < 1 or heads % kv_heads):
        raise VfasimError(f"heads ({heads}) must be a multiple of kv_heads ({kv_heads})")
    if dispatch not in POLICIES:
        raise VfasimError(f"unknown dispatch policy {dispatch!r} (valid: {', '.join(POLICIES)})")
    if numerics_heads < 0 or numerics_heads > heads:
        raise VfasimError(f"numerics_heads must lie in [0, heads={heads}], got {numerics_heads}")
    if qkv is not None:
        raise VfasimError("--qkv is not supported on a chip (give the shape; the workload is generated)")


def _check_size(config: HardwareConfig, policy: Policy, batch: int, unit_heads: int, kv_heads: int, group: int,
                tu: Tiling, splits: int, sample: int) -> None:
    """The launch's size estimated from its geometry (``inputs.check_chip_plan``) before anything is allocated."""
    assert config.chip is not None
    units = batch * unit_heads * tu.n_qblocks * max(splits, 1)
    traced = unit_heads // kv_heads if data_independent(policy) else \
        sample * representative_heads(unit_heads // kv_heads) if sample else batch * unit_heads
    tiles = traced * tu.n_qblocks * tu.n_kblocks
    check_chip_plan(units, config.chip.cores * config.chip.core_limits.max_streams, tiles, tu.seq_len,
                    f"batch {batch} x heads {unit_heads * group} x {tu.n_qblocks} query blocks"
                    + (f" x {splits} splits" if splits > 1 else "") + f", {config.chip.cores} cores")


def kernel_splits(kernel: Kernel, config: HardwareConfig, head_dim: int, causal: bool, decode: bool,
                  batch_heads: int, rows: int, kv_len: int, own_tiles: bool, main_path: bool,
                  algo: str | None = None) -> tuple[int, bool]:
    """(splits, split tiles): the splits of the K/V its own rule picks (0: the chip model picks them, as
    ``fill_slots`` or ``none`` say) and whether the launch runs the kernel's split-KV (decode) tiles.

    A ``wave_efficiency`` or ``grid_target`` rule decides on the kernel's own tiles (not on blocks a user gave) and,
    where the rule says so, in prefill too; a launch of one split runs the tiles ``one_split_tiles`` names. A decode step the
    split path does not take (``main_path``: ``DecodeRule.runs`` says no, for more queries than its ``max_queries``
    or a GQA group its ``gqa_groups`` refuses) runs the main kernel, unsplit.
    """
    rule = kernel.decode.split_kv if kernel.decode is not None else "none"
    if decode and main_path and own_tiles:
        return 1, False  # the kernel's main path: its prefill tiles, one split
    if not isinstance(rule, (WaveSplit, GridSplit)) or not own_tiles or not (decode or rule.prefill) \
            or config.chip is None:
        return 0, decode
    try:
        block_k = kernel.tile(head_dim, format_class(config.precision.matmul), causal, True, algo).block_k
    except ValueError:  # no split tile for this run: the table it runs from says why
        return 0, decode
    splits = rule.splits(batch_heads, rows, config.chip.cores, -(-kv_len // block_k))
    assert kernel.decode is not None
    return splits, splits > 1 or (decode and kernel.decode.one_split_tiles == "decode")


def kernel_tiles(kernel: Kernel, config: HardwareConfig, head_dim: int, causal: bool, decode: bool,
                 block_q: int | None, block_k: int | None, algo: str | None = None) -> tuple[TileRule, int, int]:
    """(tile rule, a stream's block_q, block_k): the kernel's own tile unless a block is given.

    A one-line error when the kernel does not target the chip or has no tile for the run.
    """
    if not kernel.runs_on(config.name, builtin_names()):
        raise VfasimError(f"kernel {kernel.name} targets {', '.join(kernel.targets)}, not {config.name} "
                          "(copy its YAML file and add the chip to 'targets' to try it there)")
    try:
        rule = kernel.tile(head_dim, format_class(config.precision.matmul), causal, decode, algo)
    except ValueError as exc:
        raise VfasimError(str(exc)) from None
    rows = rule.block_q // kernel.streams_per_cta(rule)
    return rule, rows if block_q is None else block_q, rule.block_k if block_k is None else block_k


def _policy(algo: str, options: Options, kernel: Kernel) -> Policy:
    """The algorithm's policy with the kernel's exp emulation and rescale rule where the options leave them."""
    policy = policy_for(algo, **options.policy_options())
    if kernel.exp_emulation and options.exp_emulation is None:
        policy = dataclasses.replace(policy, exp_emulation=kernel.exp_emulation)
    threshold = kernel.rescale_threshold_log2
    if threshold is not None and options.rescale_threshold is None and policy.rescale_threshold is None:
        policy = dataclasses.replace(policy, rescale_threshold=threshold * math.log(2))
    return policy


def sampled_kv_heads(policy: Policy, batch: int, tu: Tiling) -> int:
    """K/V heads whose representative heads a data-dependent trace holds when the launch (``batch`` × ``tu``'s
    heads) has more than ``TRACED_TILES`` tiles, at least one; 0: every head is traced (or none needs data)."""
    per_head = int(tu.n_visible.sum())
    if data_independent(policy) or batch * tu.heads * per_head <= TRACED_TILES:
        return 0
    per_kv_head = representative_heads(tu.heads // tu.kv_heads) * per_head
    return min(batch * tu.kv_heads, max(1, TRACED_TILES // per_kv_head))


def _trace(policy: Policy, precision: Precision, tiling_args: TilingArgs, batch: int, heads: int, kv_heads: int,
           seed: int, workload: str, decode: bool, queries: int, packed: int,
           lam: float, pad_to: int = 0, o_in_place: bool = False, sample: int = 0,
           v_before_skip_test: bool = False, mask_steps: int = 0, mask_all: bool = False) -> tuple[Trace, bool]:
    """(trace, representative): a group's representative heads without data, or every head (``sample`` > 0: the
    representative heads of that many K/V heads) through the engine, on ``workload``'s data.

    ``packed`` > 1: each of the ``heads`` (= K/V heads) rows holds ``packed`` query heads. ``pad_to`` > 0 (a
    decode tile's rows): the trace computes whole tiles of that many rows, as the MMAs and the softmax of a real
    tile do whatever rows are valid (the engine pads the queries with zero rows, which its skip test leaves out).
    ``o_in_place`` and ``v_before_skip_test`` as ``run_engine`` takes them; ``mask_steps`` and ``mask_all`` as ``Tiling`` does.
    Inside a ``reuse`` scope each trace is made once per key: a representative trace per its tiling, policy, precision, decode and O accumulation,
    everything ``trace_only`` reads; an engine trace per ``_engine_trace``'s arguments, everything it reads.
    """
    group = heads // kv_heads
    rows = -(-tiling_args[0] // pad_to) * pad_to if pad_to else tiling_args[0]
    if data_independent(policy):
        padded = Tiling(rows, *tiling_args[1:3], pad_to or tiling_args[3], *tiling_args[4:], 1, 1, mask_steps,
                        mask_all)
        trace = cached(("representative trace", padded, policy, repr(precision), decode, o_in_place),
                       lambda: trace_only(padded, policy, precision, decode=decode, o_in_place=o_in_place))
        return _predicated(trace, tiling_args[0], rows), True
    n_heads, n_kv = (sample * representative_heads(group), sample) if sample else (heads * batch, kv_heads * batch)
    t = Tiling(*tiling_args[:3], pad_to or tiling_args[3], *tiling_args[4:], n_heads, n_kv, mask_steps, mask_all)
    args = (t, policy, precision, seed, workload, decode, queries, packed, lam, o_in_place, v_before_skip_test)
    trace = cached(("engine trace", *args[:2], repr(precision), *args[3:]), lambda: _engine_trace(*args))
    return _predicated(trace, tiling_args[0], rows), False


def _engine_trace(t: Tiling, policy: Policy, precision: Precision, seed: int, workload: str, decode: bool,
                  queries: int, packed: int, lam: float, o_in_place: bool, v_before_skip_test: bool) -> Trace:
    """The engine's trace of ``t``'s heads (each row of a head holds ``packed`` query heads) on ``workload``'s
    data, drawn with ``seed``."""
    q, k = _queries_keys(workload, t, packed, seed, decode, queries)
    q = q.reshape(t.heads, -1, q.shape[-1])  # a group's query heads are adjacent
    return engine_trace(q, k, k, t, policy, precision, lam, decode=decode, o_in_place=o_in_place,
                        v_before_skip_test=v_before_skip_test)  # an engine trace reads no V: K stands in


def _queries_keys(workload: str, t: Tiling, packed: int, seed: int, decode: bool, queries: int) \
        -> tuple[np.ndarray, np.ndarray]:
    """The Q (a decode step's queries alone) and K of ``workload``'s data for ``t``; the random workload (the
    harness's inputs) drawn without its V and without holding Q whole (``random_qk``: the same values)."""
    heads = t.heads * packed
    if workload != "random":
        wl = run_workload(None, workload, t.kv_len, t.head_dim, heads, t.kv_heads, seed, decode, queries)
        return wl.q, wl.k
    rows = checked_queries(queries, t.kv_len) if decode else t.kv_len
    return random_qk(t.kv_len, t.head_dim, heads, seed, t.kv_heads, rows)


def _predicated(trace: Trace, valid: int, rows: int) -> Trace:
    """``trace`` of a tile of ``rows`` rows whose Q loads and O stores move only the ``valid`` rows (the source's
    copies are predicated on the row index; its MMAs and softmax run on the whole tile)."""
    if valid == rows:
        return trace
    rowwise = np.isin(trace.kind, [OP_CODES["load_q"], OP_CODES["store_o"]])
    work = np.where(rowwise, trace.work * valid // rows, trace.work)
    return dataclasses.replace(trace, work=work)


def _q_with_every_key_block(trace: Trace) -> Trace:
    """``trace`` of a kernel that reads its Q tile again with every key block (``Kernel.q_reread``): each K load of a
    row also moves the bytes of that row's Q load."""
    q = trace.kind == OP_CODES["load_q"]
    q_bytes = np.bincount(trace.row[q], weights=trace.work[q], minlength=int(trace.row.max(initial=-1)) + 1)
    k = trace.kind == OP_CODES["load_k"]
    work = trace.work.copy()
    work[k] += q_bytes[trace.row[k]].astype(work.dtype)
    return dataclasses.replace(trace, work=work)


#: op kinds whose work grows with the head dim the kernel computes at (its MMAs and its O work); loads and stores
#: move only the real columns (their copies are predicated), and the scores' ops do not depend on it
PADDED_KINDS = ("qk_matmul", "pv_matmul", "minit_matmul", "move_o", "move_pv", "rescale_o", "accumulate_o",
                "accumulate_pv", "normalize")


def _padded_compute(trace: Trace, head_dim: int, compute_dim: int) -> Trace:
    """``trace`` as a kernel compiled for ``compute_dim`` runs it: the work of ``PADDED_KINDS`` scaled up."""
    if compute_dim == head_dim:
        return trace
    padded = np.isin(trace.kind, [OP_CODES[k] for k in PADDED_KINDS])
    work = np.where(padded, -(-trace.work * compute_dim // head_dim), trace.work)
    return dataclasses.replace(trace, work=work)


def _shape(t: Tiling, precision: Precision) -> TileShape:
    return TileShape(t.block_q, t.block_k, t.head_dim, precision.bytes_per("q"), precision.bytes_per("k"),
                     precision.bytes_per("p"))


def _flops(t: Tiling) -> float:
    """4 · d · visible query-key pairs · heads (causal pairs counted exactly)."""
    offset = t.kv_len - t.seq_len
    rows = np.arange(t.seq_len)
    pairs = np.minimum(rows + offset + 1, t.kv_len).sum() if t.causal else t.seq_len * t.kv_len
    return 4.0 * t.head_dim * float(pairs) * t.heads


def _numerics(config: HardwareConfig, inputs: RunInputs, policy: Policy, kv_heads: int,
              tiling_args: TilingArgs) -> tuple[dict, list[int]]:
    """Numerics of the first ``numerics_heads`` heads (whole GQA groups) under the policy the chip run timed."""
    if inputs.numerics_heads == 0:
        return {}, []
    group = inputs.heads // kv_heads
    n = -(-inputs.numerics_heads // group) * group
    block_q, block_k = tiling_args[3:5]
    heads = dataclasses.replace(inputs, heads=n, kv_heads=n // group, batch=1, block_q=block_q, block_k=block_k,
                                numerics="full", progress=False)  # the heads checked, as one core checks them
    jobs = _numerics_jobs(inputs.jobs, inputs.executor, n // group)
    if jobs > 1 or inputs.executor == "dask":  # chunks of K/V heads on local processes or a Dask cluster: same bits
        return spread_numerics(config, dataclasses.replace(heads, progress=inputs.progress), policy, jobs), \
            list(range(n))
    with threadpool_limits(limits=1, user_api="blas"):  # as on one core: a fixed summation order, same bits
        prepared = prepare(config, heads, references=True, policy=policy)
        assert prepared.references is not None and prepared.result is not None  # asked for above
        numerics, _ = numerics_block(prepared.precision, prepared.policy, prepared.result, *prepared.references())
    return numerics, list(range(n))


def _numerics_jobs(jobs: int | None, executor: str, kv_heads: int) -> int:
    """Chunks of a chip run's heads' numerics, at most one a K/V head: as given, else on Dask one a K/V head, locally
    one per core, or one in a process that is itself a pool's worker (a sweep's or validate's point: pools do not
    nest)."""
    if jobs is None:
        local = 1 if multiprocessing.parent_process() is not None else os.cpu_count() or 1
        jobs = kv_heads if executor == "dask" else local
    return min(jobs, kv_heads)


def _fields(config: HardwareConfig, algo: str, res: ChipResult, trace: Trace, policy: Policy, kernel: Kernel,
            dispatch: str, numerics: dict, used: list[int], geo: Geometry, t: Tiling, seed: int, workload: str,
            schedule: str) -> dict:
    us = res.latency_cycles / (config.clock_ghz * 1e3)
    pipes = {n: {"busy_cycles": int(b), "utilization": res.utilization[n]} for n, b in res.busy_cycles.items()}
    by_class = {c: sum(v for k, v in res.kind_cycles.items() if OP_KINDS[k][0] == c) for c in SHARE_CLASSES}
    total = sum(by_class.values())
    return {
        "hw": config.name, "algo": algo, "workload": workload, "latency_cycles": res.latency_cycles,
        "latency_us": us, "pipelines": pipes,
        "shares": {c: (v / total if total else 0.0) for c, v in by_class.items()},
        "bottleneck": busiest_stream({n: p["utilization"] for n, p in pipes.items()}, config),
        "bound": res.bound,
        "ops": {k: int(v) for k, v in res.kind_cycles.items()},
        "manifest": {"version": __version__, "hw_digest": config.digest(), "seed": seed,
                     "trace_digest": trace.digest(), "trace_ops": len(trace), "schedule": schedule,
                     "trace_scope": _scope(geo)},
        "numerics": numerics,
        "shape": {"batch": geo.batch, "seq_len": t.seq_len, "kv_len": t.kv_len, "head_dim": t.head_dim,
                  "heads": t.heads, "kv_heads": t.kv_heads, "block_q": t.block_q, "block_k": t.block_k,
                  "causal": t.causal, "decode": geo.decode},
        "options": {"policy": asdict(policy), "kernel": kernel.name, "kernel_digest": kernel.digest(),
                    "dispatch": dispatch},
        "chip": chip_summary(res, config, kernel.name, dispatch, used),
    }


def _scope(geo: Geometry) -> str:
    if geo.representative:
        return "the first head of one K/V-head group, standing for every head (data-independent trace)"
    if geo.sampled_kv_heads:
        return (f"representative heads of {geo.sampled_kv_heads} of the {geo.batch * geo.kv_heads} K/V heads, each on "
                f"its own data (the launch is over {TRACED_TILES} tiles; the other K/V heads' units reuse them)")
    return "all batch x heads"


def launch_us(res: ChipResult, clock_ghz: float) -> dict[str, float]:
    """The latency by launch, µs: the attention kernel (its units' last end, and its wait for the L2's dirty lines,
    ``writeback_us``), the split's combine kernel (its last end after that), the pre-pass (its own launch included),
    and the launch overheads charged for the others (the rest)."""
    main = float(res.times.end.max(initial=0)) + res.writeback_cycles
    combine = float(res.combine.end.max()) - main if res.combine is not None else 0.0
    overheads = res.latency_cycles - main - combine - res.prepass_cycles
    return {name: cycles / (clock_ghz * 1e3) for name, cycles in
            (("attention_kernel", main), ("combine_kernel", combine), ("prepass_kernel", float(res.prepass_cycles)),
             ("launch_overheads", overheads))}


def chip_summary(res: ChipResult, config: HardwareConfig, kernel: str, dispatch: str, used: list[int]) -> dict:
    seconds = res.latency_cycles / (config.clock_ghz * 1e9)
    units = int(res.launch.kind.size)
    cores = config.chip.cores if config.chip is not None else 1
    slots = cores * res.slots_per_core
    return {
        "cores": cores, "streams_per_core": res.streams_per_core, "kernel": kernel,
        "dispatch": dispatch, "units": units, "streams_per_unit": res.streams_per_core // res.slots_per_core,
        "splits": res.splits, "waves": -(-units // slots),
        "latency_cycles": res.latency_cycles, "latency_us": seconds * 1e6,
        "flops": res.flops, "tflops": res.flops / seconds / 1e12 if seconds else 0.0,
        "hbm_bytes": res.hbm_bytes, "l2_bytes": res.l2_bytes,
        "achieved_hbm_tbps": res.hbm_bytes / seconds / 1e12 if seconds else 0.0,
        "achieved_l2_tbps": res.l2_port_bytes / seconds / 1e12 if seconds else 0.0,
        "bound": res.bound,
        "prepass_cycles": res.prepass_cycles, "prepass_us": res.prepass_cycles / (config.clock_ghz * 1e3),
        "attention_call_cycles": res.alone_cycles, "attention_call_us": res.alone_cycles / (config.clock_ghz * 1e3),
        "launch_us": launch_us(res, config.clock_ghz),
        "writeback_us": res.writeback_cycles / (config.clock_ghz * 1e3),
        "unit_overhead_cycles": res.unit_overhead_cycles, "unit_overhead_from": res.unit_overhead_from,
        "utilization": {k.removeprefix("class_"): v for k, v in res.utilization.items() if k.startswith("class_")},
        "unit_bounds": unit_bound_counts(res.times),
        "numerics_heads": used,
        "roofline": roofline(res, config),
    }
