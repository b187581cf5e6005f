"""Decode with grouped-query attention at a fixed K/V: ``python3 -m harness.gqa --out DIR``.

Why: the second blind campaign (``validation/blind_grid2_h200_2026_11``) has the Triton decode tile 18-27% faster in
the model than on the GPU at GQA 8:1, where the model finds those launches bound by the L2 port (every query head's
program reads its K/V head's tiles again). This sweep holds the K/V fixed (batch 4, 8 K/V heads, head dim 128, fp16)
and grows the query heads per K/V head, 1 to 8, so a call's time against the group size shows what each further
query head's pass over the same K/V costs: from HBM once, from the L2 after. One query per head (the campaigns'
decode); K/V lengths 10,000 and 48,000. Kernels: ``triton_fa2`` (this project's decode tile), ``triton_vfa_attn``
(VFA's attention kernel on the same tile, its key summaries made before the timing) and ``sdpa_flash``.

Output (``--out DIR``): ``gqa.csv`` (kernel, K/V length, query heads, K/V heads, the call's timed median and spread as
the campaigns time a call, ``harness.bench.Timer``), its sidecar, ``log.txt``, ``command.txt``,
``clocks_trace.txt``. The grid needs no torch.
"""

from __future__ import annotations

import argparse
import sys

BATCH, KV_HEADS, HEAD_DIM = 4, 8, 128
GROUPS = (1, 2, 4, 8)
KEYS = (10000, 48000)
KERNELS = ("triton_fa2", "triton_vfa_attn", "sdpa_flash")
COLUMNS = ["kernel", "dtype", "head_dim", "batch", "heads", "kv_heads", "seq_len_q", "seq_len", "call_us",
           "call_spread_pct", "reps"]


def grid(quick: bool = False, kv_heads: int = KV_HEADS, groups: tuple[int, ...] = GROUPS,
         kernels: tuple[str, ...] = KERNELS) -> list[tuple[str, int, int]]:
    """Cases as (kernel, K/V length, query heads)."""
    keys, groups = ((10000,), (groups[0], groups[-1])) if quick else (KEYS, groups)
    return [(kernel, n, kv_heads * g) for kernel in kernels for n in keys for g in groups]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv if argv is None else argv
    ap = argparse.ArgumentParser(prog="python -m harness.gqa", description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for gqa.csv and the rest (created)")
    ap.add_argument("--quick", action="store_true", help="one K/V length, the first and last group (smoke run)")
    ap.add_argument("--batch", type=int, default=BATCH, help=f"sequences (default {BATCH})")
    ap.add_argument("--kv-heads", type=int, default=KV_HEADS, help=f"K/V heads (default {KV_HEADS})")
    ap.add_argument("--groups", default=",".join(map(str, GROUPS)),
                    help="query heads a K/V head, comma-separated (default %(default)s)")
    ap.add_argument("--kernels", default=",".join(KERNELS), help="comma-separated (default %(default)s)")
    a = ap.parse_args(argv[1:])
    names = tuple(a.kernels.split(","))
    groups = tuple(int(g) for g in a.groups.split(",") if g.strip().isdigit())
    if a.batch < 1 or a.kv_heads < 1 or len(groups) != len(a.groups.split(",")) or min(groups) < 1 \
            or not set(names) <= set(KERNELS):
        ap.error(f"--batch, --kv-heads and --groups take positive integers, --kernels some of {', '.join(KERNELS)}")
    from harness.campaign import measurement

    note = {"method": "harness.bench.Timer (L2 flushed, sleep kernel ahead, CUDA events, median)",
            "inputs": f"standard normal Q, K, V (seeded) in fp16; batch {a.batch}, {a.kv_heads} K/V heads, head dim "
                      f"{HEAD_DIM}, one query per head"}
    m = measurement(a.out, "harness.gqa", argv, note, {"quick": a.quick, "batch": a.batch, "kv_heads": a.kv_heads,
                                                        "groups": list(groups), "kernels": list(names)})
    if m is None:
        return 1
    cases = grid(a.quick, a.kv_heads, groups, names)
    return m.finish((("gqa.csv", timed(cases, m.log, a.batch, a.kv_heads), COLUMNS),))


def timed(cases: list[tuple[str, int, int]], log, batch: int = BATCH, kv_heads: int = KV_HEADS) -> list[dict]:
    """A row per case: one decode call of its kernel, timed."""
    import torch

    from harness import kernels
    from harness.attention import sdpa_call
    from harness.bench import Timer

    timer, rows = Timer(), []
    g = torch.Generator(device="cuda")
    for i, (kernel, n, heads) in enumerate(cases):
        g.manual_seed(9000 + i)
        q = torch.randn((batch, heads, 1, HEAD_DIM), device="cuda", generator=g).half()
        k, v = (torch.randn((batch, kv_heads, n, HEAD_DIM), device="cuda", generator=g).half() for _ in range(2))
        if kernel.startswith("triton"):
            out, mode = torch.empty_like(q), kernel.split("_")[1]
            kr = kernels.krepr(k, kernels.config_for(HEAD_DIM, 1)[1]) if mode == "vfa" else None

            def call():
                kernels.attention(q, k, v, False, mode, out=out, kr=kr)
        else:
            call = sdpa_call(kernel, q, k, v, False)
        for _ in range(3):
            call()
        torch.cuda.synchronize()
        t = timer.time(call)
        rows.append({"kernel": kernel, "dtype": "fp16", "head_dim": HEAD_DIM, "batch": batch, "heads": heads,
                     "kv_heads": kv_heads, "seq_len_q": 1, "seq_len": n, "call_us": round(t.median_us, 3),
                     "call_spread_pct": round(t.spread_pct, 2), "reps": t.reps})
        log(f"{kernel} K/V {n}, {heads}/{kv_heads} heads: {t.median_us:.2f} us (spread {t.spread_pct:.1f}%)")
        del q, k, v
    return rows


if __name__ == "__main__":
    raise SystemExit(main())
