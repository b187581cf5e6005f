"""Summarise the Triton cache's compiled ``attn_fwd`` variants (and, asked, copy their TTGIR, PTX and metadata).

Usage on the GPU machine, after a run that compiled the kernels into ``TRITON_CACHE_DIR``::

    python3 -m harness.asm_dump --cache /tmp/tcache --out $OUT/asm

The summary (``asm.csv``) has, per compiled variant: its name and constants as the metadata names them, registers,
spills, shared memory, and counts of the PTX instructions that say how the loop was pipelined (``cp.async``,
``wgmma`` waits, barriers, local loads and stores). ``cache_kernels`` reads any kernel's (``harness.flex`` uses it).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil

from harness.rows import write_rows

COUNTS = {"cp_async": r"cp\.async\.(?:ca|cg)", "cp_async_bulk": r"cp\.async\.bulk", "wgmma": r"wgmma\.mma_async",
          "wgmma_wait": r"wgmma\.wait_group", "bar_sync": r"bar\.sync|barrier\.sync",
          "mbarrier_wait": r"mbarrier\.try_wait",
          "ld_local": r"ld\.local", "st_local": r"st\.local", "ex2": r"ex2\.approx", "branch": r"\bbra\b"}


def cache_kernels(cache: str, name: str | None = None, copy_to: str | None = None) -> list[dict]:
    """One row per compiled kernel in a Triton cache (only those called ``name``, if given): its name, constants as
    the metadata names them, warps, stages, registers, spills, shared memory and PTX instruction counts; with
    ``copy_to``, each one's TTGIR, PTX and metadata are copied there."""
    rows = []
    for root, _, files in sorted(os.walk(cache)):
        meta = [f for f in files if f.endswith(".json") and not f.startswith("__grp__")]
        for m in meta:
            with open(os.path.join(root, m)) as f:
                md = json.load(f)
            if not isinstance(md, dict) or "num_warps" not in md or name not in (None, md.get("name")):
                continue
            tag = os.path.basename(root)[:12]
            ptx = next((f for f in files if f.endswith(".ptx")), None)
            row = {"variant": tag, "name": md.get("name", "?"), "num_warps": md.get("num_warps"),
                   "num_stages": md.get("num_stages"), "shared": md.get("shared"), "n_regs": md.get("n_regs", ""),
                   "n_spills": md.get("n_spills", ""),
                   "constants": json.dumps(md.get("constants", md.get("constexprs", "")), sort_keys=True)[:400]}
            if ptx:
                with open(os.path.join(root, ptx)) as f:
                    text = f.read()
                row |= {k: len(re.findall(p, text)) for k, p in COUNTS.items()}
                row["ptx_lines"] = text.count("\n")
            row["metadata_keys"] = " ".join(sorted(md))
            for f in files if copy_to else ():
                if f.endswith((".ttgir", ".json", ".ptx")):
                    shutil.copy(os.path.join(root, f), os.path.join(copy_to, f"{tag}{os.path.splitext(f)[1]}"))
            rows.append(row)
    return rows


def write_summary(path: str, rows: list[dict]) -> None:
    """``rows`` of ``cache_kernels`` as one table, the variant first."""
    columns = sorted({k for r in rows for k in r}, key=lambda k: (k != "variant", k))
    write_rows(path, rows, columns)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", required=True, help="the TRITON_CACHE_DIR of the run")
    ap.add_argument("--out", required=True, help="folder for asm.csv (created)")
    ap.add_argument("--copy", action="store_true", help="also copy each variant's TTGIR, PTX and metadata")
    a = ap.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    rows = cache_kernels(a.cache, "attn_fwd", a.out if a.copy else None)
    if not rows:
        raise SystemExit(f"{a.cache}: no compiled attn_fwd variant found")
    write_summary(os.path.join(a.out, "asm.csv"), rows)
    print(f"{len(rows)} attn_fwd variants")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
