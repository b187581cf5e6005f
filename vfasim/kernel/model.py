"""A kernel as data: the software choices of one attention kernel, apart from the chip it runs on.

A ``Kernel`` says what a real kernel's source says: its tile per head dim,
format and mask; how a thread block (CTA) splits that tile into *tile streams*
(one query block's walk over its key blocks: a whole CTA in FA2, one consumer
warp group in FA3); how deep each stream pipelines its score tiles and its K/V
loads; where Q and P live; how its matmuls issue; its exp emulation and rescale
rule; its decode (split-KV) path; and how its launch hands work to the cores.
What a kernel *reaches* on one chip (its tensor efficiency, its fixed cost per
work unit) is a property of the pair and lives in the chip config
(``chip.kernel_tuning.<kernel name>``), fitted or sourced there.

Assumptions:
- A stream's live register tiles are ``score_buffers`` fp32 score tiles, one P
  tile in the matmul format (none when P aliases the scores) and the fp32 O
  accumulator, unless a tile rule declares the registers its source allots
  (``registers_per_thread``, e.g. FA3's ``setmaxnreg`` figures); then that
  figure times the stream's threads is what must fit, plus the CTA's other
  warps (``producer_threads`` × ``producer_registers_per_thread``).
- VFA's key summaries: with ``minit: prepass`` the chip model prices them as a launch
  of their own before the attention kernel (one read of K at the HBM bandwidth, or
  the compute, whichever is slower, plus the launch cost and one memory latency; the
  compute is the kernel's counted instructions at its measured issue rate where
  ``prepass_rates`` gives them, else one vector operation per element); with
  ``inline`` they stay in the trace of the stream that first needs them.
- Causal masking: the model masks only the blocks the diagonal crosses and
  skips the fully hidden ones (every shipped kernel's path); no other path is
  modelled, so the field admits only that value.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from vfasim.formats import FormatClass
from vfasim.trace import OP_KINDS

ACC_BYTES = 4  # fp32 scores and O accumulator
MAX_TILE = 1024


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


_Warps = Annotated[int, Field(strict=True, gt=0, le=64)]


class TileRule(_Strict):
    """One row of a kernel's tile table: the first rule that matches a run gives its tile."""

    head_dim_max: int = Field(strict=True, gt=0, le=1024, description="The rule applies to head dims up to this one")
    formats: list[FormatClass] | None = Field(default=None, description="Matmul format classes it applies to "
                                              "(16bit, 8bit, 4bit); absent: any")
    causal: bool | None = Field(default=None, description="Applies only with (true) or without (false) a causal "
                                "mask; absent: both")
    algorithms: list[str] | None = Field(default=None, min_length=1, description="Applies only to runs of these "
                                         "algorithms (a source that compiles a loop per algorithm, whose measured "
                                         "costs differ); absent: any")
    block_q: int = Field(strict=True, gt=0, le=MAX_TILE, description="Query rows of the CTA's tile")
    block_k: int = Field(strict=True, gt=0, le=MAX_TILE, description="Keys per key block")
    warps: int | None = Field(strict=True, default=None, gt=0, le=64, description="Warps per stream (absent: the kernel's)")
    kv_stages: int | None = Field(strict=True, default=None, gt=0, le=8, description="K/V pipeline stages with this tile "
                                  "(absent: the kernel's)")
    registers_per_thread: int | None = Field(
        strict=True, default=None, gt=0, le=255, description="Registers the source allots each thread of a stream (absent: "
                                                "computed from the live tiles)")
    shared_bytes: int | None = Field(
        strict=True, default=None, gt=0, le=1 << 24, description="Shared memory one CTA of this tile takes, from the "
        "source's shared storage, where it streams K and V in chunks rather than holding whole tiles (absent: "
        "computed from the tiles: Q where it lives in shared memory and kv_stages K and V tiles)")
    producer_registers_per_thread: int | None = Field(
        strict=True, default=None, ge=0, le=255, description="Registers of each producer thread with this tile (absent: the "
                                                "kernel's)")
    ctas_per_core: int | None = Field(
        strict=True, default=None, gt=0, le=64, description="CTAs a core runs at once with this tile, where the tile "
        "is another kernel's than the kernel's main one (e.g. a decode kernel), measured; absent: the kernel's")
    result_latency: dict[str, Annotated[int, Field(strict=True, ge=0, le=10**6)]] = Field(
        default_factory=dict, description="Op kind -> cycles from such an op's start on this tile until its result may "
        "be read, measured with the op alone (e.g. a row reduction across warps through shared memory and "
        "barriers); replaces the chip config's result_latency for that kind; absent: the config's")
    program_order: bool = Field(default=False, description="The tile's ops run in program order within its stream "
                                "(its warps meet at every row reduction's barriers and issue its copies themselves, "
                                "so no op runs ahead of the one before it): its tensor, vector, exp and memory ops take "
                                "turns within the stream, each after the previous one's result; a copy's turn is its "
                                "time on the memory pipe, its data then streams at the core's rates", strict=True)
    loop_pipelined: bool | None = Field(default=None, description="Whether the key loop is software-pipelined with "
                                        "this tile (e.g. Triton's num_stages 1 compiles a loop that is not); absent: "
                                        "the kernel's loop_pipelined")
    warp_grid: tuple[_Warps, _Warps] | None = Field(
        default=None, description="[warps along the query rows, warps along the columns] of each matmul's output tile, "
        "where the warps read their operands from shared memory (operands_from_shared): each warp reads its rows of A "
        "and its columns of B; absent: every warp its own rows and all columns (FlashAttention-2's warps x 1)")
    cta_cycles: int | None = Field(
        strict=True, default=None, ge=0, le=10**9, description="Cycles each CTA of this tile spends beyond the ops the "
        "model prices (its prologue and epilogue), measured; a chip's fitted kernel_tuning cta_cycles_scale scales it, "
        "a flat unit_overhead_cycles replaces it; absent: none")
    uneven_mask_work: float | None = Field(
        default=None, gt=0, le=1e3, allow_inf_nan=False, strict=True, description="The kernel's mask_work in a causal "
        "launch of its uneven code with this tile (causal_masking: trailing_steps), measured against its even code; "
        "absent: mask_work")
    bounds_mask_work: float | None = Field(
        default=None, gt=0, le=1e3, allow_inf_nan=False, strict=True, description="Vector operations per score element "
        "with which a launch off the kernel's lengths (Kernel.bounds_masked: by default one without a causal mask "
        "whose K/V length is not a whole number of this tile's key blocks) masks every key block (a bounds check in "
        "each iteration, not only the last block's), measured against whole blocks; absent: only the last block is "
        "masked, at mask_work (with bounds_cta_cycles or bounds_block_cycles: every block, at one operation)")
    bounds_cta_cycles: int | None = Field(
        strict=True, default=None, ge=0, le=10**9, description="Cycles each CTA of a launch off the kernel's lengths "
        "spends beyond the ops the model prices, in place of cta_cycles (a kernel compiled apart for such lengths), "
        "measured as cta_cycles is; absent: cta_cycles")
    bounds_block_cycles: int | None = Field(
        strict=True, default=None, ge=0, le=10**9, description="Cycles each key block of a CTA of a launch off the "
        "kernel's lengths takes beyond what the model prices it at, measured against a sweep of such lengths; absent: "
        "none")
    masked_loop_cycles: int | None = Field(
        strict=True, default=None, ge=0, le=10**9, description="Cycles each CTA of a causal launch of this tile pays "
        "to walk its masked blocks in a loop of their own (an algorithm the kernel's masked_loop_apart names), "
        "measured; absent: none")
    block_cycles: dict[Annotated[int, Field(gt=0, le=64)],  # not strict: a JSON copy's keys are strings
                       Annotated[int, Field(strict=True, gt=0, le=10**9)]] = Field(
        default_factory=dict, description="SM cycles a key block of this tile takes each CTA where k of them share an "
        "SM, by k, measured: where each scheduler holds one or two warps their chain of dependent instructions and "
        "loads sets the pace, which the pipes' rates do not give; no unit of the tile walks its key blocks faster "
        "than the figure of the largest k given at or below the CTAs sharing its core; empty: none")
    source: str = Field(min_length=1, description="Where the rule is read from, or 'assumed, because ...'")

    @model_validator(mode="after")
    def _known_kinds(self) -> TileRule:
        unknown = [k for k in self.result_latency if k not in OP_KINDS]
        if unknown:
            raise ValueError(f"result_latency names unknown op kind {unknown[0]!r}")
        return self

    def block_floor(self, ctas: int) -> int:
        """The fewest SM cycles a key block takes each of ``ctas`` CTAs of this tile sharing an SM (``block_cycles``
        of the largest count given at or below it; 0: none)."""
        given = [k for k in self.block_cycles if k <= ctas]
        return self.block_cycles[max(given)] if given else 0


class PrepassRate(_Strict):
    """What VFA's key-summary launch (``minit: prepass``) issues per element of K, for head dims up to one.

    The launch's compute time on a core is elements × ``warp_instructions_per_element`` / ``instructions_per_cycle``
    (its reductions are issue- and latency-bound: few CTAs fit, each reduces one key block across its warps); a
    core's first program takes ``program_us`` alone, and the programs resident at the start (``programs_per_core``
    on every core the launch fills) read their blocks from the HBM together.
    """

    head_dim_max: int = Field(strict=True, gt=0, le=1024, description="The rate applies to head dims up to this one")
    formats: list[FormatClass] | None = Field(default=None, description="Matmul format classes of K it applies to; "
                                              "absent: any")
    block_k: int | None = Field(strict=True, default=None, gt=0, le=MAX_TILE, description="Applies only to key blocks "
                                "of this many keys (one program's share); absent: any")
    warp_instructions_per_element: float = Field(gt=0, le=64, description="Warp instructions the launch executes per "
                                                 "element of K (a count, e.g. Nsight Compute's inst_executed)")
    instructions_per_cycle: float = Field(gt=0, le=8, description="Warp instructions one core issues per cycle of the "
                                          "config's clock while the launch runs")
    program_us: float | None = Field(default=None, gt=0, le=1e3, allow_inf_nan=False, description="Microseconds a "
                                     "launch of up to one program a core takes beyond an empty kernel's: one "
                                     "program's chain of its block's load and its reductions, measured; a core's "
                                     "further programs add the rest of the work at the issue rate; absent: one "
                                     "memory latency")
    programs_per_core: int | None = Field(default=None, strict=True, gt=0, le=64, description="Programs one core "
                                          "holds at once (the launch's occupancy, e.g. Nsight Compute's limit by "
                                          "registers): they all load their key blocks from the HBM at the start, so "
                                          "with program_us a launch also waits for those blocks' bytes beyond one "
                                          "program's; absent: one program a core")
    source: str = Field(min_length=1, description="Where the numbers come from, or 'assumed, because ...'")

    @model_validator(mode="after")
    def _burst_needs_program(self) -> PrepassRate:
        if self.programs_per_core is not None and self.program_us is None:
            raise ValueError("programs_per_core prices the first wave's reads beyond one program's program_us, "
                             "and program_us is not given")
        return self

    def resident(self, programs: int, cores: int) -> int:
        """Programs of a launch of ``programs`` on ``cores`` that run from its start (``programs_per_core`` a core)."""
        return min(programs, cores * (self.programs_per_core or 1))


class WaveSplit(_Strict):
    """A split-KV rule that picks the fewest splits within a fraction of the best wave efficiency.

    With ``m`` = batch × heads × query blocks of ``block_q`` rows and ``s`` = cores × ``slots_per_core``: no split
    when m ≥ ``no_split_fill`` · s; otherwise, over the splits n ≤ min(``max_splits``, s, key blocks) that change
    the key blocks per split, efficiency(n) = w / ceil(w) with w = m · n / s, and the rule takes the smallest n whose
    efficiency reaches ``efficiency_ratio`` of the best.
    """

    rule: Literal["wave_efficiency"]
    block_q: int = Field(strict=True, gt=0, le=MAX_TILE, description="Query rows per block as the rule counts them")
    slots_per_core: int = Field(strict=True, gt=0, le=64, description="CTAs the rule assumes per core")
    no_split_fill: float = Field(strict=True, gt=0, le=1, description="No split once the launch fills this fraction of slots")
    efficiency_ratio: float = Field(strict=True, gt=0, le=1)
    max_splits: int = Field(strict=True, gt=0, le=4096)
    prefill: bool = Field(description="The rule also splits prefill launches (not only decode)", strict=True)
    source: str = Field(min_length=1)

    def splits(self, batch_heads: int, rows: int, cores: int, kblocks: int) -> int:
        """Splits for ``batch_heads`` rows of heads, ``rows`` query rows each, over ``kblocks`` key blocks."""
        m = batch_heads * -(-rows // self.block_q)
        slots = cores * self.slots_per_core
        if m >= self.no_split_fill * slots:
            return 1
        top = min(self.max_splits, slots, kblocks)
        eligible = [n for n in range(1, top + 1) if n == 1 or -(-kblocks // n) != -(-kblocks // (n - 1))]
        eff = {n: (m * n / slots) / math.ceil(m * n / slots) for n in eligible}
        best = max(eff.values())
        return next(n for n in eligible if eff[n] >= self.efficiency_ratio * best)


class GridSplit(_Strict):
    """A split-KV rule that splits each row tile's keys until the launch reaches a CTA count.

    With ``m`` = batch × heads × query blocks of ``block_q`` rows: no split below ``min_kblocks`` key blocks;
    otherwise n = min(``max_splits``, key blocks, ``target_ctas`` // m), at least 1, rounded down to a power of
    two where ``power_of_two`` says so.
    """

    rule: Literal["grid_target"]
    block_q: int = Field(strict=True, gt=0, le=MAX_TILE, description="Query rows per block as the rule counts them")
    target_ctas: int = Field(strict=True, gt=0, le=1 << 20,
                             description="The CTAs the splits fill the launch to, at most")
    max_splits: int = Field(strict=True, gt=0, le=4096)
    min_kblocks: int = Field(strict=True, gt=0, le=1 << 20, description="No split with fewer key blocks than this")
    power_of_two: bool = Field(strict=True, description="Splits are a power of two")
    prefill: bool = Field(description="The rule also splits prefill launches (not only decode)", strict=True)
    source: str = Field(min_length=1)

    def splits(self, batch_heads: int, rows: int, cores: int, kblocks: int) -> int:
        """Splits for ``batch_heads`` rows of heads, ``rows`` query rows each, over ``kblocks`` key blocks (``cores``
        does not enter: the rule's target is a CTA count)."""
        if kblocks < self.min_kblocks:
            return 1
        m = batch_heads * -(-rows // self.block_q)
        n = max(1, min(self.max_splits, kblocks, self.target_ctas // m))
        return 1 << (n.bit_length() - 1) if self.power_of_two else n


class CombineRows(_Strict):
    """Query rows per CTA of the split-KV combine launch: the first rule whose divisor divides the head dim."""

    head_dim_multiple_of: int | None = Field(strict=True, default=None, gt=0, description="Applies when the head dim is a "
                                             "multiple of this; absent: any head dim")
    rows: int = Field(strict=True, gt=0, le=MAX_TILE)
    source: str = Field(min_length=1)


class SideLaunch(_Strict):
    """Kernels one call launches beside the attention kernel (and a split's combine): set-up or reduction kernels of
    the source's own, each costing the chip's ``next_launch_us`` (a further kernel of the call)."""

    when: Literal["always", "unmasked", "decode", "main"] = Field(
        description="always; unmasked: calls without a causal mask; decode: decode steps the split-KV path runs; "
                    "main: calls the main kernel runs (prefill, and decode steps the split-KV path does not take)")
    count: int = Field(strict=True, gt=0, le=64, description="Kernels launched")
    source: str = Field(min_length=1)


class DecodeRule(_Strict):
    """The kernel's split-KV path: decode (few query rows against a long K/V), and prefill where the rule says."""

    tiles: list[TileRule] = Field(min_length=1, description="Split-KV tile table (block_q: query rows of a "
                                  "tile, packed query heads included), first match wins")
    split_kv: Literal["fill_slots", "none"] | WaveSplit | GridSplit = Field(
        description="fill_slots: split each row's K/V into enough chunks that every stream slot of the chip gets "
                    "work; a wave_efficiency rule: the source's own split heuristic; a grid_target rule: splits that "
                    "fill the launch to a measured CTA count; none: no split. Splits > 1 add "
                    "a combine launch that merges the partial results")
    one_split_tiles: Literal["decode", "main"] = Field(
        default="decode", description="The tiles a decode launch runs with when it makes one split: decode (this "
                                      "table) or main (the kernel's prefill tiles: its source runs its main kernel)")
    pack_gqa: bool = Field(description="One query token: the query heads of a GQA group share one tile and read "
                                       "their K/V once", strict=True)
    max_queries: int | None = Field(default=None, gt=0, description="The split-KV path runs only for decode steps of "
                                    "at most this many queries; more run the main kernel, unsplit; absent: any")
    gqa_groups: Literal["any", "power_of_two"] = Field(
        default="any", description="power_of_two: the split-KV path runs only where the query heads of a K/V head "
                                   "number a power of two; other groups run the main kernel, unsplit, a query head "
                                   "a tile; any: every group")
    combine_reads: Literal["per_split", "parallel"] = Field(
        default="per_split", description="per_split: a combine CTA reads the splits' log-sum-exps in one round trip, "
                                         "then their partials one dependent round trip each (FA2's loop over splits); "
                                         "parallel: all at once, one round trip")
    combine_cycles: int | None = Field(
        strict=True, default=None, ge=0, le=10**7, description="Cycles each combine CTA spends beyond the round trips "
        "and arithmetic the model prices, measured; absent: none")
    combine_rows: list[CombineRows] = Field(
        default_factory=lambda: [CombineRows(rows=4, source="assumed, because the description gives none: "
                                                          "FA2's combine figure at head dim 128")],
        description="Query rows per combine CTA; each CTA reads the splits' partials one after another (a "
                    "dependent memory round trip per split)")
    source: str = Field(min_length=1)

    @model_validator(mode="after")
    def _applies(self) -> DecodeRule:
        if self.one_split_tiles == "main" and isinstance(self.split_kv, str):
            raise ValueError("one_split_tiles: main needs a wave_efficiency or grid_target split_kv rule (the rules "
                             "that can leave a decode launch at one split)")
        return self

    def runs(self, queries: int, group: int) -> bool:
        """Whether a decode step of ``queries`` queries, ``group`` query heads a K/V head, takes this path (else the
        kernel's main path, unsplit)."""
        return (self.max_queries is None or queries <= self.max_queries) \
            and (self.gqa_groups == "any" or group & (group - 1) == 0)

    def combine_block(self, head_dim: int) -> int:
        return next((c.rows for c in self.combine_rows
                     if c.head_dim_multiple_of is None or head_dim % c.head_dim_multiple_of == 0), 4)


class Kernel(_Strict):
    """One attention kernel as its source describes it (``kernels/*.yaml``; ``load_kernel`` reads one).

    ``tile`` picks the tile rule for a run; ``streams_per_cta`` says how many tile streams share a CTA;
    ``runs_on`` whether a built-in chip is one it targets; ``digest`` identifies the description in a run's spec.
    """

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    description: str = ""
    source: str = Field(min_length=1, description="Repository, commit and file (or paper section) it is read from")
    targets: list[str] = Field(min_length=1, description="Built-in chip names it runs on, or '*' for any; a "
                               "config of one's own (not a built-in name) may run any kernel")
    measured_as: list[str] = Field(default_factory=list, description="Kernel names of validation tables whose "
                                   "rows this description predicts (and a kernel tuning may be fitted on)")
    predicts: list[str] = Field(default_factory=list, description="Kernel names of validation tables of other "
                                "implementations of the same structure: their rows are predicted with this "
                                "description and held out always, never fitted on")
    tiles: list[TileRule] = Field(min_length=1, description="Tile table, first match wins")
    head_dims: list[int] = Field(default_factory=list, description="Head dims the kernel is compiled for, ascending: "
                                 "a run's head dim computes at the next one up (zero-padded columns in its MMAs and "
                                 "O work; loads and stores move the real columns); empty: every head dim as is")
    warps: int = Field(strict=True, gt=0, le=64, description="Warps per tile stream, where a tile rule gives none")
    stream_rows: int | None = Field(strict=True, default=None, gt=0, le=MAX_TILE,
                                    description="Query rows one tile stream computes (a consumer warp group); "
                                                "absent: the whole CTA tile is one stream")
    pad_streams: bool = Field(default=False, description="Every stream of a CTA computes, a stream past the last query "
                              "row on padding (each consumer warp group issues its MMAs whatever the query length; the "
                              "epilogue drops the rows): a head's last CTA costs all its streams; false: a stream with "
                              "no rows is not run, and a head of one query block runs as one stream", strict=True)
    ctas_per_core: int | None = Field(strict=True, default=None, gt=0, description="CTAs a core runs at once by the source's "
                                      "launch bounds; absent: as many as fit")
    producer_threads: int = Field(strict=True, default=0, ge=0, description="Threads of a CTA that only move data (FA3's "
                                  "producer warp group)")
    producer_registers_per_thread: int = Field(strict=True, default=0, ge=0, le=255)
    score_buffers: int = Field(strict=True, gt=0, le=4, description="Score tiles in flight per stream: 1 runs softmax after "
                               "each QK matmul; 2 overlaps one tile's softmax with the next tile's matmuls")
    exp_issue_share: float | None = Field(
        strict=True, default=None, gt=0, le=1, description="Where the chip's exp pipeline shares the FP32 issue stream: "
        "the share of each exp's cycles the kernel's exps hold it (its instruction schedule interleaves them with its "
        "FP32 work); absent: the chip's issue_share")
    exp_beside_mma: bool = Field(default=True, description="A core's exps may run beside its matmuls (one stream's "
                                 "softmax overlapping another's MMAs); false: the kernel's warp groups, and the CTAs "
                                 "sharing a core, reach the softmax in phase (no ping-pong schedule), so its exps and "
                                 "matmuls take turns on the core", strict=True)
    gaps_filled_by_ctas: list[FormatClass] = Field(
        default_factory=list, description="Matmul format classes in which, where two or more of its CTAs share a core, "
        "the tensor pipes run at their datasheet rate: the gaps the chip's tensor_efficiency stands for (one CTA's "
        "dependent chain, measured with one CTA a core) are filled by another CTA's work; in others (and by default) "
        "the efficiency applies however many share")
    kv_stages: int = Field(strict=True, gt=0, le=8, description="K/V pipeline stages")
    kv_ring: bool = Field(default=False, description="K and V tiles share one ring of kv_stages buffers (each "
                          "stage holds a K or a V tile); false: each stage holds a K and a V tile", strict=True)
    mma: Literal["per_stream", "shared"] = Field(
        description="per_stream: each stream's warps issue their own mma.sync, so k streams sharing a core get 1/k "
                    "of the tensor pipes each (a stream alone no more than its warps reach, "
                    "core_limits.tensor_partitions); shared: asynchronous warp-group MMAs (wgmma, tcgen05, cube) "
                    "that take the whole pipe in turn")
    operands_from_shared: bool = Field(description="Each warp reads its matmul operands from shared memory "
                                       "(mma.sync), paid at the core's shared_read_bytes_per_cycle", strict=True)
    q_in: Literal["shared", "registers"] = Field(description="Where Q lives for the key loop")
    q_reread: bool = Field(default=False, description="The Q tile is read again from memory with every key block "
                           "(the first matmul's mainloop streams Q's chunks beside K's), not once per CTA: each K load "
                           "also moves the CTA's Q bytes", strict=True)
    p_in: Literal["registers", "shared"] = Field(default="registers", description="Where the PV matmul reads P "
                                                  "from: registers (the score fragment converted in place) or shared "
                                                  "memory (written there after the softmax; each warp then reads its "
                                                  "rows of P as it reads V, with operands_from_shared)")
    p_aliases_scores: bool = Field(description="P is written over its score tile's registers (no separate P tile)",
                                   strict=True)
    exp_emulation: float = Field(strict=True, default=0.0, ge=0, lt=1, description="Fraction of exps computed by polynomial on "
                                 "the vector ALUs")
    rescale_threshold_log2: float | None = Field(
        strict=True, default=None, ge=0, description="Rescale O only when the max grows by more than this (log2 units); absent: "
                                        "always")
    v_before_skip_test: bool = Field(default=False, description="A skipping algorithm's block test (BLASST, VSA) "
                                     "comes after the block's V load in the source, so a skipped block still reads "
                                     "its V; false: only a kept block loads V, after the test", strict=True)
    fused_ops: list[str] = Field(
        default_factory=list, description="Op kinds the kernel's source folds into a neighbouring instruction, priced "
        "at nothing (e.g. scale: the score scale riding in the FFMA of the max subtraction, exp2(s * scale - m))")
    loop_pipelined: bool = Field(
        default=True, description="The key loop is software-pipelined: a key block's K and V loads are issued while "
        "earlier blocks compute; false: each block's loads are issued in the iteration that uses them (its matmuls run "
        "their own mainloops), priced as a skipping loop that is not pipelined is (skip_loop_pipelined)", strict=True)
    skip_loop_pipelined: bool = Field(
        default=True, description="The key loop stays software-pipelined when it carries a skipping algorithm's block "
        "test; false: the compiled loop runs in program order (each stream's ops one after another, its K/V loads in "
        "the iteration that uses them, each waiting out the L2 latency and moving its bytes at the core's share of "
        "the L2 bandwidth)", strict=True)
    minit: Literal["prepass", "inline"] = Field(
        description="Where VFA's key summaries are made: prepass - a separate launch reads K once and writes them, "
                    "the attention kernel reads them in its prologue; inline - the tile stream that first needs a K/V "
                    "head's summaries computes them (the paper's prelude), sharing them with the head's other streams")
    prepass_rates: list[PrepassRate] = Field(
        default_factory=list, description="With minit: prepass, the key-summary launch's instruction count and issue "
        "rate by head dim (first match wins); none matching: one vector operation per element on the vector pipes")
    causal_masking: Literal["diagonal_blocks", "trailing_steps"] = Field(
        description="Which key blocks run the masked iteration under a causal mask (hidden blocks are skipped): "
                    "diagonal_blocks, those the diagonal crosses; trailing_steps, a fixed count at the end of each "
                    "query block's visit whether the diagonal crosses them or not: ceil(block_q / block_k), one more "
                    "where the launch is uneven (FlashAttention-2's n_masking_steps)")
    uneven_above_head_dim: int | None = Field(
        default=None, gt=0, description="With trailing_steps: above this head dim the kernel is compiled uneven "
        "whatever the lengths (FlashAttention-2 instantiates Is_even_MN only up to head dim 128); absent: never",
        strict=True)
    masked_loop_apart: list[str] = Field(
        default_factory=list, description="Algorithms whose masked key blocks the source walks in a loop of their own "
        "after the unmasked ones (a compiler pipelines each loop apart: the second one's first loads wait for the "
        "first to end); their causal launches pay each tile's masked_loop_cycles a CTA, with the kernel's own tiles")
    bounds_multiple: int | None = Field(
        default=None, gt=0, le=1 << 20, strict=True, description="The length the query and K/V lengths must both be "
        "multiples of for the kernel to run without a bounds check in each key block (a compile-time divisibility "
        "flag): a launch off it is bounds-checked (Kernel.bounds_masked); absent: the K/V length against the tile's "
        "key block")
    bounds_causal: bool = Field(
        default=False, strict=True, description="A causal launch off the kernel's lengths is bounds-checked too (its "
        "blocks below the diagonal masked as well, at the causal mask's work); false: only launches without a causal "
        "mask")
    mask_work: float = Field(default=1.0, gt=0, le=1e3, allow_inf_nan=False, strict=True, description=(
        "Vector operations per score element of a causal launch's masked iteration (index arithmetic, compares and "
        "selects, and what the masked code path costs beyond them); 1: one operation"))
    decode: DecodeRule | None = Field(default=None, description="The decode path; absent: the kernel has none")
    side_launches: list[SideLaunch] = Field(default_factory=list, description="Kernels a call launches beside the "
                                            "attention kernel (and a split's combine), by when; none: one launch")
    dispatch: Literal["greedy", "waves", "persistent"] = Field(
        description="greedy: a grid launch, each CTA to whichever core frees first; waves: fixed strides per core; "
                    "persistent: one CTA per slot pulls tiles, longest first under a causal mask")

    @model_validator(mode="after")
    def _consistent(self) -> Kernel:
        rules = [*self.tiles, *(self.decode.tiles if self.decode else [])]
        if (self.bounds_multiple is not None or self.bounds_causal) and not any(
                (r.bounds_mask_work, r.bounds_cta_cycles, r.bounds_block_cycles) != (None, None, None) for r in rules):
            raise ValueError("bounds_multiple and bounds_causal say when a tile's bounds-checked code runs, and no tile "
                             "gives bounds_mask_work, bounds_cta_cycles or bounds_block_cycles")
        for i, rule in enumerate(self.tiles):
            rows = self.stream_rows or rule.block_q
            if rule.block_q % rows:
                raise ValueError(f"tiles.{i}.block_q {rule.block_q} is not a multiple of stream_rows {rows}")
        if any(not isinstance(d, int) or isinstance(d, bool) or not 0 < d <= MAX_TILE for d in self.head_dims) \
                or self.head_dims != sorted(set(self.head_dims)):
            raise ValueError(f"head_dims must be distinct positive integers up to {MAX_TILE} in ascending order, got "
                             f"{self.head_dims}")
        unknown = [k for k in self.fused_ops if k not in OP_KINDS]
        if unknown:
            raise ValueError(f"fused_ops names unknown op kind {unknown[0]!r}")
        if self.causal_masking != "trailing_steps" and (self.uneven_above_head_dim is not None or any(
                r.uneven_mask_work is not None for r in [*self.tiles, *(self.decode.tiles if self.decode else [])])):
            raise ValueError("uneven_above_head_dim and a tile's uneven_mask_work describe an uneven launch: they need "
                             "causal_masking: trailing_steps")
        if self.prepass_rates and self.minit != "prepass":
            raise ValueError("prepass_rates needs minit: prepass (no key-summary launch to price)")
        for rule in [*self.tiles, *(self.decode.tiles if self.decode else [])]:
            warps = rule.warps or self.warps
            if rule.warp_grid is not None and rule.warp_grid[0] * rule.warp_grid[1] != warps:
                raise ValueError(f"warp_grid {list(rule.warp_grid)} has {rule.warp_grid[0] * rule.warp_grid[1]} warps, "
                                 f"the tile {warps}")
        if not self.operands_from_shared and (self.p_in == "shared" or any(
                r.warp_grid for r in [*self.tiles, *(self.decode.tiles if self.decode else [])])):
            raise ValueError("p_in: shared and a tile's warp_grid price the warps' operand reads from shared memory: "
                             "they need operands_from_shared")
        if self.mma == "shared" and self.operands_from_shared:
            raise ValueError("operands_from_shared needs mma: per_stream (warp-group MMAs read shared memory "
                             "themselves)")
        both = sorted(set(self.measured_as) & set(self.predicts))
        if both:
            raise ValueError(f"table kernel {both[0]!r} is in both measured_as and predicts: name it in one")
        return self

    def tile(self, head_dim: int, fmt: FormatClass, causal: bool, decode: bool = False,
             algo: str | None = None) -> TileRule:
        """The first rule for this head dim, format class, mask and algorithm (``None``: a rule for any algorithm);
        a one-line error when none applies."""
        if decode and self.decode is None:
            raise ValueError(f"kernel {self.name} has no decode path (its description gives no 'decode')")
        rules = self.decode.tiles if decode and self.decode is not None else self.tiles
        for rule in rules:
            if head_dim <= rule.head_dim_max and (rule.formats is None or fmt in rule.formats) \
                    and rule.causal in (None, causal) and (rule.algorithms is None or algo in rule.algorithms):
                return rule
        dims = sorted({r.head_dim_max for r in rules if r.formats is None or fmt in r.formats})
        raise ValueError(f"kernel {self.name} has no {'decode ' if decode else ''}tile for head dim {head_dim} "
                         f"with {fmt} inputs" + (f" (it supports head dims up to {dims[-1]})" if dims
                                                 else f" (no {fmt} tiles)"))

    def algorithm_names(self) -> set[str]:
        """The algorithms the description names (tile rules' ``algorithms``, ``masked_loop_apart``), which the runner
        checks against those it knows."""
        return {a for r in [*self.tiles, *(self.decode.tiles if self.decode else [])] for a in r.algorithms or []} \
            | set(self.masked_loop_apart)

    def streams_per_cta(self, rule: TileRule) -> int:
        """Tile streams of a CTA with this tile; a tile of no more rows than one stream's is one stream."""
        return rule.block_q // min(self.stream_rows or rule.block_q, rule.block_q)

    def side_launch_count(self, causal: bool, decode: bool) -> int:
        """Kernels a call with this mask and mode launches beside the attention kernel and its combine."""
        on = {"always": True, "unmasked": not causal, "decode": decode, "main": not decode}
        return sum(side.count for side in self.side_launches if on[side.when])

    def uneven(self, rule: TileRule, head_dim: int, seq_len_q: int, kv_len: int) -> bool:
        """True where a launch runs the kernel's uneven code (``trailing_steps``): a length that is not a whole
        number of its tiles, or a head dim above ``uneven_above_head_dim``."""
        if self.causal_masking != "trailing_steps":
            return False
        above = self.uneven_above_head_dim is not None and head_dim > self.uneven_above_head_dim
        return above or bool(seq_len_q % rule.block_q or kv_len % rule.block_k)

    def mask_steps(self, rule: TileRule, uneven: bool) -> int:
        """Key blocks at the end of each query block's visit that run the masked iteration under a causal mask
        (``trailing_steps``); 0: the blocks the diagonal crosses (``diagonal_blocks``)."""
        if self.causal_masking != "trailing_steps":
            return 0
        return -(-rule.block_q // rule.block_k) + int(uneven)

    def bounds_masked(self, rule: TileRule, causal: bool, kv_len: int, q_len: int) -> bool:
        """True where a launch checks its bounds in every key block (the tile's ``bounds_mask_work``,
        ``bounds_cta_cycles`` and ``bounds_block_cycles``): without ``bounds_multiple``, one without a causal mask whose
        K/V length is not a whole number of the tile's key blocks; with it, one (causal too, with ``bounds_causal``)
        whose query or K/V length is not a multiple of it."""
        described = (rule.bounds_mask_work, rule.bounds_cta_cycles, rule.bounds_block_cycles) != (None, None, None)
        if not described or causal and not self.bounds_causal:
            return False
        if self.bounds_multiple is None:
            return kv_len % rule.block_k != 0
        return kv_len % self.bounds_multiple != 0 or q_len % self.bounds_multiple != 0

    def causal_mask_work(self, rule: TileRule, uneven: bool) -> float:
        """Vector operations per score element of a causal launch's masked iteration with this tile."""
        return rule.uneven_mask_work if uneven and rule.uneven_mask_work is not None else self.mask_work

    def compute_head_dim(self, head_dim: int) -> int:
        """The head dim a run computes at: the next compiled one up (``head_dims``), else its own."""
        return next((d for d in self.head_dims if d >= head_dim), head_dim)

    def prepass_rate(self, head_dim: int, fmt: FormatClass, block_k: int) -> PrepassRate | None:
        """The first prepass rate for this head dim, format class and key block, or None."""
        return next((r for r in self.prepass_rates if head_dim <= r.head_dim_max
                     and (r.formats is None or fmt in r.formats) and r.block_k in (None, block_k)), None)

    def runs_on(self, chip: str, builtin_chips: list[str]) -> bool:
        """True unless ``chip`` is a built-in chip missing from ``targets`` (a config of one's own runs any kernel)."""
        known = {c.lower() for c in builtin_chips}
        return "*" in self.targets or chip.lower() not in known or chip.lower() in (t.lower() for t in self.targets)

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.model_dump(mode="json"), sort_keys=True).encode()).hexdigest()[:16]
