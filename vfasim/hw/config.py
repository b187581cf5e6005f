"""Hardware description of one core: pipelines, their rates, and which op kind runs where.

A config is data, not code: which pipelines exist, each one's throughput per
data type, start-up latency and per-instruction overhead, and the op-kind ->
pipeline map. Both a GPU-like SM (tensor cores + FP32 ALUs + SFU) and a split
cube/vector core (Ascend-like) can be written this way.

Assumptions:
- An op occupies one pipeline for start-up + ceil(work × work_factor / throughput)
  + issue overhead cycles; start-up is not overlapped between ops.
- An op kind mapped to ``fused`` costs nothing (e.g. O accumulation inside the
  cube's accumulator); it still orders its dependants.
- A pipeline with ``shares_issue_with`` has no instruction stream of its own: its ops
  join the named pipeline's in-order stream, so ops of the two never run side by side
  (busy cycles are still counted per pipeline). ``issue_streams`` lists the streams.
  With ``issue_share`` s < 1 such an op holds the shared stream for only s of its cycles
  (its unit works the rest beside the stream's other ops), yet a tile's ops of the pipeline
  take no less than their full cycles beside the tile's other ops on the stream (``sim.schedule``).
- ``units`` instances serve a stream's ops in issue order (``units_by: issue``), or one
  instance per trace row modulo ``units`` (``units_by: row``: each tile stream keeps its own
  in-order queue on its own instance, as when every thread block's warps issue their own
  ``mma.sync``).
"""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from vfasim.hw.chip import ChipSpec
from vfasim.formats import BlockScaleName, VectorFormat
from vfasim.trace import DTYPES, OP_KINDS

FUSED = "fused"
#: plausible ranges: beyond them an op's cycle count leaves integer range or rounds to nothing
MIN_RATE, MAX_RATE = 1e-3, 1e9  # work units per cycle
MAX_CYCLES = 10**9  # fixed cycles per op
MAX_WORK_FACTOR = 1e3
Role = Literal["tensor", "vector", "exp", "memory"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Pipeline(_Strict):
    role: Role = Field(description="What the unit is: tensor/cube, vector ALU, exp/SFU, or data mover")
    throughput: dict[str, Annotated[float, Field(strict=True)]] = Field(
        min_length=1, description="Work units per cycle by data type: MACs (tensor), elements "
                                  "(vector, exp) or bytes (memory)")
    startup_cycles: int = Field(strict=True, ge=0, le=MAX_CYCLES, description="Fixed latency added to every op on this pipeline")
    issue_overhead_cycles: int = Field(strict=True, ge=0, le=MAX_CYCLES, description="Per-instruction issue cost, once per op")
    units: int = Field(default=1, strict=True, gt=0, le=4096, description="Identical instances that serve ops in parallel")
    units_by: Literal["issue", "row"] = Field(
        default="issue", description="How ops are dealt to the units: 'issue' - in issue order, each op after the "
                                     "one `units` places before it; 'row' - every op of trace row r on unit r mod "
                                     "units, after the row's previous op there (one in-order queue per tile stream)")
    shares_issue_with: str | None = Field(
        default=None, min_length=1, description="Another pipeline whose in-order instruction stream this one's ops "
                                                "join (the two never run side by side); absent: a stream of its own")
    issue_share: float = Field(
        default=1.0, strict=True, gt=0.0, le=1.0,
        description="With shares_issue_with: the share of each op's cycles it holds the shared stream (1: all)")

    @model_validator(mode="after")
    def _known_positive_rates(self) -> Pipeline:
        for dtype, rate in self.throughput.items():
            if dtype not in (*DTYPES, "bytes"):
                raise ValueError(f"unknown data type {dtype!r} in throughput "
                                 f"(valid: {', '.join(DTYPES)}, or bytes for data movers)")
            if not MIN_RATE <= rate <= MAX_RATE:  # also refuses inf and nan
                raise ValueError(f"throughput for {dtype} must be a finite rate in [{MIN_RATE:g}, {MAX_RATE:g}] "
                                 f"per cycle, got {rate}")
        return self


ScaleKind = Literal["none", "per_tensor", "per_block"]


class OperandScaling(_Strict):
    """How each matmul operand is scaled into the matmul format (scale blocks run along K)."""

    q: ScaleKind = "none"
    k: ScaleKind = "none"
    v: ScaleKind = "none"
    p: ScaleKind = "none"


class PrecisionSpec(_Strict):
    matmul: str = Field(description="Matmul input format (C16/C8/C4 in the config name)")
    vector: VectorFormat = Field(description="Vector-side arithmetic (V32/V16)")
    scaling: OperandScaling = Field(default_factory=OperandScaling)
    block_scale: BlockScaleName | None = Field(
        default=None, description="Per-block scale rule: mxfp4/mx (32 elements, E8M0), nvfp4 (16, E4M3)")

    @model_validator(mode="after")
    def _known(self) -> PrecisionSpec:
        if self.matmul not in DTYPES:
            raise ValueError(f"unknown data type {self.matmul!r} (valid: {', '.join(DTYPES)})")
        kinds = self.scaling.model_dump()
        if "per_block" in kinds.values() and self.block_scale is None:
            raise ValueError("block_scale is required when an operand is scaled per_block")
        if self.matmul == "float4_e2m1" and "none" in kinds.values():
            raise ValueError("float4_e2m1 inputs need a scale rule for q, k, v and p (scaling)")
        return self


class HardwareConfig(_Strict):
    """One core (pipelines with their rates, the op kind -> pipeline map, formats, score buffers) and, with a
    ``chip`` section, the chip of many such cores sharing L2 and HBM. Loaded from ``hw_configs/*.yaml`` (or a
    file) by ``vfasim.hw.load_hw``; every number in a shipped file says where it comes from. Frozen; a config object
    handed to a run is validated again (``load_hw``), so a change made in Python (``model_copy``) is checked like a
    file before anything runs."""

    name: str = Field(min_length=1)
    description: str = ""
    clock_ghz: float = Field(strict=True, gt=0, le=1e3, allow_inf_nan=False, description="Core clock, to turn cycles into time")
    precision: PrecisionSpec
    score_buffers: int = Field(strict=True, gt=0, le=1024, description="Score-tile buffers: how far the cube may run ahead")
    pipelines: dict[str, Pipeline] = Field(min_length=1)
    op_map: dict[str, str] = Field(description="Op kind -> pipeline name, or 'fused' (free)")
    work_factor: dict[str, Annotated[float, Field(strict=True)]] = Field(
        default_factory=dict, description="Op kind -> multiplier on its work (e.g. reduction cost)")
    result_latency: dict[str, Annotated[int, Field(strict=True, ge=0, le=MAX_CYCLES)]] = Field(
        default_factory=dict, description="Op kind -> cycles from such an op's start until an op reading its result may "
        "start (its latency when it runs alone, e.g. a row reduction across warps through shared memory); its "
        "pipeline is free once the op's own cycles end. Shorter than those cycles: no effect; absent: none")
    load_latency_cycles: int = Field(
        default=0, strict=True, ge=0, le=MAX_CYCLES, description="Cycles a memory op's data arrives after its bytes "
        "have crossed its pipeline, the pipeline moving other ops' bytes meanwhile (a loop that waits for each load it "
        "issues, timed in program order); 0: none beyond the pipeline's start-up")
    chip: ChipSpec | None = Field(default=None, description="Many such cores sharing L2 and HBM (absent: one core)")
    take_turns: tuple[Role, ...] = Field(
        default=(), description="Pipeline roles whose ops take turns core-wide, in issue order, whatever their streams "
        "(a kernel whose warp groups reach the softmax in phase sets tensor and exp: its exps never run beside its "
        "matmuls); empty: none")
    turns_within: Literal["core", "row"] = Field(
        default="core", description="Where ops of the take_turns roles take turns: core, all of the core's ops in one "
        "order; row, each trace row (a tile stream) on its own, beside the others (a loop that runs in program order "
        "per stream)")

    @model_validator(mode="after")
    def _consistent(self) -> HardwareConfig:
        missing = [k for k in OP_KINDS if k not in self.op_map]
        if missing:
            raise ValueError(f"op_map has no entry for {', '.join(missing)}")
        for kind, pipe in self.op_map.items():
            if kind not in OP_KINDS:
                raise ValueError(f"op_map names unknown op kind {kind!r}")
            if pipe != FUSED and pipe not in self.pipelines:
                raise ValueError(f"op_map.{kind} names unknown pipeline {pipe!r} "
                                 f"(pipelines: {', '.join(self.pipelines)})")
        for kind, factor in self.work_factor.items():
            if kind not in OP_KINDS or not 0 < factor <= MAX_WORK_FACTOR:
                raise ValueError(f"work_factor.{kind} must name an op kind and be a finite number in "
                                 f"(0, {MAX_WORK_FACTOR:g}]")
        unknown = [k for k in self.result_latency if k not in OP_KINDS]
        if unknown:
            raise ValueError(f"result_latency names unknown op kind {unknown[0]!r}")
        self._check_rates()
        self._check_shared_issue()
        if len(set(self.take_turns)) != len(self.take_turns) or len(self.take_turns) == 1:
            raise ValueError(f"take_turns must name two or more distinct roles, got {list(self.take_turns)}")
        missing = [r for r in self.take_turns if r not in {p.role for p in self.pipelines.values()}]
        if missing:
            raise ValueError(f"take_turns names role {missing[0]!r}, which no pipeline has")
        if self.turns_within == "row" and not self.take_turns:
            raise ValueError("turns_within: row says where the take_turns roles take turns, and take_turns is empty")
        return self

    def _check_shared_issue(self) -> None:
        """A shared stream names another pipeline that has its own stream and as many units."""
        for name, p in self.pipelines.items():
            other = p.shares_issue_with
            if other is None:
                if p.issue_share != 1.0:
                    raise ValueError(f"pipelines.{name}.issue_share applies only with shares_issue_with "
                                     f"(it has its own stream)")
                continue
            if other == name or other not in self.pipelines:
                raise ValueError(f"pipelines.{name}.shares_issue_with must name another pipeline "
                                 f"(pipelines: {', '.join(self.pipelines)})")
            if self.pipelines[other].shares_issue_with is not None:
                raise ValueError(f"pipelines.{name}.shares_issue_with names {other!r}, which itself shares "
                                 f"another's stream: name that stream's own pipeline")
            if (self.pipelines[other].units, self.pipelines[other].units_by) != (p.units, p.units_by):
                raise ValueError(f"pipelines.{name}.shares_issue_with: {name!r} and {other!r} need the same units "
                                 "and units_by to share one stream")

    @property
    def o_in_place(self) -> bool:
        """PV accumulates into O in place (``accumulate_o`` fused into the MMA), so O's rescale precedes PV."""
        return self.op_map["accumulate_o"] == FUSED

    def issue_streams(self) -> list[tuple[str, ...]]:
        """Pipeline names per in-order instruction stream, streams in order of their first pipeline."""
        streams: dict[str, list[str]] = {}
        for name, p in self.pipelines.items():
            head = p.shares_issue_with or name
            streams.setdefault(head, []).append(name)
        return sorted((tuple(v) for v in streams.values()), key=lambda s: list(self.pipelines).index(s[0]))

    def _check_rates(self) -> None:
        """Every pipeline an op kind maps to must have a rate for the dtype it will see."""
        for kind, pipe in self.op_map.items():
            if pipe == FUSED:
                continue
            key = self.rate_key(kind)
            if key not in self.pipelines[pipe].throughput:
                raise ValueError(f"pipelines.{pipe}.throughput has no rate for {key} (needed by {kind})")

    def rate_key(self, kind: str) -> str:
        """Which throughput entry prices ``kind``: bytes, or the dtype it computes in."""
        cls, unit = OP_KINDS[kind]
        if unit == "bytes":
            return "bytes"
        return self.precision.matmul if cls == "tensor" else self.precision.vector

    def digest(self) -> str:
        text = json.dumps(self.model_dump(mode="json"), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]
