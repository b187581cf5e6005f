"""A sweep's table and plots read at a glance: the ratios a reader asks for, options that apply to some
algorithms, and plots whose labels, legends and broken runs do not hide the data."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from vfasim.errors import VfasimError
from vfasim.sweep import make_points, parse_set, results_frame, run_sweep
from vfasim.sweep.plots import metric_figure, pareto_figure, series_styles
from vfasim.sweep.table import NA

SMALL = {"seq_len": 256, "head_dim": 32, "block_q": 64, "block_k": 64}


def test_an_option_applies_where_it_means_something_and_is_na_elsewhere():
    points = make_points(["C4V16"], ["fa2", "vfa", "vsa", "fa4"], [parse_set("minit_margin=0,4")], SMALL)
    assert [(p.algo, p.inputs["minit_margin"]) for p in points] == [
        ("fa2", NA), ("vfa", 0), ("vfa", 4), ("vsa", 0), ("vsa", 4), ("fa4", NA)]  # one fa2 run, not two
    assert "minit_margin" not in points[0].run_kwargs and points[1].run_kwargs["minit_margin"] == 0
    lam = make_points(["C4V16"], ["fa2", "vsa"], [parse_set("lam=1e-3,1e-2")], SMALL)
    assert [p.inputs["lam"] for p in lam] == [NA, 1e-3, 1e-2]
    with pytest.raises(VfasimError, match="option minit_margin applies to vfa, vsa, none of fa2, fa4"):
        make_points(["C4V16"], ["fa2", "fa4"], [parse_set("minit_margin=0,4")], SMALL)


def test_speedup_against_the_baseline_algorithm_at_the_same_point():
    points = make_points(["C4V16"], ["vfa", "fa2"], [parse_set("minit_margin=0,4"), parse_set("seq_len=128,256")],
                         {k: v for k, v in SMALL.items() if k != "seq_len"})
    frame = results_frame(run_sweep(points, jobs=1))
    assert "speedup" not in frame and "latency_vs_first_x" in frame
    fa2 = frame[frame.algo == "fa2"].set_index("seq_len")["latency_cycles"]
    for _, row in frame.iterrows():  # fa2 is the baseline wherever it is swept, whatever the order given
        assert row["speedup_vs_fa2"] == pytest.approx(fa2[row["seq_len"]] / row["latency_cycles"])
    line = frame[(frame.algo == "vfa") & (frame.seq_len == 128)]  # x is the first axis, minit_margin: 0 then 4
    assert list(line["latency_vs_first_x"]) == [1.0, line.latency_cycles.iloc[1] / line.latency_cycles.iloc[0]]


def test_one_algorithm_has_no_baseline_column():
    frame = results_frame(run_sweep(make_points(["C4V16"], ["vfa"], [parse_set("seq_len=128,256")], {
        k: v for k, v in SMALL.items() if k != "seq_len"}), jobs=1))
    assert not [c for c in frame if c.startswith("speedup_vs_")]


def test_every_series_has_its_own_colour_and_marker():
    styles = series_styles([f"s{i}" for i in range(70)])
    assert len(set(styles.values())) == 70


def _frame(n_series: int, broken: set[int] = frozenset(), degraded: set[int] = frozenset()) -> pd.DataFrame:
    """A synthetic sweep table: ``n_series`` algorithms over two x values, some runs broken."""
    rows = []
    for i in range(n_series):
        for x in (1, 2):
            verdict = "broken" if i in broken else "degraded" if i in degraded else "ok"
            rows.append({"hw": "C4V16", "algo": f"a{i}", "x": x, "latency_cycles": 1000 * (1 + x), "bound": "exp",
                         "verdict": verdict, "rel_err_finite_only": math.nan if i in broken else 1e-3 * (1 + i % 3),
                         "rel_err_vs_fp64": 0.145 if i in broken else 1e-3})
    return pd.DataFrame(rows)


def _extent(fig, artist):
    FigureCanvasAgg(fig).draw()
    return artist.get_window_extent()


def test_pareto_keeps_broken_runs_in_a_band_without_a_scale_and_the_legend_outside():
    fig = pareto_figure(_frame(12, broken={3, 7}), ["hw", "algo", "x"])
    band, ax = fig.axes
    assert list(band.get_yticks()) == [] and "broken" in band.get_ylabel()
    broken_x = sorted(x for line in band.get_lines() for x in line.get_xdata())
    assert broken_x == [2000, 2000, 3000, 3000]  # every broken run, at its latency, none on the error axis
    assert all(y < 0.01 for line in ax.get_lines() for y in line.get_ydata())
    [legend] = fig.legends
    assert not _extent(fig, legend).overlaps(_extent(fig, ax)) and not _extent(fig, legend).overlaps(band.bbox)
    styles = {(h.get_color(), h.get_marker()) for h in legend.legend_handles if h.get_label().startswith("C4V16")}
    assert len(styles) == 24  # one entry per series and point, each its own colour and marker
    # no run labels to overprint: only how many runs share a place (20 runs at 3 errors x 2 latencies here)
    assert all(t.get_text().startswith("×") for t in ax.texts) and sum(int(t.get_text()[1:]) for t in ax.texts) == 20


def test_pareto_without_broken_or_degraded_runs_has_one_axis_and_no_empty_legend_entries():
    fig = pareto_figure(_frame(2), ["hw", "algo", "x"])
    assert len(fig.axes) == 1
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels and not any("numerics" in t for t in labels)


def test_sweep_plot_legend_is_outside_and_a_not_applicable_series_is_one_line():
    frame = _frame(3).astype({"x": object})
    frame.loc[frame.algo == "a0", "x"] = NA
    fig = metric_figure(frame.drop_duplicates(["algo", "x"]), "x", ["hw", "algo"], "latency_cycles", "latency")
    [ax], [legend] = fig.axes, fig.legends
    assert not _extent(fig, legend).overlaps(_extent(fig, ax))
    labels = [t.get_text() for t in legend.get_texts()]
    assert labels == ["C4V16 a0 (x n/a)", "C4V16 a1", "C4V16 a2"] and ax.get_title() == "every point exp-bound"
    assert [tick.get_text() for tick in ax.get_xticklabels()] == ["1", "2"]  # n/a takes no place on the x axis


def test_validate_scatter_names_chips_once_prints_its_mape_and_plain_ticks():
    import dataclasses

    from vfasim.validate import FIT_SEQ_LENS, Prediction, load_rows
    from vfasim.validate.report import scatter_figure

    base = next(r for r in load_rows() if r.metric == "latency_us" and not r.heldout_always)
    rows = [dataclasses.replace(base, chip=chip, value=v, seq_len=seq)
            for chip, v, seq in (("H100-SXM5-80GB", 300.0, FIT_SEQ_LENS[0]), ("H100", 410.0, 3),
                                 ("H200", 520.0, 3), ("H200", 2000.0, FIT_SEQ_LENS[0]))]
    preds = [Prediction(r, r.value * f, "tensor", {}, 1) for r, f in zip(rows, (1.1, 0.8, 1.0, 1.3))]
    fig = scatter_figure(preds)
    [ax], [legend] = fig.axes, fig.legends
    labels = [t.get_text() for t in legend.get_texts()]
    assert "H100-SXM" in labels and not any("SXM5" in t for t in labels)  # one name per chip: its config's
    assert [t.get_text() for t in ax.texts] == ["MAPE 20.0% on 2 fit rows\nMAPE 10.0% on 2 held-out rows"]
    FigureCanvasAgg(fig).draw()
    for axis in (ax.xaxis, ax.yaxis):
        ticks = [t for t in axis.get_majorticklabels() if t.get_text()]
        assert ticks and all("10^" not in t.get_text() and "times" not in t.get_text() for t in ticks)
        boxes = [t.get_window_extent() for t in ticks]
        assert not any(a.overlaps(b) for a, b in zip(boxes, boxes[1:]))  # no "3×10²4×10²"
    assert not _extent(fig, legend).overlaps(_extent(fig, ax))
