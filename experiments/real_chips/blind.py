"""Every row of the blind campaigns through both tiers: MAPE and mean error per chip, kernel, mode and format.

Usage: python experiments/real_chips/blind.py [--max-rows N] [--jobs J] [--out DIR] [--campaigns PREFIX,...]

The blind campaigns (``validation/blind_*``: shapes no other campaign holds, measured after the kernel descriptions
were final; their READMEs say what changed since, which those rows no longer check) hold about 25,100 modelled rows.
``vfasim validate`` compares an evenly spread sample of them; this runs every one (``--max-rows N``: the first N
of each group, for a smoke run) through ``vfasim.validate.predict_tiers`` on both tiers: tier 1 (spec only, the
configs' fitted tuning removed) and tier 2 (the configs as shipped). Errors are (model - measured) / measured of
the row's latency, so a negative mean error is a model too fast.

Writes DIR/blind.csv and .md (default experiments/real_chips/out): one row per campaign, kernel, mode and format,
then one per campaign and one for all. Expected run time: about an hour and a half on 2 cores for every row.
``--campaigns`` runs other campaigns' rows the same way (folder prefixes, e.g. ``occupancy_``: the sweeps measured
after the per-stream MMA change), written as DIR/<first prefix>.csv and .md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from vfasim.hw import load_hw
from vfasim.report.tables import write_table
from vfasim.validate import chip_name, load_rows, modelled, predict_tiers, row_group, spec_only

HERE = Path(__file__).resolve().parent
COLUMNS = ("campaign", "kernel", "mode", "dtype", "rows", "tier1_mape", "tier1_mean_error", "tier2_mape",
           "tier2_mean_error", "tier2_worst")


def blind_rows(max_rows: int | None = None, prefixes: tuple[str, ...] = ("blind_",)) -> list:
    """The modelled rows of every campaign whose folder starts with one of ``prefixes`` (default the blind ones; at
    most ``max_rows`` of each group, in file order)."""
    groups: dict[tuple, list] = {}
    for r in load_rows():
        if r.table.startswith(prefixes) and modelled(r):
            groups.setdefault(_group(r), []).append(r)
    return [r for members in groups.values() for r in members[:max_rows]]


def _group(r) -> tuple[str, str, str, str]:
    return r.table.split("/")[0], r.kernel, row_group(r)[3], r.dtype


def _line(key: tuple[str, str, str, str], errors: list[tuple[float, float]]) -> dict:
    one, two = [e for e, _ in errors], [e for _, e in errors]
    return dict(zip(COLUMNS, (*key, len(errors), statistics.mean(map(abs, one)), statistics.mean(one),
                              statistics.mean(map(abs, two)), statistics.mean(two), max(two, key=abs))))


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-rows", type=int, default=None, help="at most N rows of each group (default: every row)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", default=str(HERE / "out"))
    ap.add_argument("--campaigns", default="blind_", help="campaign folder prefixes, comma-separated (default blind_)")
    a = ap.parse_args(argv)
    if a.max_rows is not None and a.max_rows < 1:
        ap.error("--max-rows must be at least 1")
    prefixes = tuple(p for p in a.campaigns.split(",") if p)
    rows = blind_rows(a.max_rows, prefixes)
    if not rows:
        ap.error(f"no modelled rows in campaigns starting with {', '.join(prefixes) or '(none)'}")
    chips = {chip_name(r) for r in rows}
    shipped, spec = predict_tiers(rows, [{}, {c: spec_only(load_hw(c)) for c in chips}], a.jobs)
    by: dict[tuple, list[tuple[float, float]]] = {}
    for p2, p1 in zip(shipped, spec):
        key = _group(p2.row)
        for k in (key, (key[0], "all", "", ""), ("all", "", "", "")):
            by.setdefault(k, []).append((p1.error, p2.error))
    out = [_line(k, by[k]) for k in sorted(by, key=lambda k: (k[0] == "all", k[1] == "all", k))]
    write_table(out, COLUMNS, Path(a.out) / ("blind" if prefixes == ("blind_",) else prefixes[0].rstrip("_")))
    for r in out:
        if r["kernel"] in ("all", ""):
            print(f"{r['campaign']:24} {r['rows']:5} rows: tier 1 {100 * r['tier1_mape']:.2f}% "
                  f"({100 * r['tier1_mean_error']:+.1f}%), tier 2 {100 * r['tier2_mape']:.2f}% "
                  f"({100 * r['tier2_mean_error']:+.1f}%)")
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
