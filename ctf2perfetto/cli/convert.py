"""`ctf2perfetto TRACE_DIR -o OUT.pftrace` (also `memq convert`): LTTng CTF to a memq Perfetto trace."""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Callable, Iterable, Iterator

from . import run_command, stderr_is_terminal

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

exit status: 0 converted, 1 the trace could not be read (one line naming the file and packet) or the output
written, 2 bad usage (an -o that is not a new file or a regular file of yours, a missing input), 130 Ctrl-C."""


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("trace", type=Path, metavar="TRACE_DIR", help="LTTng output directory (searched recursively)")
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
    print("\n".join(lines), file=sys.stderr)


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


class _Later:
    """An iterable made on first iteration (write_trace consumes extra_packets after the batches)."""

    def __init__(self, make: Callable[[], list[bytes]]) -> None:
        self.make = make

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.make())


def _realtime_offset(info) -> int:
    """REALTIME - MONOTONIC (ns) that the trace's clock snapshot applies to the LTTng events."""
    from .. import clocks

    clock = clocks.correspondence(info, 0)
    return clock.realtime - clock.monotonic


def keep_freed_memory() -> None:
    """Have glibc keep freed memory for reuse instead of handing it back to the kernel.

    The pipeline allocates and frees the same batch-sized numpy arrays (0.5-15 MB) over and
    over, from two threads. With glibc's defaults many of them are mmap'd and unmapped each
    time, or trimmed from the arena top, so every batch faulted its pages in again: ~140k
    page faults and 0.35 s of system time per 3M events. With a fixed 32 MiB mmap threshold
    (above every per-batch array, the 15 MB encode buffer included) and a 1 GiB trim threshold
    they are reused: ~26k faults, 0.12 s. Both must be set: setting either one also freezes
    glibc's adaptive mmap threshold, at 128 KiB if it was not raised. Memory is still bounded
    by the largest working set (peak RSS +10 MB), not by the number of events. No-op where
    libc has no mallopt.
    """
    import ctypes

    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is not None:
        m_trim_threshold, m_mmap_threshold = -1, -3  # <malloc.h>
        mallopt(m_mmap_threshold, 32 << 20)
        mallopt(m_trim_threshold, 1 << 30)


def convert(args: argparse.Namespace, prog: str) -> int:
    # numpy's OpenBLAS starts a thread per core at import, which then spin: this command does no
    # linear algebra, and those threads take CPU from the decoder (must be set before numpy loads).
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    keep_freed_memory()
    from ..decode import decode
    from ..outfiles import check_output

    inputs = [args.trace] + ([args.kineto] if args.kineto is not None else [])
    check_output(args.output, inputs=inputs)
    extra_packets: Iterable[bytes] = []
    kineto_packets = None
    lttng_events = None
    if args.kineto is not None:
        from .. import kineto
        from ..write import device_track_packet, device_track_uuid, process_track_uuid, thread_track_uuid

        devices: set[int] = set()

        def device_uuid(device: int) -> int:
            devices.add(int(device))
            return device_track_uuid(device)

        kineto_packets = kineto.KinetoMerge(kineto.load(args.kineto), thread_track_uuid=thread_track_uuid,
                                            process_track_uuid=process_track_uuid, device_track_uuid=device_uuid)
        lttng_events = kineto.LttngEvents(kineto_packets.anchor_addresses())
    progress = _Progress(stderr_is_terminal() and not args.quiet)
    try:
        # 64k-row batches: a quarter of the decoder's default memory, and no slower end to end.
        with decode(args.trace, salvage=args.salvage, batch_size=1 << 16, progress=progress.decoded) as decoding:
            batches: Iterable = iter(decoding)  # the decoder starts now, while the writer's modules load
            from ..write import write_trace

            if kineto_packets is not None and lttng_events is not None:
                batches = (lttng_events.add(batch) for batch in batches)
                # Made after the last batch (write_trace reads extra_packets last), against the LTTng
                # events: clock check on shared allocations, ops widened over API calls (docs/TIMELINE.md).
                extra_packets = _Later(lambda: [device_track_packet(d) for d in sorted(devices)]
                                       + kineto_packets.packets(lttng_events, _realtime_offset(decoding.info)))
            summary = write_trace(
                batches, lambda: decoding.info, args.output, progress=progress.written,
                extra_packets=extra_packets,
                extra_processes=kineto_packets.processes if kineto_packets else {},
                extra_threads=kineto_packets.threads if kineto_packets else {}, inputs=inputs)
    finally:
        progress.close()
    if not args.quiet:
        _print_summary(summary, prog)
    warnings = list(summary.warnings)
    if kineto_packets is not None:
        warnings += kineto_packets.warnings(summary.lttng_threads)
    for line in warnings:
        print(f"{prog}: warning: {line}", file=sys.stderr)
    return 0


def run(args: argparse.Namespace) -> int:
    return convert(args, "memq convert")


def build_parser() -> argparse.ArgumentParser:
    from .memq import _ArgumentParser

    parser = _ArgumentParser(prog="ctf2perfetto", description=DESCRIPTION, epilog=EPILOG,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
    from .. import __version__

    parser.add_argument("--version", action="version", version=f"ctf2perfetto {__version__}")
    _add_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_command("ctf2perfetto", lambda: convert(args, "ctf2perfetto"))


if __name__ == "__main__":
    sys.exit(main())
