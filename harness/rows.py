"""Table schemas, the checked CSV writer, the YAML sidecar writer and a run's log (standard library only).

Everything here runs without torch, triton or a GPU, so the tests (and anyone reading a
campaign folder) can import it anywhere. A table is a list of dict rows with a fixed
column order; every value is checked before anything is written, and files are written
atomically (a temporary file in the same folder, then ``os.replace``), so a reader never
sees half a file and a run killed mid-write leaves the previous complete version.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class SchemaError(ValueError):
    """A row or table that does not follow its schema (the message is one line)."""


DTYPES = ("fp16", "bf16", "fp8_e4m3")
#: the blind grids' shapes (``attention.blind_grid``, ``flex.blind_grid``), none of which another grid uses: prefill
#: lengths, batches and (heads, K/V heads), decode (batch, heads, K/V heads) and K/V lengths
BLIND_SEQS = (384, 700, 1536, 5000, 6144, 12288)
BLIND_BATCHES = (2, 8, 32)
BLIND_HEADS = ((12, 12), (40, 8), (24, 8), (20, 4))
BLIND_DECODE = ((2, 40, 8), (16, 24, 8), (32, 12, 12))
BLIND_DECODE_KEYS = (1500, 6000, 24000)
#: a second blind grid (``attention.blind_grid(BLIND2)``), measured after the first had been compared: other lengths,
#: batches and head configs (GQA 8:1 and 4:1 as large models use), head dim 256 at a few shapes, decode of 1 and 4
#: queries; (seqs, batches, heads, decode, decode keys, decode queries, other head dims, the shapes they run)
BLIND2 = ((640, 2304, 3584, 7000, 10240, 20480), (1, 6, 24), ((64, 8), (16, 2), (32, 4), (10, 10)),
          ((4, 64, 8), (8, 32, 4), (64, 16, 2)), (3000, 10000, 48000), (1, 4), (256,),
          ((3584, 6, (16, 2)), (10240, 1, (64, 8))))
#: a third blind grid (``attention.blind_grid(BLIND3)``), measured after the pre-pass's first-wave reads joined the model:
#: other lengths, batches (3-40) and head configs (GQA 7:1, 6:1 and 3:1, and 8 heads), head dim 256 at two shapes,
#: decode of 1 and 3 queries at K/V lengths no grid used
BLIND3 = ((896, 1792, 2800, 4608, 9216, 14336), (3, 10, 40), ((28, 4), (48, 8), (8, 8), (36, 12)),
          ((1, 28, 4), (12, 48, 8), (48, 8, 8)), (2000, 16000, 40000), (1, 3), (256,),
          ((2800, 3, (28, 4)), (9216, 1, (8, 8))))
#: a fourth blind grid (``attention.blind_grid(BLIND4)``), measured after cuDNN's decode grid and the L2's dirty lines
#: joined the model: other lengths, batches (2-16) and head configs (32/2, GQA 16:1; 56/8 and 14/2, 7:1; 20/20), head
#: dim 256 at two shapes, decode of 1 and 2 queries at K/V lengths no grid used (32/2, 56/8 and 20/20 heads)
BLIND4 = ((768, 1280, 3200, 5120, 12288, 18000), (2, 5, 16), ((32, 2), (56, 8), (20, 20), (14, 2)),
          ((2, 32, 2), (24, 56, 8), (6, 20, 20)), (6000, 24000, 60000), (1, 2), (256,),
          ((3200, 5, (14, 2)), (12288, 2, (32, 2))))
#: a fifth blind grid (``attention.blind5_grid(BLIND5)``), measured after prefill of fewer queries than keys joined the
#: model, in regimes no grid held: a chunk of queries against a longer K/V (chunked prefill; (queries, keys) by (batch,
#: heads, K/V heads), non-causal, and causal for the project's Triton kernels, whose mask aligns the queries with the
#: last keys), decode of 8 and 16 queries (speculative decoding; (batch, heads, K/V heads) by K/V length), head dims
#: 80 and 96 at blind shapes (SDPA only), and one-sequence prefill at 32K and 64K
BLIND5 = (((256, 4096), (512, 12000), (1024, 8192), (2000, 30000), (3072, 16384)),
          ((1, 32, 8), (4, 16, 16), (8, 40, 8), (2, 64, 8)),
          ((4, 32, 8), (16, 40, 8), (64, 8, 8)), (3000, 12000, 50000), (8, 16),
          (80, 96), (1536, 6000), (2, 8), ((32, 8), (24, 24)),
          ((32768, 40, 8, 128, True), (32768, 24, 8, 128, False), (32768, 16, 16, 64, True),
           (65536, 8, 1, 128, True)))
#: a sixth blind grid (``attention.blind_grid(BLIND6)``), measured after the H200's own L2 size and cuDNN's bounds check
#: joined the model: other lengths (most off the 128-key blocks), batches (3-24) and head configs (24/3 and 44/4, GQA
#: 8:1 and 11:1; 12/4 and 30/30), head dim 256 at two shapes, decode of 1 and 6 queries at K/V lengths no grid used
BLIND6 = ((1100, 2500, 4000, 7777, 9000, 15000), (3, 12, 24), ((24, 3), (44, 4), (12, 4), (30, 30)),
          ((3, 24, 3), (20, 44, 4), (40, 12, 4)), (2500, 20000, 70000), (1, 6), (256,),
          ((2500, 12, (24, 3)), (7777, 3, (12, 4))))
#: a seventh blind grid (``attention.blind_grid(BLIND7)``), measured after the Triton decode tile's third block_cycles
#: joined the model: other lengths, batches (1-20) and head configs (40/5, GQA 8:1; 18/6, 3:1; 64/4, 16:1; 36/36), head
#: dim 256 at two shapes, decode of 1 and 5 queries at K/V lengths no grid used
BLIND7 = ((600, 1700, 3000, 6500, 11500, 22000), (1, 7, 20), ((40, 5), (18, 6), (64, 4), (36, 36)),
          ((3, 40, 5), (20, 18, 6), (8, 36, 36)), (1000, 8000, 36000), (1, 5), (256,),
          ((6500, 7, (18, 6)), (1700, 20, (40, 5))))
#: an eighth blind grid (``attention.blind_grid(BLIND8)``), measured after a non-pipelined loop's loads took the SM's
#: port in issue order and VSA's head-dim-64 tiles their floor: other lengths, batches (2-28) and head configs (24/6,
#: GQA 4:1; 56/7, 8:1; 10/2, 5:1; 48/48), head dim 256 at two shapes, decode of 1 and 3 queries at K/V lengths no grid
#: used
BLIND8 = ((520, 1400, 2600, 5300, 9900, 17000), (2, 9, 28), ((24, 6), (56, 7), (10, 2), (48, 48)),
          ((7, 24, 6), (40, 10, 2), (8, 48, 48)), (1200, 9500, 44000), (1, 3), (256,),
          ((2600, 9, (24, 6)), (9900, 2, (56, 7))))
BOOLS = ("true", "false")


def _int_pos(text: str) -> bool:
    try:
        return int(text) > 0 and str(int(text)) == text
    except ValueError:
        return False


def _int_nonneg(text: str) -> bool:
    try:
        return int(text) >= 0 and str(int(text)) == text
    except ValueError:
        return False


def _real(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def _real_pos(text: str) -> bool:
    return _real(text) and float(text) > 0


def _real_nonneg(text: str) -> bool:
    return _real(text) and float(text) >= 0


def _one_of(*values: str):
    def check(text: str) -> bool:
        return text in values

    check.__doc__ = "one of " + "|".join(values)
    return check


def _any_text(text: str) -> bool:
    return "\n" not in text and "\r" not in text


_CHECK_DOC = {_int_pos: "a positive integer", _int_nonneg: "an integer >= 0", _real: "a finite number",
              _real_pos: "a finite number > 0", _real_nonneg: "a finite number >= 0",
              _any_text: "one line of text"}


@dataclass(frozen=True)
class Schema:
    name: str
    columns: tuple[str, ...]
    checks: Mapping[str, Any]  # column -> predicate(text) -> bool
    provenance_keys: tuple[str, ...] = field(default=())

    def check_row(self, row: Mapping[str, Any], where: str = "") -> dict[str, str]:
        """The row as text in column order, or SchemaError naming the first problem."""
        at = f"{self.name}{' ' + where if where else ''}"
        missing = [c for c in self.columns if c not in row]
        if missing:
            raise SchemaError(f"{at}: missing column {missing[0]!r}")
        extra = sorted(set(row) - set(self.columns))
        if extra:
            raise SchemaError(f"{at}: unknown column {extra[0]!r}")
        out: dict[str, str] = {}
        for col in self.columns:
            text = _text(row[col])
            if text == "":
                raise SchemaError(f"{at}: empty value in column {col!r}")
            check = self.checks.get(col, _any_text)
            if not check(text):
                want = _CHECK_DOC.get(check) or check.__doc__ or "a valid value"
                raise SchemaError(f"{at}: column {col!r} = {text!r} is not {want}")
            out[col] = text
        return out


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if not math.isfinite(value):
            return repr(value)  # 'nan' / 'inf': refused by the numeric checks
        return f"{value:.6g}" if abs(value) < 1e15 else repr(value)
    return str(value)


#: the project's validation schema (validation/README.md) with metric/value/unit,
#: plus this harness's spread_pct and reps
ATTENTION = Schema(
    "attention",
    ("chip", "kernel", "dtype", "head_dim", "causal", "seq_len", "batch", "heads", "kv_heads", "seq_len_q",
     "mode", "metric", "value", "unit", "spread_pct", "reps"),
    {"dtype": _one_of(*DTYPES), "head_dim": _int_pos, "causal": _one_of(*BOOLS), "seq_len": _int_pos,
     "batch": _int_pos, "heads": _int_pos, "kv_heads": _int_pos, "seq_len_q": _int_pos,
     "mode": _one_of("prefill", "decode"), "metric": _one_of("latency"), "value": _real_pos,
     "unit": _one_of("us"), "spread_pct": _real_nonneg, "reps": _int_pos},
)

MICRO = Schema("micro", ("name", "value", "unit", "notes"), {"value": _real})

#: harness.mma: one mma.sync configuration's issue rate (harness/mma_sync.cu)
MMA = Schema(
    "mma",
    ("inst", "ilp", "warps", "blocks_per_sm", "iters", "sms_seen", "mma_per_sm_per_clk", "min_sm", "max_sm",
     "kernel_us", "flops_per_mma", "flops_per_sm_per_clk"),
    {"ilp": _int_pos, "warps": _int_pos, "blocks_per_sm": _int_pos, "iters": _int_pos, "sms_seen": _int_pos,
     "mma_per_sm_per_clk": _real_pos, "min_sm": _real_pos, "max_sm": _real_pos, "kernel_us": _real_pos,
     "flops_per_mma": _int_pos, "flops_per_sm_per_clk": _real_pos},
)

NUMERICS = Schema(
    "numerics",
    ("case", "inputs", "kernel", "dtype", "head_dim", "causal", "seq_len", "batch", "heads", "kv_heads",
     "rel_l2", "max_abs_err", "nonfinite", "in_npz"),
    {"dtype": _one_of(*DTYPES), "head_dim": _int_pos, "causal": _one_of(*BOOLS), "seq_len": _int_pos,
     "batch": _int_pos, "heads": _int_pos, "kv_heads": _int_pos, "rel_l2": _real_nonneg,
     "max_abs_err": _real_nonneg, "nonfinite": _int_nonneg, "in_npz": _one_of(*BOOLS)},
)

CHECKS = Schema(
    "checks",
    ("kernel", "dtype", "head_dim", "causal", "seq_len", "seq_len_q", "batch", "heads", "kv_heads",
     "block_m", "block_n", "rel_l2", "tol", "passed", "compile_s"),
    {"dtype": _one_of(*DTYPES), "head_dim": _int_pos, "causal": _one_of(*BOOLS), "seq_len": _int_pos,
     "seq_len_q": _int_pos, "batch": _int_pos, "heads": _int_pos, "kv_heads": _int_pos, "block_m": _int_pos,
     "block_n": _int_pos, "rel_l2": _real_nonneg, "tol": _real_pos, "passed": _one_of(*BOOLS),
     "compile_s": _real_nonneg},
)

SKIPPED = Schema(
    "skipped",
    ("table", "kernel", "dtype", "head_dim", "causal", "seq_len", "seq_len_q", "batch", "heads", "kv_heads",
     "mode", "reason"),
    {"dtype": _one_of(*DTYPES), "head_dim": _int_pos, "causal": _one_of(*BOOLS), "seq_len": _int_pos,
     "seq_len_q": _int_pos, "batch": _int_pos, "heads": _int_pos, "kv_heads": _int_pos,
     "mode": _one_of("prefill", "decode")},
)

#: the CUDA kernels one SDPA call launches (torch.profiler), with their GPU time per call
PROFILE = Schema(
    "profile",
    ("kernel", "batch", "heads", "kv_heads", "head_dim", "seq_len_q", "seq_len", "causal", "cuda_kernel",
     "launches_per_call", "us_per_call"),
    {"batch": _int_pos, "heads": _int_pos, "kv_heads": _int_pos, "head_dim": _int_pos, "seq_len_q": _int_pos,
     "seq_len": _int_pos, "causal": _one_of(*BOOLS), "launches_per_call": _real_pos, "us_per_call": _real_nonneg},
)

#: one SDPA call's CUDA kernels in launch order, timed as the campaigns time calls (L2 flushed, the GPU held by a
#: sleep first): each kernel's start after the sleep ends and its duration (torch.profiler, medians over the calls
#: profiled), and the whole call's CUDA-event time measured without the profiler
CALLS = Schema(
    "calls",
    ("kernel", "dtype", "batch", "heads", "kv_heads", "head_dim", "seq_len_q", "seq_len", "causal", "order",
     "cuda_kernel", "start_us", "us", "call_us", "call_spread_pct", "calls"),
    {"dtype": _one_of(*DTYPES), "batch": _int_pos, "heads": _int_pos, "kv_heads": _int_pos, "head_dim": _int_pos,
     "seq_len_q": _int_pos, "seq_len": _int_pos, "causal": _one_of(*BOOLS), "order": _int_nonneg,
     "start_us": _real_nonneg, "us": _real_nonneg, "call_us": _real_pos, "call_spread_pct": _real_nonneg,
     "calls": _int_pos},
)

#: two kernels timed in alternation on one shape: each one's median and the median of their per-rep ratio
PAIRS = Schema(
    "pairs",
    ("chip", "kernel_a", "kernel_b", "dtype", "head_dim", "causal", "seq_len", "batch", "heads", "kv_heads",
     "seq_len_q", "mode", "a_us", "b_us", "ratio", "ratio_spread_pct", "reps"),
    {"dtype": _one_of(*DTYPES), "head_dim": _int_pos, "causal": _one_of(*BOOLS), "seq_len": _int_pos,
     "batch": _int_pos, "heads": _int_pos, "kv_heads": _int_pos, "seq_len_q": _int_pos,
     "mode": _one_of("prefill", "decode"), "a_us": _real_pos, "b_us": _real_pos, "ratio": _real_pos,
     "ratio_spread_pct": _real_nonneg, "reps": _int_pos},
)

#: the same pairs at a fixed number of query blocks (1, one per SM, two per SM) and a growing K/V length
CHAIN = Schema("chain", PAIRS.columns, PAIRS.checks)

SCHEMAS: dict[str, Schema] = {s.name: s for s in (ATTENTION, MICRO, MMA, NUMERICS, CHECKS, SKIPPED, PROFILE, PAIRS,
                                                 CHAIN)}

#: keys every sidecar holds (the provenance of the table next to it)
PROVENANCE_KEYS = ("table", "gpu", "sm_count", "l2_bytes", "clocks", "clocks_locked", "driver", "cuda",
                   "torch", "triton", "date_utc", "command", "timing", "finished")


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder and ``os.replace``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def csv_text(schema: Schema, rows: Iterable[Mapping[str, Any]]) -> str:
    """The CSV of ``rows`` (checked; SchemaError on the first bad row)."""
    checked = [schema.check_row(r, f"row {i}") for i, r in enumerate(rows, 1)]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(schema.columns), lineterminator="\n")
    w.writeheader()
    w.writerows(checked)
    return buf.getvalue()


def write_csv(path: str | os.PathLike, schema: Schema, rows: Iterable[Mapping[str, Any]]) -> None:
    """Check every row, then write the table atomically (nothing is written if any row is bad)."""
    atomic_write_text(path, csv_text(schema, rows))


def write_rows(path: str | os.PathLike, rows: list[Mapping[str, Any]], columns: list[str] | None = None) -> None:
    """A table of no fixed schema (a probe's summary), written atomically as ``csv.DictWriter`` writes it: the
    columns given, else the first row's keys; an error for no rows."""
    if not rows:
        raise ValueError(f"{path}: no rows to write")
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=columns or list(rows[0]))
    w.writeheader()
    w.writerows(rows)
    atomic_write_text(path, buf.getvalue())


class Table:
    """Rows of one schema, kept in memory and rewritten whole (atomically) on every flush.

    ``add`` checks the row at once, so a bad row fails where it is made, not at the end.
    """

    def __init__(self, path: str | os.PathLike, schema: Schema) -> None:
        self.path, self.schema, self.rows = Path(path), schema, []

    def add(self, row: Mapping[str, Any], flush: bool = False) -> None:
        self.rows.append(self.schema.check_row(row, f"row {len(self.rows) + 1}"))
        if flush:
            self.flush()

    def flush(self) -> None:
        write_csv(self.path, self.schema, self.rows)


# ---- YAML (a small emitter: nested dicts and lists of scalars; strings JSON-quoted, valid YAML) ----
def _yaml_scalar(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else (".nan" if math.isnan(v) else (".inf" if v > 0 else "-.inf"))
    return json.dumps(str(v), ensure_ascii=False)


def yaml_text(data: Any, indent: int = 0) -> str:
    pad = "  " * indent
    if isinstance(data, Mapping):
        if not data:
            return pad + "{}\n"
        lines = []
        for k, v in data.items():
            key = json.dumps(str(k)) if not str(k).replace("_", "").replace("-", "").isalnum() else str(k)
            if isinstance(v, (Mapping, list, tuple)) and len(v):
                lines.append(f"{pad}{key}:\n" + yaml_text(v, indent + 1))
            elif isinstance(v, (Mapping, list, tuple)):
                lines.append(f"{pad}{key}: {'{}' if isinstance(v, Mapping) else '[]'}\n")
            else:
                lines.append(f"{pad}{key}: {_yaml_scalar(v)}\n")
        return "".join(lines)
    if isinstance(data, (list, tuple)):
        lines = []
        for v in data:
            if isinstance(v, (Mapping, list, tuple)) and len(v):
                body = yaml_text(v, indent + 1)
                lines.append(f"{pad}-\n{body}")
            else:
                lines.append(f"{pad}- {_yaml_scalar(v) if not isinstance(v, (Mapping, list, tuple)) else '[]'}\n")
        return "".join(lines)
    return pad + _yaml_scalar(data) + "\n"


def write_sidecar(csv_path: str | os.PathLike, provenance: Mapping[str, Any]) -> Path:
    """Write ``<table>.yaml`` next to ``csv_path`` (atomically); every PROVENANCE_KEYS key is required."""
    missing = [k for k in PROVENANCE_KEYS if k not in provenance]
    if missing:
        raise SchemaError(f"sidecar of {Path(csv_path).name}: missing provenance key {missing[0]!r}")
    out = Path(csv_path).with_suffix(".yaml")
    atomic_write_text(out, yaml_text(dict(provenance)))
    return out


def read_sidecar_keys(path: str | os.PathLike) -> set[str]:
    """Top-level keys of a sidecar written by ``write_sidecar`` (no YAML library needed)."""
    keys = set()
    for line in Path(path).read_text().splitlines():
        if line and not line[0].isspace() and not line.startswith(("-", "#")) and ":" in line:
            key = line.split(":", 1)[0].strip()
            keys.add(json.loads(key) if key.startswith('"') else key)
    return keys


def check_table_file(path: str | os.PathLike, schema: Schema | None = None) -> int:
    """Check a written CSV (header, every row) and its sidecar; return the row count."""
    path = Path(path)
    schema = schema or SCHEMAS.get(path.stem)
    if schema is None:
        raise SchemaError(f"{path.name}: no schema for table {path.stem!r}")
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        header = tuple(reader.fieldnames or ())
        if header != schema.columns:
            raise SchemaError(f"{path.name}: header {header} is not {schema.columns}")
        n = 0
        for n, row in enumerate(reader, 1):
            if None in row:
                raise SchemaError(f"{path.name} row {n}: more fields than columns")
            schema.check_row(row, f"row {n}")
    side = path.with_suffix(".yaml")
    if not side.is_file():
        raise SchemaError(f"{path.name}: no sidecar {side.name}")
    missing = [k for k in PROVENANCE_KEYS if k not in read_sidecar_keys(side)]
    if missing:
        raise SchemaError(f"{side.name}: missing provenance key {missing[0]!r}")
    return n


def chip_name(device_name: str) -> str:
    """The validation tables' chip name for a torch device name."""
    known = {"NVIDIA H100 80GB HBM3": "H100-SXM5-80GB", "NVIDIA H200": "H200", "NVIDIA H100 PCIe": "H100-PCIe",
             "NVIDIA H100 NVL": "H100-NVL", "NVIDIA H200 NVL": "H200-NVL"}
    return known.get(device_name, device_name.replace("NVIDIA ", "").replace(" ", "-"))


def pct(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (0..100) of an ascending list."""
    if not sorted_values:
        raise ValueError("no values")
    x = (len(sorted_values) - 1) * q / 100.0
    lo = int(math.floor(x))
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (x - lo)


def summarize(times_us: Sequence[float]) -> tuple[float, float]:
    """(median, (p80 - p20) / median in %) of per-call times."""
    s = sorted(times_us)
    med = pct(s, 50)
    return med, (pct(s, 80) - pct(s, 20)) / med * 100.0 if med > 0 else 0.0


class CampaignLog:
    """A measurement's folder opened for a run: ``out`` created, ``command.txt`` holding the command that ran
    (``python -m <module> <arguments>``), and a log whose lines, stamped with the seconds since the start, go to
    the console and to ``log.txt`` as they are written."""

    def __init__(self, out: str | os.PathLike, module: str, argv: Sequence[str]) -> None:
        self.start = time.time()
        os.makedirs(out, exist_ok=True)
        self.command = " ".join(["python", "-m", module, *argv[1:]])
        Path(out, "command.txt").write_text(self.command + "\n")
        self._file = open(os.path.join(out, "log.txt"), "w")

    def __call__(self, msg: str) -> None:
        line = f"[{self.elapsed():6.1f}s] {msg}"
        print(line, flush=True)
        self._file.write(line + "\n")
        self._file.flush()

    def elapsed(self) -> float:
        return time.time() - self.start

    def close(self) -> None:
        self._file.close()
