"""The shapes of a ``RunResult``'s nested parts, for type checkers: ``r.numerics["rel_err_vs_fp64"]`` is a
``float | None`` in user code, not an ``object``.

Every part is a ``TypedDict`` of optional keys (``total=False``): a one-core run and a chip run fill
different keys (``critical_path`` and most of ``numerics`` are one core's, ``chip`` a chip run's). At
run time each part is a read-only ``dict`` (``vfasim.frozen``); lists inside are tuples, so sequences
are typed ``Sequence``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypedDict


class WorstRow(TypedDict):
    """One of the rows whose output is furthest from the float64 oracle."""

    head: int
    row: int
    cause: str
    row_err: float | None
    max_gap: float


class Numerics(TypedDict, total=False):
    """The numerics verdict and what it rests on (``vfasim.runner.prepare``; docs/running.md)."""

    verdict: str  # ok, degraded, broken, unchecked
    numerics_mode: str  # full, sample, off
    matmul_dtype: str
    vector_dtype: str
    rel_err_vs_fp64: float | None
    fa2_rel_err_vs_fp64: float | None
    max_abs_err_vs_fp64: float | None
    rel_err_finite_only: float | None
    nonfinite_fraction: float | None
    nan_count: int
    inf_count: int
    bad_rows: int | None
    bad_row_fraction: float | None
    causes: dict[str, int] | None
    worst_rows: Sequence[WorstRow] | None
    bit_identical_vs_fa2: float | None
    max_ulp_vs_fa2: int | None
    frozen_max_below_true_rows: float
    frozen_max_largest_gap: float
    max_gap_quantiles: dict[str, float]
    skipped_block_fraction: float
    skipped_row_fraction: float
    rescale_skip_fraction: float
    overflow_count: int
    underflow_count: int
    flows: dict[str, int]
    sampled_query_blocks: Sequence[int]
    sampled_rows: int


class Manifest(TypedDict, total=False):
    """What identifies a run's inputs and trace, by digest."""

    version: str
    hw_digest: str
    seed: int
    workload_digest: str | None  # None: a timing-only run (no Q/K/V made)
    trace_digest: str
    trace_ops: int
    output_digest: str | None
    schedule: str
    trace_scope: str  # chip runs: which part of the launch the trace covers


class Shape(TypedDict, total=False):
    """The attention problem as run."""

    batch: int  # chip runs
    seq_len: int
    kv_len: int
    head_dim: int
    heads: int
    kv_heads: int
    block_q: int
    block_k: int
    causal: bool
    decode: bool


class PolicyFields(TypedDict, total=False):
    """The algorithm's policy after options (``vfasim.functional.policy.Policy``)."""

    minit: bool
    reorder: bool
    freeze: bool
    skip: str
    rescale_threshold: float | None
    key_summary: str
    q_summary: str | None
    exp_emulation: float
    protect_special: bool
    minit_clamp: bool
    minit_margin: float
    fp32_state: bool
    p_bf16: bool


class RunOptions(TypedDict, total=False):
    """The policy run and the options that applied (None where they do not)."""

    policy: PolicyFields
    lam: float | None
    topk: int | None
    kernel: str  # chip runs
    kernel_digest: str
    dispatch: str


class CriticalPathSummary(TypedDict, total=False):
    """What every latency cycle waited on (``vfasim.sim.critical``); one-core runs."""

    latency_cycles: int
    path_ops: int
    bottleneck: str
    by_pipeline: dict[str, int]
    by_kind: dict[str, int]
    pipelines: dict[str, dict[str, float]]
    bound_by: dict[str, int]


class ChipFigures(TypedDict, total=False):
    """A chip run's launch (docs/chips.md)."""

    cores: int
    streams_per_core: int
    kernel: str
    dispatch: str
    units: int
    streams_per_unit: int
    splits: int
    waves: int
    latency_cycles: int
    latency_us: float
    flops: float
    tflops: float
    hbm_bytes: float  # what crosses the HBM: the launches' reads and writes, and the dirty L2 lines written back
    l2_bytes: float
    achieved_hbm_tbps: float
    achieved_l2_tbps: float
    bound: str
    prepass_cycles: int
    prepass_us: float
    attention_call_cycles: int  # the launches after the pre-pass as a call of their own: the attention kernel timed
    # alone, as a campaign times it (its launch a call's first, every dirty L2 line its own); the latency without one
    attention_call_us: float
    launch_us: dict[str, float]  # the latency by launch: the attention kernel (its launch's start to its last CTA's
    # end, and its wait for the dirty L2 lines), the split's combine kernel, the key-summary pre-pass (its own launch
    # included) and the launch overheads the model charges for the others
    writeback_us: float  # the attention kernel's wait for the dirty L2 lines its first reads evict (hw l2.dirty_bytes)
    unit_overhead_cycles: int  # fixed cycles each unit paid beyond its ops
    unit_overhead_from: str  # tuning (the chip's flat kernel_tuning figure), scaled (the tile's cta_cycles times the
    # chip's fitted cta_cycles_scale), measured (the tile's cta_cycles) or none
    utilization: dict[str, float]
    unit_bounds: dict[str, int]
    numerics_heads: Sequence[int]
    roofline: Roofline


class Roofline(TypedDict, total=False):
    """A chip run against the chip's rooflines (``vfasim.chip.roofline``)."""

    tflops: float
    intensity_flop_per_hbm_byte: float | None
    intensity_flop_per_l2_byte: float | None
    peak_tbps: dict[str, float]
    ceilings_tflops: dict[str, float]
    bound: str
    achieved_fraction: float


class RunSpec(TypedDict, total=False):
    """Every input that decides a result (``vfasim.runner.spec``)."""

    version: int
    hw: str
    hw_digest: str
    algo: str
    kernel: str | None
    kernel_digest: str | None
    seq_len: int
    head_dim: int
    block_q: int | None
    block_k: int | None
    causal: bool
    heads: int
    kv_heads: int | None
    seed: int
    workload: str
    qkv: str | None
    schedule: str
    decode: bool
    queries: int
    batch: int
    dispatch: str | None
    numerics_heads: int
    numerics: str | None
    matmul_format: str | None
    options: dict[str, object]
