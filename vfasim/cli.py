"""Command line: ``vfasim run``, ``vfasim sensitivity``, ``vfasim hw list``, ``vfasim hw show NAME``.

Bad input ends with ``error: <one line>`` on stderr and exit status 2; no traceback. So does a
standard output that cannot take the result: closed (found before any work), full, or a pipe
whose reader left.
Ctrl-C ends with one line and exit status 130, SIGTERM with 143 (see ``vfasim.io.interrupt``).
Each command imports what it needs when it runs, and the parser fills in only the options of
the command given: ``vfasim --version``, ``--help`` and ``hw list`` load neither NumPy nor pydantic.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path
from typing import NoReturn

from vfasim import __version__
from vfasim.errors import Interrupted, VfasimError
from vfasim.io import interrupt

EXIT_BAD_INPUT = 2
EXIT_BROKEN = 3  # vfasim run --check: the run's numerics verdict is broken


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, like every other bad input
        raise VfasimError(f"{self.prog}: {message}" if " " in self.prog else message)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole parser; with ``command``, only that command's options are filled in (the others keep their
    name and help line), so that a command loads only the modules its own options name."""
    parser = _Parser(prog="vfasim", description="Performance model of FlashAttention-style kernels.")
    parser.add_argument("--version", action="version", version=f"vfasim {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    run_p = sub.add_parser("run", help="simulate one algorithm on one core, with checked numerics")
    sens = sub.add_parser("sensitivity", help="latency change when each hardware parameter is scaled")
    sweep = sub.add_parser("sweep", help="what-if grid over hardware fields and run options (resumable)")
    for name, p, fill in (("run", run_p, _add_run_command), ("sensitivity", sens, _add_sensitivity),
                          ("sweep", sweep, _add_sweep)):
        if command in (None, name):
            fill(p)
    _add_other_commands(sub)
    _name_commands_and_defaults(parser)
    return parser


def _add_run_command(run_p: argparse.ArgumentParser) -> None:
    from vfasim.functional.sampling import FULL_LIMIT, MODES

    _add_run(run_p)
    run_p.add_argument("--trace-out", default=None, metavar="FILE",
                       help="also write a Chrome/Perfetto trace (JSON) of the timeline to FILE ('-': standard "
                            "output, the report then goes to standard error)")
    run_p.add_argument("--roofline-out", default=None, metavar="FILE",
                       help="chip runs: also draw the run against the chip's rooflines to FILE (.png or .svg); the "
                            "numbers are in --json under chip.roofline")
    run_p.add_argument("--trace-window", default=None, type=_cycle_window, metavar="START:END",
                       help="with --trace-out: only the ops that overlap cycles [START, END)")
    run_p.add_argument("--trace-cores", default=None, type=_core_list, metavar="C1,C2,...",
                       help="chip runs, with --trace-out: the cores drawn, each unit with its ops on the core's "
                            "pipelines (default: the first 8 cores, units only)")
    run_p.add_argument("--spec", default=None, metavar="FILE",
                       help="repeat a run from its spec (the JSON of vfasim run --json, or its 'spec'); give no other "
                            "run options")
    run_p.add_argument("--no-cache", dest="cache", action="store_false",
                       help="neither read nor keep the references (float64 oracle, fa2 baseline) in the reference "
                            "cache: $VFASIM_CACHE_DIR, else vfasim/references in $XDG_CACHE_HOME or ~/.cache")
    run_p.add_argument("--check", action="store_true",
                       help=f"exit with status {EXIT_BROKEN} when the numerics verdict is broken (for scripts and CI)")
    run_p.add_argument("--matmul-format", default=None,
                       help="matmul format among those the chip supports: fp16, bf16, fp8_e4m3, fp8_e5m2, fp4 "
                            "(with the scaling a real kernel uses; default: the config's)")
    _add_chip(run_p)
    run_p.add_argument("--numerics", choices=MODES, default=None,
                       help="check the output against the float64 oracle and fa2 on every query row (full), "
                            "on a stated subset of query blocks (sample) or not at all (off); default: full "
                            f"up to {FULL_LIMIT:,} score entries (heads x seq x kv), else sample")


def _add_sensitivity(sens: argparse.ArgumentParser) -> None:
    _add_run(sens)
    sens.add_argument("--factors", type=float, nargs="+", default=[2.0, 0.5],
                      help="multipliers applied to each parameter (default: 2 0.5)")


def _add_other_commands(sub: argparse._SubParsersAction[_Parser]) -> None:
    """figure, validate, hw and kernel: options that name nothing from the models."""
    fig = sub.add_parser("figure", help="rebuild a figure of the VFA paper from the model")
    fig_sub = fig.add_subparsers(dest="figure", required=True, parser_class=_Parser)
    lr = fig_sub.add_parser("latency-ratio", help="Figure 1: latency ratio normalized to Tensor on C16V32")
    lr.add_argument("--out", default="latency_ratio_out", help="output folder (default latency_ratio_out)")
    lr.add_argument("--granularity", choices=("block", "sequence"), default="block",
                    help="block: a steady stream of identical tiles, the paper's unit (default); "
                         "sequence: one causal head of --seq-len tokens")
    lr.add_argument("--head-dim", type=int, default=64, help="head dim drawn and fitted (64 or 128; both reported)")
    lr.add_argument("--seq-len", type=int, default=1024, help="tokens of the sequence run (default 1024)")
    lr.add_argument("--fit", default=None,
                    help="claim ids the bounded fit targets (default: the six share claims; '' skips the fit "
                         "and the search)")
    lr.add_argument("--fa4", action="store_true", help="add FA4 and VFA with FA4-style exp emulation")
    _add_validate(sub)
    hw = sub.add_parser("hw", help="list or show hardware configs")
    hw_sub = hw.add_subparsers(dest="hw_command", required=True, parser_class=_Parser)
    hw_sub.add_parser("list", help="names of the built-in configs")
    show = hw_sub.add_parser("show", help="print one config (built-in name or YAML path)")
    show.add_argument("name")
    kp = sub.add_parser("kernel", help="list or show kernel descriptions (kernels/*.yaml)")
    k_sub = kp.add_subparsers(dest="kernel_command", required=True, parser_class=_Parser)
    k_sub.add_parser("list", help="names of the built-in kernels")
    k_show = k_sub.add_parser("show", help="print one kernel (built-in name or YAML path)")
    k_show.add_argument("name")


def _name_commands_and_defaults(parser: argparse.ArgumentParser) -> None:
    """Sub-commands shown as ``{list,show}`` (not their internal names); every option's default in --help."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            action.metavar = "{" + ",".join(action.choices) + "}"
            for sub in action.choices.values():
                _name_commands_and_defaults(sub)
        elif action.option_strings and not any(action.default is x for x in (None, False, argparse.SUPPRESS)) \
                and "default" not in (action.help or ""):
            action.help = f"{action.help} (default: %(default)s)" if action.help else "(default: %(default)s)"


def _core_list(text: str) -> tuple[int, ...]:
    """``0,1,5`` -> (0, 1, 5); the run checks the cores exist."""
    try:
        return tuple(int(c) for c in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected core numbers separated by commas (e.g. 0,1), got {text!r}") from None


def _cycle_window(text: str) -> tuple[int, int]:
    """``START:END`` in cycles -> (start, end); the run checks start < end."""
    start, _, end = text.partition(":")
    try:
        return int(start), int(end)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected START:END in cycles (e.g. 0:100000), got {text!r}") from None


def _add_run(p: argparse.ArgumentParser) -> None:
    from vfasim.functional.policy import ALGORITHMS, KEY_SUMMARIES, Q_SUMMARIES
    from vfasim.sim import SCHEDULES
    from vfasim.workloads import WORKLOADS

    p.add_argument("--hw", default="C4V16", help="built-in config name or YAML path (default C4V16)")
    p.add_argument("--algo", default="vfa", help=f"one of {', '.join(ALGORITHMS)} (default vfa)")
    p.add_argument("--seq-len", type=int, default=4096)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--block-q", type=int, default=None,
                   help="query rows of a tile (one tile stream's on a chip); default 128 on one core, the kernel's "
                        "own on a chip")
    p.add_argument("--block-k", type=int, default=None,
                   help="keys of a tile; default 128 on one core, the kernel's own on a chip")
    p.add_argument("--causal", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--heads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workload", default="llm-like", help=f"one of {', '.join(WORKLOADS)}")
    p.add_argument("--qkv", default=None, help=".npz (q, k, v) or .npy [3, ...] file; overrides --workload")
    p.add_argument("--kv-heads", type=int, default=None, help="K/V heads (< heads: grouped-query attention)")
    p.add_argument("--decode", action="store_true", help="decode: the last --queries rows against the whole KV")
    p.add_argument("--queries", type=int, default=1, help="query rows in decode (default 1)")
    p.add_argument("--schedule", default="pipelined", help=f"one of {', '.join(SCHEDULES)}")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    p.add_argument("--quiet", action="store_true", help="no progress bar (none is shown off a terminal)")
    g = p.add_argument_group("algorithm options")
    g.add_argument("--lam", type=float, default=1e-3, help="BLASST/VSA skip threshold λ in (0, 1)")
    g.add_argument("--topk", type=int, default=None,
                   help="bsfa: off-diagonal blocks kept per query block (default: 8, at most the key blocks "
                        "beside the diagonal)")
    g.add_argument("--rescale-threshold", type=float, default=None,
                   help="fa4/blasst_fa4: max growth (natural log) that skips the rescale; default 8·ln2")
    g.add_argument("--exp-emulation", type=float, default=None,
                   help="fraction of exps computed by polynomial on the vector ALUs (FA4-style), in [0, 1)")
    g.add_argument("--key-summary", choices=KEY_SUMMARIES, default=None, help="vfa/vsa: key-block summary")
    g.add_argument("--q-summary", choices=Q_SUMMARIES, default=None,
                   help="vfa/vsa: block-wise m-init from one summary of Q_i")
    g.add_argument("--no-minit", dest="minit", action="store_false", default=None, help="vfa/vsa: m starts at -inf")
    g.add_argument("--no-reorder", dest="reorder", action="store_false", default=None,
                   help="vfa/vsa: visit key blocks in order 1, 2, 3, …")
    m = p.add_argument_group("mitigations (this project's, not the paper's; see README)")
    m.add_argument("--protect-special", action="store_true", default=None,
                   help="skipping algorithms never skip the sink and local blocks")
    m.add_argument("--minit-clamp", action="store_true", default=None,
                   help="vfa/vsa: clamp m-init to scale·|q|·max|k| (an upper bound of every score)")
    m.add_argument("--minit-margin", type=float, default=None, metavar="DELTA",
                   help="vfa/vsa: lower m-init by DELTA (natural log units)")
    m.add_argument("--fp32-state", action="store_true", default=None,
                   help="keep l and O in fp32 on a 16-bit vector side")
    m.add_argument("--p-bf16", action="store_true", default=None, help="cast P to bf16 (unscaled) for PV")


def _add_chip(p: argparse.ArgumentParser) -> None:
    from vfasim.chip.fluid import POLICIES
    from vfasim.kernel import builtin_kernel_names

    g = p.add_argument_group("chip (configs with a chip section, e.g. --hw H100-SXM)")
    g.add_argument("--batch", type=int, default=1, help="batch elements (on one core: more heads)")
    g.add_argument("--kernel", default=None, metavar="NAME|FILE",
                   help=f"the kernel run: {', '.join(builtin_kernel_names())} or a kernel YAML file (default fa2)")
    g.add_argument("--kernel-style", default=None, help="former name of --kernel (fa2, fa3, fa4), kept for a release")
    g.add_argument("--dispatch", default=None,
                   help=f"work distribution, one of {', '.join(POLICIES)} (default: the kernel's)")
    g.add_argument("--numerics-heads", type=int, default=0,
                   help="check numerics on the first N heads (whole GQA groups); default none on a chip")


def _add_validate(sub: argparse._SubParsersAction[_Parser]) -> None:
    p = sub.add_parser("validate", help="the chip model against the published measurements in validation/")
    p.add_argument("--rows", type=int, default=None, metavar="N",
                   help="at most N rows of each chip x kernel group, evenly spread (default: every row)")
    p.add_argument("--out", default=None, help="folder for the predicted-vs-measured scatter (PNG + SVG)")
    p.add_argument("--json", action="store_true", help="print the JSON document instead of the report")
    p.add_argument("--fit", action="store_true",
                   help="fit each chip's per-kernel tuning on the fit rows and print it as config YAML")
    p.add_argument("--kernel", action="append", default=[], metavar="NAME|FILE",
                   help="predict the table kernels this description claims (its measured_as) with it instead of "
                        "the shipped one; repeatable")
    p.add_argument("--jobs", type=int, default=None, help="processes (default: CPU count)")


def _validate(args: argparse.Namespace) -> str:
    import os

    from vfasim.validate.calibrate import fit_all, run_validation
    from vfasim.io.outputs import check_folder_target
    from vfasim.kernel import load_kernel
    from vfasim.report import to_json
    from vfasim.validate.report import SCATTER_FILES, format_report, to_doc, write_scatter
    from vfasim.validate import FIT_SEQ_LENS, load_rows, modelled, subset

    for flag, value in (("--rows", args.rows), ("--jobs", args.jobs)):
        if value is not None and value < 1:
            raise VfasimError(f"{flag} must be >= 1, got {value}")
    if args.fit and (args.out is not None or args.json):
        raise VfasimError("--fit prints the fitted tuning as config YAML; --out and --json apply to the report "
                          "(give them without --fit)")
    if args.out is not None:  # before the work, not after it
        check_folder_target(args.out, SCATTER_FILES, "--out folder")
    kernels = tuple(load_kernel(k) for k in args.kernel)
    for k in kernels:
        if not k.measured_as:
            raise VfasimError(f"kernel {k.name} claims no table kernel (its measured_as is empty): "
                              "nothing to validate it on")
    jobs = args.jobs or os.cpu_count() or 1
    if args.fit:
        if kernels:
            raise VfasimError("--fit fits the shipped kernels' tuning; give --kernel without --fit")
        fitted = fit_all([r for r in subset(load_rows(), args.rows) if modelled(r)], jobs)
        return "\n".join(f"# {f.chip} ({f.rows} fit rows, MAPE {100 * f.mape_fit:.1f}%"
                         f"{', at bound: ' + ', '.join(f.at_bound) if f.at_bound else ''})\n{f.yaml()}"
                         for f in fitted)
    v = run_validation(args.rows, jobs, kernels)
    doc = to_doc(v.groups, v.not_modelled, v.ratios, FIT_SEQ_LENS, v.tuning, v.chips_without_rows)
    paths = write_scatter(v.groups, Path(args.out)) if args.out else []
    if args.json:
        return to_json(doc)
    return format_report(doc) + "".join(f"\nwrote {p}" for p in paths)


def _add_sweep(p: argparse.ArgumentParser) -> None:
    from vfasim.sim import SCHEDULES
    from vfasim.workloads import WORKLOADS

    p.add_argument("--hw", action="append", help="configs, comma list or repeated (default C4V16)")
    p.add_argument("--algo", action="append", help="algorithms, comma list or repeated (default vfa)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="PATH=V1,V2",
                   help="a hardware field (pipelines.exp.throughput.float16, score_buffers) or a run "
                        "option (seq_len, block_q, lam, topk); several --set give their cartesian product")
    for role in ("exp", "vector", "tensor"):
        p.add_argument(f"--{role}-scale", metavar="S1,S2", help=f"multiply every {role} pipeline throughput")
    for flag, default in (("--seq-len", 4096), ("--head-dim", 128), ("--block-q", 128), ("--block-k", 128),
                          ("--heads", 1), ("--seed", 0)):
        p.add_argument(flag, type=int, default=default)
    p.add_argument("--causal", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--workload", default="llm-like", help=f"one of {', '.join(WORKLOADS)}")
    p.add_argument("--schedule", default="pipelined", help=f"one of {', '.join(SCHEDULES)}")
    p.add_argument("--out", help="directory: points.jsonl (resume), results.csv/.parquet, plots")
    p.add_argument("--jobs", type=int, default=None, help="local processes (default: CPU count)")
    p.add_argument("--executor", choices=("local", "dask"), default="local")
    p.add_argument("--scheduler", help="Dask scheduler address, with --executor dask")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        with interrupt.handled(), warnings.catch_warnings():
            warnings.showwarning = _one_line_warning
            parser = build_parser(next((a for a in argv if not a.startswith("-")), ""))  # the first word: command
            if not argv:
                print(parser.format_usage().rstrip(), file=sys.stderr)
                print("error: choose a command (vfasim --help describes them)", file=sys.stderr)
                return EXIT_BAD_INPUT
            args = parser.parse_args(argv)
            if sys.stdout is None:  # found before the work, not after it
                raise VfasimError("standard output is closed: the result cannot be printed (redirect it to a file)")
            text, status = _dispatch(args)
            if str(getattr(args, "trace_out", None)) == "-":  # standard output holds the trace
                print(text, file=sys.stderr)
            else:
                _emit(text)
            return status
    except VfasimError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Interrupted as exc:
        interrupt.finish(str(exc))
    except KeyboardInterrupt:
        interrupt.finish(interrupt.reason())
    except MemoryError:
        print("error: out of memory; use a smaller size", file=sys.stderr)
        return EXIT_BAD_INPUT
    return 0


def _emit(text: str) -> None:
    """``text`` on stdout, flushed; a full or broken stdout (``/dev/full``, a reader that left) is a one-line error."""
    from vfasim.io.outputs import stdout_error

    try:
        print(text)
        sys.stdout.flush()
    except OSError as exc:
        raise stdout_error(exc, "the result") from None


def _one_line_warning(message: Warning | str, category: type[Warning], *args: object, **kwargs: object) -> None:
    print(f"warning: {message}", file=sys.stderr)


def _dispatch(args: argparse.Namespace) -> tuple[str, int]:
    """What to print, and the exit status."""
    if args.command == "sweep":
        from vfasim.sweep import sweep_command
        return sweep_command(args), 0
    if args.command == "figure":
        return _figure(args), 0
    if args.command == "validate":
        return _validate(args), 0
    if args.command == "hw":
        return _hw(args), 0
    if args.command == "kernel":
        return _kernel(args), 0
    return _run(args)


def _hw(args: argparse.Namespace) -> str:
    if args.hw_command == "list":
        from vfasim.hw.registry import builtin_names

        return "\n".join(builtin_names())
    from vfasim.hw import load_hw
    from vfasim.hw.sources import hw_sources
    from vfasim.report import format_hw
    from vfasim.runner.applies import check_tuning_names

    config = load_hw(args.name)
    check_tuning_names(config)
    return format_hw(config, hw_sources(args.name))


def _kernel(args: argparse.Namespace) -> str:
    from vfasim.kernel import builtin_kernel_names, load_kernel
    from vfasim.report import format_kernel

    return "\n".join(builtin_kernel_names()) if args.kernel_command == "list" else format_kernel(load_kernel(args.name))


def _run(args: argparse.Namespace) -> tuple[str, int]:
    """``vfasim run`` or ``vfasim sensitivity``: what to print, and the exit status."""
    from vfasim.runner.api import DEFAULT_BLOCK, Options, run
    from vfasim.functional.sampling import FULL_LIMIT
    from vfasim.report import format_run, to_json

    options = Options(**{name: getattr(args, name) for name in Options.__dataclass_fields__})
    shape = dict(seq_len=args.seq_len, head_dim=args.head_dim, block_q=args.block_q, block_k=args.block_k,
                 causal=args.causal, heads=args.heads, kv_heads=args.kv_heads, seed=args.seed,
                 workload=args.workload, qkv=args.qkv, decode=args.decode, queries=args.queries)
    if args.command == "sensitivity":
        from vfasim.sensitivity import format_sensitivity, sensitivity_table

        frame = sensitivity_table(args.hw, args.algo, schedule=args.schedule, factors=tuple(args.factors),
                                  options=options, **{**shape, "block_q": args.block_q or _core_block_q(args),
                                                      "block_k": args.block_k or DEFAULT_BLOCK})
        return (frame.to_json(orient="records", indent=2) if args.json else format_sensitivity(frame)), 0
    progress = not args.quiet and sys.stderr.isatty()
    if args.roofline_out is not None:
        _check_roofline_target(args)
    if args.check and args.spec is None and (args.numerics == "off" or (_is_chip(args.hw) and not args.numerics_heads)):
        raise VfasimError("--check needs a numerics verdict, and this run computes none (on a chip give "
                          "--numerics-heads N; on one core leave --numerics on)")
    if args.spec is not None:
        result = run(**_replayed(args), trace_out=args.trace_out, trace_window=args.trace_window,
                     trace_cores=args.trace_cores, progress=progress, cache=args.cache)
    else:
        result = run(args.hw, args.algo, schedule=args.schedule, options=options, trace_out=args.trace_out,
                     trace_window=args.trace_window, trace_cores=args.trace_cores,
                     progress=progress, batch=args.batch, kernel=args.kernel, kernel_style=args.kernel_style,
                     dispatch=args.dispatch, numerics_heads=args.numerics_heads, numerics=args.numerics,
                     matmul_format=args.matmul_format, cache=args.cache, **shape)
    doc = result.to_dict()
    if args.numerics is None and doc["numerics"].get("numerics_mode") == "sample":
        print(f"note: numerics checked on {len(doc['numerics']['sampled_query_blocks'])} sampled query blocks "
              f"(more than {FULL_LIMIT:,} score entries); --numerics full checks every row", file=sys.stderr)
    if doc["chip"]:  # a real chip: say whether measurements cover the run
        doc["validation"] = _coverage(doc)
        if not doc["validation"]["inside"] and not args.json:
            print(f"note: {doc['validation']['note']}", file=sys.stderr)
    if args.roofline_out is not None:
        from vfasim.report.roofline_plot import write_roofline

        write_roofline(args.roofline_out, doc["chip"]["roofline"], f"{doc['hw']}, kernel {doc['options']['kernel']}, "
                       f"algo {doc['algo']}")
    broken = args.check and doc["numerics"].get("verdict") == "broken"
    return (to_json({**doc, "row": result.to_row()}) if args.json else format_run(doc)), EXIT_BROKEN if broken else 0


def _check_roofline_target(args: argparse.Namespace) -> None:
    """--roofline-out: a .png or .svg file that may be written, on a config with a chip section."""
    from vfasim.hw import load_hw
    from vfasim.io.outputs import check_file_target

    if Path(args.roofline_out).suffix not in (".png", ".svg"):
        raise VfasimError(f"--roofline-out {args.roofline_out}: give a .png or .svg file")
    if args.spec is None and load_hw(args.hw).chip is None:
        raise VfasimError(f"--roofline-out applies to chip runs; {args.hw} has no chip section (e.g. --hw H100-SXM)")
    check_file_target(args.roofline_out, "roofline file")


def _is_chip(hw: str) -> bool:
    from vfasim.hw import load_hw

    return load_hw(hw).chip is not None


def _core_block_q(args: argparse.Namespace) -> int:
    """One core's default block_q: 128, or a decode step's rows when fewer (the tile is cut to them anyway)."""
    from vfasim.runner.api import DEFAULT_BLOCK

    return min(DEFAULT_BLOCK, args.queries) if args.decode else DEFAULT_BLOCK


def _coverage(doc: dict) -> dict:
    from vfasim.hw import load_hw
    from vfasim.validate import TABLE_FORMATS, coverage

    shape = doc["shape"]
    fmt = doc["spec"]["matmul_format"] or TABLE_FORMATS.get(load_hw(doc["spec"]["hw"]).precision.matmul, "")
    inside, note = coverage(doc["hw"], doc["options"]["kernel"], shape["decode"], shape["kv_len"], shape["head_dim"],
                            fmt)
    return {"inside": inside, "note": note}


#: options of vfasim run that choose outputs, not the run: allowed beside --spec
OUTPUT_OPTIONS = ("spec", "trace_out", "trace_window", "trace_cores", "roofline_out", "json", "quiet", "check", "command", "cache")


def _replayed(args: argparse.Namespace) -> dict:
    """run()'s arguments from ``--spec``; any other run option given beside it is refused."""
    from vfasim.runner.spec import read_spec, replay_arguments

    defaults = vars(build_parser().parse_args(["run"]))
    given = [k for k, v in vars(args).items() if k not in OUTPUT_OPTIONS and v != defaults.get(k)]
    if given:
        flags = ", ".join("--" + k.replace("_", "-") for k in given)
        raise VfasimError(f"--spec repeats a run as it was: give no other run options (got {flags})")
    return replay_arguments(read_spec(args.spec))


def _figure(args: argparse.Namespace) -> str:
    from vfasim.figure import SHARE_CLAIMS, latency_ratio  # plotting stack loads only for this command
    from vfasim.io.outputs import check_folder_target
    from vfasim.report.figure_write import FIGURE_FILES, summary, write_latency_ratio

    fit = SHARE_CLAIMS if args.fit is None else frozenset(x for x in args.fit.split(",") if x)
    check_folder_target(args.out, FIGURE_FILES)
    result = latency_ratio(seq_len=args.seq_len, granularity=args.granularity, head_dim=args.head_dim, fit=fit,
                           with_fa4=args.fa4, search=bool(fit))
    from vfasim.figure.numerics import verdict_line, verdicts

    checked = verdict_line(verdicts(args.seq_len, args.head_dim), args.seq_len, args.head_dim)
    paths = write_latency_ratio(result, Path(args.out))
    return f"{summary(result)}\n{checked}\nwrote {', '.join(str(p) for p in paths)}"


if __name__ == "__main__":
    sys.exit(main())
