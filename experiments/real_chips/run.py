"""What VFA (and VSA) buy on real chips: predicted speedups over the FA2 kernel and each chip's own kernel.

Usage: python experiments/real_chips/run.py [--seq-len 2048] [--decode-kv 8192] [--out DIR]
For every built-in real chip, every matmul format it supports among bf16 (fp16 when it has no bf16), fp8_e4m3
and fp4, prefill and decode, it runs each variant below through the chip model with the kernel's own tiles
and checks its numerics on a few heads (``--numerics-heads``). Speedups are latency ratios against FA2 on
the FA2 kernel and against FA2 on the chip's own kernel, same chip, format and mode. A variant whose kernel
has no tile for the format (FA2 has no fp8 path) or no decode path is listed with the reason, not dropped.
``measured_range`` says whether shipped measurements of that chip, kernel and mode cover the shape
(``vfasim.validate.coverage``): a row outside is a prediction the model was never checked on.
Writes DIR/results.csv and DIR/results.md (default DIR: experiments/real_chips/out).

Kernels (``kernels/*.yaml``): the chip's own is FA3 on Hopper, FA4 on Blackwell (prefill; decode runs the
split-KV kernel there, FA4 describes no decode path) and the PTO kernel on Ascend.
Variants (algorithm, kernel):
- FA2: fa2 on the FA2 kernel (mma.sync, no overlap inside a thread block);
- base: fa2 on the chip's own kernel (on FA4 that includes its exp emulation and conditional rescale);
- VFA: vfa on the chip's own kernel; VFA on FA2: vfa on the FA2 kernel;
- VSA at the paper's lambda values (1e-3, 1e-2, 1e-1) on the chip's own kernel.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from vfasim import run
from vfasim.hw import load_hw
from vfasim.hw.formats import supported_formats
from vfasim.report.tables import write_table
from vfasim.errors import VfasimError
from vfasim.validate import coverage

HERE = Path(__file__).resolve().parent
CHIPS = ("H100-SXM", "H200", "B200", "B300", "Ascend-910B")
FORMATS = ("bf16", "fp8_e4m3", "fp4")
LAMS = (1e-3, 1e-2, 1e-1)
OWN = {"H100-SXM": "fa3", "H200": "fa3", "B200": "fa4", "B300": "fa4", "Ascend-910B": "ascend-pto"}
OWN_DECODE = {**OWN, "B200": "splitkv-decode", "B300": "splitkv-decode"}
VARIANTS: dict[str, tuple[str, str, dict]] = {  # name -> (algorithm, kernel or "own", options)
    "FA2": ("fa2", "fa2", {}),
    "base": ("fa2", "own", {}),
    "VFA": ("vfa", "own", {}),
    "VFA on FA2": ("vfa", "fa2", {}),
    **{f"VSA lam={lam:g}": ("vsa", "own", {"lam": lam}) for lam in LAMS},
}
COLUMNS = ("chip", "format", "mode", "variant", "kernel", "latency_us", "tflops", "bound", "speedup_vs_fa2",
           "speedup_vs_base", "verdict", "rel_err_vs_fp64", "skipped_block_fraction", "measured_range", "note")


def formats(chip: str) -> list[str]:
    have = supported_formats(load_hw(chip))
    picked = [f for f in FORMATS if f in have]
    return picked if "bf16" in picked or "fp16" not in have else ["fp16", *picked]


def shape(mode: str, args: argparse.Namespace) -> dict:
    """Prefill: one causal sequence; decode: one token per sequence against a long K/V cache (GQA)."""
    if mode == "prefill":
        return dict(seq_len=args.seq_len, batch=args.prefill_batch, heads=args.heads, kv_heads=args.heads,
                    causal=True)
    return dict(seq_len=args.decode_kv, batch=args.decode_batch, heads=args.heads, kv_heads=max(1, args.heads // 4),
                causal=False, decode=True, queries=1)


def one(chip: str, fmt: str, mode: str, variant: str, args: argparse.Namespace) -> dict:
    algo, kernel, opts = VARIANTS[variant]
    kernel = (OWN_DECODE if mode == "decode" else OWN)[chip] if kernel == "own" else kernel
    sizes = shape(mode, args)
    inside, _ = coverage(chip, kernel, mode == "decode", sizes["seq_len"], args.head_dim, fmt)
    row = {"chip": chip, "format": fmt, "mode": mode, "variant": variant, "kernel": kernel, "note": "",
           "measured_range": "inside" if inside else "outside"}
    try:
        res = run(chip, algo, head_dim=args.head_dim, kernel=kernel, matmul_format=fmt,
                  numerics_heads=args.numerics_heads, **shape(mode, args), **opts)
    except VfasimError as exc:  # no tile for this format, no decode path, not this chip: said, not dropped
        return {**dict.fromkeys(COLUMNS, ""), **row, "note": f"not run: {exc}"}
    num = res.numerics
    return {**row, "latency_us": res.latency_us, "tflops": res.chip["tflops"], "bound": res.chip["bound"],
            "verdict": num.get("verdict", ""), "rel_err_vs_fp64": num.get("rel_err_vs_fp64", ""),
            "skipped_block_fraction": num.get("skipped_block_fraction", "")}


def study(args: argparse.Namespace, chips=CHIPS, variants=tuple(VARIANTS)) -> list[dict]:
    rows = []
    for chip in chips:
        for fmt in formats(chip):
            for mode in ("prefill", "decode"):
                got = [one(chip, fmt, mode, v, args) for v in variants]
                base = {r["variant"]: r.get("latency_us") for r in got}
                for r in got:
                    for col, ref in (("speedup_vs_fa2", "FA2"), ("speedup_vs_base", "base")):
                        r[col] = base[ref] / r["latency_us"] if base.get(ref) and r["latency_us"] != "" else ""
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
