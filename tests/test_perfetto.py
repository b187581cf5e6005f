"""Chrome/Perfetto export: valid JSON, one event per op at the right time, named tracks, atomic writes, and
nothing Perfetto's importer would drop."""

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
    assert "displayTimeUnit" not in loaded  # ignored by Perfetto, read as the unit of ts by older importers
    assert loaded["otherData"]["time_unit"].startswith("ns") and loaded["otherData"]["clock_ghz"] == 1.0
    assert loaded == json.loads(json.dumps(doc))
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]  # no temp file left behind


@pytest.mark.parametrize("clock_ghz", [1.0, 2.0])
def test_every_op_once_with_its_span(clock_ghz):
    trace, timeline, doc = doc_for(clock_ghz=clock_ghz, score_buffers=2)
    ops = by_phase(doc, "X")
    assert sorted(e["args"]["op"] for e in ops) == list(range(len(trace)))
    names = track_names(doc)
    for e in ops:
        i = e["args"]["op"]
        start, end = np.rint(timeline.start_cycles[i] / clock_ghz), np.rint(timeline.end_cycles[i] / clock_ghz)
        assert round(e["ts"] * 1000) == start and round(e["dur"] * 1000) == end - start  # integer ns
        assert e["args"]["start_cycle"] == timeline.start_cycles[i]
        assert e["args"]["cycles"] == timeline.end_cycles[i] - timeline.start_cycles[i]
        assert names[e["tid"]] == timeline.pipeline_names[timeline.pipeline[i]]
    qk2 = next(e for e in ops if e["args"]["op"] == 5)
    assert qk2["name"] == "qk_matmul" and qk2["cat"] == "tensor"  # named by kind: Perfetto aggregates by name
    assert qk2["args"] == {"op": 5, "row": 0, "step": 2, "kblock": 1, "start_cycle": 8, "cycles": 5, "work": 40,
                           "dtype": "float16"}
    start, end = np.rint(8 / clock_ghz), np.rint(13 / clock_ghz)  # each boundary rounded once (6.5 ns -> 6)
    assert qk2["ts"] == start / 1000 and qk2["dur"] == (end - start) / 1000


def test_tracks_are_named_in_pipeline_order():
    *_, doc = doc_for()
    assert track_names(doc) == {1: "cube", 2: "vector", 3: "exp", 4: "mover"}
    assert {e["pid"] for e in doc["traceEvents"]} == {1}


def test_fused_ops_get_their_own_track():
    op_map = dict(tiny_hw().op_map, exp="fused")
    _, _, doc = doc_for(TWO_TILES[:4], op_map=op_map)
    names = track_names(doc)
    assert names[5] == "fused"
    exp = next(e for e in by_phase(doc, "X") if e["name"] == "exp")
    assert exp["tid"] == 5 and exp["dur"] == 0


def test_algorithm_events_are_instants_on_their_track():
    *_, doc = doc_for(events=EVENTS)
    names = track_names(doc)
    instants = by_phase(doc, "i")
    assert [(e["name"], e["ts"], names[e["tid"]]) for e in instants] == [
        ("max updated", 0.008, "algorithm"), ("rescale skipped", 0.013, "algorithm")]
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


# -- what Perfetto's importer keeps ------------------------------------------------------------


def perfetto_ns(value: float | int) -> int:
    """Perfetto's JSON importer: an integer is whole microseconds, a double is rounded, llround(us * 1000)."""
    return value * 1000 if isinstance(value, int) else int(np.floor(value * 1000.0 + 0.5))


def dropped_by_perfetto(doc: dict) -> int:
    """Slices Perfetto's importer drops: per track, in time order, one that begins inside the open slice
    and ends after it (a partial overlap; a slice inside another nests, one that begins at its end follows)."""
    tracks: dict[tuple, list[tuple[int, int]]] = {}
    for e in by_phase(doc, "X"):
        ts = perfetto_ns(e["ts"])
        tracks.setdefault((e["pid"], e["tid"]), []).append((ts, ts + perfetto_ns(e["dur"])))
    lost = 0
    for slices in tracks.values():
        open_ends: list[int] = []
        for start, end in sorted(slices, key=lambda s: (s[0], -s[1])):
            while open_ends and open_ends[-1] <= start:
                open_ends.pop()
            if open_ends and end > open_ends[-1]:
                lost += 1
            else:
                open_ends.append(end)
    return lost


def test_the_import_rule_drops_partial_overlaps_only():
    doc = {"traceEvents": [{"ph": "X", "pid": 1, "tid": 1, "ts": ts, "dur": dur} for ts, dur in
                           ((0, 2), (2, 1), (2.5, 0.2), (2.9, 0.2), (0.0681, 0.0006999999999999923))]}
    assert dropped_by_perfetto(doc) == 1  # (2.9, 3.1) crosses the end of (2, 3); the others nest or follow
    # float microseconds as vfasim wrote them before: ts and dur rounded apart, touching spans overlap by 1 ns
    touching = [(0.0676, 0.0016), (0.0692, 0.002)]  # 67.6-69.2 ns, 69.2-71.2 ns: [68, 70) and [69, 71) in Perfetto
    assert dropped_by_perfetto({"traceEvents": [{"ph": "X", "pid": 1, "tid": 1, "ts": ts, "dur": dur}
                                                for ts, dur in touching]}) == 1


@pytest.mark.parametrize("algo", ["fa2", "vfa", "vsa", "fa4", "blasst", "bsfa"])
def test_perfetto_keeps_every_slice_of_a_core_run(algo, tmp_path):
    import vfasim

    out = tmp_path / "t.json"
    vfasim.run("C4V16", algo, seq_len=1024, head_dim=64, trace_out=out)  # 1.5 GHz: cycles are no whole ns
    doc = json.loads(out.read_text())
    assert len(by_phase(doc, "X")) > 100 and dropped_by_perfetto(doc) == 0


@pytest.mark.parametrize(("algo", "shape"), [("fa2", dict(seq_len=4096, heads=32, batch=2)),
                                             ("vfa", dict(seq_len=2048, heads=16)),
                                             *((a, dict(seq_len=512, heads=2)) for a in ("vsa", "fa4", "blasst"))])
def test_perfetto_keeps_every_slice_of_a_chip_run(algo, shape, tmp_path):
    import vfasim

    out = tmp_path / "t.json"
    vfasim.run("H100-SXM", algo, trace_out=out, **shape)
    doc = json.loads(out.read_text())
    assert by_phase(doc, "X") and dropped_by_perfetto(doc) == 0
    assert all(e["name"] == "combine" or e["name"].endswith("-bound unit") for e in by_phase(doc, "X"))
    assert {"batch", "head", "qblock", "split", "cycles"} <= set(by_phase(doc, "X")[0]["args"])


def test_a_chip_trace_draws_the_ops_of_the_cores_asked_for_inside_their_units(tmp_path):
    import vfasim
    from vfasim.trace import OP_KINDS

    out = tmp_path / "t.json"
    vfasim.run("H100-SXM", "vfa", kernel="fa3", seq_len=1024, heads=4, trace_out=out, trace_cores=(0, 5))
    doc = json.loads(out.read_text())
    processes = [e["args"]["name"] for e in by_phase(doc, "M") if e["name"] == "process_name"]
    assert processes == ["memory", "core 0 (cores 0, 5 of 132 shown)", "core 5 (cores 0, 5 of 132 shown)"]
    units = {e["pid"]: e for e in by_phase(doc, "X") if e["cat"] == "unit"}
    ops = [e for e in by_phase(doc, "X") if e["cat"] == "op"]
    assert set(units) == {2, 7} and {e["pid"] for e in ops} == {2, 7} and {e["name"] for e in ops} <= set(OP_KINDS)
    assert {"qk_matmul", "exp", "pv_matmul"} <= {e["name"] for e in ops}
    for e in ops:  # each op inside its unit's span, on a pipeline's track of its slot
        unit = units[e["pid"]]
        assert unit["ts"] <= e["ts"] and e["ts"] + e["dur"] <= unit["ts"] + unit["dur"] + 1e-9
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in by_phase(doc, "M") if e["name"] == "thread_name"}
    assert {threads[e["pid"], e["tid"]] for e in ops} == {"slot 0 · tensor", "slot 0 · vector", "slot 0 · exp",
                                                         "slot 0 · mover"}
    assert dropped_by_perfetto(doc) == 0


def test_touching_ops_touch_in_integer_ns_at_any_clock():
    trace, timeline, doc = doc_for(clock_ghz=1.755, score_buffers=2)
    assert dropped_by_perfetto(doc) == 0
    for e in by_phase(doc, "X"):
        assert abs(e["ts"] * 1000 - round(e["ts"] * 1000)) < 1e-6  # whole nanoseconds


def test_the_critical_path_is_a_track_of_its_own():
    from vfasim.hw import load_hw
    from vfasim.sim.critical import critical_path

    trace, config = hand_trace(TWO_TILES), tiny_hw(score_buffers=2)
    timeline = simulate(trace, config)
    crit = critical_path(trace, timeline, config)
    doc = chrome_trace(trace, timeline, None, 1.0, crit.ops)
    tid = {v: k for k, v in track_names(doc).items()}["critical path"]
    on_path = [e for e in by_phase(doc, "X") if e["tid"] == tid]
    assert [e["args"]["op"] for e in on_path] == crit.ops.tolist()
    assert sum(e["args"]["cycles"] for e in on_path) == crit.latency_cycles - crit.by_pipeline.get("idle", 0)


def test_a_window_keeps_the_ops_that_overlap_it():
    trace, timeline, _ = doc_for(score_buffers=2)
    doc = chrome_trace(trace, timeline, EVENTS, 1.0, window=(8, 13))
    kept = {e["args"]["op"] for e in by_phase(doc, "X")}
    overlap = {i for i in range(len(trace)) if timeline.start_cycles[i] < 13 and
               (timeline.end_cycles[i] > 8 or timeline.start_cycles[i] >= 8)}
    assert kept == overlap and 0 < len(kept) < len(trace)
    assert [e["name"] for e in by_phase(doc, "i")] == ["max updated"]  # 13 lies outside [8, 13)


def test_an_oversized_trace_is_refused_in_one_line_naming_the_window(monkeypatch):
    from vfasim.errors import VfasimError
    from vfasim.report import perfetto

    trace, timeline, _ = doc_for()
    monkeypatch.setattr(perfetto, "MAX_EVENTS", 3)
    with pytest.raises(VfasimError, match=r"over the 3-event limit; write part of it with --trace-window START:END"):
        chrome_trace(trace, timeline)
    assert len(by_phase(chrome_trace(trace, timeline, window=(0, 4)), "X")) <= 3


def test_trace_out_dash_writes_the_trace_to_stdout(tmp_path, capsys, monkeypatch):
    from vfasim.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["run", "--seq-len", "256", "--head-dim", "32", "--trace-out", "-", "--trace-window", "0:500"]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)  # standard output holds the trace alone; the report went to stderr
    assert by_phase(doc, "X") and "latency" in err and list(tmp_path.iterdir()) == []
    assert main(["run", "--seq-len", "256", "--trace-out", "t.json", "--trace-window", "9"]) == 2
    assert "expected START:END" in capsys.readouterr().err
