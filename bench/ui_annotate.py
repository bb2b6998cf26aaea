#!/usr/bin/env python3
"""Cost of `memq annotate` and `memq open` against the time to load the trace.

Reference, in the same run: loading the trace into the embedded engine (open_trace + one
query). Measured: the analyses annotate runs (`collect`), building and appending the
annotation packets, and, with --browser, the time from `memq open` to the annotated tracks
on screen in headless Chromium (the UI's own wasm engine loads the trace).

    python3 bench/ui_annotate.py [TRACE_DIR_OR_PFTRACE] [--repeat 3] [--browser]

Default input: tests/data/ctf/disc (a real LTTng recording), converted first.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))


def best(repeat: int, step) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = step()
        times.append(time.perf_counter() - start)
    return min(times), result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace", nargs="?", type=Path, default=REPO / "tests" / "data" / "ctf" / "disc")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--browser", action="store_true", help="also time memq open in headless Chromium")
    args = parser.parse_args()

    from ctf2perfetto.look.annotate import annotation_packets, collect, write_annotated
    from ctf2perfetto.engine import open_trace

    with tempfile.TemporaryDirectory(prefix="memq-bench-") as tmp:
        trace = args.trace
        if trace.is_dir():
            trace = Path(tmp) / "trace.pftrace"
            subprocess.run([sys.executable, "-m", "ctf2perfetto.cli.memq", "convert", str(args.trace), "-o",
                            str(trace), "-q"], check=True)
        size_mb = trace.stat().st_size / 1e6

        def load() -> None:
            with open_trace(trace) as engine:
                engine.query("SELECT 1")

        def analyses():
            with open_trace(trace) as engine:
                return collect(engine)

        load_s, _ = best(args.repeat, load)
        collect_s, notes = best(args.repeat, analyses)
        out = Path(tmp) / "annotated.pftrace"
        append_s, _ = best(args.repeat, lambda: write_annotated(trace, out, annotation_packets(notes)))
        print(f"trace {trace.name}: {size_mb:.1f} MB; annotations: {len(notes.duplicated)} counter samples, "
              f"{len(notes.redundant)} redundant slices, {len(notes.leaks)} leaks")
        print(f"load (reference)        {load_s:7.2f} s")
        print(f"load + analyses         {collect_s:7.2f} s   ratio to load {collect_s / load_s:5.2f}")
        print(f"packets + append        {append_s:7.2f} s   ratio to load {append_s / load_s:5.2f}")
        print(f"annotate total          {collect_s + append_s:7.2f} s   ratio to load "
              f"{(collect_s + append_s) / load_s:5.2f}")
        if args.browser:
            from ctf2perfetto.traceformat import names as N
            from ui.browser import load_in_chromium, start_memq_open

            track = N.ANALYSIS_GROUP  # on the first screen of every annotated trace
            start = time.perf_counter()
            server = start_memq_open(out, "--engine", "browser")  # the UI's own engine, as documented
            try:
                report = load_in_chromium(server.url, Path(tmp) / "shot.png", [track])
            finally:
                server.stop()
            assert not report["missing"], f"{track} never appeared"
            shown = report["firstSeenMs"][track] / 1000
            print(f"memq open -> tracks on screen (Chromium) {shown:7.2f} s (incl. {time.perf_counter() - start - shown:.1f} s "
                  f"server start and browser teardown)   ratio to load {shown / load_s:5.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
