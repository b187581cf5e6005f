"""Lengths on and just off a tile edge: ``python3 -m harness.edges --out DIR [--quick]``.

Why: SDPA's flash backend runs causal prefill at lengths that are not a multiple of its tile (257, 700, 1,000 tokens)
25-39% slower than the model prices it, while the same lengths without a mask, and causal lengths that are a multiple
of the tile (256, 384, 1,024), agree within a few per cent. This campaign times each kernel at pairs of lengths, one
on a multiple of 128 and the next ones past it, causal and not, at the same batch and heads, so that what one extra
token costs can be read from the table and not guessed.

Kernels: SDPA's flash, efficient and cuDNN backends and this project's Triton FA2 (``harness.kernels``), fp16, head
dims 64 and 128, 16 x 32 heads (one K/V head per query head: the efficient backend refuses GQA) and, for flash, 16 x
32/8 (GQA). Output in ``--out``: ``attention.csv`` (the validation schema; CUDA events, L2 flushed, median),
``profile.csv`` (every CUDA kernel each case launches, from ``torch.profiler``, with its template name: it says which
instantiation ran), ``skipped.csv``, sidecars with the provenance, ``clocks_trace.txt``, ``command.txt``, ``log.txt``.
"""

from __future__ import annotations

import sys

#: on a multiple of 128, one past it, and lengths of the other campaigns that are on no tile edge
LENGTHS = (256, 257, 320, 384, 385, 512, 513, 700, 1000, 1024, 1025, 3000, 3072)
QUICK_LENGTHS = (256, 257)
KERNELS = ("sdpa_flash", "sdpa_efficient", "sdpa_cudnn", "triton_fa2")


def grid(quick: bool = False) -> list[tuple[str, int, int, int, int, int, bool]]:
    """Cases as (kernel, batch, heads, kv_heads, seq_len, head_dim, causal), the lengths of one shape in a row so a
    budget cut keeps whole pairs."""
    lengths = QUICK_LENGTHS if quick else LENGTHS
    shapes = [(kern, 16, 32, 32) for kern in KERNELS] + [("sdpa_flash", 16, 32, 8)]
    return [(kern, b, h, hk, n, d, c) for d in (64, 128) for c in (True, False) for kern, b, h, hk in shapes
            for n in lengths]


def main(argv: list[str] | None = None) -> int:
    from harness.campaign import campaign_main
    return campaign_main("harness.edges", __doc__, grid, 5000, "two lengths only (smoke run)",
                         sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    raise SystemExit(main())
