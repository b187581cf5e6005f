"""FlexAttention off a multiple of 128: what its bounds-checked kernel costs a CTA and a key block, and a check.

Usage: python experiments/real_chips/flex_bounds.py [--quick]

FlexAttention compiles another kernel where the query or K/V length is not a multiple of 128 (the lowering's
``IS_DIVISIBLE``; ``kernels/flex.yaml`` ``bounds_multiple``): every key block checks its bounds. Two units sweeps
measured it on one H200 the same day (``validation/flex_units_h200_2026_11``: 1,056 query blocks of 128 rows at K/V
lengths 128-4,096; ``flex_units_off_h200_2026_11``: the same query blocks at 120-4,000, each length off a multiple).
For each sweep a line of latency against key blocks per CTA (from ``unit_cost.FROM_SEQ`` on; a last block in part
counts whole) gives a slope (waves x a key block's time) and an intercept (the launch and waves x a CTA's cost beside
its blocks). The off sweep's line less the on sweep's, less the model's own difference between the two (it prices a
select on every score of the off launch, one vector operation, and nothing else), over the waves, in cycles of the
config's 1.83 GHz: ``bounds_block_cycles`` (a key block) and, added to the tile's ``cta_cycles``, ``bounds_cta_cycles``
(a CTA). Head dim 256's sweep runs its off lengths in a wave count of their own, so it has no figure.

The check: ``validation/flex_edges_h200_2026_11``, pairs of lengths on and just off a multiple with as many 128-key
blocks at another batch and heads, causal and not: the model's time ratio of each pair against the measured one, with
the figures and without them. These pairs (and the H200's blind FlexAttention rows, which showed the miss) were seen
before the figures were taken: they check the figures, they are not blind to them.

Expected run time: about a minute on 2 cores (``--quick``: head dim 64 and two pairs).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # unit_cost.py: the sweep's lines
from unit_cost import FROM_SEQ, line, measured  # noqa: E402
from vfasim import run
from vfasim.hw import load_hw
from vfasim.kernel import Kernel, load_kernel
from vfasim.validate import load_rows

ROOT = Path(__file__).resolve().parents[2]
ON = ROOT / "validation" / "flex_units_h200_2026_11" / "units.csv"
OFF = ROOT / "validation" / "flex_units_off_h200_2026_11" / "units.csv"
EDGES = "flex_edges_h200_2026_11"
CHIP = "H200"


def with_figures(kernel: Kernel, head_dim: int, cta: int | None, block: int | None) -> Kernel:
    """``kernel`` with the tile of ``head_dim`` at those figures (None, None: none)."""
    rule = kernel.tile(head_dim, "16bit", False)
    tiles = [t.model_copy(update={"bounds_cta_cycles": cta, "bounds_block_cycles": block}) if t is rule else t
             for t in kernel.tiles]
    return kernel.model_copy(update={"tiles": tiles})


def sweep_line(rows: list[dict], kernel: Kernel, head_dim: int) -> tuple[tuple[float, float], tuple[float, float], int]:
    """(measured (slope, intercept), the model's, waves) of a units sweep's rows at ``head_dim``."""
    block_k = kernel.tile(head_dim, "16bit", False).block_k
    seq = np.array([int(r["seq_len"]) for r in rows])
    tiles = np.ceil(seq / block_k)
    us = np.array([float(r["value"]) for r in rows])
    res = [run(CHIP, "fa2", kernel=kernel, head_dim=head_dim, seq_len=int(r["seq_len"]), heads=int(r["heads"]),
               causal=False, numerics_heads=0) for r in rows]
    waves = {int(x.chip["waves"]) for x in res}  # type: ignore[call-overload]
    if len(waves) != 1:
        raise SystemExit(f"head dim {head_dim}: the sweep runs in {sorted(waves)} waves, not one count")
    return line(tiles, us, seq), line(tiles, np.array([x.latency_us for x in res]), seq), waves.pop()


def figures(head_dim: int) -> tuple[int, int]:
    """(bounds_cta_cycles, bounds_block_cycles) of the tile of ``head_dim`` from the two sweeps."""
    shipped = load_kernel("flex")
    plain = with_figures(shipped, head_dim, None, None)  # the divisible kernel's pricing at every length
    checked = with_figures(shipped, head_dim, shipped.tile(head_dim, "16bit", False).cta_cycles, 0)  # a select a score
    on = measured(ON)[("flex_attention", head_dim, "fp16")]
    off = measured(OFF)[("flex_attention", head_dim, "fp16")]
    (s_on, i_on), (ms_on, mi_on), n_on = sweep_line(on, plain, head_dim)
    (s_off, i_off), (ms_off, mi_off), n_off = sweep_line(off, checked, head_dim)
    if n_on != n_off:
        raise SystemExit(f"head dim {head_dim}: the sweeps run in {n_on} and {n_off} waves")
    clock = load_hw(CHIP).clock_ghz * 1e3  # cycles a microsecond
    block = ((s_off - s_on) - (ms_off - ms_on)) / n_on * clock
    cta = ((i_off - i_on) - (mi_off - mi_on)) / n_on * clock
    base = shipped.tile(head_dim, "16bit", False).cta_cycles or 0
    if cta < 0 or block < 0:  # the fields take no negative figure: said, not hidden
        print(f"head dim {head_dim}: the sweeps give {cta:.0f} cycles a CTA and {block:.0f} a key block; a negative "
              "figure is taken as 0")
    print(f"head dim {head_dim}: a key block on all CTAs {s_on:.2f} -> {s_off:.2f} us (model {ms_on:.2f} -> "
          f"{ms_off:.2f}), intercept {i_on:.1f} -> {i_off:.1f} us (model {mi_on:.1f} -> {mi_off:.1f}), {n_on} waves "
          f"(lengths from {FROM_SEQ}): a key block {block:.0f} cycles more, a CTA {cta:.0f} more than cta_cycles "
          f"{base}")
    return int(round(base + max(cta, 0))), int(round(max(block, 0)))


def check(kernel: Kernel, dims: tuple[int, ...], limit: int | None) -> None:
    """The edge pairs' measured time ratios beside the model's, with the shipped description and without its
    bounds figures."""
    rows = {(r.head_dim, r.causal, r.seq_len): r for r in load_rows(CHIP) if r.table.startswith(EDGES)}
    plain = kernel
    for d in dims:
        plain = with_figures(plain, d, None, None)
    pairs = [(1024, 1000), (2048, 2000), (4096, 4000)][:limit]
    for d in dims:
        for causal in (False, True):
            for on, off in pairs:
                a, b = rows[(d, causal, on)], rows[(d, causal, off)]
                model = {}
                for name, k in (("with", kernel), ("without", plain)):
                    t = [run(CHIP, "fa2", kernel=k, head_dim=d, seq_len=r.seq_len, heads=r.heads, batch=r.batch,
                             causal=causal, numerics_heads=0).latency_us for r in (a, b)]
                    model[name] = t[1] / t[0]
                print(f"  d{d} {'causal' if causal else 'full':6} {off}/{on}: measured {b.value / a.value:.3f}x, model "
                      f"{model['with']:.3f}x with the figures, {model['without']:.3f}x without")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="head dim 64, two pairs")
    a = ap.parse_args(argv)
    dims = (64,) if a.quick else (64, 128)
    for d in dims:
        cta, block = figures(d)
        print(f"  -> bounds_cta_cycles {cta}, bounds_block_cycles {block}; kernels/flex.yaml gives "
              f"{load_kernel('flex').tile(d, '16bit', False).bounds_cta_cycles}, "
              f"{load_kernel('flex').tile(d, '16bit', False).bounds_block_cycles}")
    print(f"check ({EDGES}, pairs of as many 128-key blocks):")
    check(load_kernel("flex"), dims, 2 if a.quick else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
