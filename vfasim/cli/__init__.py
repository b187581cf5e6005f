"""Command line: ``vfasim run``, ``vfasim sensitivity``, ``vfasim hw list``, ``vfasim hw show NAME``.

Bad input ends with ``error: <one line>`` on stderr and exit status 2; no traceback. So does a
standard output that cannot take the result: closed (found before any work), full, or a pipe
whose reader left.
Ctrl-C ends with one line and exit status 130, SIGTERM with 143 (see ``vfasim.io.interrupt``).
Each command imports what it needs when it runs, and the parser fills in only the options of
the command given: ``vfasim --version``, ``--help`` and ``hw list`` load neither NumPy nor pydantic.
``run`` and ``sensitivity`` (their options and the run) are in ``vfasim.cli.run``; the other commands here.
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
from vfasim.cli.run import EXIT_BROKEN, add_run_command, add_sensitivity, run_command

__all__ = ["EXIT_BAD_INPUT", "EXIT_BROKEN", "build_parser", "main"]

EXIT_BAD_INPUT = 2


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
    for name, p, fill in (("run", run_p, add_run_command), ("sensitivity", sens, add_sensitivity),
                          ("sweep", sweep, _add_sweep)):
        if command in (None, name):
            fill(p)
    _add_other_commands(sub)
    _name_commands_and_defaults(parser)
    return parser


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
    lr.add_argument("--jobs", type=int, default=None,
                    help="processes for the fit and the search (default: CPU count; the same output for any number)")
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
    p.add_argument("--no-cache", dest="cache", action="store_false",
                   help="neither read nor keep runs in the run store (the cache folder's runs/, named by the "
                        "config, kernel, inputs and the model's source); by default a run made before is read")


def _validate(args: argparse.Namespace) -> str:
    import os

    from vfasim.validate.calibrate import fit_all, run_validation
    from vfasim.io.outputs import check_folder_target
    from vfasim.kernel import load_kernel
    from vfasim.report import to_json
    from vfasim.validate.report import SCATTER_FILES, format_report, to_doc, write_scatter
    from vfasim.validate import FIT_SEQ_LENS, load_rows, modelled

    _at_least_one(("--rows", args.rows), ("--jobs", args.jobs))
    if args.fit and (args.out is not None or args.json):
        raise VfasimError("--fit prints the fitted tuning as config YAML; --out and --json apply to the report "
                          "(give them without --fit)")
    if args.out is not None:  # before the work, not after it
        check_folder_target(args.out, SCATTER_FILES, "--out folder")
    kernels = tuple(load_kernel(k) for k in args.kernel)
    for k in kernels:
        if not k.measured_as and not k.predicts:
            raise VfasimError(f"kernel {k.name} claims no table kernel (its measured_as and predicts are empty): "
                              "nothing to validate it on")
    jobs = args.jobs or os.cpu_count() or 1
    if args.fit:
        if kernels:
            raise VfasimError("--fit fits the shipped kernels' tuning; give --kernel without --fit")
        fitted = fit_all([r for r in load_rows() if modelled(r)], jobs, args.rows)
        return "\n".join(f"# {f.chip} ({f.rows} fit rows, MAPE {100 * f.mape_fit:.1f}%"
                         f"{', at bound: ' + ', '.join(f.at_bound) if f.at_bound else ''})\n{f.yaml()}"
                         for f in fitted)
    v = run_validation(args.rows, jobs, kernels, args.cache)
    doc = to_doc(v, FIT_SEQ_LENS)
    paths = write_scatter(v.groups, Path(args.out)) if args.out else []
    if args.json:
        return to_json(doc)
    return format_report(doc) + "".join(f"\nwrote {p}" for p in paths)


def _add_sweep(p: argparse.ArgumentParser) -> None:
    from vfasim.sim import SCHEDULES
    from vfasim.workloads import WORKLOADS

    p.add_argument("--hw", action="append", help="configs, comma list or repeated (default C4V16)")
    p.add_argument("--algo", action="append", help="algorithms, comma list or repeated (default vfa)")
    p.add_argument("--kernel", action="append", metavar="NAME|FILE",
                   help="kernels to sweep on a chip, comma list or repeated (an axis, as --set kernel=...; "
                        "default: the run's own)")
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
    return run_command(args)


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


def _at_least_one(*flags: tuple[str, int | None]) -> None:
    for flag, value in flags:
        if value is not None and value < 1:
            raise VfasimError(f"{flag} must be >= 1, got {value}")


def _figure(args: argparse.Namespace) -> str:
    import os

    from vfasim.figure import SHARE_CLAIMS, latency_ratio  # plotting stack loads only for this command
    from vfasim.io.outputs import check_folder_target
    from vfasim.report.figure_write import FIGURE_FILES, summary, write_latency_ratio

    _at_least_one(("--jobs", args.jobs))
    fit = SHARE_CLAIMS if args.fit is None else frozenset(x for x in args.fit.split(",") if x)
    check_folder_target(args.out, FIGURE_FILES)
    result = latency_ratio(seq_len=args.seq_len, granularity=args.granularity, head_dim=args.head_dim, fit=fit,
                           with_fa4=args.fa4, search=bool(fit), jobs=args.jobs or os.cpu_count() or 1)
    from vfasim.figure.numerics import verdict_line, verdicts

    checked = verdict_line(verdicts(args.seq_len, args.head_dim), args.seq_len, args.head_dim)
    paths = write_latency_ratio(result, Path(args.out))
    return f"{summary(result)}\n{checked}\nwrote {', '.join(str(p) for p in paths)}"
