"""``vfasim validate``: the chip model against the published measurements shipped in ``validation/``.

Every row of every table is mapped to a built-in chip config (``CHIPS``) and the
kernel description that claims its kernel (``measured_as`` in ``kernels/*.yaml``), run through the chip model in timing-only mode (the
``fa2`` algorithm's trace does not depend on the data, so no numerics are
computed) and compared with its measurement. Rows of kernels no description
claims (cuDNN, vendor operators) are counted as "not modelled".

Rules (printed with every report):
- The error of a row is (predicted − measured) / measured of the table's own
  quantity: forward TFLOP/s (FLOPs counted as the table counts them) or latency.
  MAPE is the mean absolute error of a group; a row the model cannot run is an
  error of the run, never skipped.
- Tile shapes, dispatch and decode path are the kernels' own (their YAML files, read from their sources);
  no parameter depends on a row except through the model.
- Two tiers: *spec only* (``spec_only``: no fitted parameter, every number from a datasheet, a source
  file or a microbenchmark) and *calibrated* (the configs' per-kernel tuning). Results are reported per
  family (chip, kernel, format, mode, regime; ``group_key``).
- Fitting (``fit``) tunes a chip's per-kernel parameters (``KernelTuning``) on
  the rows whose sequence length is in ``FIT_SEQ_LENS``; every other row is held
  out. Rows of tables the validation README flags as unverified transcriptions
  (``UNVERIFIED_TABLES``) are held out always. The fitted values live in the
  chip configs, so ``vfasim run`` uses the same numbers.
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any

import numpy as np

from vfasim.errors import VfasimError
from vfasim.formats import MATMUL_FORMATS, TABLE_NAMES, format_class
from vfasim.hw import HardwareConfig, load_hw
from vfasim.hw.registry import variant
from vfasim.kernel import Kernel, kernels_measured_as, kernels_predicted_only, load_kernel
from vfasim.reuse import cached, reuse

if TYPE_CHECKING:
    from vfasim.io.refcache import ReferenceCache

#: table chip name -> built-in config
CHIPS = {"H100-SXM5-80GB": "H100-SXM", "H100": "H100-SXM", "H200": "H200", "B200": "B200",
         "Ascend-910B2": "Ascend-910B"}
#: table dtype -> matmul format
FORMATS = TABLE_NAMES
#: a config's matmul data type -> the tables' format name
TABLE_FORMATS = {dtype: name for name, dtype in MATMUL_FORMATS.items()}
#: tables whose values are transcriptions the README asks not to fit on
UNVERIFIED_TABLES = frozenset({"h100_fa3_fp8_forward.csv"})
#: the declared fit rows: sequence lengths (every other length is held out)
FIT_SEQ_LENS = (1024, 8192)
CHIP_KERNELS = ("fa2", "fa3", "ascend-pto", "triton", "cudnn")  # kernels whose per-chip tuning `fit` sets
#: tuning values a (chip, kernel) takes from the kernel's own microbenchmark: kept as configured by the fit and in
#: tier 1 (a microbenchmark is a spec-only source), never fitted. The H200 inherits the H100's Triton efficiency
#: (0.833), which its own loop confirms (0.832: experiments/real_chips/loop_efficiency.py --chip H200)
MEASURED = {("H100-SXM", "triton"): ("tensor_efficiency",), ("H200", "triton"): ("tensor_efficiency",)}
#: table kernels that run another algorithm than fa2 on their kernel, and which launches their time covers:
#: all, main (the attention kernel alone) or prepass (VFA's key-summary launch alone)
ROW_RUNS = {"triton_vfa": ("vfa", "all"), "triton_vfa_attn": ("vfa", "main"), "triton_vfa_minit": ("vfa", "prepass"),
            "triton_vsa": ("vsa", "all"), "triton_vsa_attn": ("vsa", "main")}
#: the inputs the campaigns' harness times its kernels on: standard-normal Q, K and V, unscaled (harness/attention.py
#: Inputs: torch.randn; each campaign's attention.yaml, timing.inputs), which is vfasim's "random" workload. A row
#: whose algorithm's trace depends on the data (VSA's skipped blocks) runs on it; no published table's row does
MEASURED_INPUTS = "random"
#: table kernels added after the shipped tuning was fitted, held out always: as fit rows they would move the fitted
#: values (the fit minimises the MAPE of every fit row of the kernel description), and held out they report how the
#: tuning fitted without them carries over (the triton description's tuning was fitted on FA2 and VFA rows)
HELD_OUT_KERNELS = frozenset({"triton_vsa", "triton_vsa_attn"})
#: campaigns measured after the shipped tuning was fitted (folders validation/<prefix>*), held out always for the same
#: reason: the edge-length sweeps hold rows at the fit lengths, the occupancy sweep rows of the fit's kind
HELD_OUT_CAMPAIGNS = ("edges_", "occupancy_")
#: campaigns measured after every kernel description they check was final and left as they were after (folders
#: validation/blind_*): validate reports their rows apart too, the one set of held-out rows no choice was made on
BLIND_PREFIX = "blind_"
#: a measured row whose spread (p80 - p20 over the median) is above this caught a slow episode: not compared
UNSTABLE_SPREAD_PCT = 20.0
#: rows of each (chip, kernel, format, mode) group of a measurement campaign that validate compares by default,
#: spread evenly over the table in file order (the published tables are compared whole); --rows sets another cap
CAMPAIGN_ROWS_PER_GROUP = 12
SHORT_KV = 4096  # decode rows below this K/V length form the "short KV" regime


def kernel_for(row_kernel: str, overrides: tuple[Kernel, ...] = ()) -> Kernel | None:
    """The kernel description that predicts a table's kernel: an override that claims it, else a shipped one."""
    for k in overrides:
        if row_kernel in k.measured_as or row_kernel in k.predicts:
            return k
    name = kernels_measured_as().get(row_kernel)
    return load_kernel(name) if name is not None else None


@dataclass(frozen=True)
class Row:
    table: str
    chip: str  # as the table names it
    kernel: str
    dtype: str
    head_dim: int
    causal: bool
    seq_len: int
    seq_len_q: int
    batch: int
    heads: int
    kv_heads: int
    decode: bool
    metric: str  # "tflops" or "latency_us"
    value: float
    clock_mhz: float | None
    spread_pct: float | None = None  # measured campaigns: (p80 - p20) / median of the repetitions, percent

    @property
    def chunk(self) -> bool:
        """A prefill of fewer queries than keys (a chunk of a longer sequence, or cross attention): the model runs it
        as its decode convention does, the queries the last of the keys' positions."""
        return not self.decode and self.seq_len_q < self.seq_len

    @property
    def campaign(self) -> bool:
        """A row of a measurement campaign (validation/<campaign>/attention.csv) rather than a published table."""
        return "/" in self.table

    @property
    def flops(self) -> float:
        """FLOPs as the tables count them: 4 · seq_q · seq · d · heads · batch, halved when causal."""
        f = 4.0 * self.seq_len_q * self.seq_len * self.head_dim * self.heads * self.batch
        return f / 2 if self.causal else f

    @property
    def heldout_always(self) -> bool:
        """A transcribed table, a kernel the descriptions only predict (``predicts``), one of ``HELD_OUT_KERNELS``, a
        campaign of ``HELD_OUT_CAMPAIGNS`` or a blind one (measured after the fit): never a fit row."""
        return self.table in UNVERIFIED_TABLES or self.kernel in kernels_predicted_only() or \
            self.kernel in HELD_OUT_KERNELS or self.table.startswith((*HELD_OUT_CAMPAIGNS, BLIND_PREFIX))

    @property
    def blind(self) -> bool:
        """A row of a blind campaign (``BLIND_PREFIX``)."""
        return self.table.startswith(BLIND_PREFIX)

    @property
    def fit(self) -> bool:
        return not self.heldout_always and self.seq_len in FIT_SEQ_LENS


def load_rows(chip: str | None = None) -> list[Row]:
    """Every row of every shipped table, in file order: the published tables, then each campaign's attention.csv;
    with ``chip`` (a built-in config's name, ``CHIPS``' values), only its rows."""
    root = resources.files("vfasim").joinpath("validation")
    files = sorted(((f.name, f) for f in root.iterdir() if f.name.endswith(".csv")), key=lambda nf: nf[0])
    campaigns = sorted((d.name, d.joinpath("attention.csv")) for d in root.iterdir() if d.is_dir())
    files += [(f"{name}/attention.csv", f) for name, f in campaigns if f.is_file()]
    return [table_row(name, r) for name, f in files for r in csv.DictReader(f.read_text().splitlines())
            if chip is None or CHIPS.get(r["chip"]) == chip]


def table_row(table: str, r: dict) -> Row:
    """One CSV row of ``table`` (validation/'s schema) as a ``Row``."""
    tflops = "tflops" in r
    value = float(r["tflops"]) if tflops else float(r["value"])
    if not tflops and (r["metric"], r["unit"]) != ("latency", "us"):
        raise VfasimError(f"{table}: unknown measurement {r['metric']} in {r['unit']}")
    return Row(table, r["chip"], r["kernel"], r["dtype"], int(r["head_dim"]), r["causal"] == "true",
               int(r["seq_len"]), int(r.get("seq_len_q") or r["seq_len"]), int(r["batch"]), int(r["heads"]),
               int(r.get("kv_heads") or r["heads"]), r.get("mode", "prefill") == "decode",
               "tflops" if tflops else "latency_us", value,
               float(r["clock_mhz"]) if r.get("clock_mhz") else None,
               float(r["spread_pct"]) if r.get("spread_pct") else None)


def why_not(row: Row) -> str:
    """Why the model does not run a row ('' when it does)."""
    if row.chip not in CHIPS:
        return "no built-in chip"
    kernel = kernel_for(row.kernel)
    if kernel is None:
        return "no kernel description"
    if row.dtype not in FORMATS:
        return "unknown format"
    if row.seq_len_q > row.seq_len:
        return "prefill with more queries than keys"
    if row.chunk and kernel.decode is None:
        return "prefill with fewer queries than keys on a kernel described without a decode path"
    if row.chunk and row.causal and not row.kernel.startswith("triton_"):
        return "causal prefill of fewer queries than keys outside the Triton kernels (SDPA aligns is_causal top left)"
    split = kernel.decode is not None and kernel.decode.runs(row.seq_len_q, row.heads // row.kv_heads)
    try:
        kernel.tile(kernel.compute_head_dim(row.head_dim), format_class(MATMUL_FORMATS[FORMATS[row.dtype]]),
                    row.causal, row.decode or (row.chunk and split), ROW_RUNS.get(row.kernel, ("fa2", "all"))[0])
    except ValueError as exc:
        return str(exc)
    if row.spread_pct is not None and row.spread_pct > UNSTABLE_SPREAD_PCT:
        return f"unstable measurement (spread above {UNSTABLE_SPREAD_PCT:g}%)"
    return ""


def modelled(row: Row) -> bool:
    """A row the model can run: known chip, kernel style and format, and (prefill) no more queries than keys.

    A prefill of fewer queries than keys runs as the model's decode convention does (the queries the last of the
    keys' positions; a causal mask aligned with them, as the project's Triton kernels align it), on kernels whose
    description has a decode path (which says which tiles such a launch runs); more queries than keys is not
    modelled.
    """
    return why_not(row) == ""


@dataclass(frozen=True)
class Prediction:
    row: Row
    predicted: float  # in the row's metric
    bound: str  # what bounds the chip in the model
    utilization: dict[str, float]
    waves: int
    kernel: str = ""  # the kernel description that made the prediction (a --kernel override included)

    @property
    def error(self) -> float:
        return (self.predicted - self.row.value) / self.row.value


@dataclass(frozen=True)
class Launch:
    """What the chip model gives one run of a row's kernel (rows that differ only in which launches their time
    covers, ``ROW_RUNS``' part, share one)."""

    latency_cycles: int
    prepass_cycles: int
    alone_cycles: int  # the launches after the pre-pass called on their own (``ChipResult.alone_cycles``)
    clock_ghz: float
    bound: str
    utilization: dict[str, float]
    waves: int
    kernel: str


def run_key(row: Row) -> tuple:
    """The inputs of ``launch`` a row decides: rows with equal keys (on one config and kernel) share one run."""
    return (row.chip, ROW_RUNS.get(row.kernel, ("fa2", "all"))[0], row.dtype, row.head_dim, row.causal, row.seq_len,
            row.seq_len_q, row.batch, row.heads, row.kv_heads, row.decode, row.clock_mhz)


def launch(row: Row, config: HardwareConfig | None = None, kernel: Kernel | None = None,
           store: ReferenceCache | None = None) -> Launch:
    """The chip model's run of a row's kernel (timing only), on ``config`` or the row's built-in chip, as ``kernel``
    or the shipped kernel that claims the row. Tiles, dispatch and decode path are the kernel's own; an algorithm
    whose trace depends on the data runs on ``MEASURED_INPUTS``. Inside a ``reuse`` scope a run is made once per
    key: the config (the row's clock applied) and kernel by digest, the algorithm and every run input, which are all
    the run depends on; rows that differ only in what they measure (the run's part, the metric, the value) share it."""
    from vfasim.functional import policy_for
    from vfasim.functional.trace_only import data_independent
    from vfasim.runner.api import run
    from vfasim.runner.spec import DEFAULTS

    hw = config or load_hw(CHIPS[row.chip])
    if row.clock_mhz is not None:
        hw = variant(hw, {"clock_ghz": row.clock_mhz / 1e3}, f"the table's clock {row.clock_mhz} MHz")
    k = kernel or kernel_for(row.kernel)
    if k is None:
        raise VfasimError(f"no kernel description predicts {row.kernel} rows")
    algo = ROW_RUNS.get(row.kernel, ("fa2", "all"))[0]
    data = DEFAULTS["workload"] if data_independent(policy_for(algo)) else MEASURED_INPUTS  # no data: the default
    few = row.decode or row.chunk  # fewer queries than keys: the last seq_len_q of the keys' positions
    inputs: dict[str, Any] = dict(seq_len=row.seq_len, head_dim=row.head_dim, causal=row.causal, heads=row.heads,
                                  kv_heads=row.kv_heads, batch=row.batch, decode=few,
                                  queries=row.seq_len_q if few else 1, matmul_format=FORMATS[row.dtype], workload=data)
    key = ("validate run", hw.digest(), k.digest(), algo, *sorted(inputs.items()))

    def made() -> Launch:
        res = run(hw, algo, kernel=k, numerics_heads=0, **inputs)
        chip = res.chip
        return Launch(res.latency_cycles, int(chip["prepass_cycles"]), int(chip["attention_call_cycles"]), hw.clock_ghz,
                      str(chip["bound"]),
                      {name: float(v) for name, v in chip["utilization"].items()}, int(chip["waves"]), k.name)

    return cached(key, lambda: made() if store is None else _stored(store, key, made))


def _stored(store: ReferenceCache, key: tuple, made: Callable[[], Launch]) -> Launch:
    """``made()``, or the same run's figures kept in ``store`` (``io.refcache.run_store``) by an earlier process: named
    by ``key``, which holds the config's and kernel's digests and every input, and by the model's source."""
    import json

    from vfasim.io.refcache import entry_name, model_version

    name = entry_name(model_version(), *key)
    found = store.get(name, np.dtype(np.uint8))
    if found is not None:
        try:
            return Launch(**json.loads(found.tobytes()))
        except (ValueError, TypeError):  # an entry that cannot be read counts as absent
            pass
    value = made()
    store.put(name, np.frombuffer(json.dumps(value.__dict__).encode(), np.uint8), prune=False)
    return value


def predict(row: Row, config: HardwareConfig | None = None, kernel: Kernel | None = None,
            store: ReferenceCache | None = None) -> Prediction:
    """The model's figure for one row, from its run (``launch``; ``store``: the run store it reads and keeps runs in)."""
    res = launch(row, config, kernel, store)
    part = ROW_RUNS.get(row.kernel, ("fa2", "all"))[1]
    cycles = {"all": res.latency_cycles, "main": res.alone_cycles,
              "prepass": res.prepass_cycles}[part]
    seconds = cycles / (res.clock_ghz * 1e9)
    value = row.flops / seconds / 1e12 if row.metric == "tflops" else seconds * 1e6
    return Prediction(row, value, res.bound, res.utilization, res.waves, res.kernel)


def predict_all(rows: list[Row], configs: dict[str, HardwareConfig] | None = None, jobs: int = 1,
                kernels: tuple[Kernel, ...] = ()) -> list[Prediction]:
    """Predictions in row order on ``configs`` (a chip they do not name: its built-in config); ``jobs`` > 1 spreads
    rows over processes (same results).

    ``kernels`` replace the shipped descriptions for the table kernels they claim (``measured_as``).
    """
    return predict_tiers(rows, [configs or {}], jobs, kernels)[0]


def predict_tiers(rows: list[Row], tiers: list[dict[str, HardwareConfig]], jobs: int = 1,
                  kernels: tuple[Kernel, ...] = (), cache: bool = False) -> list[list[Prediction]]:
    """``predict_all`` on each tier's configs, in one pass.

    Rows that can share a trace (``_shared_trace``: everything but batch and heads the same; for an algorithm
    whose trace is the data's, chip and clock may differ too) make one task, which predicts them on every tier inside one
    ``reuse`` scope: their traces, unit layouts, unit timings and identical runs are made once
    (``tests/test_validate.py`` checks the predictions against runs without a scope). ``cache``: runs are also read
    from and kept in the run store (``io.refcache.run_store``), so a later call reuses them."""
    from vfasim.exec import compute  # the local pool: workers ignore Ctrl-C and end with their parent
    from vfasim.io.refcache import run_store

    chips = {chip_name(r) for r in rows}
    configs = [{c: tier.get(c) or load_hw(c) for c in chips} for tier in tiers]
    groups: dict[tuple, list[int]] = {}
    for i, r in enumerate(rows):
        groups.setdefault(_shared_trace(r, kernels), []).append(i)
    members = sorted(groups.values(), key=lambda idx: -sum(_units(rows[i]) + 256 for i in idx))  # longest first
    tasks = [([rows[i] for i in idx], [kernel_for(rows[i].kernel, kernels) for i in idx],
              [[tier[chip_name(rows[i])] for i in idx] for tier in configs], cache) for idx in members]
    out: list[list[Prediction | None]] = [[None] * len(rows) for _ in tiers]
    for g, predictions in compute(_predict_group, tasks, [f"vfasim-rows-{g}" for g in range(len(tasks))], "local",
                                  max(jobs, 1), None):
        for tier, preds in zip(out, predictions):
            for i, p in zip(members[g], preds):
                tier[i] = p
    store = run_store(cache)
    if store is not None:
        store.prune()  # once, after every task's writes
    return [[p for p in tier if p is not None] for tier in out]


def _shared_trace(row: Row, kernels: tuple[Kernel, ...]) -> tuple:
    """What a row's trace can depend on (a task's grouping, not a key): all its run's inputs but batch and heads;
    for an algorithm whose trace is the data's (the engine's, made once per its inputs), not the chip or clock
    either, so that rows of two chips share it."""
    from vfasim.functional import policy_for
    from vfasim.functional.trace_only import data_independent

    k = kernel_for(row.kernel, kernels)
    algo = ROW_RUNS.get(row.kernel, ("fa2",))[0]
    where = (chip_name(row), row.clock_mhz) if data_independent(policy_for(algo)) else ()
    return (*where, k.name if k is not None else row.kernel, algo, FORMATS[row.dtype], row.head_dim, row.causal,
            row.seq_len, row.seq_len_q, row.decode)


def _units(row: Row) -> int:
    """About how many work units a row's launch has (a task's cost, to start the longest first: a shorter tail)."""
    return row.batch * row.heads * -(-row.seq_len_q // 128)


def _predict_group(rows: list[Row], kernels: list[Kernel | None], configs: list[list[HardwareConfig]],
                   cache: bool = False) -> list[list[Prediction]]:
    """One task of ``predict_tiers``: its rows on each tier's configs (one a row), in one ``reuse`` scope (and with
    the run store, where ``cache``)."""
    from vfasim.io.refcache import run_store

    store = run_store(cache)
    with reuse():
        return [[predict(r, c, k, store) for r, k, c in zip(rows, kernels, tier)] for tier in configs]


def subset(rows: list[Row], per_group: int | None) -> list[Row]:
    """At most ``per_group`` rows of each ``row_group``, evenly spread over the group in file order; None: every
    published row and ``CAMPAIGN_ROWS_PER_GROUP`` of each campaign group."""
    groups: dict[tuple[str, ...], list[Row]] = {}
    for r in rows:
        groups.setdefault(row_group(r), []).append(r)  # a campaign's kernel names are its own: no group mixes
    keep: set[int] = set()
    for members in groups.values():
        cap = per_group if per_group is not None else CAMPAIGN_ROWS_PER_GROUP if members[0].campaign else None
        if cap is None:
            keep.update(id(m) for m in members)
            continue
        idx = np.unique(np.linspace(0, len(members) - 1, min(cap, len(members))).round().astype(int))
        keep.update(id(members[i]) for i in idx)
    return [r for r in rows if id(r) in keep]


def with_tuning(config: HardwareConfig, kernel: str, **fields: float | None) -> HardwareConfig:
    """``config`` with kernel ``kernel``'s tuning fields replaced; a per-CTA cost given (a flat
    ``unit_overhead_cycles`` or a ``cta_cycles_scale``) replaces the other one unless both are given."""
    from vfasim.hw.chip import KernelTuning

    chip = config.chip
    if chip is None:
        raise VfasimError(f"{config.name} has no chip section")
    old = chip.kernel_tuning.get(kernel, KernelTuning())
    costs = ("unit_overhead_cycles", "cta_cycles_scale")
    dropped = {other: None for mine, other in (costs, costs[::-1])
               if fields.get(mine) is not None and other not in fields}
    tuning = {**old.model_dump(), **dropped, **fields}
    return variant(config, {"chip": {"kernel_tuning": {kernel: tuning}}}, f"{kernel} tuning {fields}")


def chip_name(row: Row) -> str:
    return CHIPS[row.chip]


def row_group(r: Row) -> tuple[str, str, str, str]:
    """(chip, kernel, format, mode): FP8, decode and chunked-prefill rows are reported apart from FP16 prefill."""
    mode = "decode" if r.decode else "chunked" if r.chunk else "prefill"
    return CHIPS.get(r.chip, r.chip), r.kernel, FORMATS.get(r.dtype, r.dtype), mode


def group_key(p: Prediction) -> tuple[str, str, str, str, str]:
    """(chip, kernel, format, mode, regime): the family a prediction is reported in."""
    return (*row_group(p.row), regime(p))


def regime(p: Prediction) -> str:
    """Declared before any error was looked at: decode by K/V length (short below ``SHORT_KV``), prefill by
    whether the launch fills the chip more than once (its waves in the model's own geometry)."""
    if p.row.decode:
        return "short KV" if p.row.seq_len < SHORT_KV else "long KV"
    return "one wave" if p.waves <= 1 else "many waves"


def spec_only(config: HardwareConfig) -> HardwareConfig:
    """Tier 1: ``config`` with no fitted per-kernel tuning (every kernel at its datasheet or microbenchmark rates,
    each CTA paying only its tile's measured ``cta_cycles``); the values ``MEASURED`` names are kept."""
    from vfasim.hw.chip import KernelTuning

    if config.chip is None or not config.chip.kernel_tuning:
        return config
    tuning = {style: KernelTuning(**{n: getattr(t, n) for n in MEASURED[(config.name, style)]}).model_dump()
              if (config.name, style) in MEASURED else None  # None: the entry removed
              for style, t in config.chip.kernel_tuning.items()}
    return variant(config, {"chip": {"kernel_tuning": tuning}}, "no fitted tuning")


def mape(preds: list[Prediction]) -> float | None:
    return float(np.mean([abs(p.error) for p in preds])) if preds else None



#: a step of at most this many queries against a longer K/V is a decode step, more a chunk (the tables' mode column)
DECODE_QUERIES = 16


def run_mode(decode: bool, queries: int) -> str:
    """A run's mode as the tables name theirs (``row_group``): decode, chunked (more queries against a longer K/V) or
    prefill."""
    return ("decode" if queries <= DECODE_QUERIES else "chunked") if decode else "prefill"


def coverage(chip: str, kernel: str, mode: str, seq_len: int, head_dim: int, fmt: str) -> tuple[bool, str]:
    """(inside, one line): whether shipped measurements of this built-in chip and kernel cover a run's mode
    (``run_mode``), matmul format (``fp16``, ``bf16``, ``fp8_e4m3``, ...), K/V length and head dim. A run outside
    them is a prediction the model was never checked on."""
    mine = [r for r in load_rows(chip) if row_group(r)[3] == mode and modelled(r)
            and FORMATS[r.dtype] == fmt and (k := kernel_for(r.kernel)) is not None and k.name == kernel]
    mode = f"{fmt} {mode}"
    if not mine:
        return False, f"outside the measured range: no shipped measurement of kernel {kernel} {mode} on {chip}"
    seqs, dims = [r.seq_len for r in mine], sorted({r.head_dim for r in mine})
    where = (f"{len(mine)} rows of {chip} {kernel} {mode}: seq {min(seqs)}-{max(seqs)}, head dims "
             f"{', '.join(map(str, dims))}")
    inside = min(seqs) <= seq_len <= max(seqs) and head_dim in dims
    return inside, f"{'inside' if inside else 'outside'} the measured range ({where}; vfasim validate compares them)"
