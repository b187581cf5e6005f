"""FlashAttention-2's uneven causal code: the mask work per element at which the model reproduces it.

FA2 compiles its causal kernel twice, even (both lengths whole tiles) and uneven, and the uneven one runs 1.09-1.45x
slower per tile (``validation/edges_h100_2026_11``). The model has no instruction fetch, which Nsight Compute names as
the cause; ``kernels/fa2.yaml`` carries the difference as ``uneven_mask_work``, the vector operations a score element
of a masked tile costs in the uneven code. This script tries candidate figures, each head dim's tile on its own, and
prints the error of the model on that campaign's uneven causal rows of SDPA's flash backend for each (the calibration
rows, chosen before looking at any other campaign), then the same rows of the earlier campaigns (held out, but seen
before the figures were made) and of the H200 sweep measured after them (blind).

    python experiments/real_chips/uneven_mask.py            # ~1 min on 2 cores
    python experiments/real_chips/uneven_mask.py --quick    # two candidates, calibration rows only (the tests)
"""

from __future__ import annotations

import argparse
import sys

from vfasim.kernel import load_kernel
from vfasim.validate import load_rows, modelled, predict_all

CAMPAIGN = "edges_h100_2026_11"
BLIND = "edges_h200_2026_11"  # the same sweep on an H200, measured after the figures were fixed
CANDIDATES = (1.0, 12.0, 24.0, 30.0, 36.0, 42.0, 48.0, 54.0, 60.0, 66.0)


def uneven_rows(which: str, head_dim: int) -> list:
    """The causal sdpa_flash prefill rows at ``head_dim`` whose lengths are not whole tiles of FA2's tile there, of
    the calibration campaign (``which`` "calibration"), of the H200 sweep measured after it ("blind") or of every
    earlier table ("earlier": seen before the figures were made)."""
    kernel = load_kernel("fa2")
    rule = kernel.tile(head_dim, "16bit", True)
    rows = []
    for r in load_rows():
        if r.kernel != "sdpa_flash" or not r.causal or r.decode or r.head_dim != head_dim or not modelled(r):
            continue
        source = "calibration" if CAMPAIGN in r.table else "blind" if BLIND in r.table else "earlier"
        if source != which:
            continue
        even_code = r.head_dim <= (kernel.uneven_above_head_dim or 0)  # an even and an uneven code to compare
        if even_code and kernel.uneven(rule, r.head_dim, r.seq_len_q, r.seq_len):
            rows.append(r)
    return rows


def with_figure(head_dim: int, figure: float):
    """FA2's description with the tile of ``head_dim`` at ``figure`` operations an element in its uneven code."""
    kernel = load_kernel("fa2")
    rule = kernel.tile(head_dim, "16bit", True)
    tiles = [t.model_copy(update={"uneven_mask_work": figure}) if t is rule else t for t in kernel.tiles]
    return kernel.model_copy(update={"tiles": tiles})


def errors(rows: list, figure: float, head_dim: int, jobs: int) -> tuple[float, float]:
    """(MAPE, bias) of the model on ``rows`` with that figure."""
    preds = predict_all(rows, jobs=jobs, kernels=(with_figure(head_dim, figure),))
    errs = [p.error for p in preds]
    return sum(map(abs, errs)) / len(errs), sum(errs) / len(errs)


def scores(head_dim: int, figures: tuple[float, ...], jobs: int = 2) -> list[tuple[float, float, float]]:
    """(figure, MAPE, bias) on the calibration rows at ``head_dim`` for each candidate figure."""
    rows = uneven_rows("calibration", head_dim)
    if not rows:
        raise SystemExit(f"head dim {head_dim}: no uneven causal rows in {CAMPAIGN}")
    return [(f, *errors(rows, f, head_dim, jobs)) for f in figures]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="two candidates, calibration rows only")
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args(argv)
    shipped = load_kernel("fa2")
    for head_dim in (64, 128):
        figures = CANDIDATES[::5] if a.quick else CANDIDATES
        scored = scores(head_dim, figures, a.jobs)
        best = min(scored, key=lambda s: s[1])
        now = shipped.tile(head_dim, "16bit", True).uneven_mask_work
        print(f"head dim {head_dim}: {len(uneven_rows('calibration', head_dim))} calibration rows ({CAMPAIGN}); "
              f"kernels/fa2.yaml has {now}")
        for f, m, b in scored:
            print(f"  {f:5.1f} ops/element: MAPE {100 * m:5.1f}%, bias {100 * b:+5.1f}%" + ("  <- least" if f == best[0]
                                                                                        else ""))
        if best[0] in (figures[0], figures[-1]):
            print(f"  the least error sits at an end of the candidates ({best[0]}): widen them")
        for which, what in (("earlier", "the earlier campaigns, seen before"), ("blind", f"{BLIND}, blind")):
            held = uneven_rows(which, head_dim) if not a.quick and now is not None else []
            if held:
                m, b = errors(held, now, head_dim, a.jobs)
                m1, b1 = errors(held, 1.0, head_dim, a.jobs)
                print(f"  held out ({len(held)} rows of {what}): MAPE {100 * m1:.1f}% (bias {100 * b1:+.1f}%) "
                      f"at 1 op/element, {100 * m:.1f}% (bias {100 * b:+.1f}%) at the shipped {now}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
