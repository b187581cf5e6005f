"""One strictness rule: an input that does not apply to a run is refused, naming it.

``check_applies`` is called once per run, on its ``RunInputs`` and its config, by ``runner.plan``: the
path of ``vfasim.run`` (so of the command line), ``run_configs``, a sweep's points and
``sensitivity_table``. An input left at its default is never refused; one given another value is
refused when nothing in the run would read it:

- ``lam`` on an algorithm that skips no block or row by threshold, ``topk`` on one that keeps
  no top-k blocks (each algorithm's policy says which it does);
- the chip-only inputs (``kernel``, ``dispatch``, ``numerics_heads``, ``trace_cores``, ``jobs``, ``executor``,
  ``scheduler``) on a config without a chip section, and ``numerics`` (one core's mode) on a chip; ``jobs``,
  ``executor`` and ``scheduler`` on a chip with no heads' numerics asked for (``numerics_heads``: they compute
  those), ``scheduler`` without the ``dask`` executor and that executor without one;
- ``seed`` and ``workload`` on a run that generates no data: an algorithm whose trace does not
  depend on the data, on a chip with no heads' numerics asked for (``numerics_heads``), or on
  one core with ``numerics="off"`` (both are timed from ``trace_only``);
- ``block_q`` in a one-core decode step beyond its ``queries`` rows (the tile would be cut to
  them); on a chip a decode tile computes whole rows, so it is not cut.

``check_tuning_names`` refuses a chip config whose ``kernel_tuning`` names a kernel that is
neither shipped nor the run's own: a typo (``FA3``, ``fa9``) would leave the tuning unused.
"""

from __future__ import annotations

from collections.abc import Iterator

from vfasim.errors import VfasimError
from vfasim.functional import ALGORITHMS, policy_for
from vfasim.functional.trace_only import data_independent
from vfasim.hw import HardwareConfig
from vfasim.runner.options import Options, applies_to
from vfasim.runner.spec import RunInputs

CHIP_ONLY = ("kernel", "dispatch", "numerics_heads", "trace_cores", "jobs", "executor", "scheduler")


def check_applies(inputs: RunInputs, config: HardwareConfig) -> None:
    """Refuse the first input of ``inputs`` that a run of them on ``config`` would not read (see the module notes)."""
    for problem in _problems(inputs, config):
        raise VfasimError(problem)


def _problems(i: RunInputs, config: HardwareConfig) -> Iterator[str]:
    algo, options = i.algo, i.options
    policy = policy_for(algo, **options.policy_options())
    for name in ("lam", "topk"):  # the other options are scoped by policy_for itself
        if getattr(options, name) != getattr(Options, name) and not applies_to(name, algo):
            scope = ", ".join(a for a in ALGORITHMS if applies_to(name, a))
            yield f"{name} applies to {scope}, not {algo}: leave it out"
    if config.chip is None:
        yield from (f"{n} applies to chip runs; {config.name} has no chip section" for n in CHIP_ONLY if i.given(n))
        if i.decode and i.block_q is not None and i.block_q > i.queries:
            yield (f"block_q {i.block_q} is larger than the {i.queries} query row(s) of the decode step: the tile "
                   f"would be cut to them; give block_q <= {i.queries} or leave it out")
        if data_independent(policy) and i.numerics == "off" and i.qkv is None:
            yield from (f"{n} does not apply: {algo} with numerics off is timed without data (leave {n} out, or "
                        "check numerics)" for n in ("seed", "workload") if i.given(n))
        return
    if i.given("numerics"):
        yield "numerics applies to one-core runs; on a chip give numerics_heads (--numerics-heads)"
    for name in ("jobs", "executor", "scheduler"):
        if i.given(name) and not i.numerics_heads:
            yield (f"{name} applies to a chip run's numerics over its heads: give numerics_heads (--numerics-heads) "
                   "or leave it out")
    if i.executor == "dask" and i.scheduler is None:
        yield "executor dask needs a scheduler (--scheduler ADDRESS, or scheduler= a dask.distributed.Client)"
    if i.executor != "dask" and i.scheduler is not None:
        yield "scheduler applies to executor dask; give both, or neither to run locally"
    if data_independent(policy) and not i.numerics_heads:
        yield from (f"{n} does not apply: {algo}'s chip run is timed without data, and no heads' numerics are asked "
                    "for (give numerics_heads, --numerics-heads N, to check numerics on generated data)"
                    for n in ("seed", "workload") if i.given(n))


def check_tuning_names(config: HardwareConfig, own: str | None = None) -> None:
    """Each ``chip.kernel_tuning`` key names a shipped kernel or ``own`` (the run's kernel), else it is refused."""
    from vfasim.kernel import builtin_kernel_names

    known = [*builtin_kernel_names(), *([own] if own else [])]
    unknown = [k for k in (config.chip.kernel_tuning if config.chip is not None else {}) if k not in known]
    if unknown:
        raise VfasimError(f"hw config {config.name}: chip.kernel_tuning names unknown kernel {unknown[0]!r} (shipped: "
                          f"{', '.join(builtin_kernel_names())}; or the name of the kernel file run)")
