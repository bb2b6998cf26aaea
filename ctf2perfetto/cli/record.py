"""`memq record -o DIR [--api hip,cuda,libc] [--host-min-size BYTES] [--mode blocking|discard]
[--content sampled|full|off] [--delay S] [--duration S] [--capture-range profiler-api] [--force] -- CMD ...`

`python3 -m ctf2perfetto.cli.record record -o DIR -- CMD` is the same command
without the other subcommands, whose modules import pandas: recording needs only
the standard library (the GPU bundle, scripts/gpu-bundle.sh, relies on it).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

HELP = "record host heap and HIP/CUDA memory calls of a command with LTTng"
DESCRIPTION = """\
Run COMMAND under an LTTng user-space session and write its trace (CTF) to DIR:
the libc heap (memq's preload library: every block of at least --host-min-size
usable bytes as an allocation and a free event, smaller blocks as per-thread
totals written every 10 ms), every HIP and CUDA runtime memory call
(allocations, frees with the size they free, copies, sets, prefetch/advise,
synchronisations, device selection), loaded libraries and process names, with
vpid/vtid/ip contexts, and content fingerprints of what copies move where the
CPU may read it (--content), which let the analyses tell redundant copies from
copies of new data. A session daemon is started if none is running.
Ctrl-C reaches COMMAND (SIGINT, SIGTERM and SIGHUP sent to memq are forwarded
to it); the session is stopped and destroyed whatever happens to COMMAND or to
memq (a guardian process does it if memq is killed), and DIR/memq-record.json
records the command, its exit code, clocks, versions, what was enabled and how
many events were lost. memq record exits with COMMAND's exit code (127: not
found, 126: not executable).
"""
EPILOG = """\
notes:
  LTTng records every instrumented process of your user while the session is
  active, not only COMMAND's: tell them apart by pid. LD_PRELOAD is inherited
  by COMMAND's children; a pyenv shim is replaced by the interpreter it runs.
  --mode blocking (default) makes the program wait (up to 200 ms per event)
  instead of losing events when the consumer falls behind; --mode discard
  never stalls it, and lost events are counted.
  A PyTorch loop makes ~650k heap allocations per second, 99% of them under
  4 KiB: the default --host-min-size keeps the trace ~80x smaller while the
  host live-bytes counter stays exact to within 10 ms (small blocks are in it
  as totals). --host-min-size 0 records every block; --host-source lttng
  records LTTng's raw lttng_ust_libc:* events instead (every call, no
  threshold, sizes as requested).

capture windows (record part of a long run):
  --delay/--duration record one window of every process's run, timed from
  COMMAND's start; --capture-range profiler-api records between the program's
  cudaProfilerStart/Stop, cuProfilerStart/Stop or hipProfilerStart/Stop calls
  (torch.cuda.profiler.start()/stop()), as many windows as it opens. Nothing
  outside a window is recorded; when a window opens, every live GPU
  allocation and host block of at least --host-min-size is written (and the
  small blocks' totals so far), so copies and frees in the window resolve to
  allocations made before it. The analyses then say which windows their
  figures cover. Windows gate memq's own events, not LTTng's libc wrapper
  (--host-source lttng is refused with them).

examples:
  memq record -o trace/ -- python train.py --epochs 1
  ctf2perfetto trace/ -o trace.pftrace
  memq record -o trace/ --delay 600 --duration 60 -- python train.py
  memq record -o trace/ --capture-range profiler-api -- python train.py
"""


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("record", help=HELP, description=DESCRIPTION, epilog=EPILOG,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-o", "--output", required=True, type=Path, metavar="DIR",
                        help="trace directory (created; must be empty unless --force); %%h is replaced by the "
                             "host name, %%r by the rank and %%j by the job id the launcher set, for one recording "
                             "per node of a job: srun memq record -o job/%%h -- python train.py")
    parser.add_argument("--api", default="hip,cuda,libc", metavar="LIST",
                        help="what to record, comma-separated from hip,cuda,libc (default: all)")
    parser.add_argument("--host-min-size", default="4096", metavar="BYTES",
                        help="libc heap blocks of at least BYTES (usable size; suffixes k, M, G) are events, smaller "
                             "ones per-thread totals (default 4096; 0 records every block)")
    parser.add_argument("--host-source", choices=("memq", "lttng"), default="memq",
                        help="what records the libc heap: memq's preload library (default) or LTTng's libc wrapper "
                             "(raw lttng_ust_libc:* events, every call; --host-min-size does not apply)")
    parser.add_argument("--mode", choices=("blocking", "discard"), default="blocking",
                        help="when buffers are full: make the program wait (default) or lose events")
    parser.add_argument("--subbuf-size", default=None, metavar="SIZE",
                        help="LTTng sub-buffer size per CPU, e.g. 64k, 2M (rounded up to a power of two; default "
                             "512k, 2M when every heap call is an event: --host-min-size 0 or --host-source lttng)")
    parser.add_argument("--num-subbuf", type=int, default=8, metavar="N",
                        help="sub-buffers per CPU (default 8): more buffer absorbs longer bursts")
    parser.add_argument("--delay", metavar="SEC",
                        help="open the capture window SEC seconds after COMMAND starts (default: at once)")
    parser.add_argument("--duration", metavar="SEC",
                        help="close the capture window SEC seconds after it opens (default: at exit)")
    parser.add_argument("--capture-range", metavar="RANGE",
                        help="none (default) or profiler-api: windows between the program's "
                             "cuda/cu/hipProfilerStart and Stop calls")
    parser.add_argument("--content", choices=("sampled", "full", "off"), default="sampled",
                        help="fingerprint what copies move, where the CPU can read it (host memory; device memory "
                             "only on unified-memory devices): sampled (default: the length and 16 blocks of 64 "
                             "bytes spread over the range; ~0.1 us a fingerprint, ~1 us when not cached), full "
                             "(every byte; ~20 GB/s per core) or off. Redundant copies are then checked against "
                             "the data, not only addresses")
    parser.add_argument("--force", action="store_true",
                        help="record into a non-empty DIR (replaces a previous recording's ust/ and "
                             "memq-record.json, leaves other files)")
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND ...",
                        help="the program to run and its arguments")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ctf2perfetto.cli import stderr_is_terminal
    from ctf2perfetto.capture.triggers import Capture
    from ctf2perfetto.errors import UsageError
    from ctf2perfetto.capture import RecordOptions, parse_apis, parse_host_min_size, record, summary
    from ctf2perfetto.capture.preload import RECORDING_ENV

    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise UsageError("no command given: memq record -o DIR -- COMMAND ...")
    outer = os.environ.get(RECORDING_ENV)
    if outer:
        raise UsageError(f"this command already runs under memq record (recording into {outer}): a recording "
                         "cannot hold another; record the command once, from outside")
    capture = Capture.from_options(args.delay, args.duration, args.capture_range)
    announce = (lambda line: print(line, file=sys.stderr, flush=True)) if stderr_is_terminal() else None
    result = record(RecordOptions(output=args.output, command=command, apis=parse_apis(args.api),
                                  mode=args.mode, force=args.force, subbuf_size=args.subbuf_size,
                                  num_subbuf=args.num_subbuf, host_source=args.host_source,
                                  host_min_size=parse_host_min_size(args.host_min_size),
                                  content=args.content, capture=capture), announce)
    try:
        print(summary(result), file=sys.stderr)
    except OSError:
        pass  # the terminal is gone (SIGHUP): memq-record.json says it all
    return result.exit_code


if __name__ == "__main__":
    from ctf2perfetto.cli.memq import main

    sys.exit(main(modules=["record"]))
