"""Long rows emitted once per tile pattern and repeated: the same trace as the full engine's, or the full emission."""

from __future__ import annotations

import numpy as np
import pytest

import vfasim.functional.trace_only as trace_only_module
from vfasim.functional import Precision, Tiling, policy_for, run_engine
from vfasim.repeats import Gap, gaps, repeated
from vfasim.functional.trace_only import _TraceLoop, trace_only
from vfasim.workloads import make_workload

FP8 = Precision(matmul="float8_e4m3", vector="float16",
                scaling={"q": "per_tensor", "k": "per_tensor", "v": "per_tensor", "p": "none"})


def _compressed(tiling: Tiling, algo: str, precision: Precision = Precision()) -> tuple:
    loop = _TraceLoop(tiling, policy_for(algo), precision, False, False, repeat=True)
    loop.prelude()
    loop.all_steps()
    built = loop.finish_trace(algo)
    return built, gaps(built, loop.template, loop.copies)


@pytest.mark.parametrize("algo", ["fa2", "vfa"])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("decode", [False, True])
@pytest.mark.parametrize("precision", [Precision(), FP8], ids=["c16v32", "c8v16"])
@pytest.mark.parametrize("mask_steps", [0, 2])
def test_repeated_rows_give_the_full_engines_trace(algo, causal, decode, precision, mask_steps):
    wl = make_workload("llm-like", 1000, 32, 4, 0, 2)
    q = wl.q[:, -5:] if decode else wl.q
    tiling = Tiling(q.shape[1], 1000, 32, 5 if decode else 64, 32, causal, 4, 2, mask_steps)
    full = run_engine(q, wl.k, wl.v, tiling, algo, precision, decode=decode).trace
    assert trace_only(tiling, algo, precision, decode=decode).digest() == full.digest()


@pytest.mark.parametrize("algo", ["fa2", "vfa"])
@pytest.mark.parametrize("causal", [True, False])
def test_most_tiles_of_long_rows_are_left_out_and_put_back(algo, causal):
    tiling = Tiling(2048, 2048, 64, 64, 64, causal, 2, 1)
    built, found = _compressed(tiling, algo)
    assert len(found) >= tiling.n_rows - 2 * 6  # every row of more than 5 or 6 tiles has a gap
    found_repeats = repeated(built, found)
    assert found_repeats is not None
    full = found_repeats.with_copies()
    assert len(full) > 2 * len(built)
    assert full.digest() == trace_only(tiling, algo).digest()
    assert found_repeats.digest() == full.digest() and len(found_repeats) == len(full)  # hashed a piece at a time
    assert found_repeats.with_copies() is found_repeats.whole  # written once


def test_a_gap_that_is_not_a_repeat_is_refused_and_the_full_trace_emitted(monkeypatch):
    tiling = Tiling(1024, 1024, 32, 64, 64, True, 1, 1)
    built, found = _compressed(tiling, "fa2")
    first = [g for g in found if g.first > 0][0]
    masked = Gap(first.after, 2 * first.after - first.first, 1)  # the tile after a gap is the masked diagonal
    assert repeated(built, [masked]) is None
    assert repeated(built, [Gap(0, first.after - first.first, 1)]) is None  # no tile before it
    calls = []
    real = trace_only_module.repeated
    monkeypatch.setattr(trace_only_module, "repeated", lambda t, g: calls.append(len(g)) or (None if g else real(t, g)))
    emitted = trace_only(tiling, "fa2")  # refused, then emitted whole
    assert calls[0] > 0 and calls[1] == 0
    wl = make_workload("llm-like", 1024, 32, 1, 0)
    assert emitted.digest() == run_engine(wl.q, wl.k, wl.v, tiling, "fa2").trace.digest()


@pytest.mark.parametrize("seq_len", [64, 256])
def test_short_rows_have_no_gap(seq_len):
    built, found = _compressed(Tiling(seq_len, seq_len, 32, 64, 64, True, 1, 1), "vfa")  # at most 4 key blocks a row
    assert found == []
    none = repeated(built, found)
    assert none is not None and none.with_copies() is built
    assert np.all(np.diff(built.row) >= 0)
