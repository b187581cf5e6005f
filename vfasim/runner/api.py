"""The Python API: ``vfasim.run(...)`` mirrors ``vfasim run`` and returns a frozen RunResult."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from threadpoolctl import threadpool_limits

from vfasim import __version__
from vfasim.errors import VfasimError
from vfasim.frozen import freeze, thaw
from vfasim.functional import Precision
from vfasim.hw import HardwareConfig
from vfasim.io.outputs import finite
from vfasim.runner.inputs import checked
from vfasim.kernel import Kernel
from vfasim.runner.options import Options, topk_for
from vfasim.runner.plan import DEFAULT_KERNEL, Plan, plan
from vfasim.runner.prepare import DEFAULT_BLOCK, Prepared, checked_numerics, digest, engine_precision, prepare
from vfasim.repeats import Repeated
from vfasim.report.perfetto import algorithm_events, chrome_trace, row_failure_events, write_chrome_trace
from vfasim.sim import simulate, timing_stats
from vfasim.sim.critical import CriticalPath, critical_path
from vfasim.sim.engine import Timeline
from vfasim.sim.repeated import timing_repeated
from vfasim.sim.stats import TimingStats
from vfasim.runner.results import (ChipFigures, CriticalPathSummary, Manifest, Numerics, PolicyFields, RunOptions,
                                   RunSpec, Shape)
from vfasim.runner.row import result_row
from vfasim.runner.spec import RunInputs

__all__ = ["DEFAULT_BLOCK", "DEFAULT_KERNEL", "Options", "RunResult", "engine_precision", "run", "run_configs",
           "to_frame"]

if TYPE_CHECKING:  # pandas loads only when a frame is asked for
    import pandas as pd


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
    bottleneck: str  # the busiest pipeline (or shared issue stream, "vector+exp") by utilisation
    bound: str  # what limits the run, one definition: the chip's bound on a chip, else the bottleneck's role
    ops: dict[str, int]
    manifest: Manifest
    numerics: Numerics
    shape: Shape
    options: RunOptions = field(default_factory=lambda: RunOptions())
    critical_path: CriticalPathSummary = field(default_factory=lambda: CriticalPathSummary())
    chip: ChipFigures = field(default_factory=lambda: ChipFigures())  # chip runs only: cores, waves, bytes, bound, ...
    spec: RunSpec = field(default_factory=lambda: RunSpec())  # every input that decides the result (runner.spec)

    def __post_init__(self) -> None:  # read-only all the way down: a digest cannot be edited
        for name in self.__dataclass_fields__:
            object.__setattr__(self, name, freeze(getattr(self, name)))

    def to_dict(self) -> dict:
        """A plain, mutable, JSON-able copy."""
        return {name: thaw(getattr(self, name)) for name in self.__dataclass_fields__}

    def to_row(self) -> dict[str, object]:
        """The result as one flat table row (``vfasim.runner.row``): what sweeps tabulate, one column per figure."""
        return result_row(self.to_dict())

    def to_frame(self) -> pd.DataFrame:
        """The result as a one-row DataFrame of ``to_row``'s columns (``to_frame(results)`` for many)."""
        return to_frame([self])

    def to_json(self, indent: int | None = 2) -> str:
        """Strict JSON of ``to_dict`` (non-finite floats as null), what ``vfasim run --json`` prints but its row."""
        return json.dumps(finite(self.to_dict()), indent=indent)


def to_frame(results: Iterable[RunResult]) -> pd.DataFrame:
    """One row per result, flat (``RunResult.to_row``): the columns a sweep's table has, no nested dicts."""
    import pandas as pd

    return pd.DataFrame([r.to_row() for r in results])


@checked
def run(hw: str | Path | HardwareConfig = "C4V16", algo: str = "vfa", *, seq_len: int = 4096,
        head_dim: int = 128, block_q: int | None = None, block_k: int | None = None, causal: bool = True,
        heads: int = 1, kv_heads: int | None = None, seed: int = 0, workload: str = "llm-like",
        qkv: str | Path | None = None, schedule: str = "pipelined", decode: bool = False,
        queries: int = 1, options: Options = Options(), trace_out: str | Path | None = None,
        trace_window: tuple[int, int] | None = None, trace_cores: tuple[int, ...] | None = None,
        progress: bool = False, batch: int = 1, kernel: str | Path | Kernel | None = None,
        kernel_style: str | None = None, dispatch: str | None = None, numerics_heads: int = 0,
        numerics: str | None = None, matmul_format: str | None = None, cache: bool = True,
        jobs: int | None = None, executor: str = "local", scheduler: Any = None, **option_kwargs: Any) -> RunResult:
    """Run ``algo`` on ``hw``: functional engine, trace, timing model, numerics — one result.

    Algorithm options may be given as ``options=Options(...)`` or as keywords (``lam=0.01``).
    ``decode`` keeps the last ``queries`` query rows against the whole KV sequence.
    ``trace_out`` also writes a Chrome/Perfetto trace of the timeline to that file (``"-"``:
    standard output), of the ops that overlap ``trace_window`` (start, end cycles) if given; on a chip, of the
    cores ``trace_cores`` names, each unit with its ops on the core's pipelines (default: the first 8, units only);
    ``progress`` shows the functional engine's progress on stderr. On a config with a chip
    section the whole launch of ``batch`` × ``heads`` runs on the chip (see ``chip_run``) as
    ``kernel`` (a built-in name from ``kernels/``, a YAML path or a ``Kernel``; default ``fa2``;
    ``kernel_style`` is its former name, kept as an alias): its own tiles unless ``block_q`` /
    ``block_k`` are given (``block_q`` is one tile stream's rows), its ``dispatch`` unless one is
    given; ``numerics_heads`` picks the heads whose numerics are checked, computed K/V-head groups at a time on
    ``jobs`` local processes (default one per core, one inside a pool's worker; 1: in this process), or with
    ``executor="dask"`` as tasks on the Dask cluster ``scheduler`` names (its address or a client; ``jobs`` chunks,
    default one a K/V head): the same bits every way. On one core the blocks
    default to 128 x 128, ``batch`` elements are more heads, and the chip-only inputs are refused.
    ``numerics`` (one core) is
    ``full``, ``sample`` (a stated subset of query blocks, see ``functional.sampling``) or
    ``off``; None picks ``full`` up to ``sampling.FULL_LIMIT`` score entries, else ``sample``. ``off`` on a
    generated workload with an algorithm whose trace does not depend on the data (fa2, vfa and their
    ablations) is timing only: the trace is emitted without arithmetic (the same trace), no Q, K or V
    are made, and the engine's own figures, the workload and output digests are None.
    ``matmul_format`` (e.g. ``"fp8_e4m3"``) picks the matmul format
    among those the chip supports, with the scaling a real kernel uses (``hw.formats``). ``cache``: read
    and keep the references (float64 oracle, fa2 baseline) in the reference cache (``vfasim.io.refcache``);
    it never changes a result.
    """
    return run_plan(plan(dict(
        hw=hw, algo=algo, seq_len=seq_len, head_dim=head_dim, block_q=block_q, block_k=block_k, causal=causal,
        heads=heads, kv_heads=kv_heads, seed=seed, workload=workload, qkv=qkv, schedule=schedule, decode=decode,
        queries=queries, options=options, trace_out=trace_out, trace_window=trace_window, trace_cores=trace_cores,
        progress=progress, batch=batch, kernel=kernel, kernel_style=kernel_style, dispatch=dispatch,
        numerics_heads=numerics_heads, numerics=numerics, matmul_format=matmul_format, cache=cache, jobs=jobs,
        executor=executor, scheduler=scheduler, **option_kwargs)))


def run_configs(hws: Sequence[str | Path | HardwareConfig], algo: str = "vfa", *,
                schedules: list[str] | None = None, **run_kwargs: Any) -> list[RunResult]:
    """``run`` on each one-core config, the numerics computed once: the configs must compute in one precision.

    Each result is the one ``run(hw, algo, schedule=..., **run_kwargs)`` gives; the
    functional engine, the oracle and the fa2 baseline run once for all of them.
    """
    schedules = _schedules(hws, schedules, run_kwargs)
    plans = [plan({**run_kwargs, "hw": hw, "algo": algo, "schedule": s}, warn=n == 0)  # one warning: one engine run
             for n, (hw, s) in enumerate(zip(hws, schedules))]
    chip = next((p.config.name for p in plans if p.kernel is not None), None)
    if chip is not None:
        raise VfasimError(f"run_configs times one-core configs; {chip} has a chip section (run it with vfasim.run)")
    return run_shared(plans)


def _schedules(hws: Sequence[object], schedules: list[str] | None, run_kwargs: dict[str, Any]) -> list[str]:
    """``run_configs``' schedules, one per config; its own inputs are refused among ``run``'s keywords."""
    if isinstance(hws, (str, Path, HardwareConfig)) or not hws:
        raise VfasimError("run_configs needs a non-empty list of configs (names, paths or HardwareConfig)")
    schedules = schedules or ["pipelined"] * len(hws)
    if len(schedules) != len(hws):
        raise VfasimError("run_configs needs one schedule per config and configs of one precision and one O "
                          "accumulation (op_map.accumulate_o fused or not)")
    for name, instead in (("hw", "give the configs as hws"), ("schedule", "give schedules=[...], one per config"),
                          ("trace_out", "a trace is one run's: give trace_out to vfasim.run")):
        if name in run_kwargs:
            raise VfasimError(f"run_configs takes no {name}: {instead}")
    return schedules


def _engine(planned: Plan) -> tuple[Precision, bool]:
    """What a functional run depends on in a config: the formats it computes in and where O accumulates."""
    return engine_precision(planned.timed), planned.timed.o_in_place


def run_plan(planned: Plan) -> RunResult:
    """The run ``planned`` describes: a chip launch as its kernel, or one core's run (``run_shared``)."""
    if planned.kernel is None:
        return run_shared([planned])[0]
    from vfasim.runner.chip_run import run_chip

    return RunResult(**run_chip(planned.timed, planned.inputs, planned.kernel), spec=cast(RunSpec, planned.spec()))


def run_shared(plans: Sequence[Plan]) -> list[RunResult]:
    """One-core plans that differ only in their config (not in its engine precision or O accumulation) and schedule:
    the first's functional run (its numerics, trace, oracle and fa2 baseline), timed on each plan's config."""
    first = plans[0]
    if any(_engine(p) != _engine(first) for p in plans):
        raise VfasimError("run_configs needs one schedule per config and configs of one precision and one O "
                          "accumulation (op_map.accumulate_o fused or not)")
    with threadpool_limits(limits=1, user_api="blas"):  # the references' thread runs on during the timing
        prepared = prepare(first.timed, first.inputs, references=True)
        return [replace(_timed(prepared, p.timed, p.inputs), spec=cast(RunSpec, p.spec())) for p in plans]


def _timed(prepared: Prepared, config: HardwareConfig, inputs: RunInputs) -> RunResult:
    """The prepared run of ``inputs`` timed on ``config``: timeline, statistics, critical path, manifest, numerics."""
    algo, schedule, seed, decode = inputs.algo, inputs.schedule, inputs.seed, inputs.decode
    block_k = inputs.block_k or DEFAULT_BLOCK
    policy, opts, tiling, precision, result = (prepared.policy, prepared.opts, prepared.tiling, prepared.precision,
                                               prepared.result)
    causal, trace = tiling.causal, prepared.trace
    timeline, stats, crit = _timing(prepared, config, schedule, inputs.trace_out is not None)
    refs = prepared.references() if prepared.references is not None else None  # waits for the side threads
    numerics, failed_rows = checked_numerics(precision, policy, result, refs, prepared.blocks, tiling)
    trace_out, window = inputs.trace_out, inputs.trace_window
    if trace_out is not None:
        assert timeline is not None, "a run that writes its trace is simulated whole"
        whole = prepared.whole_trace()
        events = algorithm_events(whole, timeline, None if result is None else result.above_max)
        events += row_failure_events(whole, timeline, failed_rows, tiling.block_q, tiling.n_qblocks)
        write_chrome_trace(trace_out, chrome_trace(whole, timeline, events, config.clock_ghz, crit.ops, window))
    manifest: Manifest = {"version": __version__, "hw_digest": config.digest(), "seed": seed,
                          "workload_digest": prepared.workload_digest, "trace_digest": trace.digest(),
                          "trace_ops": len(trace), "output_digest": None if result is None else digest(result.out),
                          "schedule": schedule}
    return RunResult(
        hw=config.name, algo=algo, workload=prepared.workload, latency_cycles=stats.latency_cycles,
        latency_us=stats.latency_cycles / (config.clock_ghz * 1e3), pipelines=stats.pipelines,
        shares=stats.shares, bottleneck=stats.bottleneck, bound=role_of(stats.bottleneck, config), ops=stats.ops,
        manifest=manifest,
        numerics=cast(Numerics, numerics),
        shape={"seq_len": tiling.seq_len, "kv_len": tiling.kv_len, "head_dim": tiling.head_dim,
               "heads": tiling.heads, "kv_heads": tiling.kv_heads, "block_q": tiling.block_q, "block_k": block_k,
               "causal": causal, "decode": decode},
        options={"policy": cast(PolicyFields, asdict(policy)), "lam": opts.lam if policy.skip in ("block", "row") else None,
                 "topk": topk_for(opts.topk, tiling.n_kblocks) if policy.skip == "topk" else None},
        critical_path=cast(CriticalPathSummary, crit.to_dict()))


def _timing(prepared: Prepared, config: HardwareConfig, schedule: str,
            spans: bool) -> tuple[Timeline | None, TimingStats, CriticalPath]:
    """The trace's timeline (None where it is not made), statistics and critical path: from short versions of the
    trace where its rows repeat tiles (``sim.repeated``) and ``spans`` (every op's) are not asked for, else from the
    whole trace simulated."""
    held = prepared.trace
    fast = timing_repeated(held, config, schedule) if isinstance(held, Repeated) and not spans else None
    if fast is not None:
        return None, *fast
    trace = prepared.whole_trace()
    timeline = simulate(trace, config, schedule)
    return timeline, timing_stats(trace, timeline, config), critical_path(trace, timeline, config, schedule)


def role_of(stream: str, config: HardwareConfig) -> str:
    """The role(s) of a pipeline or shared issue stream ("vector+exp"): a core run's bound."""
    return "+".join(config.pipelines[n].role for n in stream.split("+"))
