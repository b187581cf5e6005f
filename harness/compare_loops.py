"""Compare the two VFA/VSA loop forms with FA2 on FA3-regime shapes (prints a table, writes a CSV).

``python -m harness.compare_loops --out FILE [--configs SPEC]``: LOOP 0 = special blocks before
four pipelined loops over the frozen blocks; LOOP 1 = the whole visit order as one pipelined loop
(run-time branches for the exact update and the mask). Attention kernel alone (k_repr ready).
"""

from __future__ import annotations

import argparse
import csv

import torch

from harness import kernels
from harness.bench import Timer
from harness.worker import parse_configs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--configs", default="")
    a = ap.parse_args()
    if a.configs:
        kernels.CONFIGS.update(parse_configs(a.configs))
    timer = Timer(flush=True)
    rows = []
    for dt, tdt in (("fp16", torch.float16), ("fp8_e4m3", torch.float8_e4m3fn)):
        for d in (64, 128):
            for n in (512, 8192):
                for causal in (False, True):
                    b, h = 16384 // n, 2048 // d
                    q, k, v = (torch.randn(b, h, n, d, device="cuda").to(tdt) for _ in range(3))
                    if tdt == torch.float8_e4m3fn:
                        v = v.transpose(-1, -2).contiguous().transpose(-1, -2)
                    cfg = kernels.config_for(d, n)
                    kr = kernels.krepr(k, cfg[1])
                    res = {}
                    for name, mode, loop in (("fa2", "fa2", 0), ("vfa_loop0", "vfa", 0), ("vfa_loop1", "vfa", 1),
                                             ("vsa_loop0", "vsa", 0), ("vsa_loop1", "vsa", 1)):
                        o = torch.empty(b, h, n, d, device="cuda",
                                        dtype=torch.bfloat16 if dt == "fp8_e4m3" else tdt)
                        fn = lambda: kernels.attention(q, k, v, causal, mode, out=o, kr=kr, loop=loop)  # noqa: E731
                        res[name] = timer.time(fn).median_us
                    rows.append({"dtype": dt, "head_dim": d, "seq": n, "causal": causal, **res})
                    print(f"{dt:8s} d{d:<3} n{n:<5} {'causal' if causal else 'full  '} "
                          + " ".join(f"{k} {v:7.1f}" for k, v in res.items())
                          + f" | fa2/vfa0 {res['fa2'] / res['vfa_loop0']:.3f} fa2/vfa1 {res['fa2'] / res['vfa_loop1']:.3f}"
                          f" fa2/vsa1 {res['fa2'] / res['vsa_loop1']:.3f}", flush=True)
    with open(a.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


if __name__ == "__main__":
    main()
