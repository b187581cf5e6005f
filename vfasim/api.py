"""The Python API: ``vfasim.run(...)`` mirrors ``vfasim run`` and returns a frozen RunResult."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from vfasim import __version__
from vfasim.errors import VfasimError
from vfasim.functional import ALGORITHMS, Precision, Tiling, reference_attention, run_engine
from vfasim.functional import checks
from vfasim.hw import HardwareConfig, load_hw
from vfasim.sim import simulate, timing_stats
from vfasim.workloads import Workload, load_qkv, make_workload

BASELINE = "fa2"


@dataclass(frozen=True)
class RunResult:
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

    def to_dict(self) -> dict:
        return asdict(self)


def run(hw: str | Path | HardwareConfig = "C4V16", algo: str = "vfa", *, seq_len: int = 4096,
        head_dim: int = 128, block_q: int = 128, block_k: int = 128, causal: bool = True,
        heads: int = 1, seed: int = 0, workload: str = "llm-like", qkv: str | Path | None = None,
        lam: float = 1e-3, schedule: str = "pipelined") -> RunResult:
    """Run ``algo`` on ``hw``: functional engine, trace, timing model, numerics — one result."""
    config = hw if isinstance(hw, HardwareConfig) else load_hw(hw)
    if algo not in ALGORITHMS:
        raise VfasimError(f"unknown algorithm {algo!r} (valid: {', '.join(ALGORITHMS)})")
    wl = load_qkv(qkv) if qkv is not None else make_workload(workload, seq_len, head_dim, heads, seed)
    tiling = Tiling(wl.seq_len, wl.kv_len, wl.head_dim, block_q, block_k, causal, wl.heads, wl.kv_heads)
    precision = engine_precision(config)
    result = run_engine(wl.q, wl.k, wl.v, tiling, algo, precision, lam)
    timeline = simulate(result.trace, config, schedule)
    stats = timing_stats(result.trace, timeline, config)
    manifest = {"version": __version__, "hw_digest": config.digest(), "seed": seed,
                "trace_digest": result.trace.digest(), "trace_ops": len(result.trace),
                "schedule": schedule}
    return RunResult(
        hw=config.name, algo=algo, workload=wl.name, latency_cycles=stats.latency_cycles,
        latency_us=stats.latency_cycles / (config.clock_ghz * 1e3), pipelines=stats.pipelines,
        shares=stats.shares, bottleneck=stats.bottleneck, ops=stats.ops, manifest=manifest,
        numerics=_numerics(wl, tiling, precision, result, algo, lam),
        shape={"seq_len": wl.seq_len, "kv_len": wl.kv_len, "head_dim": wl.head_dim, "heads": wl.heads,
               "kv_heads": wl.kv_heads, "block_q": block_q, "block_k": block_k, "causal": causal})


def engine_precision(config: HardwareConfig) -> Precision:
    """The formats the functional engine computes in for ``config``.

    For now every config runs fp16 matmul inputs with fp32 accumulation and fp32
    vector math; the timing model already prices the config's own formats.
    """
    return Precision(matmul="float16", vector="float32")


def _numerics(wl: Workload, tiling: Tiling, precision: Precision, result, algo: str, lam: float) -> dict:
    ref = reference_attention(wl.q, wl.k, wl.v, tiling.causal)
    base = result if algo == BASELINE else run_engine(wl.q, wl.k, wl.v, tiling, BASELINE, precision)
    out = {"matmul_dtype": precision.matmul, "vector_dtype": precision.vector,
           **checks.error_vs_reference(result.out, ref), **checks.non_finite(result.out),
           **checks.bits_vs_baseline(result.out, base.out),
           **checks.frozen_max_stats(result.used_max, result.true_max)}
    out["skipped_block_fraction"] = result.skipped_tiles / max(result.visited_tiles, 1)
    out["lam"] = lam if ALGORITHMS[algo].skip else None
    return out

