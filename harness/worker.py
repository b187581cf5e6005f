"""Compile-and-check worker: ``python -m harness.worker --tasks FILE --out FILE --configs SPEC``.

The run starts several of these at once so Triton's compiles (most of a run's fixed cost) go in
parallel; compiled kernels land in Triton's on-disk cache, where the main process finds them.
A task is ["check", mode, dtype, head_dim, decode] (correctness rows for checks.csv) or
["warm", head_dim, config] (compile fa2 fp16 with that tile config, for the config pick).
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch

from harness import kernels
from harness.attention import check_variant


def parse_configs(spec: str) -> dict[int, tuple[int, int, int, int]]:
    out = {}
    for part in filter(None, spec.split(";")):
        d, cfg = part.split("=")
        out[int(d)] = tuple(int(x) for x in cfg.split(","))
    return out


def format_configs(cfgs: dict[int, tuple[int, int, int, int]]) -> str:
    return ";".join(f"{d}=" + ",".join(str(x) for x in c) for d, c in sorted(cfgs.items()))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--configs", default="")
    a = ap.parse_args()
    if a.configs:
        kernels.CONFIGS.update(parse_configs(a.configs))
    kernels.VFA_LOOP = int(os.environ.get("HARNESS_VFA_LOOP", kernels.VFA_LOOP))
    tasks = json.load(open(a.tasks))
    results = []
    for task in tasks:
        t0 = time.time()
        if task[0] == "check":
            _, mode, dtype, d, decode = task
            results.append({"task": task, "rows": check_variant(mode, dtype, d, decode)})
        elif task[0] == "warm":
            _, d, cfg = task
            try:
                q = torch.randn(1, 2, 256, d, device="cuda", dtype=torch.float16)
                kernels.attention(q, q, q, True, "fa2", config=tuple(cfg))
                torch.cuda.synchronize()
                results.append({"task": task, "ok": True, "s": time.time() - t0})
            except Exception as e:  # noqa: BLE001
                results.append({"task": task, "ok": False, "error": f"{type(e).__name__}: {str(e)[:300]}"})
        print(f"worker task {task} done in {time.time() - t0:.1f}s", flush=True)
        json.dump(results, open(a.out, "w"))


if __name__ == "__main__":
    main()
