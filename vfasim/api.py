"""The Python API: ``vfasim.run(...)`` mirrors ``vfasim run`` and returns a frozen RunResult."""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, NamedTuple
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from vfasim import __version__
from vfasim.allocator import tune_allocator
from vfasim.errors import VfasimError
from vfasim.functional import EngineResult, Policy, Precision, Tiling, policy_for, reference_attention, run_engine
from vfasim.functional import checks, sampling
from vfasim.frozen import freeze, thaw
from vfasim.functional.engine import engine_threads
from vfasim.functional.policy import calibrate_bsfa
from vfasim.hw import HardwareConfig, load_hw
from vfasim.hw.formats import with_matmul_format
from vfasim.kernel import Kernel, load_kernel
from vfasim.spec import run_spec
from vfasim.inputs import check_blocks, check_options, checked
from vfasim.qkv_files import load_qkv
from vfasim.report.perfetto import algorithm_events, chrome_trace, row_failure_events, write_chrome_trace
from vfasim.sim import SCHEDULES, simulate, timing_stats
from vfasim.sim.critical import critical_path
from vfasim.workloads import Workload, make_workload

if TYPE_CHECKING:  # pandas loads only when a frame is asked for
    import pandas as pd

BASELINE = "fa2"
DEFAULT_BLOCK = 128  # one core's tile rows and keys when none are given (the paper's 128 x 128)
DEFAULT_KERNEL = "fa2"  # a chip run's kernel when none is given
BSFA_CALIBRATION_RUNS = 2
MAX_FAILED_ROWS = 1000  # failed rows drawn as trace events  # calibration workloads: the same generator at seeds seed+1, seed+2


@dataclass(frozen=True)
class Options:
    """Algorithm options beyond the name (None keeps the algorithm's default)."""

    lam: float = 1e-3
    topk: int = 8
    key_summary: str | None = None
    minit: bool | None = None
    reorder: bool | None = None
    q_summary: str | None = None
    rescale_threshold: float | None = None
    exp_emulation: float | None = None
    protect_special: bool | None = None
    minit_clamp: bool | None = None
    minit_margin: float | None = None
    fp32_state: bool | None = None
    p_bf16: bool | None = None

    def __post_init__(self) -> None:
        check_options(self)
        if not 0.0 < self.lam < 1.0:
            raise VfasimError(f"lam must lie in (0, 1), got {self.lam}")
        if isinstance(self.topk, bool) or not isinstance(self.topk, int) or self.topk < 0:
            raise VfasimError(f"topk must be an integer >= 0, got {self.topk!r}")

    def policy_options(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__ if k not in ("lam", "topk")}


@dataclass(frozen=True)
class RunResult:
    """One run: latency and what bounds it, per-pipeline busy cycles, checked numerics, and the spec that made it.

    Read-only all the way down. ``to_dict`` gives a plain copy (what ``vfasim run --json`` prints);
    ``spec`` repeats the run (``vfasim run --spec``), ``manifest`` identifies its inputs and trace by digest.
    ``chip`` is filled on a config with a chip section (cores, waves, bytes, the chip's bound).
    """

    hw: str
    algo: str
    workload: str
    latency_cycles: int
    latency_us: float
    pipelines: dict[str, dict[str, float]]
    shares: dict[str, float]
    bottleneck: str
    ops: dict[str, int]
    manifest: dict[str, object]
    numerics: dict[str, object]
    shape: dict[str, object]
    options: dict[str, object] = field(default_factory=dict)
    critical_path: dict[str, object] = field(default_factory=dict)
    chip: dict[str, object] = field(default_factory=dict)  # chip runs only: cores, waves, bytes, bound, ...
    spec: dict[str, object] = field(default_factory=dict)  # every input that decides the result (vfasim.spec)

    def __post_init__(self) -> None:  # read-only all the way down: a digest cannot be edited
        for name in self.__dataclass_fields__:
            object.__setattr__(self, name, freeze(getattr(self, name)))

    def to_dict(self) -> dict:
        """A plain, mutable, JSON-able copy."""
        return {name: thaw(getattr(self, name)) for name in self.__dataclass_fields__}


@checked
def run(hw: str | Path | HardwareConfig = "C4V16", algo: str = "vfa", *, seq_len: int = 4096,
        head_dim: int = 128, block_q: int | None = None, block_k: int | None = None, causal: bool = True,
        heads: int = 1, kv_heads: int | None = None, seed: int = 0, workload: str = "llm-like",
        qkv: str | Path | None = None, schedule: str = "pipelined", decode: bool = False,
        queries: int = 1, options: Options = Options(), trace_out: str | Path | None = None,
        progress: bool = False, batch: int = 1, kernel: str | Path | Kernel | None = None,
        kernel_style: str | None = None, dispatch: str | None = None, numerics_heads: int = 0,
        numerics: str | None = None, matmul_format: str | None = None, **option_kwargs: Any) -> RunResult:
    """Run ``algo`` on ``hw``: functional engine, trace, timing model, numerics — one result.

    Algorithm options may be given as ``options=Options(...)`` or as keywords (``lam=0.01``).
    ``decode`` keeps the last ``queries`` query rows against the whole KV sequence.
    ``trace_out`` also writes a Chrome/Perfetto trace of the timeline to that file;
    ``progress`` shows the functional engine's progress on stderr. On a config with a chip
    section the whole launch of ``batch`` × ``heads`` runs on the chip (see ``chip_run``) as
    ``kernel`` (a built-in name from ``kernels/``, a YAML path or a ``Kernel``; default ``fa2``;
    ``kernel_style`` is its former name, kept as an alias): its own tiles unless ``block_q`` /
    ``block_k`` are given (``block_q`` is one tile stream's rows), its ``dispatch`` unless one is
    given; ``numerics_heads`` picks the heads whose numerics are checked. On one core the blocks
    default to 128 x 128, ``batch`` elements are more heads, and the chip-only inputs are refused.
    ``numerics`` (one core) is
    ``full``, ``sample`` (a stated subset of query blocks, see ``functional.sampling``) or
    ``off``; None picks ``full`` up to ``sampling.FULL_LIMIT`` score entries, else ``sample``.
    ``matmul_format`` (e.g. ``"fp8_e4m3"``) picks the matmul format
    among those the chip supports, with the scaling a real kernel uses (``hw.formats``).
    """
    _check_schedule(schedule)
    config = hw if isinstance(hw, HardwareConfig) else load_hw(hw)
    kernel = _kernel_alias(kernel, kernel_style)
    opts = _options(options, option_kwargs)
    spec = run_spec(hw, config.name, config.digest(), algo, locals(), asdict(opts), _kernel_spec(kernel, config))
    if matmul_format is not None:
        config = with_matmul_format(config, matmul_format)
    if config.chip is not None:
        if numerics is not None:
            raise VfasimError("numerics applies to one-core runs; on a chip give numerics_heads (--numerics-heads)")
        return replace(_run_chip(config, algo, locals(), opts, {}), spec=spec)
    for name, value in (("kernel", kernel), ("dispatch", dispatch), ("numerics_heads", numerics_heads or None)):
        if value is not None:
            raise VfasimError(f"{name} applies to chip runs; {config.name} has no chip section")
    block_q, block_k = block_q or DEFAULT_BLOCK, block_k or DEFAULT_BLOCK
    if batch != 1:
        heads, kv_heads = _fold_batch(batch, heads, kv_heads)
    with threadpool_limits(limits=1, user_api="blas"):  # the references' thread runs on during the timing
        prepared = _prepare(
            config, algo, seq_len=seq_len, head_dim=head_dim, block_q=block_q, block_k=block_k, causal=causal,
            heads=heads, kv_heads=kv_heads, seed=seed, workload=workload, qkv=qkv, decode=decode,
            queries=queries, options=opts, progress=progress, references=True, numerics=numerics)
        return replace(_timed(prepared, algo, prepared.config, schedule, trace_out, seed, decode, block_k), spec=spec)


def run_configs(hws: Sequence[str | Path | HardwareConfig], algo: str = "vfa", *,
                schedules: list[str] | None = None, **run_kwargs: Any) -> list[RunResult]:
    """``run`` on each config, the numerics computed once: the configs must compute in one precision.

    Each result is the one ``run(hw, algo, schedule=..., **run_kwargs)`` gives; the
    functional engine, the oracle and the fa2 baseline run once for all of them.
    """
    configs = [hw if isinstance(hw, HardwareConfig) else load_hw(hw) for hw in hws]
    schedules = schedules or ["pipelined"] * len(configs)
    for schedule in schedules:
        _check_schedule(schedule)
    if any(engine_precision(c) != engine_precision(configs[0]) for c in configs) or len(schedules) != len(configs):
        raise VfasimError("run_configs needs one schedule per config and configs of one precision")
    with threadpool_limits(limits=1, user_api="blas"):
        prepared = _prepare(configs[0], algo, references=True, **{"numerics": None, **run_kwargs})
        return [replace(_timed(prepared, algo, c, s, None, run_kwargs.get("seed", 0), run_kwargs.get("decode", False),
                               run_kwargs.get("block_k") or DEFAULT_BLOCK), spec=_spec_of(hw, c, algo, s, run_kwargs))
                for hw, c, s in zip(hws, configs, schedules)]


def _spec_of(hw: str | Path | HardwareConfig, config: HardwareConfig, algo: str, schedule: str,
             run_kwargs: dict[str, Any]) -> dict[str, object]:
    """The spec ``run(hw, algo, schedule=schedule, **run_kwargs)`` would carry."""
    bound = inspect.signature(run.__wrapped__).bind(hw, algo, schedule=schedule, **run_kwargs)  # type: ignore[attr-defined]
    bound.apply_defaults()
    values = {**bound.arguments, **bound.arguments.pop("option_kwargs", {})}
    option_kwargs = {k: values.pop(k) for k in list(values) if k in Options.__dataclass_fields__}
    opts = _options(values["options"], option_kwargs)
    return run_spec(hw, config.name, config.digest(), algo, values, asdict(opts), None)


def _timed(prepared: _Prepared, algo: str, config: HardwareConfig, schedule: str,
           trace_out: str | Path | None, seed: int, decode: bool, block_k: int) -> RunResult:
    """The prepared run timed on ``config``: timeline, statistics, critical path, manifest, numerics."""
    _, policy, opts, workload, workload_digest, tiling, precision, result, references, blocks = prepared
    causal, trace = tiling.causal, result.traced()
    timeline = simulate(trace, config, schedule)
    stats = timing_stats(trace, timeline, config)
    crit = critical_path(trace, timeline, config, schedule)
    refs = references() if references is not None else None  # waits for the side threads
    numerics, failed_rows = _checked_numerics(precision, policy, result, refs, blocks, tiling)
    if trace_out is not None:
        events = algorithm_events(trace, timeline, result.above_max)
        events += row_failure_events(trace, timeline, failed_rows, tiling.block_q, tiling.n_qblocks)
        write_chrome_trace(trace_out, chrome_trace(trace, timeline, events, config.clock_ghz))
    manifest = {"version": __version__, "hw_digest": config.digest(), "seed": seed,
                "workload_digest": workload_digest, "trace_digest": trace.digest(),
                "trace_ops": len(trace), "output_digest": _digest(result.out), "schedule": schedule}
    return RunResult(
        hw=config.name, algo=algo, workload=workload, latency_cycles=stats.latency_cycles,
        latency_us=stats.latency_cycles / (config.clock_ghz * 1e3), pipelines=stats.pipelines,
        shares=stats.shares, bottleneck=stats.bottleneck, ops=stats.ops, manifest=manifest,
        numerics=numerics,
        shape={"seq_len": tiling.seq_len, "kv_len": tiling.kv_len, "head_dim": tiling.head_dim,
               "heads": tiling.heads, "kv_heads": tiling.kv_heads, "block_q": tiling.block_q, "block_k": block_k,
               "causal": causal, "decode": decode},
        options={"policy": asdict(policy), "lam": opts.lam if policy.skip in ("block", "row") else None,
                 "topk": opts.topk if policy.skip == "topk" else None},
        critical_path=crit.to_dict())


def _run_chip(config: HardwareConfig, algo: str, args: dict, options: Options, option_kwargs: dict) -> RunResult:
    from vfasim.chip_run import run_chip

    keys = ("batch", "seq_len", "head_dim", "block_q", "block_k", "causal", "heads", "kv_heads", "seed",
            "workload", "qkv", "decode", "queries", "dispatch", "numerics_heads", "trace_out", "schedule")
    return RunResult(**run_chip(config, algo, options=_options(options, option_kwargs),
                                kernel=args["kernel"] or DEFAULT_KERNEL, **{k: args[k] for k in keys}))


def _kernel_spec(kernel: str | Path | Kernel | None, config: HardwareConfig) -> tuple[str, str] | None:
    """(name or path, digest) of a chip run's kernel for its spec; None on one core."""
    if config.chip is None:
        return None
    k = load_kernel(kernel or DEFAULT_KERNEL)
    return (str(kernel) if isinstance(kernel, (str, Path)) else k.name), k.digest()


def _kernel_alias(kernel: str | Path | Kernel | None, kernel_style: str | None) -> str | Path | Kernel | None:
    """``kernel``, or the former ``kernel_style`` name for it (both given: refused)."""
    if kernel_style is None:
        return kernel
    if kernel is not None:
        raise VfasimError("give kernel or its alias kernel_style, not both")
    return kernel_style


def _fold_batch(batch: int, heads: int, kv_heads: int | None) -> tuple[int, int | None]:
    """On one core, batch elements are more heads (each with its own K/V heads)."""
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise VfasimError(f"batch must be a positive integer, got {batch!r}")
    return heads * batch, (kv_heads or heads) * batch


def _options(options: Options, option_kwargs: dict) -> Options:
    unknown = set(option_kwargs) - set(Options.__dataclass_fields__)
    if unknown:
        raise VfasimError(f"unknown option(s) {', '.join(sorted(unknown))}")
    return Options(**{**asdict(options), **option_kwargs})


@checked
def sensitivity_table(hw: str | Path | HardwareConfig = "C4V16", algo: str = "vfa", *,
                      schedule: str = "pipelined", factors: tuple[float, ...] = (2.0, 0.5),
                      **run_kwargs: Any) -> "pd.DataFrame":
    """``vfasim sensitivity``: one functional run, then its trace re-simulated per hardware parameter.

    ``run_kwargs`` are ``run``'s workload, shape and algorithm-option keywords.
    """
    _check_schedule(schedule)
    from vfasim.sensitivity import sensitivity

    prepared = _prepare(hw, algo, **run_kwargs)
    return sensitivity(prepared.result.traced(), prepared.config, schedule, factors)


class _Prepared(NamedTuple):
    config: HardwareConfig
    policy: Policy
    opts: Options
    workload: str  # name; Q, K and V are let go once the engine has run (the timing needs none)
    workload_digest: str
    tiling: Tiling
    precision: Precision
    result: EngineResult
    references: Callable[[], tuple[np.ndarray, EngineResult]] | None  # float64 oracle output, fa2 (waits)
    blocks: np.ndarray | None = None  # query blocks the references cover (sampled numerics); None: all


def _prepare(hw: str | Path | HardwareConfig, algo: str, *, seq_len: int = 4096, head_dim: int = 128,
             block_q: int = 128, block_k: int = 128, causal: bool = True, heads: int = 1,
             kv_heads: int | None = None, seed: int = 0, workload: str = "llm-like",
             qkv: str | Path | None = None, decode: bool = False, queries: int = 1,
             options: Options = Options(), progress: bool = False, references: bool = False,
             numerics: str | None = "full", policy: Policy | None = None, **option_kwargs: Any) -> _Prepared:
    """Config, policy and workload resolved, and the functional engine run (its trace inside).

    With ``references``, the float64 oracle and the fa2 baseline start in two more threads
    (NumPy releases the GIL in its kernels, so the cores are shared), on the query blocks
    ``numerics`` asks for (see ``run``); ``references`` of the result waits for them.
    ``policy`` replaces the algorithm's own (a chip run's kernel may set its exp emulation and rescale rule).
    """
    opts = _options(options, option_kwargs)
    config = hw if isinstance(hw, HardwareConfig) else load_hw(hw)
    policy = policy or policy_for(algo, **opts.policy_options())
    wl = _workload(qkv, workload, seq_len, head_dim, heads, kv_heads, seed, decode, queries)
    tiling = Tiling(wl.seq_len, wl.kv_len, wl.head_dim, min(block_q, wl.seq_len) if decode else block_q,
                    block_k, causal, wl.heads, wl.kv_heads)
    check_blocks(tiling)
    precision = engine_precision(config)
    thresholds = _bsfa_thresholds(policy.skip, tiling, precision, opts, qkv, workload, seed, decode, queries)
    mode = sampling.resolve_mode(numerics, wl.heads, wl.seq_len, wl.kv_len)
    references = references and mode != "off"
    blocks = sampling.sample_blocks(wl.q, tiling.block_q, seed) if references and mode == "sample" else None
    is_baseline = policy == policy_for(BASELINE)  # then the run is its own baseline
    # Full references are two more computations beside the engine: each runs on one thread and the
    # three share the cores (an engine's own row threads would only add overhead); sampled ones are
    # small, and the engine keeps its threads.
    threads = 1 if references and mode == "full" else None
    if engine_threads(threads) == 1:  # the engine allocates in the main arena: see vfasim.allocator
        tune_allocator()
    pool = ThreadPoolExecutor(max_workers=2)
    # one BLAS thread per engine thread: tile-sized matmuls gain nothing from more
    with threadpool_limits(limits=1, user_api="blas"):
        side = _start_references(pool, wl, tiling, precision, decode, not is_baseline, blocks, threads) \
            if references else None
        pool.shutdown(wait=False)  # the submitted work goes on; the pool takes no more
        result = run_engine(wl.q, wl.k, wl.v, tiling, policy, precision, opts.lam, thresholds=thresholds,
                            decode=decode, progress=progress, threads=threads)
    refs = _awaited(*side, result if is_baseline else None) if side is not None else None
    return _Prepared(config, policy, opts, wl.name, _digest(wl.q, wl.k, wl.v), tiling, precision, result, refs,
                     blocks)


def _awaited(oracle: Future, baseline: Future | None,
             own: EngineResult | None) -> Callable[[], tuple[np.ndarray, EngineResult]]:
    """(oracle output, fa2 baseline) once the side threads are done; ``own``: the run is the baseline."""
    def get() -> tuple[np.ndarray, EngineResult]:
        base = own if baseline is None else baseline.result()
        assert base is not None
        return oracle.result(), base
    return get


def _start_references(pool: ThreadPoolExecutor, wl: Workload, tiling: Tiling, precision: Precision, decode: bool,
                      baseline: bool, blocks: np.ndarray | None,
                      threads: int | None) -> tuple[Future, Future | None]:
    """The float64 oracle's output and, if asked, fa2 at the kernel's precision (on ``blocks`` only), started."""
    rows = None if blocks is None else sampling.block_rows(blocks, tiling.block_q, tiling.seq_len)
    oracle = pool.submit(reference_attention, wl.q, wl.k, wl.v, tiling.causal, rows)
    if not baseline:
        return oracle, None
    engine_rows = None if blocks is None else (np.arange(tiling.heads)[:, None] * tiling.n_qblocks + blocks).ravel()
    return oracle, pool.submit(run_engine, wl.q, wl.k, wl.v, tiling, BASELINE, precision, decode=decode,
                               rows=engine_rows, trace=False, threads=threads)


def _check_schedule(schedule: str) -> None:
    """Refuse an unknown schedule before any work starts."""
    if schedule not in SCHEDULES:
        raise VfasimError(f"unknown schedule {schedule!r} (valid: {', '.join(SCHEDULES)})")


def _digest(*arrays: np.ndarray) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(str(a.shape).encode() + np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


def engine_precision(config: HardwareConfig) -> Precision:
    """The formats the functional engine computes in: exactly the config's."""
    spec = config.precision
    return Precision(matmul=spec.matmul, vector=spec.vector, scaling=spec.scaling.model_dump(),
                     block_scale=spec.block_scale)


def _workload(qkv: str | Path | None, name: str, seq_len: int, head_dim: int, heads: int, kv_heads: int | None,
              seed: int, decode: bool, queries: int) -> Workload:
    wl = load_qkv(qkv) if qkv is not None else make_workload(name, seq_len, head_dim, heads, seed, kv_heads)
    if not decode:
        return wl
    if isinstance(queries, bool) or not isinstance(queries, int) or not 1 <= queries <= wl.seq_len:
        raise VfasimError(f"queries must be an integer in [1, {wl.seq_len}], got {queries!r}")
    return Workload(wl.name, np.ascontiguousarray(wl.q[:, -queries:]), wl.k, wl.v)


def _bsfa_thresholds(skip: str, tiling: Tiling, precision: Precision, opts: Options, qkv: str | Path | None,
                     name: str, seed: int, decode: bool, queries: int) -> np.ndarray | None:
    """BSFA's per-(head, query block) thresholds, calibrated on workloads other than the one run.

    For a loaded file there is no second sample, so the file calibrates itself (optimistic).
    """
    if skip != "topk":
        return None
    if opts.topk >= tiling.n_kblocks:
        raise VfasimError(f"topk {opts.topk} keeps every block: there are {tiling.n_kblocks} key blocks, at most "
                          f"{tiling.n_kblocks - 1} beside the diagonal; give topk <= {tiling.n_kblocks - 1}")
    samples = [None] if qkv is not None else [seed + i for i in range(1, BSFA_CALIBRATION_RUNS + 1)]
    maxima = []
    for s in samples:
        wl = _workload(qkv, name, tiling.kv_len, tiling.head_dim, tiling.heads, tiling.kv_heads,
                       0 if s is None else s, decode, queries)
        maxima.append(run_engine(wl.q, wl.k, wl.v, tiling, BASELINE, precision, trace=False).block_max)
    local = np.tile(tiling.local_block, tiling.heads)
    return calibrate_bsfa(maxima, local, opts.topk)


def _numerics(precision: Precision, policy: Policy, result: EngineResult, ref: np.ndarray,
              base: EngineResult) -> tuple[dict, list[dict]]:
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
        **checks.bits_vs_baseline(result.out, base.out),
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


def _checked_numerics(precision: Precision, policy: Policy, result: EngineResult, refs: tuple | None,
                      blocks: np.ndarray | None, tiling: Tiling) -> tuple[dict, list[dict]]:
    """``_numerics`` in the mode that ran: on every query row, on the sampled blocks, or not compared."""
    if refs is None:
        return {"verdict": "unchecked", "matmul_dtype": precision.matmul, "vector_dtype": precision.vector,
                **dict.fromkeys(COMPARED_KEYS), **checks.non_finite(result.out), **_engine_numerics(result),
                "numerics_mode": "off"}, []
    if blocks is None:
        numerics, failed = _numerics(precision, policy, result, *refs)
        return {**numerics, "numerics_mode": "full"}, failed
    rows = sampling.block_rows(blocks, tiling.block_q, tiling.seq_len)
    ref, base = refs
    numerics, failed = _numerics(precision, policy, _rows_of(result, rows), ref, replace(base, out=base.out[:, rows]))
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


def _failures(result: EngineResult, ref: np.ndarray, base: EngineResult, p_cast_limit: float) -> dict:
    """Bad rows against the fa2 baseline, each with its cause; the worst few named."""
    base_err = checks.error_vs_reference(base.out, ref)["rel_err_vs_fp64"]
    err = checks.row_errors(result.out, ref)
    bad = checks.bad_rows(err, checks.row_errors(base.out, ref))
    with np.errstate(invalid="ignore"):  # inf - inf where a score overflowed
        gap = result.true_max.astype(np.float64) - result.used_max
    cause = checks.row_causes(result.rows, bad, -gap, p_cast_limit)
    return {"base_rel_err": base_err, "bad_rows": int(bad.sum()),
            "bad_row_fraction": float(bad.mean()) if bad.size else 0.0,
            "causes": checks.cause_counts(cause), "worst_rows": checks.worst_rows(err, cause, gap),
            "failed_rows": checks.worst_rows(err, cause, gap, limit=MAX_FAILED_ROWS)}
