"""What VFA (and VSA) buy on real chips: predicted speedups over FA2- and FA4-style baselines.

Usage: python experiments/real_chips/run.py [--seq-len 2048] [--decode-kv 8192] [--out DIR]
For every built-in real chip, every matmul format it supports among bf16 (fp16 when it has no bf16), fp8_e4m3
and fp4, prefill and decode, it runs each variant below through the chip model and checks its
numerics on a few heads (``--numerics-heads``). Speedups are latency ratios against the FA2-style
and the FA4-style baseline of the same chip, format and mode. Writes DIR/results.csv and
DIR/results.md (default DIR: experiments/real_chips/out).

Variants (algorithm, kernel style):
- fa2 / fa2: the Ampere-style kernel (one thread block per tile, no overlap inside it, mma.sync on its
  share of the tensor cores, operands read from shared memory by every warp);
- fa2 / fa4: the FA4-style baseline: FA3's ping-pong plus FA4's exp emulation on the FMA units
  (its other policy, the conditional rescale, needs the data: see ``fa4 / fa4``);
- fa4 / fa4: the same with FA4's conditional rescale (data-dependent: runs on every head);
- vfa / fa3 and vfa / fa4: VFA's frozen max on the ping-pong kernel, without and with exp emulation;
- vsa / fa4 at the paper's λ values (VSA rows of the VFA paper: 1e-3, 1e-2, 1e-1).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from vfasim import run
from vfasim.hw import load_hw
from vfasim.hw.formats import supported_formats
from vfasim.report.tables import write_table
from vfasim.validate import DISPATCH

HERE = Path(__file__).resolve().parent
CHIPS = ("H100-SXM", "H200", "B200", "B300", "Ascend-910B")
FORMATS = ("bf16", "fp8_e4m3", "fp4")
LAMS = (1e-3, 1e-2, 1e-1)
VARIANTS: dict[str, tuple[str, str, dict]] = {
    "FA2": ("fa2", "fa2", {}),
    "FA4-style": ("fa2", "fa4", {}),
    "FA4 (cond. rescale)": ("fa4", "fa4", {}),
    "VFA": ("vfa", "fa3", {}),
    "VFA+emul": ("vfa", "fa4", {}),
    **{f"VSA lam={lam:g}": ("vsa", "fa4", {"lam": lam}) for lam in LAMS},
}
COLUMNS = ("chip", "format", "mode", "variant", "latency_us", "tflops", "bound", "speedup_vs_fa2",
           "speedup_vs_fa4", "verdict", "rel_err_vs_fp64", "skipped_block_fraction")


def formats(chip: str) -> list[str]:
    have = supported_formats(load_hw(chip))
    picked = [f for f in FORMATS if f in have]
    return picked if "bf16" in picked or "fp16" not in have else ["fp16", *picked]


def shape(mode: str, args: argparse.Namespace, style: str) -> dict:
    """Prefill: one causal sequence; decode: one token per sequence against a long K/V cache (GQA)."""
    blocks = {"block_q": 128, "block_k": 64} if style == "fa2" else {"block_q": 64, "block_k": 128}
    if mode == "prefill":
        return dict(seq_len=args.seq_len, batch=args.prefill_batch, heads=args.heads, kv_heads=args.heads,
                    causal=True, **blocks)
    return dict(seq_len=args.decode_kv, batch=args.decode_batch, heads=args.heads, kv_heads=max(1, args.heads // 4),
                causal=False, decode=True, queries=1, **blocks)


def one(chip: str, fmt: str, mode: str, variant: str, args: argparse.Namespace) -> dict:
    algo, style, opts = VARIANTS[variant]
    res = run(chip, algo, head_dim=args.head_dim, kernel_style=style, matmul_format=fmt,
              dispatch=DISPATCH.get(chip, "greedy"),
              numerics_heads=args.numerics_heads, **shape(mode, args, style), **opts)
    num = res.numerics
    return {"chip": chip, "format": fmt, "mode": mode, "variant": variant, "latency_us": res.latency_us,
            "tflops": res.chip["tflops"], "bound": res.chip["bound"], "verdict": num.get("verdict", ""),
            "rel_err_vs_fp64": num.get("rel_err_vs_fp64", ""),
            "skipped_block_fraction": num.get("skipped_block_fraction", "")}


def study(args: argparse.Namespace, chips=CHIPS, variants=tuple(VARIANTS)) -> list[dict]:
    rows = []
    for chip in chips:
        for fmt in formats(chip):
            for mode in ("prefill", "decode"):
                got = [one(chip, fmt, mode, v, args) for v in variants]
                base = {r["variant"]: r["latency_us"] for r in got}
                for r in got:
                    r["speedup_vs_fa2"] = base["FA2"] / r["latency_us"]
                    r["speedup_vs_fa4"] = base["FA4-style"] / r["latency_us"]
                rows += got
    return rows


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seq-len", type=int, default=2048, help="prefill sequence length (default 2048)")
    p.add_argument("--decode-kv", type=int, default=8192, help="decode K/V length (default 8192)")
    p.add_argument("--prefill-batch", type=int, default=4)
    p.add_argument("--decode-batch", type=int, default=8)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--numerics-heads", type=int, default=1, help="heads whose numerics are checked (default 1)")
    p.add_argument("--chips", default=",".join(CHIPS), help="comma list of chips")
    p.add_argument("--out", type=Path, default=HERE / "out")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> list[dict]:
    args = parse(argv)
    rows = study(args, tuple(args.chips.split(",")))
    write_table(rows, COLUMNS, args.out / "results")
    return rows


if __name__ == "__main__":
    main()
