"""Cost of a wrapped GPU call: unwrapped vs preloaded without a session vs recorded by `memq record`,
and the cost of content fingerprints (`memq record --content off|sampled|full`), all in one run.

One C program calls fake-runtime functions in tight loops (tests/fakes: the call
itself does almost nothing beyond moving the bytes, so what is measured is the
wrapper): hipStreamSynchronize (smallest event, memq:sync), hipMemcpyAsync of 8
bytes and cudaMemcpyAsync of 64 bytes (largest event, memq:copy; the call timed
on the real GPU, docs/PERFORMANCE.md), hipMemcpy of 64 KiB host to host (both
sides fingerprinted: source and destination before the call) and hipMemcpy of
16 MiB host to device (the source fingerprinted). It runs these ways in this one
bench run:

  unwrapped   no LD_PRELOAD                                  -> reference
  no session  LD_PRELOAD=libmemq_preload.so, no session       goal: <= 5 ns more than unwrapped
  recorded    `memq record --api hip,cuda --mode blocking`    goal: <= 300 ns more than unwrapped
              with --content off (the reference for the next two), sampled, full
                                                              goals: sampled <= 300 ns more per copy
                                                              than off; full >= 10 GB/s per core
  --api hip   `memq record --api hip`: the CUDA call's runtime is not recorded,
              so it should cost what it costs with no session

and prints ns/call and the differences. The machine is shared: each figure
is the best of --repeat runs (the code path's cost, not the neighbours'),
the ways interleaved so that load drifts hit them alike.

It also times the allocation table (preload/memq_table.c compiled into a
small program): inserting 400k live entries, and put+take pairs at that load,
for 2 MiB-aligned pointers (device blocks) against 48-byte-spaced ones.
Goal: aligned within 2x of unaligned.

    python3 bench/preload_overhead.py [--calls 5000000] [--traced-calls 500000] [--repeat 5] [--table-entries 400000]
        [--isolated] [--instructions] [--reference OTHER/libmemq_preload.so]

`--reference LIB` measures another build of the library (main's, say) in the
same run, interleaved with this checkout's. `--instructions` also counts, with valgrind's callgrind, the instructions of
one recorded cudaMemcpyAsync and how they split between LTTng (the event
probe), the runtime and memq's own path: a figure the machine's load does not
change.

Caveat: LTTng sessions are per user. If another session of this user enables
memq:* while this runs (other engineers' tests on a shared machine), the
"no session" figure includes tracing and recorded events are written twice;
the script says so when it sees an active session. `--isolated` avoids it:
the bench re-runs itself in a private mount namespace (unshare -m, as root;
tests/support/gpu_bundle.isolated) with empty LTTng run directories, so its
programs register only with a session daemon of its own, which `memq record`
starts there and which is stopped at the end.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from support.fakes import build_fakes  # noqa: E402
from support.gpu_bundle import isolated  # noqa: E402

from ctf2perfetto.paths import native_library  # noqa: E402

MEDIUM, LARGE = 64 << 10, 16 << 20  # bytes of the fingerprinted copies
CALLS = ("hipStreamSynchronize", "hipMemcpyAsync (8 B)", "cudaMemcpyAsync (64 B)", "hipMemcpy 64 KiB HtoH",
         "hipMemcpy 16 MiB HtoD")
SMALL = range(3)  # the loops the per-call goals are about
CONTENT_MODES = ("off", "sampled", "full")
PROGRAM = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int hipStreamSynchronize(void *);
int hipMemcpyAsync(void *, const void *, size_t, int, void *);
int cudaMemcpyAsync(void *, const void *, size_t, int, void *);
int hipMemcpy(void *, const void *, size_t, int);

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

/* bench N [cuda]: N calls of each small loop, N / 20 of the 64 KiB loop, 30 of the 16 MiB loop (only
 * cudaMemcpyAsync with "cuda"). The small loops print their mean; the fingerprinted copies (long enough to
 * be preempted) the least of batches of 100 calls / of single calls. */
int main(int argc, char **argv)
{
	int cuda_only = argc > 2;
	long n = atol(argv[1]), s = cuda_only ? 0 : n, m = cuda_only ? 0 : n / 20, k = cuda_only ? 0 : 30;
	char src[64] = "1234567", dst[64];
	char *a = malloc(MEDIUM), *b = malloc(MEDIUM), *big = malloc(LARGE), *dev = malloc(LARGE);
	void *stream = (void *) 0x1000;
	double t[4], medium = 0, large = 0, t0, dt;
	int bad = 0;

	memset(a, 1, MEDIUM);
	memset(b, 2, MEDIUM);
	memset(big, 3, LARGE);
	memset(dev, 4, LARGE);
	t[0] = now();
	for (long i = 0; i < s; i++)
		bad |= hipStreamSynchronize(stream);
	t[1] = now();
	for (long i = 0; i < s; i++)
		bad |= hipMemcpyAsync(dst, src, 8, 1, stream);
	t[2] = now();
	for (long i = 0; i < n; i++)
		bad |= cudaMemcpyAsync(dst, src, 64, 1, stream);
	t[3] = now();
	for (long i = 0; i < m; i += 100) {
		t0 = now();
		for (long j = i; j < i + 100; j++)
			bad |= hipMemcpy(j & 1 ? a : b, j & 1 ? b : a, MEDIUM, 0);
		dt = (now() - t0) / 100;
		medium = i == 0 || dt < medium ? dt : medium;
	}
	for (long i = 0; i < k; i++) {
		t0 = now();
		bad |= hipMemcpy(dev, big, LARGE, 1);
		dt = now() - t0;
		large = i == 0 || dt < large ? dt : large;
	}
	printf("%.3f %.3f %.3f %.3f %.3f\n", (t[1] - t[0]) / (s ? s : 1), (t[2] - t[1]) / (s ? s : 1),
	       (t[3] - t[2]) / n, medium, large);
	return bad;
}
"""
TABLE_PROGRAM = r"""
#include "memq_table.c"
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char **argv)
{
	long n = atol(argv[1]), pairs = 200000;
	uint64_t stride = strtoull(argv[2], NULL, 0), base = 0x7f0000000000ull;
	struct memq_alloc_info info;
	double t0, t1, t2;

	t0 = now();
	for (long i = 0; i < n; i++)
		memq_table_put(base + (uint64_t) i * stride, 0, 64, MEMQ_MEM_DEVICE);
	t1 = now();
	for (long i = 0; i < pairs; i++) {
		uint64_t p = base + (uint64_t) (n + i) * stride;
		memq_table_put(p, 0, 64, MEMQ_MEM_DEVICE);
		memq_table_take(p, 0, &info);
	}
	t2 = now();
	printf("%.3f %.3f\n", (t1 - t0) / n, (t2 - t1) / pairs);
	return 0;
}
"""
TABLE_STRIDES = {"2 MiB-aligned": 2 << 20, "48 B apart": 48}


def build_table(work: Path) -> Path:
    (work / "table.c").write_text(TABLE_PROGRAM)
    exe = work / "table_bench"
    lttng = subprocess.run(["pkg-config", "--cflags", "lttng-ust"], capture_output=True, text=True,
                           check=True).stdout.split()
    subprocess.run(["gcc", "-O2", f"-I{REPO / 'preload'}", *lttng, "-o", str(exe), str(work / "table.c"),
                    "-lpthread"], check=True)
    return exe


def table_figures(exe: Path, entries: int, repeat: int) -> dict[str, tuple[float, float]]:
    """Per pointer layout: best (ns per insert while filling to `entries`, ns per put+take pair at that load)."""
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in TABLE_STRIDES}
    for _ in range(repeat):
        for name, stride in TABLE_STRIDES.items():
            runs[name].append(run([str(exe), str(entries), str(stride)], {}))
    return {name: best(r) for name, r in runs.items()}


def build(work: Path) -> Path:
    fakes = build_fakes(work / "fakes")
    (work / "bench.c").write_text(PROGRAM)
    exe = work / "preload_bench"
    subprocess.run(["gcc", "-O2", f"-DMEDIUM={MEDIUM}", f"-DLARGE={LARGE}", "-o", str(exe), str(work / "bench.c"),
                    f"-L{fakes.dir}", "-l:libamdhip64.so", "-l:libcudart.so.12", f"-Wl,-rpath,{fakes.dir}"],
                   check=True)
    return exe


def figures(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in text.split())


def run(argv: list[str], env: dict[str, str]) -> tuple[float, ...]:
    return figures(subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout)


def recorded(exe: Path, calls: int, api: str, content: str, out: Path, env: dict[str, str]) -> tuple[float, ...]:
    proc = subprocess.run([sys.executable, "-m", "ctf2perfetto", "record", "-o", str(out), "--api", api,
                           "--content", content, "--", str(exe), str(calls)],
                          env=env, cwd=out.parent, capture_output=True, text=True, check=True)
    if '"discarded_events": 0' not in (out / "memq-record.json").read_text():
        print(f"warning: a recorded run (--api {api} --content {content}) lost events", file=sys.stderr)
    shutil.rmtree(out)
    return figures(proc.stdout)


# callgrind_annotate --inclusive=yes rows: "12,345 (6.7%)  file:function [object]"
ROW = re.compile(r"^\s*([\d,]+) \([^)]*\)\s+\S*?:(\S+)(?: \[(\S+)\])?")


def instructions(exe: Path, calls: int, work: Path, env: dict[str, str]) -> dict[str, float]:
    """Instructions per recorded cudaMemcpyAsync, counted by callgrind (independent of the machine's load): the
    whole call, LTTng's share (the event probe and the tracepoint's RCU), the fake runtime's, memq's own (the rest)."""
    out = work / "callgrind.out"
    subprocess.run([sys.executable, "-m", "ctf2perfetto", "record", "-o", str(work / "cg"), "--api", "cuda", "--",
                    "valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", str(exe), str(calls), "cuda"],
                   env=env, cwd=work, capture_output=True, text=True, check=True)
    listing = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(out)],
                             capture_output=True, text=True, check=True).stdout
    cost: dict[str, float] = {"call": 0.0, "lttng": 0.0, "runtime": 0.0}
    for line in listing.splitlines():
        row = ROW.match(line)
        if not row:
            continue
        n, function, obj = int(row[1].replace(",", "")) / calls, row[2], row[3] or ""
        if function == "cudaMemcpyAsync" and obj.endswith("libmemq_preload.so"):
            cost["call"] = max(cost["call"], n)
        elif function == "cudaMemcpyAsync" and "libcudart" in obj:
            cost["runtime"] = max(cost["runtime"], n)
        elif function == "lttng_ust__event_probe__memq___copy" or function.startswith("lttng_ust_tp_rcu_"):
            cost["lttng"] += n if obj else 0
    cost["memq"] = cost["call"] - cost["lttng"] - cost["runtime"]
    shutil.rmtree(work / "cg")
    return cost


def best(runs: list[tuple[float, ...]]) -> tuple[float, ...]:
    return tuple(min(column) for column in zip(*runs))


ISOLATED_ENV = "MEMQ_BENCH_ISOLATED"


def isolate(argv: list[str]) -> int:
    """Run this bench again in a mount namespace with its own LTTng run directories (see the docstring)."""
    proc = isolated([sys.executable, *argv], env={**os.environ, ISOLATED_ENV: "1"}, timeout=3600, system_lttng=True)
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr)
    return proc.returncode


def active_sessions() -> bool:
    listing = subprocess.run(["lttng", "list"], capture_output=True, text=True).stdout
    return "[active]" in listing


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5_000_000, help="calls per small loop, untraced runs")
    parser.add_argument("--traced-calls", type=int, default=500_000, help="calls per small loop, recorded runs")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--table-entries", type=int, default=400_000, help="live entries in the table benchmark")
    parser.add_argument("--isolated", action="store_true", help="own session daemon in a private mount namespace")
    parser.add_argument("--reference", type=Path, help="another libmemq_preload.so measured in the same run "
                        "(e.g. main's), interleaved with this checkout's")
    parser.add_argument("--instructions", action="store_true",
                        help="also count instructions per recorded cudaMemcpyAsync with valgrind's callgrind")
    args = parser.parse_args()
    if args.isolated and not os.environ.get(ISOLATED_ENV):
        return isolate(sys.argv)
    return measure(args)


@dataclass
class Library:
    """One preload library under test: its path and the environment `memq record` preloads it from."""

    name: str
    path: Path
    env: dict[str, str]


def reference_library(path: Path, work: Path, env: dict[str, str]) -> Library:
    """`path` as the library `memq record` preloads: a copy of the package with it in lib/, first on PYTHONPATH."""
    package = work / "reference" / "ctf2perfetto"
    shutil.copytree(REPO / "ctf2perfetto", package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(path, package / "lib" / "libmemq_preload.so")
    return Library("reference", package / "lib" / "libmemq_preload.so",
                   {**env, "PYTHONPATH": os.pathsep.join([str(package.parent), env.get("PYTHONPATH", "")])})


def measure_library(lib: Library, plain: tuple[float, ...], runs: dict[str, list], args: argparse.Namespace,
                    counted: dict[str, float] | None) -> None:
    idle, hip_only = best(runs["idle"]), best(runs["hip only"])
    traced = {mode: best(runs[mode]) for mode in CONTENT_MODES}
    print(f"\n{lib.name}: {lib.path}")
    print(f"ns per call (best of {args.repeat}; {args.calls:,} calls untraced, {args.traced_calls:,} recorded "
          "per small loop)")
    print(f"{'call':<24}{'unwrapped':>11}{'no session':>12}{'+ns':>8}"
          + "".join(f"{'rec ' + m:>13}{'+ns':>9}" for m in CONTENT_MODES) + f"{'--api hip':>11}{'+ns':>8}")
    for i, name in enumerate(CALLS):
        cells = "".join(f"{traced[m][i]:>13.1f}{traced[m][i] - plain[i]:>9.1f}" for m in CONTENT_MODES)
        print(f"{name:<24}{plain[i]:>11.2f}{idle[i]:>12.2f}{idle[i] - plain[i]:>8.2f}{cells}"
              f"{hip_only[i]:>11.2f}{hip_only[i] - plain[i]:>8.2f}")
    worst_idle = max(idle[i] - plain[i] for i in SMALL)
    worst_traced = max(traced["off"][i] - plain[i] for i in SMALL)
    off = hip_only[2] - idle[2]
    print(f"goal no session <= 5 ns: {'met' if worst_idle <= 5 else 'NOT met'} ({worst_idle:.2f} ns); "
          f"goal recorded <= 300 ns (content off): {'met' if worst_traced <= 300 else 'NOT met'} "
          f"({worst_traced:.1f} ns)")
    print(f"a runtime --api leaves out (cudaMemcpyAsync under --api hip) vs no session: {off:+.2f} ns")
    sampled = max(traced["sampled"][i] - traced["off"][i] for i in (1, 2, 3))
    print(f"content sampled vs off: +{traced['sampled'][1] - traced['off'][1]:.1f} ns (8 B async), "
          f"+{traced['sampled'][2] - traced['off'][2]:.1f} ns (64 B async), "
          f"+{traced['sampled'][3] - traced['off'][3]:.1f} ns (64 KiB, 2 fingerprints); goal <= 300 ns per copy: "
          f"{'met' if sampled <= 300 else 'NOT met'} (16 MiB copy: {traced['sampled'][4] - traced['off'][4]:+.0f} ns, "
          "within that loop's noise; bench/content_missrate.py times a fingerprint of uncached memory)")
    extra = traced["full"][4] - traced["off"][4]
    rate = LARGE / extra if extra > 0 else float("inf")  # bytes per ns = GB/s
    print(f"content full vs off, 16 MiB copy: +{extra / 1e3:.1f} us = {rate:.1f} GB/s hashed per core; "
          f"goal >= 10 GB/s: {'met' if rate >= 10 else 'NOT met'} (ratio to the goal {rate / 10:.2f})")
    if counted:
        print(f"instructions per recorded cudaMemcpyAsync (callgrind): {counted['call']:.0f} = LTTng "
              f"{counted['lttng']:.0f} + fake runtime {counted['runtime']:.0f} + memq {counted['memq']:.0f}")


def measure(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="memq-bench-") as tmp:
        work = Path(tmp)
        exe = build(work)
        env = dict(os.environ)
        env.pop("LD_PRELOAD", None)
        busy = active_sessions()
        # `memq record` runs from the work directory, with the package on PYTHONPATH: this checkout's, or a copy
        # holding the reference library (python -m would otherwise import the one in the current directory).
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
        libs = [Library("this checkout", native_library("libmemq_preload.so"), env)]
        if args.reference:
            libs.append(reference_library(args.reference, work, env))
        plain_runs: list[tuple[float, ...]] = []
        runs = {lib.name: {way: [] for way in ("idle", "hip only", *CONTENT_MODES)} for lib in libs}
        for i in range(args.repeat):  # interleaved, so that load drifts hit every way alike
            plain_runs.append(run([str(exe), str(args.calls)], env))
            for lib in libs:
                mine = runs[lib.name]
                mine["idle"].append(run([str(exe), str(args.calls)], {**env, "LD_PRELOAD": str(lib.path)}))
                busy = busy or active_sessions()
                for mode in CONTENT_MODES:
                    mine[mode].append(recorded(exe, args.traced_calls, "hip,cuda", mode, work / f"trace{i}-{mode}",
                                               lib.env))
                mine["hip only"].append(recorded(exe, args.calls, "hip", "sampled", work / f"hip{i}", lib.env))
        table = table_figures(build_table(work), args.table_entries, args.repeat)
        counted = {lib.name: instructions(exe, 20_000, work, lib.env) if args.instructions else None for lib in libs}

    for lib in libs:
        measure_library(lib, best(plain_runs), runs[lib.name], args, counted[lib.name])
    if busy:
        print("note: another LTTng session was active during the untraced runs")
    print(f"\nallocation table, {args.table_entries:,} live entries (ns, best of {args.repeat})")
    print(f"{'pointers':<16}{'insert':>10}{'put+take':>10}")
    for name, (fill, pair) in table.items():
        print(f"{name:<16}{fill:>10.1f}{pair:>10.1f}")
    (a_fill, a_pair), (u_fill, u_pair) = table["2 MiB-aligned"], table["48 B apart"]
    ratio = max(a_fill / u_fill, a_pair / u_pair)
    print(f"goal aligned within 2x of unaligned: {'met' if ratio <= 2 else 'NOT met'} ({ratio:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
