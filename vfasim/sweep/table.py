"""A sweep's table: one row per point, its ratios, and its text.

Columns: the point's inputs, then its result's row (``vfasim.runner.row``, the same as
``RunResult.to_row``), then two ratios:

- ``latency_vs_first_x``: the row's latency over its series' latency at the first swept value
  (x). It reads as "how much longer than at x = first" and is no speedup: for ``seq_len`` it
  grows with the work, for a boolean or a margin it compares two settings.
- ``speedup_vs_<base>`` (e.g. ``speedup_vs_fa2``): the baseline algorithm's latency at the
  same point (every other input equal) over the row's, where the sweep holds several
  algorithms; the baseline is ``fa2`` when the sweep has it, else the first algorithm. An
  option the baseline does not take (``n/a`` in its rows) matches every value of it.
"""

from __future__ import annotations

import pandas as pd

from vfasim.runner.row import result_row

NA = "n/a"  # a swept option's value where the point's algorithm does not take it
FIRST_X = "latency_vs_first_x"
BASELINE = "fa2"
TABLE_FIGURES = ("latency_cycles", FIRST_X, "verdict", "rel_err_vs_fp64", "bound", "bottleneck",
                 "share_tensor", "share_vector", "share_exp")


def sweep_row(record: dict) -> dict:
    """One row: a point's inputs, then its result's row (``vfasim.runner.row``: the same as ``RunResult.to_row``)."""
    row = result_row(record["result"])
    return {**record["inputs"], **{k: v for k, v in row.items() if k not in record["inputs"]}, "key": record["key"]}


def sweep_frame(records: list[dict], series: list[str]) -> pd.DataFrame:
    """Rows in the given order plus ``latency_vs_first_x`` and, with several algorithms, ``speedup_vs_<base>``."""
    frame = pd.DataFrame([sweep_row(r) for r in records])
    if frame.empty:
        return frame
    latency = frame["latency_cycles"]
    first = frame.groupby(series, sort=False, dropna=False)["latency_cycles"].transform("first") if series \
        else latency.iloc[0]
    frame = frame.assign(**{FIRST_X: latency / first})
    return with_baseline(frame, list(records[0]["inputs"]))


def baseline_algo(algos: list[str]) -> str | None:
    """``fa2`` when the sweep has it beside other algorithms, else the first one; None for a single algorithm."""
    if len(algos) < 2:
        return None
    return BASELINE if BASELINE in algos else algos[0]


def speedup_column(frame: pd.DataFrame) -> str | None:
    """The ``speedup_vs_<base>`` column of a sweep's frame, if it has one."""
    return next((str(c) for c in frame if str(c).startswith("speedup_vs_")), None)


def with_baseline(frame: pd.DataFrame, inputs: list[str]) -> pd.DataFrame:
    """``frame`` with ``speedup_vs_<base>``: the baseline's latency at the same point over the row's."""
    base = baseline_algo(list(dict.fromkeys(frame["algo"])))
    if base is None:
        return frame
    others = [c for c in inputs if c != "algo" and c in frame]
    ref = frame[frame["algo"] == base]
    untaken = [c for c in others if (ref[c] == NA).all()]  # options the baseline does not take: any value matches
    latency = dict(zip(_point(ref, others, untaken), ref["latency_cycles"]))
    at_point = pd.Series([latency.get(k) for k in _point(frame, others, untaken)], index=frame.index, dtype=float)
    return frame.assign(**{f"speedup_vs_{base}": at_point / frame["latency_cycles"]})


def _point(frame: pd.DataFrame, columns: list[str], untaken: list[str]) -> list[tuple[str, ...]]:
    """Each row's point, as text, with the columns in ``untaken`` read as n/a."""
    return [tuple(NA if c in untaken else str(v) for c, v in zip(columns, row))
            for row in frame[columns].itertuples(index=False)]


def format_sweep(frame: pd.DataFrame, inputs: list[str]) -> str:
    """The inputs and the headline figures of every point, one line each."""
    if frame.empty:
        return "(no finished points)"
    speedup = speedup_column(frame)
    figures = (TABLE_FIGURES[0], *((speedup,) if speedup else ()), *TABLE_FIGURES[1:])
    cols = [c for c in (*inputs, *figures) if c in frame]
    return frame[cols].to_string(index=False, float_format=lambda v: f"{v:.3g}")
