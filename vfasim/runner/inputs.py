"""The rules a run's inputs are checked by, before any work (``runner.plan`` applies them, once per run).

``normalised_keywords`` turns every keyword into the type the model uses (``np.int64(256)`` becomes
``256``; ``'no'`` for a flag is refused); ``check_combination`` refuses inputs that would be silently
ignored (``queries`` without ``decode``, sizes beside a ``qkv`` file), checks the output path, and
refuses a run whose memory estimate exceeds the machine's available memory. ``@checked`` makes a
call that does not fit an entry point's signature one line. Every entry point (the API, the command
line, sweeps, sensitivity) takes the same path, so all are equally strict.

Assumptions:
- The estimates are rough. Memory ≈ a fixed start-up cost (interpreter, libraries, the
  engine's bounded step batches), plus per Q/K/V element and per trace op. Against measured
  C4V16 causal one-head runs on two cores it came out 1.1-2.2x high (2.2x at 4K, 1.1x at
  16K, 1.5-1.8x at 128K). Time ≈ per visible score element (1.25e-8 s, measured at 128K with
  sampled numerics), times 2.5 under full numerics (the default up to 16K tokens: the fa2
  baseline and the float64 oracle run beside the engine): 4.2 s at 16K against 4.2-4.8 s
  measured (3.7-4.3 s past the ~0.5 s start-up, which is not counted), 108 s at 128K against
  103-112 s. They decide only a refusal (memory beyond what is available) and a warning
  (runs estimated above ``LONG_RUN_S``). A timing-only run (numerics off, no Q, K or V made)
  costs the start-up and the trace alone, and its time is per tile (8.5 s at 128K causal).
- Every estimate meets the available memory in ``check_memory``; ``benchmarks/bench_memory.py
  --estimates`` prints each command's peak beside the largest estimate it made there (0.2-1.0x).
- A ``qkv`` file's arrays are estimated from their headers before they are read
  (``io.qkv_files``), with the same per-element cost.
- A chip launch costs memory and time per work unit (the event loop's arrays and queues;
  measured 230-480 B and 0.3-0.4 ms a unit on H100-SXM launches of 33K-131K units on two
  cores), per stream slot, and per op of the trace it times; ``check_chip_plan`` refuses
  one beyond the available memory before anything is allocated and warns when it is long.
- Available memory is the least of the kernel's MemAvailable, the address-space limit
  (``ulimit -v``) and the cgroup's memory limit, less what they already count as used.
"""

from __future__ import annotations

import functools
import inspect
import math
import os
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, ParamSpec, Protocol, TypeVar

import numpy as np

from vfasim.errors import VfasimError
from vfasim.exec import EXECUTORS
from vfasim.functional import sampling
from vfasim.runner.options import OPTION_RULES, Options
from vfasim.runner.rules import choice, core_list, flag, integer, number, optional, path, scheduler, text, window

if TYPE_CHECKING:
    from vfasim.hw import HardwareConfig
    from vfasim.runner.spec import RunInputs

LONG_RUN_S = 60.0
BASE_BYTES = 240 * 2**20  # interpreter, NumPy, pandas, the engine's step batches (STEP_BYTES each)
BYTES_PER_QKV_ELEMENT = 16  # Q, K, V, O in float32 and their matmul-format copies, the oracle's float64 stripes
BYTES_PER_OP = 120  # the trace as it is built, and the timing model's per-op arrays beside it
OPS_PER_TILE = 16
SECONDS_PER_SCORE_ELEMENT = 1.25e-8  # per visible score element, sampled numerics, two cores
SECONDS_PER_TRACED_TILE = 1.6e-5  # timing only (no Q, K or V): trace built and timed, per tile (8.5 s at 128K)
FULL_NUMERICS_FACTOR = 2.5  # full numerics: the fa2 baseline and the float64 oracle beside the engine
BYTES_PER_UNIT = 600  # a chip launch's work unit: its rows, label, times and queue entries
BYTES_PER_SLOT = 200  # a stream slot of the chip's event loop (its queue and state)
SECONDS_PER_UNIT = 4e-4  # a chip launch's work unit through the event loop, two cores
#: keywords whose value a ``qkv`` file replaces (given with a file unless left at run's default)
FROM_FILE = ("seq_len", "head_dim", "heads", "kv_heads", "workload")


class LongRunWarning(UserWarning):
    """A run estimated to take longer than ``LONG_RUN_S`` seconds."""


RULES: dict[str, Callable[[str, object], object]] = {
    "seq_len": integer, "head_dim": integer, "block_q": optional(integer), "block_k": optional(integer),
    "heads": integer,
    "kv_heads": optional(integer), "queries": integer, "seed": lambda n, v: integer(n, v, 0),
    "causal": flag, "decode": flag, "progress": flag, "cache": flag, "algo": text, "workload": text, "schedule": text,
    "qkv": optional(path), "trace_out": optional(path), "trace_window": optional(window),
    "trace_cores": optional(core_list),
    "batch": integer, "numerics_heads": lambda n, v: integer(n, v, 0), "jobs": optional(integer),
    "executor": lambda n, v: choice(n, v, EXECUTORS), "scheduler": optional(scheduler),
    "kernel_style": optional(text),
    "kernel": optional(lambda n, v: v if _is_kernel(v) else str(path(n, v))), "dispatch": optional(text),
}
P = ParamSpec("P")
R = TypeVar("R")


def checked(func: Callable[P, R]) -> Callable[P, R]:
    """Decorate an API entry point: a call that does not fit its signature is one line, not a ``TypeError``."""
    signature = inspect.signature(func)

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise VfasimError(f"{func.__name__}(): {exc}") from None
        return func(*args, **kwargs)

    return wrapper


def normalised_keywords(values: Mapping[str, Any]) -> dict[str, Any]:
    """Each keyword of ``run`` with a rule (sizes, flags, names, paths, options) through it."""
    values = {k: (RULES.get(k) or OPTION_RULES.get(k) or (lambda n, v: v))(k, v) for k, v in values.items()}
    if "options" in values and not _is_options(values["options"]):
        raise VfasimError(f"options must be vfasim.runner.api.Options(...) (or give lam=..., topk=... as keywords), "
                          f"got {type(values['options']).__name__}")
    return values


def _is_kernel(value: object) -> bool:
    from vfasim.kernel import Kernel

    return isinstance(value, Kernel)


def _is_options(value: object) -> bool:
    return isinstance(value, Options)


def factors(values: object) -> tuple[float, ...]:
    """Sensitivity multipliers: a non-empty sequence of finite numbers in [1e-3, 1e3]."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise VfasimError(f"factors must be a sequence of numbers, got {values!r}")
    try:
        out = tuple(number("factor", f, 1e-3, 1e3) for f in values)
    except VfasimError:
        raise VfasimError(f"factors must be positive finite numbers in [0.001, 1000], got {tuple(values)}") from None
    if not out:
        raise VfasimError("factors must hold at least one number")
    return out


def check_combination(inputs: RunInputs, config: HardwareConfig, warn: bool = True) -> None:
    """Inputs that would be ignored are refused; a one-core run's size is estimated (``check_plan``; a chip launch's
    is, by ``check_chip_plan``, once its kernel's tiles are known); the output path is checked."""
    if not inputs.decode and inputs.queries != 1:
        raise VfasimError(f"queries ({inputs.queries}) applies only with decode (--decode)")
    if inputs.qkv is not None:
        given = [k for k in FROM_FILE if inputs.given(k)]
        if given:
            raise VfasimError(f"{', '.join(given)} cannot be given with qkv: the file sets the workload and "
                              "its sizes")
    elif config.chip is None:
        check_plan(inputs, warn)
    if inputs.trace_cores is not None and inputs.trace_out is None:
        raise VfasimError("trace_cores applies with trace_out (--trace-out FILE): it picks the cores the trace draws")
    if inputs.trace_window is not None and inputs.trace_out is None:
        raise VfasimError("trace_window applies with trace_out (--trace-out FILE): it picks the cycles the trace "
                          "draws")
    if inputs.trace_out is not None and str(inputs.trace_out) != "-":  # "-": standard output
        from vfasim.io.outputs import check_file_target

        check_file_target(inputs.trace_out, "trace file")


def _timing_only(inputs: RunInputs) -> bool:
    """A one-core run with numerics off of a data-independent algorithm: no Q, K or V are made."""
    from vfasim.functional import policy_for
    from vfasim.functional.trace_only import data_independent

    try:
        return inputs.numerics == "off" and data_independent(policy_for(inputs.algo))
    except VfasimError:  # the run itself reports a bad algorithm
        return False


class Blocks(Protocol):
    """What ``check_blocks`` reads: a ``Tiling``, or the same four sizes of a decode step."""

    @property
    def block_q(self) -> int: ...
    @property
    def block_k(self) -> int: ...
    @property
    def seq_len(self) -> int: ...
    @property
    def kv_len(self) -> int: ...


def check_blocks(tiling: Blocks) -> None:
    """A block larger than its sequence is refused: padding it would count work that is not there."""
    for name, block, length, what in (("block_q", tiling.block_q, tiling.seq_len, "query rows"),
                                      ("block_k", tiling.block_k, tiling.kv_len, "keys")):
        if block > length:
            raise VfasimError(f"{name} {block} is larger than the {length} {what}: the padded tile would count "
                              f"{block / length:.3g}x the work; give {name} <= {length}")


ESTIMATE_BLOCK = 128  # the blocks a run's estimate assumes where none are given (a kernel's own are close)

def check_plan(inputs: RunInputs, warn: bool = True) -> float:
    """Refuse a one-core run whose memory estimate exceeds what is available; warn if long (with ``warn``, unless a
    progress bar shows); return the time estimate in seconds."""
    i = inputs
    block_q, block_k = i.block_q or ESTIMATE_BLOCK, i.block_k or ESTIMATE_BLOCK
    rows = i.queries if i.decode else i.seq_len
    check_blocks(SimpleNamespace(block_q=min(block_q, rows) if i.decode else block_q, seq_len=rows,
                                 block_k=block_k, kv_len=i.seq_len))
    need, seconds = estimate(rows, i.seq_len, i.head_dim, min(block_q, rows), block_k, i.heads * i.batch, i.causal,
                             i.numerics, not _timing_only(i))
    check_memory(need, f"this run (seq_len {i.seq_len}, heads {i.heads}, head_dim {i.head_dim})")
    if warn and not i.progress:
        warn_if_long(seconds, "this run")
    return seconds


def check_memory(need: float, what: str) -> None:
    """Refuse ``what`` (a phrase naming the sizes that set it) when its memory estimate ``need`` exceeds what is
    available: the one place an estimate meets the machine (``benchmarks/bench_memory.py`` reads them here)."""
    have = available_bytes()
    if need > have:
        raise VfasimError(f"{what} would need about {_gib(need)} of memory, more than the {_gib(have)} available; "
                          "use a smaller size")


def warn_if_long(seconds: float, what: str) -> None:
    """A ``LongRunWarning`` (the CLI prints it as one ``warning:`` line) above ``LONG_RUN_S``."""
    if seconds > LONG_RUN_S:
        warnings.warn(f"{what} is estimated to take about {_duration(seconds)} (a rough estimate)",
                      LongRunWarning, stacklevel=5)


def estimate(rows: int, kv_len: int, head_dim: int, block_q: int, block_k: int, heads: int,
             causal: bool, numerics: str | None = None, data: bool = True) -> tuple[float, float]:
    """(bytes, seconds) a run would need, roughly (see the module notes); ``data``: Q, K and V are made (not
    a timing-only run)."""
    nq, nk = math.ceil(rows / block_q), math.ceil(kv_len / block_k)
    tiles = heads * (min(nq * nk, nq * (nk + 1) / 2 + nq) if causal and rows == kv_len else nq * nk)
    need = BASE_BYTES + BYTES_PER_OP * OPS_PER_TILE * tiles
    if not data:
        return need, SECONDS_PER_TRACED_TILE * tiles
    need += BYTES_PER_QKV_ELEMENT * heads * (rows + 2 * kv_len) * head_dim
    full = sampling.resolve_mode(numerics, heads, rows, kv_len) == "full"
    seconds = SECONDS_PER_SCORE_ELEMENT * tiles * block_q * block_k * (FULL_NUMERICS_FACTOR if full else 1.0)
    return need, seconds


def check_chip_plan(units: int, slots: int, trace_tiles: int, seq_len: int, sizes: str) -> None:
    """Refuse a chip launch whose memory estimate exceeds what is available, before it allocates; warn if long.

    ``units``: work units of the launch (an upper bound), ``slots``: stream slots of the chip, ``trace_tiles``:
    tiles of the trace it times; ``sizes`` names the inputs that set them, for the message.
    """
    need = (BASE_BYTES + BYTES_PER_UNIT * units + BYTES_PER_SLOT * slots
            + BYTES_PER_OP * OPS_PER_TILE * trace_tiles + 8 * seq_len)
    check_memory(need, f"this chip launch of {units:,} work units on {slots:,} stream slots ({sizes})")
    warn_if_long(SECONDS_PER_UNIT * units, "this chip run")


def available_bytes() -> float:
    """Memory this process may still use: the least of MemAvailable (else the physical total), the address-space
    limit (``ulimit -v``) less the address space in use, and the cgroup's memory limit less its usage."""
    return min(_meminfo(), _rlimit_left(), _cgroup_left())


def _meminfo() -> float:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return float(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return math.inf


def _rlimit_left() -> float:
    import resource

    limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    if limit == resource.RLIM_INFINITY:
        return math.inf
    try:
        with open("/proc/self/statm") as f:
            used = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        used = 0
    return float(max(limit - used, 0))


def _cgroup_left() -> float:
    try:
        line = next(x for x in Path("/proc/self/cgroup").read_text().splitlines() if x.startswith("0::"))
        folder = Path("/sys/fs/cgroup") / line[3:].lstrip("/")
        limit = (folder / "memory.max").read_text().strip()
        used = (folder / "memory.current").read_text().strip()
        return math.inf if limit == "max" else float(max(int(limit) - int(used), 0))
    except (OSError, ValueError, StopIteration):
        return math.inf


def _gib(n: float) -> str:
    return f"{n / 2**30:,.0f} GiB" if n >= 2**30 else f"{n / 2**20:,.0f} MiB"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def check_schedule(schedule: str) -> None:
    """Refuse an unknown schedule before any work starts."""
    from vfasim.sim import SCHEDULES

    if schedule not in SCHEDULES:
        raise VfasimError(f"unknown schedule {schedule!r} (valid: {', '.join(SCHEDULES)})")
