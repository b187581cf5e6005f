"""Start-up: what ``vfasim --version``, ``--help`` and ``hw list`` cost as whole processes, and what they import.

Usage::

    python benchmarks/bench_startup.py             # median of 5 runs of each
    python benchmarks/bench_startup.py --repeats 9

Each row runs ``python -m vfasim.cli ARGS`` as a child (wall, CPU and peak memory from ``os.wait4``,
as ``/usr/bin/time -v`` reports them; the median of ``--repeats``), then once more under
``-X importtime`` and names the heavy modules it loaded (NumPy, pydantic, pandas, matplotlib, Dask,
PyArrow): none is the target. Target (the speed issue): ``--version`` at most 0.2 s wall.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from bench_targets import ROOT, median_process

HEAVY = ("numpy", "pydantic", "pandas", "matplotlib", "dask", "pyarrow", "scipy")
COMMANDS = (["--version"], ["--help"], ["hw", "list"])
TARGET_S = {"--version": 0.2}


def heavy_imports(args: list[str]) -> list[str]:
    """Top-level heavy packages a ``vfasim ARGS`` process imports (from ``-X importtime``)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "vfasim.cli", *args], capture_output=True,
                          text=True, cwd=ROOT, env=env)
    names = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in done.stderr.splitlines() if "|" in line}
    return sorted(names & set(HEAVY))


def main() -> int:
    parser = argparse.ArgumentParser(description="Start-up cost of vfasim commands.")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"{'command':<20}{'wall s':>8}{'CPU s':>8}{'MiB':>7}  {'heavy imports':<24}target")
    for command in COMMANDS:
        proc = median_process(command, args.repeats)
        target = TARGET_S.get(command[0])
        print(f"{'vfasim ' + ' '.join(command):<20}{proc.wall_s:>8.3f}{proc.cpu_s:>8.3f}{proc.peak_mib:>7.0f}  "
              f"{', '.join(heavy_imports(command)) or 'none':<24}{f'<= {target} s' if target else ''}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
