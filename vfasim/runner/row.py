"""One result, one row: the flattening every table of results uses (``RunResult.to_row``, sweeps).

Columns: hw, algo, workload, kernel (chip runs), latency, ``bound`` (the one definition: the chip's
bound on a chip, the bottleneck's role on a core) and ``bottleneck`` (the busiest pipeline), the
shares, each pipeline's busy cycles and utilisation, op cycles, the critical path by pipeline, the
numerics (nested figures as ``<name>_<key>``; the worst rows are left to the run's own output), the
shape, a chip run's figures as ``chip_<name>`` (cores, waves, units, tflops, bytes, achieved
bandwidths, utilisation per class) and the digests that identify the run.
"""

from __future__ import annotations

CHIP_FIGURES = ("cores", "streams_per_core", "units", "splits", "waves", "tflops", "flops", "hbm_bytes", "l2_bytes",
                "achieved_hbm_tbps", "achieved_l2_tbps", "dispatch")


def result_row(doc: dict) -> dict[str, object]:
    """``doc`` (a ``RunResult.to_dict()``) as one flat row of scalars."""
    row: dict[str, object] = {"hw": doc["hw"], "algo": doc["algo"], "workload": doc["workload"],
                              "kernel": doc["options"].get("kernel", ""), "latency_cycles": doc["latency_cycles"],
                              "latency_us": doc["latency_us"], "bound": doc["bound"], "bottleneck": doc["bottleneck"]}
    row |= {f"share_{k}": v for k, v in doc["shares"].items()}
    row |= {f"{pipe}_{k}": v for pipe, stats in doc["pipelines"].items() for k, v in stats.items()}
    row |= {f"op_{k}_cycles": v for k, v in doc["ops"].items()}
    row |= {f"critical_{k}_cycles": v for k, v in doc.get("critical_path", {}).get("by_pipeline", {}).items()}
    for k, v in doc["numerics"].items():
        if isinstance(v, list):  # the worst rows: in the run's own output, not a table cell
            continue
        row |= {f"{k}_{k2}": v2 for k2, v2 in v.items()} if isinstance(v, dict) else {k: v}
    row |= {k: v for k, v in doc["shape"].items() if k not in row}
    chip = doc.get("chip") or {}
    row |= {f"chip_{k}": chip[k] for k in CHIP_FIGURES if k in chip}
    row |= {f"chip_utilization_{k}": v for k, v in chip.get("utilization", {}).items()}
    return row | {"trace_digest": doc["manifest"]["trace_digest"], "hw_digest": doc["manifest"]["hw_digest"]}
