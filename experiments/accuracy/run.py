"""Output error of every Table 3 and Table 4 variant of the VFA paper, on llm-like and random data.

Usage: python experiments/accuracy/run.py [--seq-len 2048] [--head-dim 128] [--heads 2] [--out DIR]
Writes DIR/results.csv and DIR/results.md (default DIR: experiments/accuracy/out).
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import vfasim
from vfasim.runner.api import Options
from vfasim.report.tables import write_table

HERE = Path(__file__).resolve().parent
LAMS_BLASST = (0.1, 0.3, 0.5, 0.9)
LAMS_VSA = (1e-3, 3e-3, 1e-2, 1e-1)

#: variant label -> (algorithm, options), named as in paper_tables.csv
VARIANTS: dict[str, tuple[str, dict]] = {
    "fa2": ("fa2", {}),
    "fa4": ("fa4", {}),
    "vfa": ("vfa", {}),
    **{f"vfa key={k}": ("vfa", {"key_summary": k}) for k in ("max", "mean", "absmax")},
    "vfa no-minit": ("vfa", {"minit": False}),
    "vfa no-reorder": ("vfa", {"reorder": False}),
    **{f"vfa q={q}": ("vfa", {"q_summary": q}) for q in ("absmax", "sabsmax", "mean")},
    **{f"{a} lam={lam:g}": (a, {"lam": lam}) for a in ("blasst", "blasst_swa", "blasst_fa4", "blasst_rowskip")
       for lam in LAMS_BLASST},
    **{f"vsa lam={lam:g}": ("vsa", {"lam": lam}) for lam in LAMS_VSA},
    **{f"bsfa topk={k}": ("bsfa", {"topk": k}) for k in (2, 8)},
}
COLUMNS = ("workload", "variant", "verdict", "rel_err_vs_fp64", "max_abs_err_vs_fp64", "nan_count", "bad_rows",
           "frozen_max_below_true_rows", "skipped_block_fraction", "skipped_row_fraction",
           "rescale_skip_fraction", "underflow_count", "causes", "latency_cycles", "paper_accuracy", "paper_sparsity")
NUMERIC_COLUMNS = COLUMNS[2:13]


def paper_rows() -> dict[str, dict[str, str]]:
    with open(HERE / "paper_tables.csv", newline="") as f:
        return {row["variant"]: row for row in csv.DictReader(f) if row["variant"] != "fa2" or row["table"] == "3"}


def measure(workload: str, label: str, shape: dict, hw: str) -> dict:
    algo, opts = VARIANTS[label]
    r = vfasim.run(hw, algo, workload=workload, options=Options(**opts), **shape)
    paper = paper_rows().get(label, {})
    numerics = {**r.numerics, "causes": json.dumps(r.numerics["causes"])}
    return {"workload": workload, "variant": label, **{k: numerics[k] for k in NUMERIC_COLUMNS},
            "latency_cycles": r.latency_cycles, "paper_accuracy": paper.get("paper_accuracy", ""),
            "paper_sparsity": paper.get("paper_sparsity", "")}


def run_study(shape: dict, hw: str = "C16V32", workloads=("llm-like", "random"), variants=None) -> list[dict]:
    return [measure(w, label, shape, hw) for w in workloads for label in (variants or VARIANTS)]


def write(rows: list[dict], out: Path) -> None:
    write_table(rows, COLUMNS, out / "results")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seq-len", type=int, default=2048)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--block", type=int, default=128)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--hw", default="C16V32")
    p.add_argument("--out", type=Path, default=HERE / "out")
    args = p.parse_args(argv)
    shape = {"seq_len": args.seq_len, "head_dim": args.head_dim, "block_q": args.block,
             "block_k": args.block, "heads": args.heads}
    rows = run_study(shape, args.hw)
    write(rows, args.out)
    print((args.out / "results.md").read_text())


if __name__ == "__main__":
    main()
