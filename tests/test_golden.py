"""Golden numbers: summary cycles and trace digests of small runs, so a change in results is seen.

After an intended change, rewrite them with ``python -m pytest tests/test_golden.py --update-golden``
and say why in the commit. Only data-independent structure is pinned (fa2 and vfa traces do not
depend on the values of Q/K/V), so BLAS rounding on another CPU cannot move them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import vfasim

GOLDEN = Path(__file__).with_name("golden.json")
CASES = [(hw, algo) for hw in ("C16V32", "C4V16", "C4V16-2xexp") for algo in ("fa2", "vfa")]
SHAPE = dict(seq_len=640, head_dim=64, block_q=64, block_k=64, causal=True, heads=2, seed=0)


def summarize(hw: str, algo: str) -> dict:
    r = vfasim.run(hw, algo, **SHAPE)
    return {"latency_cycles": r.latency_cycles, "trace_digest": r.manifest["trace_digest"],
            "trace_ops": r.manifest["trace_ops"], "bottleneck": r.bottleneck, "ops": r.ops}


def test_golden_numbers(update_golden):
    got = {f"{hw}/{algo}": summarize(hw, algo) for hw, algo in CASES}
    if update_golden:
        GOLDEN.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
        pytest.skip("golden numbers rewritten")
    assert got == json.loads(GOLDEN.read_text())
