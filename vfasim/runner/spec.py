"""A run as one record: every input that decides a result, carried by the result and replayable.

``RunInputs`` is a run's inputs as one typed object, with ``vfasim.run``'s defaults: ``runner.plan``
builds it once from any entry point's keywords (the API, the command line, sweeps, sensitivity),
normalised and checked, and the one-core and chip paths read it (no keyword list is copied between
modules). ``run_spec`` turns it into a plain, JSON-able mapping (``RunResult.spec``; ``vfasim run
--json`` prints it under ``"spec"``; ``results.RunSpec`` types it), and ``replay_arguments`` turns
such a mapping back into the arguments of ``vfasim.run`` (``vfasim run --spec FILE``), refusing it
when a config or kernel it names has changed since (their digests are part of it).

What is not in a spec (``NOT_IN_SPEC``): where outputs go (``trace_out``, ``trace_window``, ``trace_cores``),
whether a progress bar shows and whether the reference cache is used; none changes a result. A config or kernel
given as an object is recorded by name and digest: its replay needs a built-in or a file of that name.
"""

from __future__ import annotations

import json
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vfasim.errors import VfasimError
from vfasim.runner.options import Options

if TYPE_CHECKING:
    from vfasim.hw import HardwareConfig
    from vfasim.kernel import Kernel

SPEC_VERSION = 1


@dataclass(frozen=True)
class RunInputs:
    """Every input of one ``vfasim.run``, normalised and checked: what its spec holds, then where outputs go.

    ``hw`` and ``kernel`` are as given (a name, a path or an object; ``kernel`` after its ``kernel_style`` alias),
    ``options`` the algorithm options merged from ``options=`` and their keywords. The fields keep ``run``'s
    meaning: ``block_q``/``block_k`` None is the default tile (128 on one core, the kernel's own on a chip),
    ``batch`` the launch's batch (on one core, more heads).
    """

    hw: str | Path | HardwareConfig = "C4V16"
    algo: str = "vfa"
    kernel: str | Path | Kernel | None = None
    options: Options = field(default_factory=Options)
    seq_len: int = 4096
    head_dim: int = 128
    block_q: int | None = None
    block_k: int | None = None
    causal: bool = True
    heads: int = 1
    kv_heads: int | None = None
    seed: int = 0
    workload: str = "llm-like"
    qkv: str | Path | None = None
    schedule: str = "pipelined"
    decode: bool = False
    queries: int = 1
    batch: int = 1
    dispatch: str | None = None
    numerics_heads: int = 0
    numerics: str | None = None
    matmul_format: str | None = None
    trace_out: str | Path | None = None
    trace_window: tuple[int, int] | None = None
    trace_cores: tuple[int, ...] | None = None
    progress: bool = False
    cache: bool = True
    jobs: int | None = None
    executor: str = "local"
    scheduler: Any = None  # with executor dask: its scheduler's address or a dask.distributed.Client

    def given(self, name: str) -> bool:
        """Whether field ``name`` was given a value other than its default (None is never given)."""
        value = getattr(self, name)
        return value is not None and value != DEFAULTS[name]


#: RunInputs field -> its default, which is ``vfasim.run``'s (a test holds them equal)
DEFAULTS: dict[str, Any] = {f.name: f.default_factory() if f.default_factory is not MISSING else f.default
                            for f in fields(RunInputs)}
#: RunInputs fields that choose outputs, not the result: no part of a spec
NOT_IN_SPEC = ("trace_out", "trace_window", "trace_cores", "progress", "cache", "jobs", "executor", "scheduler")
#: RunInputs fields a spec holds as they are (besides hw, algo, kernel and the algorithm options), in its order
FIELDS = tuple(f.name for f in fields(RunInputs) if f.name not in ("hw", "algo", "kernel", "options", *NOT_IN_SPEC))
#: a spec's keys, in its order; ``results.RunSpec`` declares their types for type checkers (a test holds the two
#: equal, and each field's type to its ``RunInputs`` field's as JSON holds it)
SPEC_KEYS = ("version", "hw", "hw_digest", "algo", "kernel", "kernel_digest", *FIELDS, "options")
#: keys a spec file may leave out (a one-core run has no kernel; the version is checked first)
OPTIONAL_KEYS = ("version", "kernel", "kernel_digest")


def run_spec(inputs: RunInputs, config: HardwareConfig, kernel: tuple[str, str] | None) -> dict[str, Any]:
    """The spec of a run of ``inputs`` on ``config`` (as loaded, before any matmul format), ``kernel`` (name or
    path, digest) on a chip."""
    return {
        "version": SPEC_VERSION,
        "hw": str(inputs.hw) if isinstance(inputs.hw, (str, Path)) else config.name, "hw_digest": config.digest(),
        "algo": inputs.algo,
        "kernel": None if kernel is None else kernel[0], "kernel_digest": None if kernel is None else kernel[1],
        **{k: _plain(getattr(inputs, k)) for k in FIELDS},
        "options": asdict(inputs.options),
    }


def _plain(value: object) -> object:
    """A path as its text (a spec is JSON)."""
    return str(value) if isinstance(value, Path) else value


def read_spec(path: str | Path) -> dict[str, Any]:
    """A spec from a file: a ``vfasim run --json`` document (its ``spec``) or a bare spec."""
    from vfasim.hw.registry import read_text_file  # a regular file of bounded size: never a device or a FIFO

    try:
        doc = json.loads(read_text_file(Path(path), "spec", "a JSON file"))
    except json.JSONDecodeError:
        raise VfasimError(f"spec {path}: not a JSON document") from None
    spec = doc.get("spec", doc) if isinstance(doc, dict) else None  # the --json document or the spec alone
    if not isinstance(spec, dict) or spec.get("version") != SPEC_VERSION:
        raise VfasimError(f"spec {path}: no run spec of version {SPEC_VERSION} in it (give the output of "
                          "vfasim run --json, or its 'spec')")
    unknown = set(spec) - set(SPEC_KEYS)
    if unknown:
        raise VfasimError(f"spec {path}: unknown field(s) {', '.join(sorted(unknown))}")
    missing = set(SPEC_KEYS) - set(OPTIONAL_KEYS) - set(spec)
    if missing:
        raise VfasimError(f"spec {path}: missing field(s) {', '.join(sorted(missing))}")
    if not isinstance(spec["options"], dict):
        raise VfasimError(f"spec {path}: options must be a mapping")
    return spec


def replay_arguments(spec: dict[str, Any]) -> dict[str, Any]:
    """run()'s keyword arguments for ``spec``; refused when its config or kernel no longer has its digest."""
    from vfasim.hw import load_hw
    from vfasim.kernel import load_kernel

    config = load_hw(spec["hw"])
    if config.digest() != spec["hw_digest"]:
        raise VfasimError(f"hw config {spec['hw']} has changed since the run (digest {config.digest()}, the spec "
                          f"has {spec['hw_digest']}): the run cannot be repeated as it was")
    kernel = spec.get("kernel")
    if kernel is not None and load_kernel(kernel).digest() != spec.get("kernel_digest"):
        raise VfasimError(f"kernel {kernel} has changed since the run: the run cannot be repeated as it was")
    return {"hw": config, "algo": spec["algo"], "kernel": kernel, **{k: spec[k] for k in FIELDS},
            **spec["options"]}
