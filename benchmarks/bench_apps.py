"""The applications as whole processes: ``vfasim figure latency-ratio``, ``vfasim validate`` and its fit.

Usage::

    python benchmarks/bench_apps.py                                  # the figure and validate (minutes on 2 cores)
    python benchmarks/bench_apps.py --figure-only
    python benchmarks/bench_apps.py --validate-only --repeats 3      # validate --jobs 2, medians of 3
    python benchmarks/bench_apps.py --validate-only --rows 3         # validate --rows 3 (a smaller table)
    python benchmarks/bench_apps.py --validate-only --fit --rows 1   # and validate --fit on --rows 1

Each row is one ``python -m vfasim.cli ...`` child: wall, CPU (user + system, its worker processes included) and
peak memory from ``os.wait4``; with ``--repeats`` the medians. The figure writes into a temporary folder.
Validate runs twice, with a run store of its own (``$VFASIM_CACHE_DIR`` a temporary folder): cold (``--no-cache``,
every run made), then reading the runs an earlier validation kept (one untimed run fills the store first).
Targets (the speed issue): figure 5 s, validate 15 s. On a shared machine quote the CPU seconds.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

from bench_targets import median_process


def main() -> int:
    parser = argparse.ArgumentParser(description="Whole-process cost of the figure, of validate and of its fit.")
    parser.add_argument("--figure-only", action="store_true")
    parser.add_argument("--validate-only", action="store_true")
    parser.add_argument("--fit", action="store_true", help="also time vfasim validate --fit")
    parser.add_argument("--jobs", type=int, default=2, help="validate's --jobs (default 2, the test machine's cores)")
    parser.add_argument("--rows", type=int, default=None, help="validate's --rows (default: its own)")
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    validate = ["validate", "--jobs", str(args.jobs)] + (["--rows", str(args.rows)] if args.rows else [])
    print(f"{'command':<44}{'wall s':>8}{'CPU s':>8}{'MiB':>7}  target")
    with tempfile.TemporaryDirectory() as out:
        # (name, command, target, whether an untimed run fills the run store first)
        figure = ("vfasim figure latency-ratio", ["figure", "latency-ratio", "--out", out], "<= 5 s", False)
        cases = [] if args.validate_only else [figure]
        if not args.figure_only:
            os.environ["VFASIM_CACHE_DIR"] = os.path.join(out, "cache")  # the children's run store, empty at first
            cases.append((f"vfasim {' '.join(validate)} --no-cache", [*validate, "--no-cache"], "<= 15 s", False))
            cases.append(("  again, the runs stored", validate, "<= 15 s", True))
            if args.fit:
                cases.append((f"vfasim {' '.join(validate)} --fit", [*validate, "--fit"], "", False))
        for name, command, target, fill in cases:
            if fill:
                median_process(command, 1)
            p = median_process(command, args.repeats)
            print(f"{name:<44}{p.wall_s:>8.1f}{p.cpu_s:>8.1f}{p.peak_mib:>7.0f}  {target}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
