"""Chrome/Perfetto export: valid JSON, one event per op at the right time, named tracks, atomic writes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from vfasim.report.perfetto import chrome_trace, write_chrome_trace
from vfasim.sim import simulate

from conftest import tiny_hw
from conftest import TWO_TILES, hand_trace

EVENTS = [(8, "max updated", {"row": np.int64(0), "gap": 1.5}),
          (13, "rescale skipped", {"row": 0, "ratio": float("nan")})]


def doc_for(ops=TWO_TILES, events=None, clock_ghz=1.0, **hw):
    trace, config = hand_trace(ops), tiny_hw(**hw)
    timeline = simulate(trace, config)
    return trace, timeline, chrome_trace(trace, timeline, events, clock_ghz)


def by_phase(doc, ph):
    return [e for e in doc["traceEvents"] if e["ph"] == ph]


def track_names(doc):
    return {e["tid"]: e["args"]["name"] for e in by_phase(doc, "M") if e["name"] == "thread_name"}


def test_output_is_strict_json(tmp_path):
    *_, doc = doc_for(events=EVENTS)
    path = tmp_path / "run.json"
    write_chrome_trace(path, doc)
    loaded = json.loads(path.read_text())
    assert loaded["displayTimeUnit"] == "ns"
    assert loaded == json.loads(json.dumps(doc))
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]  # no temp file left behind


@pytest.mark.parametrize("clock_ghz", [1.0, 2.0])
def test_every_op_once_with_its_span(clock_ghz):
    trace, timeline, doc = doc_for(clock_ghz=clock_ghz, score_buffers=2)
    ops = by_phase(doc, "X")
    assert sorted(e["args"]["op"] for e in ops) == list(range(len(trace)))
    us = 1.0 / (clock_ghz * 1e3)
    names = track_names(doc)
    for e in ops:
        i = e["args"]["op"]
        assert e["ts"] == pytest.approx(timeline.start_cycles[i] * us)
        assert e["dur"] == pytest.approx((timeline.end_cycles[i] - timeline.start_cycles[i]) * us)
        assert names[e["tid"]] == timeline.pipeline_names[timeline.pipeline[i]]
    qk2 = next(e for e in ops if e["args"]["op"] == 5)
    assert qk2["name"] == "qk_matmul r0 k1" and qk2["cat"] == "tensor"
    assert qk2["args"] == {"op": 5, "row": 0, "step": 2, "kblock": 1, "work": 40, "dtype": "float16"}
    assert qk2["ts"] == pytest.approx(8 * us) and qk2["dur"] == pytest.approx(5 * us)


def test_tracks_are_named_in_pipeline_order():
    *_, doc = doc_for()
    assert track_names(doc) == {1: "cube", 2: "vector", 3: "exp", 4: "mover"}
    assert {e["pid"] for e in doc["traceEvents"]} == {1}


def test_fused_ops_get_their_own_track():
    op_map = dict(tiny_hw().op_map, exp="fused")
    _, _, doc = doc_for(TWO_TILES[:4], op_map=op_map)
    names = track_names(doc)
    assert names[5] == "fused"
    exp = next(e for e in by_phase(doc, "X") if e["name"].startswith("exp"))
    assert exp["tid"] == 5 and exp["dur"] == 0


def test_algorithm_events_are_instants_on_their_track():
    *_, doc = doc_for(events=EVENTS)
    names = track_names(doc)
    instants = by_phase(doc, "i")
    assert [(e["name"], e["ts"], names[e["tid"]]) for e in instants] == [
        ("max updated", pytest.approx(0.008), "algorithm"), ("rescale skipped", pytest.approx(0.013), "algorithm")]
    assert instants[0]["args"] == {"row": 0, "gap": 1.5} and type(instants[0]["args"]["row"]) is int
    assert instants[1]["args"]["ratio"] is None  # non-finite floats become null
    assert "algorithm" not in track_names(doc_for()[2])


def test_failed_write_leaves_no_file(tmp_path, monkeypatch):
    *_, doc = doc_for()
    new, old = tmp_path / "new.json", tmp_path / "old.json"
    old.write_text("previous")

    def boom(*args, **kwargs):
        raise RuntimeError("serialization failed")

    monkeypatch.setattr(json, "dump", boom)
    for path in (new, old):
        with pytest.raises(RuntimeError, match="serialization failed"):
            write_chrome_trace(path, doc)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.json"]
    assert old.read_text() == "previous"


def test_unserializable_args_fail_before_replacing(tmp_path):
    *_, doc = doc_for()
    doc["traceEvents"].append({"ph": "i", "args": {"x": object()}})
    with pytest.raises(TypeError):
        write_chrome_trace(tmp_path / "t.json", doc)
    assert list(tmp_path.iterdir()) == []


def test_algorithm_events_mark_updates_rescale_skips_and_skipped_blocks():
    from vfasim.functional import Tiling, run_engine
    from vfasim.hw import load_hw
    from vfasim.report.perfetto import algorithm_events
    from vfasim.sim import simulate
    from vfasim.workloads import make_workload

    wl = make_workload("llm-like", 512, 32, 1, 0)
    tiling = Tiling(512, 512, 32, 64, 64, True)
    hw = load_hw("C16V32")
    for algo, expect in (("fa2", {"max updated"}), ("fa4", {"max updated", "rescale skipped"}),
                         ("vsa", {"block skipped"})):
        res = run_engine(wl.q, wl.k, wl.v, tiling, algo, lam=0.5)
        names = {name for _, name, _ in algorithm_events(res.trace, simulate(res.trace, hw))}
        assert expect <= names, algo
    fa2 = run_engine(wl.q, wl.k, wl.v, tiling, "fa2")
    events = algorithm_events(fa2.trace, simulate(fa2.trace, hw))
    assert len(events) == fa2.counts["visited_tiles"]  # one max update per tile, nothing skipped


def test_frozen_max_below_the_true_max_is_an_event():
    from vfasim.functional import Tiling, run_engine
    from vfasim.hw import load_hw
    from vfasim.report.perfetto import algorithm_events
    from vfasim.sim import simulate
    from vfasim.workloads import make_workload

    wl = make_workload("random", 512, 32, 1, 0)  # random data: m-init often undershoots
    res = run_engine(wl.q, wl.k, wl.v, Tiling(512, 512, 32, 64, 64, True), "vfa")
    events = algorithm_events(res.trace, simulate(res.trace, load_hw("C16V32")), res.above_max)
    below = [e for e in events if e[1] == "frozen max below true max"]
    assert len(below) == int(res.above_max.sum()) > 0
    fa2 = run_engine(wl.q, wl.k, wl.v, Tiling(512, 512, 32, 64, 64, True), "fa2")
    assert not fa2.above_max.any()  # fa2 always updates its max first
