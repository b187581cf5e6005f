"""How far VFA's m-init lands from the true row max, on synthetic and captured Q/K.

Usage: python experiments/workload_stats/run.py [--seq-len 4096] [--head-dims 64,128]
       [--heads 2] [--seeds 2] [--blocks 128,64] [--workloads llm-like,random]
       [--qkv FILE ... [--pool]] [--no-causal] [--figure] [--out DIR]
Writes DIR/results.csv and DIR/results.md (default DIR: experiments/workload_stats/out),
and with --figure DIR/overshoot_tail.png. See README.md beside this file.

Everything is computed in float64 straight from Q and K, with the engine's own
block layout (``Tiling``) and key summaries (``summarize_keys``, signed absmax):
- m-init of a row: max over the key blocks its query block visits of
  scale * q . sabsmax(K_j)  (the engine's ``_minit_values`` without rounding);
- overshoot: m-init - true row max (> 0: every exp of the row is scaled down by
  at least that much);
- undershoot: true row max - VFA's used max, where the used max is the larger of
  m-init and the exact max over the sink block and the local block (> 0: a frozen
  block's exp exceeds 1 by that much in log units);
- spread: standard deviation of the row's visible scaled scores, so overshoots
  of heads of different sizes can be compared in units of their own scores.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

from vfasim.errors import VfasimError
from vfasim.functional.policy import summarize_keys
from vfasim.functional.tiling import Tiling
from vfasim.io.qkv_files import load_qkv
from vfasim.workloads import WORKLOADS, Workload

HERE = Path(__file__).resolve().parent
#: exp(x) rounds to 0 in float16 below ln(2**-25) (half the smallest subnormal, ties to even)
FP16_EXP_ZERO = 25 * math.log(2)
#: exp(x) rounds to inf in float16 at and above ln(65520) (halfway past the largest finite, 65504)
FP16_EXP_INF = math.log(65520)
QUANTILES = (1, 10, 50, 90, 99)
COLUMNS = (
    "source", "head_dim", "seq_len", "heads", "block", "causal", "rows",
    "over_p1", "over_p10", "over_p50", "over_p90", "over_p99", "over_max",
    "over_pos_frac", "over_fp16_zero_frac", "over_spread_p50", "over_spread_p99",
    "under_pos_frac", "under_p99", "under_max", "under_fp16_inf_frac",
    "max_in_sink", "max_in_local", "max_elsewhere", "rowmax_p50", "rowmax_p99", "spread_p50",
)


def head_rows(q: np.ndarray, k: np.ndarray, tiling: Tiling) -> dict[str, np.ndarray]:
    """Per-row statistics of one query head q [Sq, d] against its K head [Sk, d]."""
    d, bq, bk = tiling.head_dim, tiling.block_q, tiling.block_k
    kb = np.zeros((1, tiling.n_kblocks * bk, d))
    kb[0, : tiling.kv_len] = k
    reprs = summarize_keys(kb.reshape(1, tiling.n_kblocks, bk, d), tiling.kv_len, "sabsmax")[0]
    scale = 1.0 / math.sqrt(d)
    parts = [query_block_rows(q, k, reprs, tiling, i, scale) for i in range(tiling.n_qblocks)]
    return {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}


def query_block_rows(q, k, reprs, tiling: Tiling, i: int, scale: float) -> dict[str, np.ndarray]:
    """Statistics of the real rows of query block i."""
    bq, bk = tiling.block_q, tiling.block_k
    rows = np.arange(i * bq, min((i + 1) * bq, tiling.seq_len))
    n_vis, local = int(tiling.n_visible[i]), int(tiling.local_block[i])
    s = scale * (q[rows] @ k[: min(n_vis * bk, tiling.kv_len)].T)
    vis = tiling.visible(np.full(n_vis, i), np.arange(n_vis))  # [n_vis, Bq, Bk]
    vis = vis.transpose(1, 0, 2).reshape(bq, n_vis * bk)[: rows.size, : s.shape[1]]
    s = np.where(vis, s, -np.inf)
    padded = np.full((rows.size, n_vis * bk), -np.inf)
    padded[:, : s.shape[1]] = s
    block_max = padded.reshape(rows.size, n_vis, bk).max(axis=2)
    true_max = block_max.max(axis=1)
    special = np.maximum(block_max[:, 0], block_max[:, local])
    minit = (scale * (q[rows] @ reprs[:n_vis].T)).max(axis=1)
    where = np.argmax(block_max, axis=1)
    return {"true_max": true_max, "minit": minit, "used_max": np.maximum(minit, special),
            "spread": row_std(s, vis),
            "in_sink": where == 0, "in_local": (where == local) & (where != 0)}


def row_std(s: np.ndarray, vis: np.ndarray) -> np.ndarray:
    """Standard deviation of each row's visible entries."""
    n = vis.sum(axis=1)
    mean = np.where(vis, s, 0.0).sum(axis=1) / n
    return np.sqrt(np.where(vis, (s - mean[:, None]) ** 2, 0.0).sum(axis=1) / n)


def workload_rows(w: Workload, block: int, causal: bool) -> dict[str, np.ndarray]:
    """head_rows over every query head of a workload, in float64 (grouped heads share K)."""
    tiling = Tiling(w.seq_len, w.kv_len, w.head_dim, block, block, causal)
    group = w.heads // w.kv_heads
    parts = [head_rows(w.q[h].astype(np.float64), w.k[h // group].astype(np.float64), tiling)
             for h in range(w.heads)]
    return {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}


def summarize(rows: dict[str, np.ndarray]) -> dict[str, float]:
    """The table's statistics of one source from its per-row arrays."""
    over = rows["minit"] - rows["true_max"]
    under = rows["true_max"] - rows["used_max"]
    spread = rows["spread"]
    rel = over[spread > 0] / spread[spread > 0]
    qs = np.percentile(over, QUANTILES)
    out = {f"over_p{q}": float(v) for q, v in zip(QUANTILES, qs)}
    out.update(
        over_max=float(over.max()), over_pos_frac=float(np.mean(over > 0)),
        over_fp16_zero_frac=float(np.mean(over > FP16_EXP_ZERO)),
        over_spread_p50=float(np.percentile(rel, 50)), over_spread_p99=float(np.percentile(rel, 99)),
        under_pos_frac=float(np.mean(under > 0)), under_p99=float(np.percentile(under, 99)),
        under_max=float(under.max()), under_fp16_inf_frac=float(np.mean(under >= FP16_EXP_INF)),
        max_in_sink=float(np.mean(rows["in_sink"])), max_in_local=float(np.mean(rows["in_local"])),
        rowmax_p50=float(np.percentile(rows["true_max"], 50)),
        rowmax_p99=float(np.percentile(rows["true_max"], 99)), spread_p50=float(np.median(spread)),
    )
    out["max_elsewhere"] = 1.0 - out["max_in_sink"] - out["max_in_local"]
    return out


def measure(source: str, ws: list[Workload], block: int, causal: bool) -> tuple[dict, np.ndarray]:
    """One table row (statistics of every row of the workloads, pooled) and the rows' overshoots."""
    parts = [workload_rows(w, block, causal) for w in ws]
    rows = {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}
    shape = {"source": source, "head_dim": shared(ws, "head_dim"), "seq_len": shared(ws, "seq_len"),
             "heads": sum(w.heads for w in ws), "block": block, "causal": causal,
             "rows": int(rows["true_max"].size)}
    return {**shape, **summarize(rows)}, rows["minit"] - rows["true_max"]


def shared(ws: list[Workload], attr: str) -> int | str:
    """The workloads' common value of ``attr``, or 'mixed'."""
    values = {getattr(w, attr) for w in ws}
    return values.pop() if len(values) == 1 else "mixed"


def synthetic(name: str, seq_len: int, head_dim: int, heads: int, seeds: range) -> Workload:
    """Several seeds of a generator stacked as extra heads (each seed draws its own heads)."""
    ws = [WORKLOADS[name](seq_len, head_dim, heads=heads, seed=s) for s in seeds]
    return Workload(name, *(np.concatenate([getattr(w, a) for w in ws]) for a in ("q", "k", "v")))


def write(rows: list[dict], out: Path) -> None:
    """results.csv and results.md, each written whole or not at all."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", newline="", dir=out, delete=False, suffix=".tmp") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    os.replace(f.name, out / "results.csv")
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(cell(row[c]) for c in COLUMNS) + " |" for row in rows]
    with tempfile.NamedTemporaryFile("w", dir=out, delete=False, suffix=".tmp") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(f.name, out / "results.md")


def plot_tails(curves: dict[str, np.ndarray], path: Path) -> None:
    """Fraction of rows whose overshoot exceeds x, per source (log scale), written atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for label, over in curves.items():
        x = np.sort(over)
        ax.step(x, 1.0 - np.arange(1, x.size + 1) / x.size, where="post", label=label)
    ax.axvline(FP16_EXP_ZERO, color="k", linestyle="--", linewidth=0.8)
    ax.text(FP16_EXP_ZERO, 0.5, " fp16: every exp of the row is 0", fontsize=8)
    floor = 0.5 / max(over.size for over in curves.values())
    left = min(np.percentile(over, 0.5) for over in curves.values())
    ax.set(yscale="log", xlabel="overshoot = m-init - row max (scaled-score units)",
           ylabel="fraction of rows above x", ylim=(floor, 1.0), xlim=(left, None))
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    with tempfile.NamedTemporaryFile(dir=path.parent, delete=False, suffix=".png") as f:
        fig.savefig(f, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    os.replace(f.name, path)


def cell(value) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seq-len", type=int, default=4096)
    p.add_argument("--head-dims", default="64,128", help="comma-separated head dims of the generators")
    p.add_argument("--heads", type=int, default=2, help="heads per seed")
    p.add_argument("--seeds", type=int, default=2, help="seeds 0..N-1 of each generator")
    p.add_argument("--blocks", default="128", help="comma-separated query and key block sizes")
    p.add_argument("--workloads", default="llm-like,llm-like-stress,random",
                   help=f"comma-separated generators of {', '.join(WORKLOADS)} ('' for none)")
    p.add_argument("--qkv", type=Path, nargs="*", default=[], help="captured .npz/.npy files, one row each")
    p.add_argument("--pool", action="store_true", help="add a row pooling every --qkv file")
    p.add_argument("--no-causal", dest="causal", action="store_false")
    p.add_argument("--figure", action="store_true", help="also write overshoot_tail.png (first block size)")
    p.add_argument("--out", type=Path, default=HERE / "out")
    return p.parse_args(argv)


def sources_of(args: argparse.Namespace) -> list[tuple[str, list[Workload]]]:
    """(label, workloads) of every generator x head dim, every --qkv file, and the pooled files."""
    names = [n for n in args.workloads.split(",") if n]
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        raise VfasimError(f"unknown workload(s) {', '.join(unknown)}; valid: {', '.join(WORKLOADS)}")
    sources = [(name, [synthetic(name, args.seq_len, int(dim), args.heads, range(args.seeds))])
               for name in names for dim in args.head_dims.split(",")]
    captured = [(path.stem, [load_qkv(path)]) for path in args.qkv]
    return sources + captured + ([("captured (pooled)", [w for _, (w,) in captured])] if args.pool else [])


def main(argv: list[str] | None = None) -> list[dict]:
    args = parse(argv)
    try:
        sources = sources_of(args)
    except (VfasimError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    blocks = [int(b) for b in args.blocks.split(",")]
    measured = [measure(name, ws, block, args.causal) for name, ws in sources for block in blocks]
    write([row for row, _ in measured], args.out)
    if args.figure:  # first block size only; with --pool, the pooled files stand for each file
        hidden = {path.stem for path in args.qkv} if args.pool else set()
        curves = {f"{r['source']}, d={r['head_dim']}, block {r['block']}": over for r, over in measured
                  if r["block"] == blocks[0] and r["source"] not in hidden}
        plot_tails(curves, args.out / "overshoot_tail.png")
    print((args.out / "results.md").read_text(), end="")
    return [row for row, _ in measured]


if __name__ == "__main__":
    main()
