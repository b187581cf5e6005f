"""A tile's time with one CTA per SM and with two: measured on the GPU and modelled, for FA2 and VFA's kernel.

Usage: python experiments/real_chips/chain.py [--table validation/chain_h100_2026_11/chain.csv] [--out DIR]

Reads the harness's ``chain`` table: the Triton FA2 kernel timed in alternation with VFA's attention kernel and
with the same loop without its softmax (``triton_dots``), with one 128-row query block per CTA, one CTA per SM
(132) and two per SM (264), at K/V lengths 2048 and 16384. The time of one more key block in every CTA is the
difference over the key blocks between the two lengths. The model runs shapes with the same CTAs per SM on the
table's chip with the ``triton`` kernel (numerics off): seq_len 4224 and 16896 (33 and 132 key blocks of 128, or 66
and 264 of 64), with as many heads as give 132 or 264 CTAs, and takes the same difference; its no-softmax loop is
FA2 with the softmax's ops fused away (``softmax_share.no_softmax_loop``). The softmax's exposed time is FA2's less the
no-softmax loop's. At head dims 128 and 256 two CTAs do not fit on an SM, so 264 CTAs are two waves in both.
Writes DIR/chain[_<chip>].csv and .md (default DIR: experiments/real_chips/out).
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # softmax_share.py, the no-softmax loop
from softmax_share import no_softmax_loop  # noqa: E402
from vfasim import run
from vfasim.formats import MATMUL_FORMATS, format_class
from vfasim.hw import load_hw
from vfasim.kernel import load_kernel
from vfasim.report.tables import write_table
from vfasim.validate import CHIPS, FORMATS, MEASURED_INPUTS, UNSTABLE_SPREAD_PCT

HERE = Path(__file__).resolve().parent
TABLE = HERE.parents[1] / "validation" / "chain_h100_2026_11" / "chain.csv"
CHAIN_ROWS = 128  # query rows of every head of harness/attention.py chain_grid (unless --chain-rows said otherwise)
DECODE_ROWS = 16  # a chain table with this many query rows per head or fewer ran the kernel's decode tile
MODEL_SEQS = (4224, 16896)  # 33 x 128 and 132 x 128 query rows: 132 heads' worth of query blocks at 4 heads and at 1
COLUMNS = ("head_dim", "dtype", "ctas", "fa2_ns", "model_fa2_ns", "fa2_error", "vfa_ns", "model_vfa_ns",
           "speedup", "model_speedup", "softmax_ns", "model_softmax_ns", "vfa_removes_ns", "model_vfa_removes_ns")
VSA_COLUMNS = ("vsa_ns", "model_vsa_ns", "vsa_error", "vsa_over_vfa", "model_vsa_over_vfa")


def measured(table: Path = TABLE) -> dict[tuple[int, str, int], dict[str, dict[int, dict]]]:
    """Rows per (head dim, format, CTAs), by the kernel set against FA2, by K/V length; the 1-CTA rows are left out (a
    lone CTA, not a full SM), and so is every group with a pair that caught a slow episode (its ratio's spread above
    validate's ``UNSTABLE_SPREAD_PCT``: a per-block slope needs both lengths), named on stdout."""
    out: dict[tuple[int, str, int], dict[str, dict[int, dict]]] = {}
    unstable = set()
    with table.open() as f:
        for r in csv.DictReader(f):
            if int(r["heads"]) > 1:
                key = (int(r["head_dim"]), r["dtype"], int(r["heads"]))
                out.setdefault(key, {}).setdefault(r["kernel_b"], {})[int(r["seq_len"])] = r
                if float(r["ratio_spread_pct"]) > UNSTABLE_SPREAD_PCT:
                    unstable.add(key)
    for d, dt, heads in sorted(unstable):
        print(f"left out: d{d} {dt} {heads} heads (a pair's spread is above {UNSTABLE_SPREAD_PCT:g}%)")
    return {k: v for k, v in out.items() if k not in unstable}


def per_block_ns(t_us: dict[int, float], block_k: int) -> float:
    (a, ta), (b, tb) = sorted(t_us.items())
    return (tb - ta) / ((b - a) / block_k) * 1e3


def compare(head_dim: int, dtype: str, heads: int, rows: dict[str, dict[int, dict]], sms: int,
            kernel_name: str = "triton") -> dict:
    """Measured and modelled time per key block of ``heads`` one-query-block heads (``chain_grid``: 128 query rows
    each, so 128 / block_q CTAs a head, or at most ``DECODE_ROWS``: the decode tile, one CTA a head); the model runs
    the same CTAs per SM at two lengths of its own (prefill) or the measured shapes themselves (decode)."""
    kernel = load_kernel(kernel_name)
    vfa_rows, dots_rows = rows["triton_vfa_attn"], rows["triton_dots"]
    queries = int(next(iter(vfa_rows.values()))["seq_len_q"])
    decode = queries <= DECODE_ROWS
    tile = kernel.tile(head_dim, format_class(MATMUL_FORMATS[FORMATS[dtype]]), False, decode)
    block_k = tile.block_k
    chip = CHIPS[next(iter(vfa_rows.values()))["chip"]]
    fa2 = per_block_ns({n: float(r["a_us"]) for n, r in vfa_rows.items()}, block_k)
    vfa = per_block_ns({n: float(r["b_us"]) for n, r in vfa_rows.items()}, block_k)
    fa2_again = per_block_ns({n: float(r["a_us"]) for n, r in dots_rows.items()}, block_k)
    dots = per_block_ns({n: float(r["b_us"]) for n, r in dots_rows.items()}, block_k)
    vsa_rows = rows.get("triton_vsa_attn")
    hw = load_hw(chip)
    model = {}
    runs = [("fa2", kernel, "fa2"), ("vfa", kernel, "vfa"), ("dots", no_softmax_loop(kernel), "fa2")] + (
        [("vsa", kernel, "vsa")] if vsa_rows else [])
    for name, k, algo in runs:
        lat = {}
        for n in sorted(vfa_rows) if decode else MODEL_SEQS:
            shape = dict(seq_len=n, heads=heads, kv_heads=1, decode=True, queries=queries) if decode else \
                dict(seq_len=n, heads=heads // sms * MODEL_SEQS[-1] // n)
            res = run(hw, algo, head_dim=head_dim, causal=False, kernel=k, matmul_format=FORMATS[dtype],
                      numerics_heads=0, **shape, **({"workload": MEASURED_INPUTS} if algo == "vsa" else {}))
            lat[n] = float(res.chip["attention_call_us"])  # type: ignore[arg-type]
        model[name] = per_block_ns(lat, block_k)
    ctas = heads if decode else heads * -(-CHAIN_ROWS // tile.block_q)
    extra = {}
    if vsa_rows:
        vsa = per_block_ns({n: float(r["b_us"]) for n, r in vsa_rows.items()}, block_k)
        extra = {"vsa_ns": vsa, "model_vsa_ns": model["vsa"], "vsa_error": (model["vsa"] - vsa) / vsa,
                 "vsa_over_vfa": vsa / vfa, "model_vsa_over_vfa": model["vsa"] / model["vfa"]}
    return extra | {"head_dim": head_dim, "dtype": dtype, "ctas": ctas, "fa2_ns": fa2, "model_fa2_ns": model["fa2"],
            "fa2_error": (model["fa2"] - fa2) / fa2, "vfa_ns": vfa, "model_vfa_ns": model["vfa"],
            "speedup": fa2 / vfa, "model_speedup": model["fa2"] / model["vfa"],
            "softmax_ns": fa2_again - dots, "model_softmax_ns": model["fa2"] - model["dots"],
            "vfa_removes_ns": fa2 - vfa, "model_vfa_removes_ns": model["fa2"] - model["vfa"]}


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--table", type=Path, default=TABLE, help="a chain table measured by the harness")
    p.add_argument("--kernel", default="triton", help="the kernel description the table's tiles are (a name or a "
                   "YAML file: a campaign run with other --configs needs a description with those tiles)")
    p.add_argument("--out", type=Path, default=HERE / "out")
    p.add_argument("--stem", help="the output files' name (default: chain, chain_<chip> off the H100, _<kernel> for "
                   "another description)")
    args = p.parse_args(argv)
    groups = measured(args.table)
    sms = min(c for _, _, c in groups)
    got = [compare(d, dt, c, rows, sms, args.kernel) for (d, dt, c), rows in sorted(groups.items())]
    chip = CHIPS[next(iter(next(iter(groups.values()))["triton_dots"].values()))["chip"]]
    stem = "chain" if chip == "H100-SXM" else f"chain_{chip.lower()}"
    kernel = load_kernel(args.kernel).name
    columns = COLUMNS + (VSA_COLUMNS if all("vsa_ns" in r for r in got) else ())
    write_table(got, columns, args.out / (args.stem or (stem if kernel == "triton" else f"{stem}_{kernel}")))
    for r in got:
        print(f"d{r['head_dim']} {r['dtype']:<9} {r['ctas']} CTAs: FA2 per key block {r['fa2_ns']:.0f} ns, model "
              f"{r['model_fa2_ns']:.0f} ({r['fa2_error']:+.0%}); VFA's kernel {r['vfa_ns']:.0f} ns, model "
              f"{r['model_vfa_ns']:.0f}; speedup {r['speedup']:.3f}, model {r['model_speedup']:.3f}; softmax exposed "
              f"{r['softmax_ns']:.0f} ns, model {r['model_softmax_ns']:.0f}; VFA removes {r['vfa_removes_ns']:.0f} ns, "
              f"model {r['model_vfa_removes_ns']:.0f}" + (f"; VSA's kernel {r['vsa_ns']:.0f} ns, model "
                                                         f"{r['model_vsa_ns']:.0f} ({r['vsa_error']:+.0%})"
                                                         if "vsa_ns" in r else ""))
    return got


if __name__ == "__main__":
    main()
