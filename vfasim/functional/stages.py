"""Where each op kind sits in the kernel's software pipeline, and which tile buffers it holds.

The engine knows the algorithm, so it writes these into the trace (the ``stage``,
``take_buffer`` and ``free_buffer`` columns); the timing model only reads the
columns. A tile's ops fall in four stages: 0 K load and QK; 1 scale to exp;
2 rowsum, l update, cast of P, V load and PV; 3 O rescale and accumulate. Where the
PV matmul accumulates into O in place (a GPU's MMA: O lives in its accumulator),
the O rescale must finish before PV starts, so it and the O update the MMA does
move to stage 2 (``pipeline(o_in_place=True)``).
Prelude ops (Q load, key summary, m-init) run with stage 0 of their row's first
tile, the epilogue (normalize, store) with stage 3 of its last.

Assumptions:
- K and V tiles each live in a ring of buffers: the K load takes a K buffer that
  the tile's QK frees, the V load a V buffer that its PV frees. Score tiles are
  bounded by the stage offsets, not by a buffer column.
- Data dependencies never point to a later stage (the trace validator checks it).
"""

from __future__ import annotations

from vfasim.trace import KindSchedule

_STAGES = {
    "key_summary": 0, "load_q": 0, "minit_matmul": 0, "minit_max": 0, "load_k": 0, "qk_matmul": 0,
    "move_s": 1, "scale": 1, "mask": 1, "rowmax": 1, "running_max": 1, "skip_test": 1,
    "rescale_factor": 1, "sub": 1, "exp": 1, "exp_emul": 1,
    "rowsum": 2, "accumulate_l": 2, "quant_p": 2, "cast_p": 2, "move_p": 2, "load_v": 2, "pv_matmul": 2,
    "move_o": 3, "move_pv": 3, "rescale_o": 3, "accumulate_o": 3, "accumulate_pv": 3, "normalize": 3,
    "store_o": 3,
}
_O_UPDATES = ("move_o", "move_pv", "rescale_o", "accumulate_o", "accumulate_pv")  # part of PV when it is in place
_BUFFERS = {"takes": {"load_k": "k", "load_v": "v"}, "frees": {"qk_matmul": "k", "pv_matmul": "v"}}
SOFTWARE_PIPELINE = KindSchedule(stage=_STAGES, **_BUFFERS)
IN_PLACE_PIPELINE = KindSchedule(stage={**_STAGES, **dict.fromkeys(_O_UPDATES, 2)}, **_BUFFERS)


def pipeline(o_in_place: bool) -> KindSchedule:
    """The stage table of a kernel whose PV matmul accumulates into O in place, or not."""
    return IN_PLACE_PIPELINE if o_in_place else SOFTWARE_PIPELINE
