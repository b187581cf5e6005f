"""Launches of a few CTAs to a few waves: ``python3 -m harness.occupancy --out DIR [--quick]``.

Why: a kernel whose warps issue their own MMAs (``mma.sync``: SDPA's flash and efficient backends) was priced as if
a CTA alone on an SM could use only its slot's share of the tensor pipes (half of them where two CTAs fit), although
``validation/mma_h100_2026_11/`` shows four warps alone reaching 0.9 of eight warps' rate. The model now deals the
pipes among the CTAs an SM actually holds. This campaign times each kernel at CTA counts from a fraction of one CTA an
SM to a few waves, at the same tiles and K/V length, so that what a lone CTA costs against a shared one can be read
from the table.

Kernels: SDPA's flash, efficient and cuDNN backends and this project's Triton FA2 (``harness.kernels``), fp16, head
dims 64 and 128, non-causal, batch 1, 1-33 heads (one K/V head each) at 2,048 and 8,192 tokens: flash's 128-row tiles
give 16 or 64 CTAs a head, efficient's 64-row tiles twice that. Output as ``harness.campaign`` writes it.
"""

from __future__ import annotations

import sys

KERNELS = ("sdpa_flash", "sdpa_efficient", "sdpa_cudnn", "triton_fa2")
HEADS = (1, 2, 3, 4, 6, 8, 9, 12, 16, 17, 24, 33)
QUICK_HEADS = (4, 8)


def grid(quick: bool = False) -> list[tuple[str, int, int, int, int, int, bool]]:
    """Cases as (kernel, batch, heads, kv_heads, seq_len, head_dim, causal), the head counts of one kernel and shape
    in a row so a budget cut keeps whole sweeps."""
    heads, lengths = (QUICK_HEADS, (2048,)) if quick else (HEADS, (2048, 8192))
    return [(kern, 1, h, h, n, d, False) for n in lengths for d in (64, 128) for kern in KERNELS for h in heads]


def main(argv: list[str] | None = None) -> int:
    from harness.campaign import campaign_main
    return campaign_main("harness.occupancy", __doc__, grid, 7000, "two head counts at 2,048 tokens (smoke run)",
                         sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    raise SystemExit(main())
