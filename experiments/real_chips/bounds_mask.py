"""cuDNN's bounds check: the mask work per element at which the model reproduces a K/V length off its key blocks.

Without a causal mask, SDPA's cuDNN backend takes longer where the K/V length is not a whole number of its 128-key
blocks, over the whole launch, not only on the last block: in ``validation/edges_h100_2026_11``, 3,000 keys take
1.13x and 1,000 keys 1.12x the time of 3,072 and 1,024 at head dim 64 (the same number of key blocks, so the same
tiles), 1.04x and 1.07x at 128; with a causal mask 0.97-1.03x. Every iteration checks the bounds.
``kernels/cudnn.yaml`` carries it as ``bounds_mask_work``: the vector operations each score element costs in such a
launch, every key block masked.

The figure is read from those pairs (an off-block length and the on-block length of as many key blocks, both
measured, no causal mask): for each candidate, the model's time ratio of the pair against the measured ratio, the
least mean |difference| over the pairs. The pairs' shapes are the same but for the length, so what the model gets
wrong of both (the launch, the waves) cancels. Tried first, and printed beside it: the least MAPE over that campaign's
off-block rows at every length; its short launches (257-700 keys, whose error is the launch's, not the loop's) pick
1.0 at head dim 64. The effect was noticed on the H200's blind grids before it was looked for here: their rows are
not blind to it (``python experiments/real_chips/blind.py`` gives them with and without it).

    python experiments/real_chips/bounds_mask.py            # about a minute on 2 cores
    python experiments/real_chips/bounds_mask.py --quick    # two candidates (the tests)
"""

from __future__ import annotations

import argparse
import sys

from vfasim.kernel import load_kernel
from vfasim.validate import Row, load_rows, modelled, predict_all

CAMPAIGN = "edges_h100_2026_11"
CANDIDATES = (0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0)


def calibration_rows(head_dim: int) -> list[Row]:
    """The campaign's non-causal fp16 sdpa_cudnn prefill rows at ``head_dim``."""
    return [r for r in load_rows() if r.table.startswith(CAMPAIGN) and r.kernel == "sdpa_cudnn" and not r.causal
            and r.head_dim == head_dim and r.dtype == "fp16" and modelled(r)]


def pairs(rows: list[Row], block_k: int) -> list[tuple[Row, Row]]:
    """(off-block row, on-block row of as many key blocks): both lengths measured."""
    on = {-(-r.seq_len // block_k): r for r in rows if r.seq_len % block_k == 0}
    return [(r, on[-(-r.seq_len // block_k)]) for r in rows if r.seq_len % block_k and -(-r.seq_len // block_k) in on]


def with_figure(head_dim: int, figure: float | None):
    """cuDNN's description with the tile of ``head_dim`` at ``figure`` operations an element (None: none)."""
    kernel = load_kernel("cudnn")
    rule = kernel.tile(head_dim, "16bit", False)
    tiles = [t.model_copy(update={"bounds_mask_work": figure}) if t is rule else t for t in kernel.tiles]
    return kernel.model_copy(update={"tiles": tiles})


def score(rows: list[Row], matched: list[tuple[Row, Row]], figure: float | None, head_dim: int,
          jobs: int) -> tuple[float, float]:
    """(mean |model ratio - measured ratio| over ``matched``, MAPE over the off-block ``rows``) with that figure."""
    preds = {id(p.row): p for p in predict_all(rows, jobs=jobs, kernels=(with_figure(head_dim, figure),))}
    gaps = [abs(preds[id(a)].predicted / preds[id(b)].predicted - a.value / b.value) for a, b in matched]
    block_k = load_kernel("cudnn").tile(head_dim, "16bit", False).block_k
    off = [abs(preds[id(r)].error) for r in rows if r.seq_len % block_k]
    return sum(gaps) / len(gaps), sum(off) / len(off)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="two candidates")
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args(argv)
    shipped = load_kernel("cudnn")
    for head_dim in (64, 128):
        rows = calibration_rows(head_dim)
        block_k = shipped.tile(head_dim, "16bit", False).block_k
        matched = pairs(rows, block_k)
        if not matched:
            raise SystemExit(f"head dim {head_dim}: no pair of lengths of as many key blocks in {CAMPAIGN}")
        figures = (None, *(CANDIDATES[1::3] if a.quick else CANDIDATES))
        scored = [(f, *score(rows, matched, f, head_dim, a.jobs)) for f in figures]
        best = min(scored, key=lambda s: s[1])
        print(f"head dim {head_dim}: pairs {', '.join(f'{x.seq_len}/{y.seq_len} {x.value / y.value:.3f}x' for x, y in matched)}"
              f" ({CAMPAIGN}); the description's figure: {shipped.tile(head_dim, '16bit', False).bounds_mask_work}")
        for f, gap, mape in scored:
            print(f"  {'none' if f is None else f'{f:4.1f}':>4} ops/element: ratio off by {gap:.3f}; MAPE over the "
                  f"off-block rows {mape:5.1%}" + ("  <- least ratio error" if f == best[0] else "")
                  + ("  (the largest candidate: a bound, not a fit)" if f == best[0] == figures[-1] else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
