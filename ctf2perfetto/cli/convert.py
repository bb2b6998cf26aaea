"""`ctf2perfetto TRACE_DIR -o OUT.pftrace` (also `memq convert`): LTTng CTF to a memq Perfetto trace."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ctf2perfetto.cli import run_command, stderr_is_terminal
from ctf2perfetto.cli.output import SCHEDULER_ADDRESS, add_cluster_args, add_range_args, on_cluster, range_of

DESCRIPTION = (
    "Convert the LTTng trace(s) under TRACE_DIR (a `memq record` output, or any LTTng output directory with "
    "the libc wrapper and memq GPU events) into a Perfetto protobuf trace: heap calls as instants, HIP/CUDA "
    "memory calls as slices, live-bytes counters per process and device, copies on per-stream tracks, flows "
    "from allocations to their frees and copies. The layout is docs/TRACE_FORMAT.md. Prints a summary on "
    "stderr; lost events, unmatched frees, what the files lack (against index/ and memq-record.json) and anything "
    "--salvage dropped are reported there and in the trace (docs/TRACE_FORMAT.md, \"Loss\")."
)
EPILOG = """examples:
  ctf2perfetto trace/ -o out.pftrace
  ctf2perfetto damaged-trace/ -o out.pftrace --salvage
  ctf2perfetto trace/ --kineto profile.json -o out.pftrace
  ctf2perfetto trace/ --from 10m --to 15m -o minutes-10-to-15.pftrace
  ctf2perfetto job/ -o job.pftrace --workers 4     (job/: one recording per node, memq record -o job/%h)
  ctf2perfetto matmul_result.rpd -o matmul.pftrace      (also rocpd .db, nsys .sqlite: docs/IMPORTERS.md)

exit status: 0 converted, 1 the trace could not be read (one line naming the file and packet) or the output
written, 2 bad usage (an -o that is not a new file or a regular file of yours, a missing input), 130 Ctrl-C."""


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("trace", type=Path, metavar="TRACE_DIR",
                        help="LTTng output directory (searched recursively), or another profiler's trace: an RPD "
                             "(rocmProfileData) or rocpd (rocprofv3) database, an Nsight Systems SQLite export, a "
                             "THAPI CTF directory (docs/IMPORTERS.md; the format is told from the content)")
    parser.add_argument("-o", "--output", type=Path, required=True, metavar="OUT.pftrace",
                        help="Perfetto trace to write (replaced atomically; nothing is left there on failure; "
                             "never a link, device, directory, another user's file or a file inside a CTF "
                             "trace directory)")
    parser.add_argument("--salvage", action="store_true",
                        help="convert what can be read from a damaged trace (stream files cut back to their last "
                             "complete packet, on a temporary copy) and report exactly what was dropped")
    parser.add_argument("--kineto", type=Path, metavar="PROFILE.json",
                        help="merge a PyTorch-profiler (Kineto) JSON trace of the same run (plain or .gz): its "
                             "events join the same process/thread tracks (docs/TIMELINE.md)")
    add_range_args(parser)
    add_cluster_args(parser, "TRACE_DIR holding several recordings (a job, one per node): decode each recording as a "
                     "Dask task on a local cluster of N worker processes (output identical to the default, which "
                     "decodes them in this process)",
                     f"like --workers, on the existing Dask cluster at ADDRESS {SCHEDULER_ADDRESS}; its workers "
                     "must read TRACE_DIR at the same path")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bar and no summary (warnings only)")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("convert", help="convert an LTTng trace to Perfetto (same as ctf2perfetto)",
                                   description=DESCRIPTION, epilog=EPILOG,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_arguments(parser)
    parser.set_defaults(func=run)


class _Progress:
    """One redrawn line on stderr: how far the decoder is through the trace files, and events written."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.fraction = 0.0
        self.events = 0
        self.drawn = 0.0

    def decoded(self, done: int, total: int) -> None:
        if total > 0:
            self.fraction = min(1.0, done / total)
        self._draw()

    def written(self, events: int) -> None:
        self.events = events
        self._draw()

    def _draw(self, final: bool = False) -> None:
        now = time.monotonic()
        if not self.enabled or (not final and now - self.drawn < 0.1):
            return
        self.drawn = now
        width = 30
        filled = int(self.fraction * width)
        sys.stderr.write(f"\rconverting [{'#' * filled}{'.' * (width - filled)}] {self.fraction:4.0%} "
                         f"{self.events:,} events")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled and self.drawn:
            sys.stderr.write("\r" + " " * 70 + "\r")
            sys.stderr.flush()


def _print_summary(summary, prog: str) -> None:
    mib = summary.output_bytes / (1 << 20)
    kinds = ", ".join(f"{name} {count:,}" for name, count in sorted(summary.events.items(), key=lambda kv: -kv[1]))
    lines = [
        f"{prog}: wrote {summary.output} ({mib:.1f} MiB) in {summary.elapsed_s:.1f} s",
        f"  events: {summary.total_events:,} ({kinds})",
        f"  processes: {summary.processes}, threads: {summary.threads}",
        f"  allocations: {summary.allocations:,}"
        + (f" (and {summary.live_at_start:,} live when one of the {summary.windows:,} capture windows opened)"
           if summary.windows else "")
        + f", unmatched frees: {summary.unmatched_frees:,}"
        + (f", allocations over a live one (free not traced): {summary.replaced_allocations:,}"
           if summary.replaced_allocations else "")
        + (f"; host blocks below the threshold (totals only): {summary.small_allocations:,} allocated, "
           f"{summary.small_frees:,} freed" if summary.small_allocations or summary.small_frees else ""),
        f"  lost: {summary.lost_events:,} events, {summary.lost_packets:,} packets",
    ]
    if summary.range is not None:
        r = summary.range_report
        lines.append(f"  range: {summary.range.describe()} after the start of the trace: {r.before:,} events before "
                     f"it and {r.after:,} after it not written; {_count(r.opened, 'window')} opened (with "
                     f"{_count(r.live, 'allocation')} live at its start), {r.closed:,} closed at its end"
                     + (f"; {_count(r.done_dropped, 'completion')} of copies made before it dropped"
                        if r.done_dropped else ""))
    missing = []
    if summary.missing_events:
        missing.append(f"{_count(summary.missing_events, 'event')}" + (
            f" of the {summary.recorded_events:,} memq-record.json counted" if summary.recorded_events else ""))
    if summary.missing_packets:
        missing.append(f"{_count(summary.missing_packets, 'packet')} index/ lists")
    if summary.missing_streams:
        missing.append(f"{_count(summary.missing_streams, 'stream file')} gone")
    if missing:
        lines.append("  missing from the files: " + "; ".join(missing))
    if summary.dropped_packets:
        lines.append(f"  dropped by salvage: {_count(summary.dropped_packets, 'packet')} "
                     f"({summary.dropped_bytes:,} bytes)")
    if summary.skipped:
        lines.append("  skipped: " + ", ".join(f"{n:,} {reason}" for reason, n in sorted(summary.skipped.items())))
    imported = getattr(summary, "imported", None)
    if imported is not None:
        from ctf2perfetto.importers.foreign import NAMES

        lines.append(f"  read as {NAMES[imported.format]}" + (f" (schema {imported.version})" if imported.version
                                                                else "") + ": " + (", ".join(
            f"{direction} {n:,} ({nbytes:,} B)" for direction, (n, nbytes, _) in sorted(imported.copies.items()))
            or "no copies"))
        lines += [f"  {note}" for note in imported.notes]
        if not imported.has_addresses:
            lines.append("  its copies carry no addresses: only the address-free figures (counts, bytes, time, "
                         "bandwidth, staged) apply")
    print("\n".join(lines), file=sys.stderr)


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def convert(args: argparse.Namespace, prog: str) -> int:
    from ctf2perfetto.pipeline import convert as convert_trace, keep_freed_memory

    span = range_of(args)
    keep_freed_memory()
    progress = _Progress(stderr_is_terminal() and not args.quiet)
    try:
        with on_cluster(args.trace, args.workers, args.scheduler):
            summary = convert_trace(args.trace, args.output, kineto=args.kineto, salvage=args.salvage, span=span,
                                    progress=progress)
    finally:
        progress.close()
    if not args.quiet:
        _print_summary(summary, prog)
    for line in summary.warnings:
        print(f"{prog}: warning: {line}", file=sys.stderr)
    return 0


def run(args: argparse.Namespace) -> int:
    return convert(args, "memq convert")


def build_parser() -> argparse.ArgumentParser:
    from ctf2perfetto.cli.memq import _ArgumentParser

    parser = _ArgumentParser(prog="ctf2perfetto", description=DESCRIPTION, epilog=EPILOG,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
    from ctf2perfetto import __version__

    parser.add_argument("--version", action="version", version=f"ctf2perfetto {__version__}")
    _add_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_command("ctf2perfetto", lambda: convert(args, "ctf2perfetto"))


if __name__ == "__main__":
    sys.exit(main())
