"""What-if sweeps: every combination of hardware fields and run options, resumable, local or on Dask.

An axis is a list of values for one input: a hardware field by its dotted path
(``pipelines.exp.throughput.float16``, ``score_buffers``), a keyword of ``vfasim.run``
(``seq_len``, ``block_q``, ``lam``, ``topk``), or a shorthand scale (``exp_scale``,
``vector_scale``, ``tensor_scale``) that multiplies every throughput of the pipelines with
that role. A sweep is the cartesian product of hw × algo × axes; every point is planned as a
run (``runner.plan``: its inputs built and checked once) before anything runs, so a bad path or
value fails at once, naming it, and its plan is what runs. An algorithm option
applies where it means something (``minit_margin`` to vfa and vsa, ``lam`` to the skipping
algorithms): at the other algorithms' points its value is ``n/a`` and they run once, so one
sweep compares a mitigation with its baseline; an option no algorithm of the sweep takes is
refused.

Each finished point is appended to ``DIR/points.jsonl`` as one JSON line (flushed and
fsync'd) under a stable hash of what determines it; a re-run of the same sweep computes only
the points the journal lacks, and the tables and plots are rebuilt from the journal.

Assumptions:
- A point is identified by its inputs, every keyword passed to ``run``, the resolved hardware
  digest, the vfasim version and a digest of the model's source (every vfasim module but
  report/, cli.py and the sweep's own package), with the shipped kernel descriptions: editing
  a YAML file or the model recomputes its points.
- Runs are deterministic, so a point computed by any executor or in any order is the same.
- Points that differ only in hardware fields that leave the engine's precision alone (and in
  the schedule) share one functional run: its numerics, trace, oracle and fa2 baseline are
  computed once and its trace timed on each point's config.
- A hardware path is deep-merged into the config as data (mappings merge, anything else
  replaces) and the result validated whole: a path can add a dtype rate but not skip a check.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import itertools
import json
import os
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
from tqdm import tqdm

from vfasim import __version__
from vfasim.io import interrupt
from vfasim.runner.api import Options, run_plan, run_shared
from vfasim.runner.options import applies_to
from vfasim.errors import Interrupted, VfasimError
from vfasim.exec import EXECUTORS, WorkLost, compute
from vfasim.functional import ALGORITHMS
from vfasim.hw import load_hw
from vfasim.runner.inputs import check_plan, warn_if_long
from vfasim.runner.plan import Plan, plan
from vfasim.io.outputs import check_folder_target
from vfasim.sweep.axes import SCALES, Axis, hw_config, parse_set, run_keywords, scale_axis
from vfasim.sweep.plots import SWEEP_FILES, write_sweep
from vfasim.sweep.table import NA, format_sweep, sweep_frame
from vfasim.sweep.journal import JOURNAL, journal_writer, read_journal

if TYPE_CHECKING:
    from dask import distributed

#: what does not decide a point's result: the command line, reports, where tasks run and the sweep's own package
NOT_MODEL = ("allocator.py", "__main__.py", "exec.py")
NOT_MODEL_FOLDERS = ("cli/", "report/", "sweep/")


@dataclass(frozen=True)
class Point:
    """One run of a sweep: what it is called (inputs), the keywords it was given and exactly what runs (its plan,
    built and checked once)."""

    inputs: dict
    algo: str
    key: str
    run_kwargs: dict = field(repr=False)
    plan: Plan = field(repr=False)

    @property
    def hw_doc(self) -> dict:
        """The point's config as data (with its overrides and scales)."""
        return self.plan.config.model_dump(mode="json")


@dataclass(frozen=True)
class SweepResult:
    points: list[Point]
    records: list[dict | None]  # journal record per point, None where not done yet
    computed: int
    reused: int
    functional_runs: int = 0  # engine runs behind the computed points (one per group of shared numerics)

    @property
    def complete(self) -> bool:
        return all(r is not None for r in self.records)


# -- points -------------------------------------------------------------------------------


def make_points(hws: Iterable[str], algos: Iterable[str], axes: Iterable[Axis],
                run_kwargs: dict | None = None) -> list[Point]:
    """Every combination of hw × algo × axis values, each validated (config and options)."""
    axes, base_kwargs = list(axes), dict(run_kwargs or {})
    names = [a.name for a in axes]
    if len(set(names)) != len(names):
        raise VfasimError(f"an axis is given twice: {', '.join(names)}")
    docs, algos = {hw: load_hw(hw).model_dump(mode="json") for hw in hws}, list(algos)
    _check_scope(names, algos)
    points = []
    for hw, algo, values in itertools.product(docs, algos, itertools.product(*(a.values for a in axes))):
        swept = {k: v if _applies(k, algo) else NA for k, v in zip(names, values)}
        config = hw_config(hw, docs[hw], {k: v for k, v in swept.items() if _kind(k) == "hw"},
                            {k: v for k, v in swept.items() if k in SCALES})
        kwargs = {**base_kwargs, **{k: v for k, v in swept.items() if _kind(k) == "run" and v != NA}}
        planned = plan({**kwargs, "hw": config, "algo": algo}, warn=False)  # the sweep warns once, for all points
        inputs = {"hw": hw, "algo": algo, **swept}
        points.append(Point(inputs, algo, point_key(inputs, kwargs, config.digest()), kwargs, planned))
    return list({p.key: p for p in points}.values())  # an option that does not apply: one point, not one per value


def _applies(name: str, algo: str) -> bool:
    """Whether a swept input means something for ``algo`` (hardware fields and run sizes always do)."""
    return name not in Options.__dataclass_fields__ or applies_to(name, algo)


def _check_scope(names: list[str], algos: list[str]) -> None:
    """An option axis must apply to at least one algorithm of the sweep."""
    for name in names:
        if not any(_applies(name, a) for a in algos):
            scope = [a for a in ALGORITHMS if _applies(name, a)]
            raise VfasimError(f"option {name} applies to {', '.join(scope)}, none of {', '.join(algos)}")


def _kind(name: str) -> str:
    return Axis(name, ()).kind


def point_key(inputs: dict, run_kwargs: dict, hw_digest: str) -> str:
    """Stable hash of what determines a point's result (and of how the point is labelled)."""
    text = json.dumps({"inputs": inputs, "run": run_kwargs, "hw_digest": hw_digest, "version": __version__,
                       "model": model_digest()}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


@functools.cache
def model_digest() -> str:
    """Hash of the source a run's result depends on (``model_files``)."""
    root, digest = Path(__file__).parents[1], hashlib.sha256()
    for rel in model_files():
        digest.update(rel.encode() + b"\0" + (root / rel).read_bytes())
    return digest.hexdigest()[:16]


def model_files() -> list[str]:
    """The package's files a run's result depends on, relative to it: every module and shipped kernel but the command
    line, reports, where tasks run and the sweep's own package."""
    root = Path(__file__).parents[1]
    rels = (p.relative_to(root).as_posix() for p in sorted([*root.rglob("*.py"), *(root / "kernels").glob("*.yaml")]))
    return [rel for rel in rels if not rel.startswith(NOT_MODEL_FOLDERS) and rel not in NOT_MODEL]


# -- running ------------------------------------------------------------------------------


def run_group(plans: list[Plan]) -> list[dict]:
    """Result documents of the points of one group (see ``group_key``), from their plans.

    On one core the functional run is done once for the group and its trace timed on every point's config;
    chip launches run one by one.
    """
    if plans[0].kernel is not None:
        return [run_plan(p).to_dict() for p in plans]
    return [r.to_dict() for r in run_shared(plans)]


def group_key(point: Point) -> str:
    """What fixes a point's functional run: algorithm, run options but the schedule, engine precision and where O
    accumulates (``HardwareConfig.o_in_place``)."""
    kwargs = {k: v for k, v in point.run_kwargs.items() if k != "schedule"}
    return json.dumps([point.algo, kwargs, point.hw_doc.get("precision"), point.plan.timed.o_in_place],
                      sort_keys=True, default=str)


def _groups(points: list[Point]) -> list[list[Point]]:
    groups: dict[str, list[Point]] = {}
    for p in points:
        groups.setdefault(group_key(p), []).append(p)
    return list(groups.values())


def run_sweep(points: list[Point], out: str | Path | None = None, *, executor: str = "local",
              jobs: int | None = None, scheduler: str | distributed.Client | None = None,
              max_points: int | None = None,
              progress: bool = False) -> SweepResult:
    """Run the points ``out/points.jsonl`` lacks (at most ``max_points`` of them); keep each as it ends.

    ``executor`` is ``local`` (``jobs`` processes; 1 runs in this process) or ``dask``
    (``scheduler``: an address or a ``dask.distributed.Client``).
    """
    if executor not in EXECUTORS:
        raise VfasimError(f"unknown executor {executor!r} (valid: {', '.join(EXECUTORS)})")
    if jobs is not None and jobs < 1:
        raise VfasimError(f"jobs must be >= 1, got {jobs}")
    if executor == "dask" and scheduler is None:
        raise VfasimError("the dask executor needs a scheduler (an address, or a dask.distributed.Client)")
    journal = Path(out) / JOURNAL if out is not None else None
    done = read_journal(journal) if journal else {}
    unique = list({p.key: p for p in points}.values())
    pending = [p for p in unique if p.key not in done]
    reused, computed = len(unique) - len(pending), 0
    with tqdm(total=len(unique), initial=reused, disable=not progress, unit="point", desc="sweep") as bar, \
            journal_writer(journal) as append:
        groups = _groups(pending[:max_points])
        for group, docs in _compute(groups, executor, jobs, scheduler):
            for point, doc in zip(group, docs):
                done[point.key] = append({"key": point.key, "inputs": point.inputs, "result": doc})
            computed += len(group)
            bar.update(len(group))
    return SweepResult(points, [done.get(p.key) for p in points], computed, reused, len(groups))


def _args(group: list[Point]) -> tuple:
    return ([p.plan for p in group],)


def _compute(groups: list[list[Point]], executor: str, jobs: int | None,
             scheduler: str | distributed.Client | None) -> Iterator[tuple[list[Point], list[dict]]]:
    tasks, names = [_args(g) for g in groups], [f"vfasim-group-{g[0].key}" for g in groups]
    return ((groups[i], docs) for i, docs in compute(run_group, tasks, names, executor, jobs, scheduler))


# -- the table ----------------------------------------------------------------------------


def x_axis(points: list[Point]) -> str:
    """The column plotted along x: the first swept axis, else hw (else algo)."""
    swept = [k for k in points[0].inputs if k not in ("hw", "algo")] if points else []
    if swept:
        return swept[0]
    return "hw" if len({p.inputs["hw"] for p in points}) > 1 else "algo"


def results_frame(result: SweepResult) -> pd.DataFrame:
    """One row per finished point, in sweep order, with its ratios (``vfasim.sweep.table``)."""
    x = x_axis(result.points)
    series = [c for c in result.points[0].inputs if c != x] if result.points else []
    return sweep_frame([r for r in result.records if r is not None], series)


# -- the command --------------------------------------------------------------------------


def sweep_command(args: argparse.Namespace) -> str:
    """``vfasim sweep``: build the points, run the missing ones, write tables and plots, print a table."""
    if args.executor == "dask" and not args.scheduler:
        raise VfasimError("--executor dask needs --scheduler ADDRESS")
    if args.executor != "dask" and args.scheduler is not None:
        raise VfasimError("--scheduler applies to --executor dask; give both, or neither to run locally")
    axes = [scale_axis(k, getattr(args, k)) for k in SCALES if getattr(args, k)]  # x: a scale if any
    axes += [parse_set(s) for s in args.sets]
    if args.kernel:
        if any(axis.name == "kernel" for axis in axes):
            raise VfasimError("give the kernels by --kernel or by --set kernel=..., not both")
        axes.append(parse_set("kernel=" + ",".join(args.kernel)))
    kwargs = {k: getattr(args, k) for k in ("seq_len", "head_dim", "block_q", "block_k", "causal", "heads",
                                            "seed", "workload", "schedule")}
    if args.out is not None:
        check_folder_target(args.out, (JOURNAL, *SWEEP_FILES), "--out folder")
    points = make_points(_names(args.hw, "C4V16"), _names(args.algo, "vfa"), axes, kwargs)
    progress = not args.quiet and sys.stderr.isatty()
    if not progress and args.executor == "local":
        _warn_if_long(points, args.out, args.jobs)
    try:
        result = run_sweep(points, args.out, executor=args.executor, jobs=args.jobs, scheduler=args.scheduler,
                           progress=progress)
    except KeyboardInterrupt:
        raise Interrupted(f"{interrupt.reason()}; {_kept(args.out)}") from None
    except WorkLost as exc:
        raise VfasimError(f"{exc}; {_kept(args.out)}") from None
    frame = results_frame(result)
    x = x_axis(points)
    written = write_sweep(frame, x, [c for c in points[0].inputs if c != x], Path(args.out)) if args.out else []
    runs = result.functional_runs
    shared = (f" (numerics computed {runs} time{'s' if runs != 1 else ''}, reused for "
              f"{result.computed - runs} more points)") if result.computed else ""
    wrote = f"; wrote {', '.join(map(str, written))}" if written else \
        "; nothing written (--out DIR keeps results.csv, the plots and a journal to resume from)"
    footer = f"{result.computed} computed{shared}, {result.reused} reused{wrote}"
    return format_sweep(frame, list(points[0].inputs)) + "\n" + footer


def _kept(out: str | None) -> str:
    """Where the points finished before a sweep ended early are, and how to go on."""
    where = f"{out}/{JOURNAL}" if out else "nowhere (no --out)"
    return f"finished points are kept in {where}: run the same command to resume"


def _warn_if_long(points: list[Point], out: str | None, jobs: int | None) -> None:
    """Warn (off a terminal) when the points the journal lacks are estimated to take long."""
    done = read_journal(Path(out) / JOURNAL) if out else {}
    pending = {p.key: p for p in points if p.key not in done}.values()
    seconds = sum(check_plan(p.plan.inputs, warn=False) for p in pending)
    warn_if_long(seconds / min(jobs or os.cpu_count() or 1, max(len(pending), 1)), "this sweep")


def _names(values: list[str] | None, default: str) -> list[str]:
    names = [n.strip() for v in values or [default] for n in v.split(",") if n.strip()]
    return list(dict.fromkeys(names))
