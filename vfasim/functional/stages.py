"""Where each op kind sits in the kernel's software pipeline, and which tile buffers it holds.

The engine knows the algorithm, so it writes these into the trace (the ``stage``,
``take_buffer`` and ``free_buffer`` columns); the timing model only reads the
columns. A tile's ops fall in four stages: 0 K load and QK; 1 scale to exp;
2 rowsum, l update, cast of P, V load and PV; 3 O rescale and accumulate.
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

SOFTWARE_PIPELINE = KindSchedule(
    stage={
        "key_summary": 0, "load_q": 0, "minit_matmul": 0, "minit_max": 0, "load_k": 0, "qk_matmul": 0,
        "move_s": 1, "scale": 1, "mask": 1, "rowmax": 1, "running_max": 1, "skip_test": 1,
        "rescale_factor": 1, "sub": 1, "exp": 1, "exp_emul": 1,
        "rowsum": 2, "accumulate_l": 2, "quant_p": 2, "cast_p": 2, "move_p": 2, "load_v": 2, "pv_matmul": 2,
        "move_o": 3, "move_pv": 3, "rescale_o": 3, "accumulate_o": 3, "accumulate_pv": 3, "normalize": 3,
        "store_o": 3,
    },
    takes={"load_k": "k", "load_v": "v"},
    frees={"qk_matmul": "k", "pv_matmul": "v"},
)
