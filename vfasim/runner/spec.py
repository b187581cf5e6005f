"""A run as one record: every input that decides a result, carried by the result and replayable.

``run_spec`` turns the normalised arguments of ``vfasim.run`` into a plain,
JSON-able mapping (``RunResult.spec``; ``vfasim run --json`` prints it under
``"spec"``), and ``replay_arguments`` turns such a mapping back into the
arguments of ``vfasim.run`` (``vfasim run --spec FILE``), refusing it when a
config or kernel it names has changed since (their digests are part of it).

What is not in a spec: where outputs go (``trace_out``, ``trace_window``), whether a progress
bar shows and whether the reference cache is used; none changes a result. A config or kernel given as an object is
recorded by name and digest: its replay needs a built-in or a file of that name.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vfasim.errors import VfasimError

SPEC_VERSION = 1
#: run() keywords a spec holds (besides hw, algo, kernel and the algorithm options)
FIELDS = ("seq_len", "head_dim", "block_q", "block_k", "causal", "heads", "kv_heads", "seed", "workload", "qkv",
          "schedule", "decode", "queries", "batch", "dispatch", "numerics_heads", "numerics", "matmul_format")
NOT_IN_SPEC = ("trace_out", "trace_window", "trace_cores", "progress", "cache")


def run_spec(hw: object, hw_name: str, hw_digest: str, algo: str, values: dict[str, Any], options: dict[str, Any],
             kernel: tuple[str, str] | None) -> dict[str, Any]:
    """The spec of a run: ``values`` are run()'s normalised keywords, ``kernel`` (name or path, digest)."""
    return {
        "version": SPEC_VERSION,
        "hw": str(hw) if isinstance(hw, (str, Path)) else hw_name, "hw_digest": hw_digest,
        "algo": algo,
        "kernel": None if kernel is None else kernel[0], "kernel_digest": None if kernel is None else kernel[1],
        **{k: (str(values[k]) if isinstance(values[k], Path) else values[k]) for k in FIELDS},
        "options": options,
    }


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
    unknown = set(spec) - {"version", "hw", "hw_digest", "algo", "kernel", "kernel_digest", "options", *FIELDS}
    if unknown:
        raise VfasimError(f"spec {path}: unknown field(s) {', '.join(sorted(unknown))}")
    missing = {"hw", "hw_digest", "algo", "options", *FIELDS} - set(spec)
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
