"""The human table of a chip run (``vfasim run --hw H100-SXM``): launch, time, bytes, bound."""

from __future__ import annotations


def format_chip_run(doc: dict) -> str:
    shape, chip, num = doc["shape"], doc["chip"], doc["numerics"]
    lines = [
        f"{doc['algo']} on {doc['hw']} ({chip['cores']} cores) | kernel {chip['kernel']}, "
        f"{chip['dispatch']} dispatch | batch {shape['batch']} heads {shape['heads']}/{shape['kv_heads']} "
        f"seq {shape['seq_len']} kv {shape['kv_len']} d {shape['head_dim']} "
        f"blocks {shape['block_q']}x{shape['block_k']} {'causal' if shape['causal'] else 'non-causal'}"
        + (" decode" if shape["decode"] else ""),
        (f"latency   {chip['latency_cycles']:,} cycles ({chip['latency_us']:.2f} us)   "
        f"{chip['tflops']:.1f} TFLOP/s   bound {chip['bound']}"
        + (" (no resource busy half the time: a tail, exposed latency or each stream's own serial chain)"
           if chip["bound"] == "launch" else "")),
        "by launch " + "  ".join(f"{name.replace('_', ' ')} {us:.2f} us" for name, us in chip["launch_us"].items()
                                 if us or name == "attention_kernel"),
        (f"launch    {chip['units']:,} units ({chip['splits']} split(s) per row), {chip['streams_per_core']} "
        f"stream(s) per core, {chip['waves']} wave(s); {chip['unit_overhead_cycles']:,} cycles a unit beside its ops "
        f"({_OVERHEAD_FROM[chip['unit_overhead_from']]})"),
        (f"memory    HBM {chip['hbm_bytes'] / 1e6:,.1f} MB ({chip['achieved_hbm_tbps']:.2f} TB/s)   "
        f"L2 hits {chip['l2_bytes'] / 1e6:,.1f} MB (L2 port {chip['achieved_l2_tbps']:.2f} TB/s)"),
        "util      " + "  ".join(f"{k} {v:6.1%}" for k, v in chip["utilization"].items()),
        "units bound by  " + "  ".join(f"{k} {v:,}" for k, v in chip["unit_bounds"].items()),
        _roofline(chip["roofline"]),
        "",
        f"{'pipeline':<10}{'busy cycles':>16}{'util':>8}",
        *(f"{n:<10}{p['busy_cycles']:>16,}{p['utilization']:>8.1%}" for n, p in doc["pipelines"].items()),
        "",
    ]
    if num:
        heads = chip["numerics_heads"]
        lines.append(f"numerics on heads {heads[0]}-{heads[-1]}: {num.get('verdict', '')}   "
                     f"rel err vs fp64 {num['rel_err_vs_fp64']:.3e}   "
                     f"bit-identical vs fa2 {num['bit_identical_vs_fa2']:.1%}   NaN {num['nan_count']}")
    else:
        lines.append("numerics  not computed (timing only; --numerics-heads N checks the first N heads)")
    lines.append(f"trace {doc['manifest']['trace_digest'][:16]} ({doc['manifest']['trace_scope']})  "
                 f"hw {doc['manifest']['hw_digest']}")
    return "\n".join(lines)


_OVERHEAD_FROM = {"tuning": "the chip's kernel_tuning",
                  "scaled": "the kernel tile's measured cta_cycles times the chip's fitted cta_cycles_scale",
                  "measured": "measured: the kernel tile's cta_cycles",
                  "none": "none given"}


def _roofline(line: dict) -> str:
    """Each resource's ceiling on the kernel's TFLOP/s, lowest first, and how close the run comes to it."""
    ceilings = sorted(line["ceilings_tflops"].items(), key=lambda kv: kv[1])
    return (f"roofline  {100 * line['achieved_fraction']:.0f}% of the {line['bound']} ceiling; ceilings (TFLOP/s) "
            + "  ".join(f"{k} {v:,.0f}" for k, v in ceilings))
