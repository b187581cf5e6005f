"""From a run's keywords to what runs: one ``RunInputs``, built and checked once, with its config and kernel.

``plan`` is the one path from inputs to a run. ``vfasim.run`` (so the command line and ``--spec``),
``run_configs``, every point of a sweep and ``sensitivity_table`` take it, and what they run is the
``Plan`` it returns, never their keywords again. Its checks, in order: each keyword's rule
(``inputs.normalised_keywords``), the ``kernel_style`` alias and the algorithm options merged, the
schedule, the config loaded, the combination of inputs with the run's size (``inputs.check_combination``),
what applies (``applies.check_applies``), a chip run's kernel loaded, the config's tuning names and the
matmul format.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vfasim.errors import VfasimError
from vfasim.functional.policy import ALGORITHMS
from vfasim.hw import HardwareConfig, load_hw
from vfasim.hw.formats import with_matmul_format
from vfasim.kernel import Kernel, load_kernel
from vfasim.runner.applies import check_applies, check_tuning_names
from vfasim.runner.inputs import check_combination, check_schedule, normalised_keywords
from vfasim.runner.options import Options, merged_options
from vfasim.runner.spec import DEFAULTS, RunInputs, run_spec

DEFAULT_KERNEL = "fa2"  # a chip run's kernel when none is given


@dataclass(frozen=True)
class Plan:
    """A run ready to start: its inputs, its config as loaded and as timed (with the matmul format the inputs pick),
    and on a chip the kernel it runs as (None on one core)."""

    inputs: RunInputs
    config: HardwareConfig
    timed: HardwareConfig
    kernel: Kernel | None

    def spec(self) -> dict[str, Any]:
        """The run's spec (``runner.spec.run_spec``): what ``RunResult.spec`` holds."""
        given, kernel = self.inputs.kernel, self.kernel
        named = None if kernel is None else ((str(given) if isinstance(given, (str, Path)) else kernel.name),
                                             kernel.digest())
        return run_spec(self.inputs, self.config, named)


def plan(keywords: Mapping[str, Any], warn: bool = True) -> Plan:
    """The plan of a run of ``vfasim.run``'s keywords (those left out take their defaults), every input checked;
    ``warn``: warn of a long one-core run (a sweep warns once for all its points)."""
    inputs = run_inputs(keywords)
    check_schedule(inputs.schedule)
    config = load_hw(inputs.hw)  # a config object validated again
    check_combination(inputs, config, warn)
    check_applies(inputs, config)
    kernel = load_kernel(inputs.kernel or DEFAULT_KERNEL) if config.chip is not None else None  # loaded once
    unknown = sorted(kernel.algorithm_names() - set(ALGORITHMS)) if kernel is not None else []
    if kernel is not None and unknown:
        raise VfasimError(f"kernel {kernel.name} names unknown algorithm {unknown[0]!r} (valid: {', '.join(ALGORITHMS)})")
    check_tuning_names(config, kernel.name if kernel is not None else None)
    timed = config if inputs.matmul_format is None else with_matmul_format(config, inputs.matmul_format)
    return Plan(inputs, config, timed, kernel)


def run_inputs(keywords: Mapping[str, Any]) -> RunInputs:
    """``run``'s keywords as one ``RunInputs``: each through its rule, ``kernel_style`` as ``kernel``, the option
    keywords merged into ``options`` (an unknown keyword is refused as an unknown option)."""
    values = normalised_keywords(keywords)
    kernel = _kernel_alias(values.pop("kernel", None), values.pop("kernel_style", None))
    options = values.pop("options", Options())
    option_kwargs = {k: values.pop(k) for k in list(values) if k not in DEFAULTS}
    return RunInputs(**values, kernel=kernel, options=merged_options(options, option_kwargs))


def _kernel_alias(kernel: str | Path | Kernel | None, kernel_style: str | None) -> str | Path | Kernel | None:
    """``kernel``, or the former ``kernel_style`` name for it (both given: refused)."""
    if kernel_style is None:
        return kernel
    if kernel is not None:
        raise VfasimError("give kernel or its alias kernel_style, not both")
    return kernel_style
