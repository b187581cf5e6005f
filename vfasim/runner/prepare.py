"""One-core preparation shared by ``vfasim.run`` and chip runs: the workload, the functional engine, the
references it is checked against, and the numerics block of a result.

``prepare`` resolves the config, policy and workload and runs the engine (its trace inside); with
references, the float64 oracle and the fa2 baseline run beside it in two threads. With numerics off,
a generated workload and a trace that does not depend on the data (``trace_only.data_independent``),
there is nothing to compute: the trace is emitted without Q, K or V and the run is timing only. ``numerics_block`` and
``checked_numerics`` turn the engine's result and the references into the numerics of a result.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import fields, replace
from pathlib import Path
from typing import NamedTuple

import numpy as np
from threadpoolctl import threadpool_limits

from vfasim.allocator import keep_freed_memory, small_pages, tune_allocator
from vfasim.errors import VfasimError
from vfasim.functional import EngineResult, Policy, Precision, Tiling, policy_for, reference_attention, run_engine
from vfasim.functional import checks, sampling
from vfasim.functional.results import RowDiagnostics
from vfasim.functional.engine import engine_threads
from vfasim.functional.policy import calibrate_bsfa
from vfasim.functional.trace_only import data_independent, trace_repeated
from vfasim.hw import HardwareConfig
from vfasim.repeats import Repeated
from vfasim.runner.inputs import BASE_BYTES, BYTES_PER_QKV_ELEMENT, check_blocks, check_memory
from vfasim.runner.options import Options, topk_for
from vfasim.runner.spec import RunInputs
from vfasim.io.qkv_files import load_qkv
from vfasim.io.refcache import ReferenceCache, entry_name, reference_cache
from vfasim.trace import Trace
from vfasim.workloads import Workload, check_workload, make_workload

BASELINE = "fa2"
BSFA_CALIBRATION_RUNS = 2  # calibration workloads: the same generator at seeds seed+1, seed+2
MAX_FAILED_ROWS = 1000  # failed rows drawn as trace events
DEFAULT_BLOCK = 128  # one core's tile rows and keys when none are given (the paper's 128 x 128)


class Prepared(NamedTuple):
    config: HardwareConfig
    policy: Policy
    opts: Options
    workload: str  # name; Q, K and V are let go once the engine has run (the timing needs none)
    workload_digest: str | None  # None: timing only, no Q, K or V were made
    tiling: Tiling
    precision: Precision
    result: EngineResult | None  # None: timing only (numerics off on a data-independent trace)
    trace: Trace | Repeated  # timing only: as emitted, its long rows' repeated tiles left out (``whole_trace``)
    references: Callable[[], tuple[np.ndarray, np.ndarray]] | None  # float64 oracle and fa2 outputs (waits)
    blocks: np.ndarray | None = None  # query blocks the references cover (sampled numerics); None: all

    def whole_trace(self) -> Trace:
        """The run's trace, written whole where it is held repeated."""
        return self.trace.whole if isinstance(self.trace, Repeated) else self.trace


def prepare(config: HardwareConfig, inputs: RunInputs, *, references: bool = False,
            policy: Policy | None = None) -> Prepared:
    """The policy and workload of one core's run of ``inputs`` on ``config`` resolved, and the functional engine run
    (its trace inside). Its blocks default to ``DEFAULT_BLOCK``; on one core, batch elements are more heads.

    With ``references``, the float64 oracle and the fa2 baseline start in two more threads
    (NumPy releases the GIL in its kernels, so the cores are shared), on the query blocks
    ``numerics`` asks for (see ``run``); ``references`` of the result waits for them. With ``cache``
    they are read from the reference cache (``vfasim.io.refcache``) when there, and kept there when not.
    ``policy`` replaces the algorithm's own (a chip run's kernel may set its exp emulation and rescale rule).
    """
    i, opts = _folded(inputs), inputs.options
    block_q, block_k = i.block_q or DEFAULT_BLOCK, i.block_k or DEFAULT_BLOCK
    policy = policy or policy_for(i.algo, **opts.policy_options())
    if i.numerics == "off" and i.qkv is None and data_independent(policy):
        return _timing_only(config, i, policy, block_q, block_k)
    wl = run_workload(i.qkv, i.workload, i.seq_len, i.head_dim, i.heads, i.kv_heads, i.seed, i.decode, i.queries)
    tiling = _tiling(i, wl)
    precision = engine_precision(config)
    thresholds = _bsfa_thresholds(policy.skip, tiling, precision, opts, i.qkv, i.workload, i.seed, i.decode,
                                  i.queries)
    mode = sampling.resolve_mode(i.numerics, wl.heads, wl.seq_len, wl.kv_len)
    references = references and mode != "off"
    if i.qkv is not None and i.seed != 0 and not (references and mode == "sample"):  # a file's only use of a seed
        raise VfasimError(f"seed applies with qkv only to sampled numerics (it draws the sampled query blocks); "
                          f"this run's numerics are {mode if references else 'not checked'}: leave seed out")
    blocks = sampling.sample_blocks(wl.q, tiling.block_q, i.seed) if references and mode == "sample" else None
    is_baseline = policy == policy_for(BASELINE)  # then the run is its own baseline
    digest = _sha256(wl.q, wl.k, wl.v)
    pool = ThreadPoolExecutor(max_workers=2)
    # one BLAS thread per engine thread: tile-sized matmuls gain nothing from more
    with threadpool_limits(limits=1, user_api="blas"):
        side = _start_references(pool, wl, tiling, precision, i.decode, not is_baseline, blocks,
                                 1 if mode == "full" else None, reference_cache(i.cache), digest) if references else None
        pool.shutdown(wait=False)  # the submitted work goes on; the pool takes no more
        # Full references computed beside the engine are two more computations: each runs on one
        # thread and the three share the cores (an engine's own row threads would only add overhead);
        # sampled ones are small, and the engine keeps its threads, as it does when both were cached.
        computing = side is not None and mode == "full" and not all(f is None or f.done() for f in side)
        threads = 1 if computing else None
        if engine_threads(threads) == 1:  # the engine allocates in the main arena: see vfasim.allocator
            tune_allocator()
        result = run_engine(wl.q, wl.k, wl.v, tiling, policy, precision, opts.lam, thresholds=thresholds,
                            decode=i.decode, o_in_place=config.o_in_place, progress=i.progress, threads=threads)
    refs = _awaited(*side, result if is_baseline else None) if side is not None else None
    return Prepared(config, policy, opts, wl.name, digest[:16], tiling, precision, result, result.traced(), refs,
                    blocks)


def spread_numerics(config: HardwareConfig, inputs: RunInputs, policy: Policy, jobs: int) -> dict:
    """The numerics block of ``inputs`` with full numerics (a chip run's heads: no top-k thresholds), as ``prepare``
    and ``numerics_block`` give it, computed in ``jobs`` chunks of whole K/V heads on the inputs' executor
    (``exec.compute``: local processes, or tasks on a Dask cluster). Each chunk runs the engine beside its float64
    oracle and fa2 baseline, read from or kept in the reference cache under the chunk's own Q, K and V. Heads are
    independent and each engine row computes as it would in one pass, so the block is the one pass's, bit for bit (a
    test holds them equal)."""
    from vfasim.exec import compute

    i = _folded(inputs)
    wl = run_workload(i.qkv, i.workload, i.seq_len, i.head_dim, i.heads, i.kv_heads, i.seed, i.decode, i.queries)
    tiling = _tiling(i, wl)
    precision = engine_precision(config)
    group = tiling.heads // tiling.kv_heads
    cuts = np.linspace(0, tiling.kv_heads, min(jobs, tiling.kv_heads) + 1).round().astype(int).tolist()
    tasks = [(Workload(wl.name, wl.q[a * group:b * group], wl.k[a:b], wl.v[a:b]),
              replace(tiling, heads=(b - a) * group, kv_heads=b - a), policy, precision, i.options.lam, i.decode,
              config.o_in_place, i.cache) for a, b in zip(cuts[:-1], cuts[1:])]
    names = [f"numerics K/V heads {a}-{b - 1}" for a, b in zip(cuts[:-1], cuts[1:])]
    done: dict[int, tuple[EngineResult, np.ndarray, np.ndarray]] = {}
    for index, part in compute(_chunk_numerics, tasks, names, i.executor, len(tasks), i.scheduler):
        done[index] = part
        if i.progress:
            print(f"\rnumerics: {len(done)}/{len(tasks)} chunks of K/V heads", end="", file=sys.stderr, flush=True)
    if i.progress:
        print(file=sys.stderr)
    parts = [done[n] for n in range(len(tasks))]
    result = _joined([r for r, _, _ in parts])
    with threadpool_limits(limits=1, user_api="blas"):  # its norms as one pass's: one BLAS thread
        numerics, _ = numerics_block(precision, policy, result, np.concatenate([o for _, o, _ in parts]),
                                     np.concatenate([b for _, _, b in parts]))
    return numerics


def _chunk_numerics(wl: Workload, tiling: Tiling, policy: Policy, precision: Precision, lam: float, decode: bool,
                    o_in_place: bool, cache: bool) -> tuple[EngineResult, np.ndarray, np.ndarray]:
    """One chunk of ``spread_numerics``: the engine's result (no trace), the float64 oracle's output, fa2's."""
    is_baseline = policy == policy_for(BASELINE)
    pool = ThreadPoolExecutor(max_workers=2)
    # one BLAS thread until the references are done too: the summation order, so the bits, of one pass's
    with threadpool_limits(limits=1, user_api="blas"):
        side = _start_references(pool, wl, tiling, precision, decode, not is_baseline, None, 1, reference_cache(cache),
                                 _sha256(wl.q, wl.k, wl.v))
        pool.shutdown(wait=False)
        computing = not all(f is None or f.done() for f in side)
        result = run_engine(wl.q, wl.k, wl.v, tiling, policy, precision, lam, decode=decode, o_in_place=o_in_place,
                            trace=False, threads=1 if computing else None)
        oracle, base = _awaited(*side, result if is_baseline else None)()
    return result, oracle, base


def _joined(parts: list[EngineResult]) -> EngineResult:
    """Engine results of consecutive chunks of heads as one (rows are head-major; counts add up)."""
    def cat(name: str, of: str = "") -> np.ndarray:
        return np.concatenate([getattr(getattr(p, of) if of else p, name) for p in parts])

    rows = RowDiagnostics(*(cat(f.name, "rows") for f in fields(RowDiagnostics)))
    counts = {k: sum(p.counts[k] for p in parts) for k in parts[0].counts}
    return EngineResult(cat("out"), cat("used_max"), cat("true_max"), cat("block_max"), cat("above_max"), counts,
                        None, rows)


def _tiling(i: RunInputs, wl: Workload) -> Tiling:
    """The tiling one core runs ``wl`` on (blocks ``DEFAULT_BLOCK`` unless given; a decode step's query tile cut to
    its rows), checked."""
    block_q, block_k = i.block_q or DEFAULT_BLOCK, i.block_k or DEFAULT_BLOCK
    tiling = Tiling(wl.seq_len, wl.kv_len, wl.head_dim, min(block_q, wl.seq_len) if i.decode else block_q, block_k,
                    i.causal, wl.heads, wl.kv_heads)
    check_blocks(tiling)
    return tiling


def _folded(inputs: RunInputs) -> RunInputs:
    """``inputs`` with their batch elements as more heads (each with its own K/V heads)."""
    i = inputs
    return i if i.batch == 1 else replace(i, heads=i.heads * i.batch, kv_heads=(i.kv_heads or i.heads) * i.batch,
                                          batch=1)


def _timing_only(config: HardwareConfig, i: RunInputs, policy: Policy, block_q: int, block_k: int) -> Prepared:
    """A run with nothing to compute: its trace emitted without Q, K or V (``trace_only``), its passes on a heap
    that keeps what they free (``keep_freed_memory``), in small pages (``small_pages``)."""
    tiling = _unmade_tiling(i.workload, i.seq_len, i.head_dim, block_q, block_k, i.causal, i.heads, i.kv_heads,
                            i.seed, i.decode, i.queries)
    check_blocks(tiling)
    precision = engine_precision(config)
    keep_freed_memory()
    small_pages()
    trace = trace_repeated(tiling, policy, precision, decode=i.decode, o_in_place=config.o_in_place)
    return Prepared(config, policy, i.options, i.workload, None, tiling, precision, None, trace, None)


def _unmade_tiling(name: str, seq_len: int, head_dim: int, block_q: int, block_k: int, causal: bool, heads: int,
                   kv_heads: int | None, seed: int, decode: bool, queries: int) -> Tiling:
    """The tiling ``prepare`` runs the generated workload on, its inputs checked as generating it would."""
    kv_heads = check_workload(name, seq_len, head_dim, heads, seed, kv_heads)
    rows = checked_queries(queries, seq_len) if decode else seq_len
    return Tiling(rows, seq_len, head_dim, min(block_q, rows) if decode else block_q, block_k, causal, heads,
                  kv_heads)


def checked_queries(queries: int, seq_len: int) -> int:
    if isinstance(queries, bool) or not isinstance(queries, int) or not 1 <= queries <= seq_len:
        raise VfasimError(f"queries must be an integer in [1, {seq_len}], got {queries!r}")
    return queries


def _awaited(oracle: Future, baseline: Future | None,
             own: EngineResult | None) -> Callable[[], tuple[np.ndarray, np.ndarray]]:
    """(oracle output, fa2 baseline output) once the side threads are done; ``own``: the run is the baseline."""
    def get() -> tuple[np.ndarray, np.ndarray]:
        if baseline is not None:
            return oracle.result(), baseline.result()
        assert own is not None
        return oracle.result(), own.out
    return get


def _start_references(pool: ThreadPoolExecutor, wl: Workload, tiling: Tiling, precision: Precision, decode: bool,
                      baseline: bool, blocks: np.ndarray | None, threads: int | None, cache: ReferenceCache | None,
                      inputs: str) -> tuple[Future, Future | None]:
    """The float64 oracle's output and, if asked, fa2's at the kernel's precision (on ``blocks`` only): each
    read from ``cache`` (a done future) or started (then kept in ``cache``). ``inputs``: Q, K and V's digest."""
    sampled = None if blocks is None else tuple(blocks.tolist())
    rows = None if blocks is None else sampling.block_rows(blocks, tiling.block_q, tiling.seq_len)
    oracle = _cached_job(pool, cache, ("oracle", inputs, tiling.causal, sampled), np.dtype(np.float64),
                         lambda: reference_attention(wl.q, wl.k, wl.v, tiling.causal, rows))
    if not baseline:
        return oracle, None
    engine_rows = None if blocks is None else (np.arange(tiling.heads)[:, None] * tiling.n_qblocks + blocks).ravel()
    return oracle, _cached_job(pool, cache, (BASELINE, inputs, tiling, precision, decode, sampled), precision.vector_np,
                               lambda: run_engine(wl.q, wl.k, wl.v, tiling, BASELINE, precision, decode=decode,
                                                  rows=engine_rows, trace=False, threads=threads).out)


def _cached_job(pool: ThreadPoolExecutor, cache: ReferenceCache | None, parts: tuple, dtype: np.dtype,
                compute: Callable[[], np.ndarray]) -> Future:
    """``compute()`` as a future: done at once when ``cache`` holds the entry ``parts`` name, else started."""
    if cache is None:
        return pool.submit(compute)
    name = entry_name(*parts)
    found = cache.get(name, dtype)
    if found is None:
        return pool.submit(cache.cached, name, dtype, compute)
    done: Future = Future()
    done.set_result(found)
    return done


def digest(*arrays: np.ndarray) -> str:
    return _sha256(*arrays)[:16]


def _sha256(*arrays: np.ndarray) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(str(a.shape).encode() + np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def engine_precision(config: HardwareConfig) -> Precision:
    """The formats the functional engine computes in: exactly the config's."""
    spec = config.precision
    return Precision(matmul=spec.matmul, vector=spec.vector, scaling=spec.scaling.model_dump(),
                     block_scale=spec.block_scale)


def run_workload(qkv: str | Path | None, name: str, seq_len: int, head_dim: int, heads: int, kv_heads: int | None,
              seed: int, decode: bool, queries: int) -> Workload:
    if qkv is not None:  # its arrays' headers read first, against the memory a run of them would need
        wl = load_qkv(qkv, lambda need, what: check_memory(BASE_BYTES + need, what), BYTES_PER_QKV_ELEMENT)
    else:
        wl = make_workload(name, seq_len, head_dim, heads, seed, kv_heads)
    if not decode:
        return wl
    checked_queries(queries, wl.seq_len)
    return Workload(wl.name, np.ascontiguousarray(wl.q[:, -queries:]), wl.k, wl.v)


def _bsfa_thresholds(skip: str, tiling: Tiling, precision: Precision, opts: Options, qkv: str | Path | None,
                     name: str, seed: int, decode: bool, queries: int) -> np.ndarray | None:
    """BSFA's per-(head, query block) thresholds, calibrated on workloads other than the one run.

    For a loaded file there is no second sample, so the file calibrates itself (optimistic).
    """
    if skip != "topk":
        return None
    topk = topk_for(opts.topk, tiling.n_kblocks)
    if topk >= tiling.n_kblocks:
        raise VfasimError(f"topk {opts.topk} keeps every block: there are {tiling.n_kblocks} key blocks, at most "
                          f"{tiling.n_kblocks - 1} beside the diagonal; give topk <= {tiling.n_kblocks - 1}")
    samples = [None] if qkv is not None else [seed + i for i in range(1, BSFA_CALIBRATION_RUNS + 1)]
    maxima = []
    for s in samples:
        wl = run_workload(qkv, name, tiling.kv_len, tiling.head_dim, tiling.heads, tiling.kv_heads,
                       0 if s is None else s, decode, queries)
        maxima.append(run_engine(wl.q, wl.k, wl.v, tiling, BASELINE, precision, trace=False).block_max)
    local = np.tile(tiling.local_block, tiling.heads)
    return calibrate_bsfa(maxima, local, topk)


def numerics_block(precision: Precision, policy: Policy, result: EngineResult, ref: np.ndarray,
                   base: np.ndarray) -> tuple[dict, list[dict]]:
    """The numerics block of a result, and the failed rows (at most MAX_FAILED_ROWS) for trace events."""
    errors = checks.error_vs_reference(result.out, ref)
    failures = _failures(result, ref, base, precision.for_p(policy.p_bf16).p_cast_limit())
    base_err = failures.pop("base_rel_err")
    failed_rows = failures.pop("failed_rows")
    return {
        "verdict": checks.verdict(errors["rel_err_vs_fp64"], base_err, failures["bad_row_fraction"]),
        "fa2_rel_err_vs_fp64": base_err,
        "matmul_dtype": precision.matmul, "vector_dtype": precision.vector,
        **errors, **checks.non_finite(result.out),
        **failures,
        **checks.bits_vs_baseline(result.out, base),
        **_engine_numerics(result),
    }, failed_rows


def _engine_numerics(result: EngineResult) -> dict:
    """What the engine's own run tells, over every row: frozen max, skips, rescales, over/underflows."""
    c = result.counts
    kept = c["visited_tiles"] - c["skipped_tiles"]
    flows = {k: v for k, v in c.items() if k.endswith("flow")}
    return {
        **checks.frozen_max_stats(result.used_max, result.true_max),
        "max_gap_quantiles": checks.gap_quantiles(result.used_max, result.true_max),
        "skipped_block_fraction": c["skipped_tiles"] / max(c["visited_tiles"], 1),
        "skipped_row_fraction": c["skipped_row_tiles"] / max(c["row_tiles"], 1),
        "rescale_skip_fraction": 1 - c["rescaled_tiles"] / kept if kept else 0.0,
        "overflow_count": sum(v for k, v in flows.items() if k.endswith("overflow")),
        "underflow_count": sum(v for k, v in flows.items() if k.endswith("underflow")),
        "flows": flows,
    }


#: numerics that need the oracle or the fa2 baseline: None under ``numerics="off"``
COMPARED_KEYS = ("fa2_rel_err_vs_fp64", "rel_err_vs_fp64", "max_abs_err_vs_fp64", "nonfinite_fraction",
                 "rel_err_finite_only", "bad_rows", "bad_row_fraction", "causes", "worst_rows",
                 "bit_identical_vs_fa2", "max_ulp_vs_fa2")


#: what the engine's own run tells: None when the run was timing only (the engine did not run)
ENGINE_KEYS = ("nan_count", "inf_count", "frozen_max_below_true_rows", "frozen_max_largest_gap", "max_gap_quantiles",
               "skipped_block_fraction", "skipped_row_fraction", "rescale_skip_fraction", "overflow_count",
               "underflow_count", "flows")


def checked_numerics(precision: Precision, policy: Policy, result: EngineResult | None, refs: tuple | None,
                      blocks: np.ndarray | None, tiling: Tiling) -> tuple[dict, list[dict]]:
    """``_numerics`` in the mode that ran: on every query row, on the sampled blocks, or not compared
    (with the engine's own figures, or none when the run was timing only)."""
    if refs is None:
        own = dict.fromkeys(ENGINE_KEYS) if result is None else {**checks.non_finite(result.out),
                                                                 **_engine_numerics(result)}
        return {"verdict": "unchecked", "matmul_dtype": precision.matmul, "vector_dtype": precision.vector,
                **dict.fromkeys(COMPARED_KEYS), **own, "numerics_mode": "off"}, []
    assert result is not None  # references run beside the engine
    if blocks is None:
        numerics, failed = numerics_block(precision, policy, result, *refs)
        return {**numerics, "numerics_mode": "full"}, failed
    rows = sampling.block_rows(blocks, tiling.block_q, tiling.seq_len)
    ref, base = refs
    numerics, failed = numerics_block(precision, policy, _rows_of(result, rows), ref, base[:, rows])
    for w in (*numerics["worst_rows"], *failed):  # back to the rows of the whole output
        w["row"] = int(rows[w["row"]])
    return {**numerics, **checks.non_finite(result.out), **_engine_numerics(result), "numerics_mode": "sample",
            "sampled_query_blocks": blocks.tolist(), "sampled_rows": int(rows.size * tiling.heads)}, failed


def _rows_of(result: EngineResult, rows: np.ndarray) -> EngineResult:
    """``result`` restricted to query rows ``rows`` (output and per-row diagnostics)."""
    diag = result.rows
    return replace(result, out=result.out[:, rows], used_max=result.used_max[:, rows],
                   true_max=result.true_max[:, rows],
                   rows=replace(diag, **{f: getattr(diag, f)[:, rows] for f in diag.__dataclass_fields__}))


def _failures(result: EngineResult, ref: np.ndarray, base: np.ndarray, p_cast_limit: float) -> dict:
    """Bad rows against the fa2 baseline's output, each with its cause; the worst few named."""
    base_err = checks.error_vs_reference(base, ref)["rel_err_vs_fp64"]
    err = checks.row_errors(result.out, ref)
    bad = checks.bad_rows(err, checks.row_errors(base, ref))
    with np.errstate(invalid="ignore"):  # inf - inf where a score overflowed
        gap = result.true_max.astype(np.float64) - result.used_max
    cause = checks.row_causes(result.rows, bad, -gap, p_cast_limit)
    return {"base_rel_err": base_err, "bad_rows": int(bad.sum()),
            "bad_row_fraction": float(bad.mean()) if bad.size else 0.0,
            "causes": checks.cause_counts(cause), "worst_rows": checks.worst_rows(err, cause, gap),
            "failed_rows": checks.worst_rows(err, cause, gap, limit=MAX_FAILED_ROWS)}
