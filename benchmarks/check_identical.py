"""Bit-identity of one-core runs across a change: record the outputs of a checkout, compare another's.

Usage::

    python benchmarks/check_identical.py record DIR    # before the change (a clean checkout)
    python benchmarks/check_identical.py compare DIR   # after it: every output byte for byte

Runs (each ``python -m vfasim.cli run ... --no-cache`` in a child, twice: the text report, whose
``trace ...`` line holds the trace digest, and ``--json``): C4V16 fa2, vfa, vsa and fa4 at 1K, 4K
and 16K, causal and not (full numerics); the default run; fa2 and vfa at 128K causal with
``--numerics off``. The checkout timed is the one this interpreter imports ``vfasim`` from.
``--validate`` compares ``vfasim validate --jobs 2`` instead: its ``--json`` document and every prediction of both
tiers (their ``repr``: value, bound, utilisation, waves), one child of a few minutes.
Not a benchmark: it prints no times, only which outputs differ.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

CASES: list[tuple[str, list[str]]] = [("default", [])]
CASES += [(f"{algo}-{n // 1024}k-{'causal' if causal else 'full'}",
           ["--hw", "C4V16", "--algo", algo, "--seq-len", str(n), "--causal" if causal else "--no-causal"])
          for algo in ("fa2", "vfa", "vsa", "fa4") for n in (1024, 4096, 16384) for causal in (True, False)]
CASES += [(f"{algo}-128k-off", ["--algo", algo, "--seq-len", "131072", "--numerics", "off"]) for algo in ("fa2", "vfa")]


def _outputs(name: str, args: list[str]) -> dict[str, bytes]:
    out = {}
    for suffix, extra in (("txt", []), ("json", ["--json"])):
        done = subprocess.run([sys.executable, "-m", "vfasim.cli", "run", *args, "--quiet", "--no-cache", *extra],
                              capture_output=True, check=True)
        out[f"{name}.{suffix}"] = done.stdout
    return out


VALIDATE = """
from vfasim.report import to_json
from vfasim.validate import FIT_SEQ_LENS
from vfasim.validate.calibrate import run_validation
from vfasim.validate.report import to_doc

v = run_validation(None, 2)
print(to_json(to_doc(v, FIT_SEQ_LENS)))
for p in v.preds + [q for g in v.groups for q in g.spec]:
    print(repr(p))
"""


def _validate_outputs() -> dict[str, bytes]:
    done = subprocess.run([sys.executable, "-c", VALIDATE], capture_output=True, check=True)
    return {"validate.txt": done.stdout}


def main() -> int:
    parser = argparse.ArgumentParser(description="Record or compare one-core run outputs byte for byte.")
    parser.add_argument("mode", choices=("record", "compare"))
    parser.add_argument("dir", type=Path)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--validate", action="store_true", help="vfasim validate instead of the one-core runs")
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    differ = 0
    runs = [_validate_outputs] if args.validate else [lambda case=case: _outputs(*case) for case in CASES]
    with ThreadPoolExecutor(args.jobs) as pool:
        for outputs in pool.map(lambda run: run(), runs):
            for file, data in outputs.items():
                path = args.dir / file
                if args.mode == "record":
                    path.write_bytes(data)
                    status = "recorded"
                else:
                    same = path.read_bytes() == data
                    differ += not same
                    status = "identical" if same else "DIFFERS"
                print(f"{file:<28}{status}", flush=True)
    if args.mode == "compare":
        total = 1 if args.validate else 2 * len(CASES)
        print(f"{total - differ} of {total} outputs identical")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
