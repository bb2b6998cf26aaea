"""`memq`: the umbrella command. Each subcommand lives in its own module.

A subcommand module exposes `add_parser(subparsers)`, which registers an
argparse parser whose `func(args) -> int` runs the command. Modules import
their heavy dependencies inside `func`, so `memq --help` stays fast.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from ctf2perfetto.cli import run_command
from ctf2perfetto import __version__

# subcommand module (ctf2perfetto.cli.<name>) in the order `--help` lists them.
SUBCOMMAND_MODULES = [
    "record",  # memq record: LTTng capture around a command
    "convert",  # memq convert: same as ctf2perfetto
    "analyses",  # memq duplicated | redundant | summary | leaks
    "sql",  # memq sql: any PerfettoSQL over a trace
    "annotate",  # memq annotate: analyses baked back into the trace
    "open",  # memq open: local Perfetto UI with the trace loaded
    "serve",  # memq serve: the trace processor RPC for any Perfetto UI
    "plot",  # memq plot: PNG figure of memory over time
    "report",  # memq report: one HTML page of what to fix
    "diff",  # memq diff: what changed between two runs
]
START_HERE = ("Start here: memq report TRACE -o report.html  (one page: what the job wastes, where, the fix and its "
              "gain)\nRecord first with: memq record -o trace/ -- python train.py")


class _ArgumentParser(argparse.ArgumentParser):
    """argparse with one-line usage errors and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser(modules: list[str] = SUBCOMMAND_MODULES) -> argparse.ArgumentParser:
    """The `memq` parser with the subcommands of `modules` (a subset for record-only entries)."""
    parser = _ArgumentParser(
        prog="memq",
        description=(
            "Where does my GPU job waste memory and copies? Record host heap and HIP/CUDA memory calls "
            "with LTTng, convert them to Perfetto, and measure bytes duplicated between host and device "
            "and time spent in redundant copies."
        ),
        epilog="Run `memq COMMAND --help` for each command's options. Set MEMQ_DEBUG=1 to see tracebacks.",
    )
    parser.add_argument("--version", action="version", version=f"memq {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_ArgumentParser)
    subparsers.required = True
    for name in modules:
        importlib.import_module(f"{__package__}.{name}").add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None, modules: list[str] = SUBCOMMAND_MODULES) -> int:
    parser = build_parser(modules)
    if not (sys.argv[1:] if argv is None else argv) and "report" in modules:
        parser.print_usage(sys.stderr)
        print(START_HERE, file=sys.stderr)
        print("All commands: memq --help", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    return run_command("memq", lambda: args.func(args))


if __name__ == "__main__":
    sys.exit(main())
