"""A tile's time with one CTA per SM and with two: measured on the GPU and modelled, for FA2 and VFA's kernel.

Usage: python experiments/real_chips/chain.py [--table validation/chain_h100_2026_11/chain.csv] [--out DIR]

Reads the harness's ``chain`` table: the Triton FA2 kernel and VFA's attention kernel timed in alternation with one
128-row query block per CTA, one CTA per SM (132) and two per SM (264), at K/V lengths 2048 and 16384. The time of
one more key block in every CTA is the difference over the key blocks between the two lengths. The model runs
shapes with the same CTAs per SM on the table's chip with the ``triton`` kernel (numerics off): seq_len 4224 and
16896 (33 and 132 key blocks of 128, or 66 and 264 of 64), with as many heads as give 132 or 264 CTAs, and takes the
same difference. At head dims 128 and 256 two CTAs do not fit on an SM, so 264 CTAs are two waves in both.
Writes DIR/chain[_<chip>].csv and .md (default DIR: experiments/real_chips/out).
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

from vfasim import run
from vfasim.formats import MATMUL_FORMATS, format_class
from vfasim.kernel import load_kernel
from vfasim.report.tables import write_table
from vfasim.validate import CHIPS, FORMATS

HERE = Path(__file__).resolve().parent
TABLE = HERE.parents[1] / "validation" / "chain_h100_2026_11" / "chain.csv"
MODEL_SEQS = (4224, 16896)  # 33 x 128 and 132 x 128: 132 CTAs at 4 heads and at 1
COLUMNS = ("head_dim", "dtype", "ctas", "fa2_ns", "model_fa2_ns", "fa2_error", "vfa_ns", "model_vfa_ns",
           "speedup", "model_speedup")


def measured(table: Path = TABLE) -> dict[tuple[int, str, int], dict[int, dict]]:
    """Rows per (head dim, format, CTAs), by K/V length; the 1-CTA rows are left out (a lone CTA, not a full SM)."""
    out: dict[tuple[int, str, int], dict[int, dict]] = {}
    with table.open() as f:
        for r in csv.DictReader(f):
            if int(r["heads"]) > 1:
                out.setdefault((int(r["head_dim"]), r["dtype"], int(r["heads"])), {})[int(r["seq_len"])] = r
    return out


def per_block_ns(t_us: dict[int, float], block_k: int) -> float:
    (a, ta), (b, tb) = sorted(t_us.items())
    return (tb - ta) / ((b - a) / block_k) * 1e3


def compare(head_dim: int, dtype: str, ctas: int, rows: dict[int, dict], sms: int) -> dict:
    kernel = load_kernel("triton")
    block_k = kernel.tile(head_dim, format_class(MATMUL_FORMATS[FORMATS[dtype]]), False).block_k
    chip = CHIPS[next(iter(rows.values()))["chip"]]
    fa2 = per_block_ns({n: float(r["a_us"]) for n, r in rows.items()}, block_k)
    vfa = per_block_ns({n: float(r["b_us"]) for n, r in rows.items()}, block_k)
    model = {}
    for algo in ("fa2", "vfa"):
        lat = {}
        for n in MODEL_SEQS:
            res = run(chip, algo, seq_len=n, head_dim=head_dim, heads=ctas // sms * MODEL_SEQS[-1] // n, causal=False,
                      kernel=kernel, matmul_format=FORMATS[dtype], numerics_heads=0)
            lat[n] = res.latency_us - float(res.chip["prepass_us"])  # type: ignore[arg-type]
        model[algo] = per_block_ns(lat, block_k)
    return {"head_dim": head_dim, "dtype": dtype, "ctas": ctas, "fa2_ns": fa2, "model_fa2_ns": model["fa2"],
            "fa2_error": (model["fa2"] - fa2) / fa2, "vfa_ns": vfa, "model_vfa_ns": model["vfa"],
            "speedup": fa2 / vfa, "model_speedup": model["fa2"] / model["vfa"]}


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--table", type=Path, default=TABLE, help="a chain table measured by the harness")
    p.add_argument("--out", type=Path, default=HERE / "out")
    args = p.parse_args(argv)
    groups = measured(args.table)
    sms = min(c for _, _, c in groups)
    got = [compare(d, dt, c, rows, sms) for (d, dt, c), rows in sorted(groups.items())]
    chip = CHIPS[next(iter(next(iter(groups.values())).values()))["chip"]]
    write_table(got, COLUMNS, args.out / ("chain" if chip == "H100-SXM" else f"chain_{chip.lower()}"))
    for r in got:
        print(f"d{r['head_dim']} {r['dtype']:<9} {r['ctas']} CTAs: FA2 per key block {r['fa2_ns']:.0f} ns, model "
              f"{r['model_fa2_ns']:.0f} ({r['fa2_error']:+.0%}); VFA's kernel {r['vfa_ns']:.0f} ns, model "
              f"{r['model_vfa_ns']:.0f}; speedup {r['speedup']:.3f}, model {r['model_speedup']:.3f}")
    return got


if __name__ == "__main__":
    main()
