"""Rebuild the VFA paper's Figure 1 and check its claims: the same as `vfasim figure latency-ratio`.

Usage: python experiments/latency_ratio/run.py [--out DIR] [--granularity block|sequence] [--head-dim 64|128]
       [--seq-len 1024] [--fit P1a,P1b,...] [--fa4]
"""

from __future__ import annotations

import sys
from pathlib import Path

from vfasim.cli import main

HERE = Path(__file__).resolve().parent

if __name__ == "__main__":
    args = sys.argv[1:]
    if "--out" not in args:
        args += ["--out", str(HERE / "out")]
    sys.exit(main(["figure", "latency-ratio", *args]))
