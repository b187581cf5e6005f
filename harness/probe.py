"""Kernels to run under Nsight Compute: each case launched twice (compile + warm, then the profiled launch).

Usage on the GPU machine (repository root)::

    ncu --clock-control none --kernel-name regex:"attn_fwd|krepr_kernel" --launch-skip 0 \\
        --section SpeedOfLight --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis \\
        --section WarpStateStats --page raw --csv python3 -m harness.probe --configs '64=128,64,8,3;...'

ncu lists the launches in launch order; ``--manifest`` writes one line per launch (case, kernel, whether it is the
profiled second launch), so the raw CSV's rows can be matched to cases without relying on kernel names.
"""

from __future__ import annotations

import argparse
import csv
import sys

#: (mode, dtype, head_dim, causal, batch, heads, seq_len): the FA3-regime shapes (16K tokens, heads x head_dim 2048)
DEFAULT_CASES = tuple((m, dt, d, False, 4, 2048 // d, 4096) for d in (64, 128, 256) for dt in ("fp16",)
                      for m in ("fa2", "vfa", "dots")) + (("fa2", "fp8_e4m3", 128, False, 4, 16, 4096),
                                                          ("vfa", "fp8_e4m3", 128, False, 4, 16, 4096))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", default="", help="tile configs 'D=BM,BN,warps,stages;...' (default: built-in)")
    ap.add_argument("--manifest", default="", help="CSV of the launches in order")
    ap.add_argument("--sdpa", default="", help="instead of the Triton cases, PyTorch SDPA calls: "
                    "'backend:dtype:D:causal:batch:heads:kv_heads:seq_q:seq_k,...' with backend sdpa_flash or "
                    "sdpa_cudnn (the manifest names their launches' kernel 'sdpa': filter ncu to one backend's CUDA kernel)")
    ap.add_argument("--krepr", default="", help="instead of the attention cases, krepr_kernel alone on the same "
                    "shapes: 'D:dtype:block_n,...' (e.g. '128:fp16:64,64:fp8_e4m3:64')")
    ap.add_argument("--cases", default="", help="instead of the default Triton cases, 'mode:dtype:D,...' (mode fa2, "
                    "vfa, vsa or dots) on the same FA3-regime shapes (batch 4, 2048 / D heads, 4096 tokens, not "
                    "causal); 'mode:dtype:D:Q' runs Q query rows per head instead, on the chain phase's launch (132 "
                    "heads of one K/V head, 16384 keys): Q of 16 or fewer is the decode tile; 'mode:dtype:D:full' and "
                    "'mode:dtype:D:causal' run the FA3-regime shape of 16384 tokens at batch 1, without and with a "
                    "causal mask")
    a = ap.parse_args(argv)
    cases = DEFAULT_CASES
    if a.cases:
        specs = [spec.split(":") for spec in a.cases.split(",")]
        if any(len(x) not in (3, 4) or x[0] not in ("fa2", "vfa", "vsa", "dots") for x in specs):
            ap.error(f"--cases: each case is mode:dtype:D[:Q] with mode fa2, vfa, vsa or dots: {a.cases}")
        if any(len(x) == 4 and x[3] not in ("full", "causal") and not x[3].isdigit() for x in specs):
            ap.error(f"--cases: a fourth field is a query count, full or causal: {a.cases}")
        cases = tuple((m, dt, int(d), False, 4, 2048 // int(d), 4096) if not q else
                      (m, dt, int(d), q[0] == "causal", 1, 2048 // int(d), 16384) if q[0] in ("full", "causal") else
                      (m, dt, int(d), False, 1, 132, 16384, 1, int(q[0])) for m, dt, d, *q in specs)
    import torch  # after the arguments: --help needs no GPU stack

    from harness import kernels
    from harness.attention import Case, Inputs
    from harness.worker import parse_configs

    if a.configs:
        kernels.CONFIGS.update(parse_configs(a.configs))
    launches = []
    if a.sdpa:
        from harness.attention import sdpa_call

        for i, spec in enumerate(a.sdpa.split(",")):
            be, dtype, d, causal, b, h, hkv, nq, nk = spec.split(":")
            d, b, h, hkv, nq, nk, causal = int(d), int(b), int(h), int(hkv), int(nq), int(nk), causal == "1"
            q, k, v = Inputs(Case(b, h, hkv, nq, nk, d, causal, "probe"), 3000 + i).get(dtype)
            fn = sdpa_call(be, q, k, v, causal)  # runs once: the compile/warm launch(es)
            launches.append((i, be, dtype, d, causal, b, h, nk, "sdpa", "compile", nq, hkv))
            fn()
            launches.append((i, be, dtype, d, causal, b, h, nk, "sdpa", "profiled", nq, hkv))
            torch.cuda.synchronize()
            print(f"sdpa {i}: {spec}", file=sys.stderr, flush=True)
    if a.krepr:
        for i, spec in enumerate(a.krepr.split(",")):
            d, dtype, bn = spec.split(":")
            d, bn = int(d), int(bn)
            q, k, v = Inputs(Case(4, 2048 // d, 2048 // d, 4096, 4096, d, False, "probe"), 2000 + i).get(dtype)
            for rep in ("compile", "profiled"):
                kernels.krepr(k, bn)
                launches.append((i, f"krepr{bn}", dtype, d, False, 4, 2048 // d, 4096, "krepr_kernel", rep, 4096,
                                 2048 // d))
            torch.cuda.synchronize()
            print(f"krepr {i}: {dtype} d{d} block_n {bn}", file=sys.stderr, flush=True)
    for i, (mode, dtype, d, causal, b, h, n, *chain) in enumerate(() if a.krepr or a.sdpa else cases):
        hkv, nq = chain or (h, n)  # the chain launch: one K/V head, nq query rows per head
        q, k, v = Inputs(Case(b, h, hkv, nq, n, d, causal, "probe"), 1000 + i).get(dtype)
        cfg = kernels.config_for(d, nq)
        kr = None
        if mode in ("vfa", "vsa"):
            kr = kernels.krepr(k, cfg[1])
            launches.append((i, mode, dtype, d, causal, b, h, n, "krepr_kernel", "compile", nq, hkv))
        for rep in ("compile", "profiled"):
            if mode in ("vfa", "vsa"):
                kernels.krepr(k, cfg[1], out=kr)
                launches.append((i, mode, dtype, d, causal, b, h, n, "krepr_kernel", rep, nq, hkv))
            kernels.attention(q, k, v, causal, mode, kr=kr)
            launches.append((i, mode, dtype, d, causal, b, h, n, "attn_fwd", rep, nq, hkv))
        torch.cuda.synchronize()
        print(f"case {i}: {mode} {dtype} d{d} b{b} h{h}/{hkv} q{nq} n{n} blocks {cfg}", file=sys.stderr, flush=True)
    if a.manifest:
        with open(a.manifest, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["case", "mode", "dtype", "head_dim", "causal", "batch", "heads", "seq_len", "kernel", "launch",
                        "seq_len_q", "kv_heads"])
            w.writerows(launches)
    return 0


if __name__ == "__main__":
    sys.exit(main())
