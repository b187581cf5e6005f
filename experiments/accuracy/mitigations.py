"""Which failure each mitigation removes, and what it costs in cycles.

The mitigations are this project's, not the VFA paper's (see vfasim/functional/policy.py).
Each failing case is run as is and with each mitigation that applies to it; the table gives
the verdict, the rows per failure cause, the output error and the modelled latency.

Usage: python experiments/accuracy/mitigations.py [--seq-len 4096] [--out DIR]
Writes DIR/mitigations.csv and DIR/mitigations.md (default DIR: experiments/accuracy/out).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import vfasim
from vfasim.report.tables import write_table

HERE = Path(__file__).resolve().parent
STRESS = {"workload": "llm-like-stress"}  # m-init overshoots often enough to make these cases fail
#: failing case -> (hw, algo, options)
CASES: dict[str, tuple[str, str, dict]] = {
    "vfa C4V16 (README's stress run)": ("C4V16", "vfa", STRESS),
    "vfa C8V16": ("C8V16", "vfa", STRESS),
    "vfa C16V32": ("C16V32", "vfa", STRESS),
    "vsa C16V32 lam=1e-3": ("C16V32", "vsa", {"lam": 1e-3, **STRESS}),
    "vsa C4V16 lam=1e-3": ("C4V16", "vsa", {"lam": 1e-3, **STRESS}),
}
#: mitigation label -> options; applied where the algorithm accepts them
MITIGATIONS: dict[str, dict] = {
    "none": {},
    "protect_special": {"protect_special": True},
    "minit_clamp": {"minit_clamp": True},
    "minit_margin=4": {"minit_margin": 4.0},
    "fp32_state": {"fp32_state": True},
    "p_bf16": {"p_bf16": True},
    "margin=4 + p_bf16": {"minit_margin": 4.0, "p_bf16": True},
    "protect + margin=4": {"protect_special": True, "minit_margin": 4.0},
}
APPLIES = {"protect_special": ("vsa",), "minit_clamp": ("vfa", "vsa"), "minit_margin": ("vfa", "vsa")}
COLUMNS = ("case", "mitigation", "verdict", "causes", "bad_rows", "nan_count", "rel_err_vs_fp64",
           "rel_err_finite_only", "latency_cycles", "latency_vs_unmitigated")


def applies(algo: str, options: dict) -> bool:
    return all(algo in APPLIES.get(name, (algo,)) for name in options)


def run_study(seq_len: int, cases=CASES, mitigations=MITIGATIONS) -> list[dict]:
    rows = []
    for case, (hw, algo, base) in cases.items():
        plain = None
        for label, extra in mitigations.items():
            if not applies(algo, extra):
                continue
            r = vfasim.run(hw, algo, seq_len=seq_len, **base, **extra)
            plain = plain or r.latency_cycles
            n = r.numerics
            rows.append({"case": case, "mitigation": label, "verdict": n["verdict"],
                         "causes": json.dumps(n["causes"]), "bad_rows": n["bad_rows"], "nan_count": n["nan_count"],
                         "rel_err_vs_fp64": n["rel_err_vs_fp64"], "rel_err_finite_only": n["rel_err_finite_only"],
                         "latency_cycles": r.latency_cycles, "latency_vs_unmitigated": r.latency_cycles / plain})
    return rows


def write(rows: list[dict], out: Path) -> None:
    write_table(rows, COLUMNS, out / "mitigations")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seq-len", type=int, default=4096)
    p.add_argument("--out", type=Path, default=HERE / "out")
    args = p.parse_args(argv)
    write(run_study(args.seq_len), args.out)
    print((args.out / "mitigations.md").read_text())


if __name__ == "__main__":
    main()
