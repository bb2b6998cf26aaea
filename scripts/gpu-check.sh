#!/usr/bin/env bash
# memq on a real CUDA machine, in one call (docs/GPU_CHECK.md). Run from the
# repository root on a lent GPU machine, with the bundle made here beforehand
# (scripts/gpu-bundle.sh) carried along:
#
#   device run  carry [".gpu-bundle"]  command "bash scripts/gpu-check.sh"
#
# Needs nvcc, python3 with PyTorch (CUDA) and the bundle; no apt, no network.
# Writes $OUT/gpu-check.tar.gz (< 16 MiB): gpu-check/
#   info.json                  machine, driver, nvcc, torch, bundle packages, step exit codes
#   cuda_all/calls.jsonl       what tests/gpu/cuda_all.cu did (one line per call)
#   cuda_all/untraced.jsonl    the same program run without memq (results must agree)
#   cuda_all/trace/            its `memq record` trace (default settings: cuda + libc)
#   torch/trace/               tests/gpu/torch_loop.py under `memq record` (default settings), profiler on
#   torch/profile.json         the PyTorch profiler's Kineto trace of that run
#   torch/loop.json            the loop's own log (segment count, pinned stats, timing)
#   finetune/trace/            examples/finetune_gpt.py (a small GPT, 200 steps) under `memq record`, profiler on
#   finetune/profile.json      its Kineto trace's copy and memset events (profile-trim.json: what was left out)
#   finetune/run.json          its own log (label, mask and checkpoint copies with their pointers, segments)
#   rodinia/P-V.jsonl, P-V/    tests/fakes/rodinia_work.c (GVProf's Rodinia findings: P = backprop, streamcluster,
#                              cfd, bfs; V = orig, fix) built with nvcc: its account of every copy and its trace
#                              (streamcluster-full-V: the same with --content full)
#   timings/                   untraced / traced loop logs and --bench results, alternating
#   timings.json               their medians: loop slowdown, cudaMemcpyAsync per-call cost
#   logs/                      this script's output and each step's
# Every step runs even when an earlier one failed; info.json records each exit code.
# Then, on the development machine: python3 -m tools.gpu_check gpu-check.tar.gz
set -uo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
BUNDLE=${MEMQ_BUNDLE_DIR:-$REPO/.gpu-bundle}
OUT=${OUT:?set OUT to the directory that receives gpu-check.tar.gz}
ROUNDS=${GPU_CHECK_ROUNDS:-5}          # untraced/traced rounds of the loop timing
BENCH_ROUNDS=${GPU_CHECK_BENCH_ROUNDS:-7}  # and of the cudaMemcpyAsync bench (runs of ~1 s)
BENCH_CALLS=${GPU_CHECK_BENCH_CALLS:-200000}
LOOP_STEPS=${GPU_CHECK_LOOP_STEPS:-60}       # the profiled run
TIMING_STEPS=${GPU_CHECK_TIMING_STEPS:-300}  # timing runs: a loop long enough (~1 s) to time
MAX_ARCHIVE=$((16 << 20))
BUDGET_S=${GPU_CHECK_BUDGET_S:-420}    # no new timing round after this (the device's limit is 600 s a call)
STEP_TIMEOUT_S=${GPU_CHECK_STEP_TIMEOUT_S:-150}
# Stand-ins, for tests/test_gpu_check.py only (the fake CUDA runtime, no GPU): how to build
# cuda_all (default: nvcc against the real runtime) and a loop script that takes
# --log/--steps like tests/gpu/torch_loop.py plus --profile PATH (it writes its own Kineto
# trace: torch.profiler needs a GPU to record copies).
BUILD_CUDA_ALL=${GPU_CHECK_BUILD:-nvcc -cudart shared -O2 -I tests/fakes -o}  # + OUT SRC [GPU_CHECK_BUILD_LIBS]
BUILD_LIBS=${GPU_CHECK_BUILD_LIBS:-}
LOOP=${GPU_CHECK_LOOP:-tests/gpu/torch_loop.py}
# The fine-tune (stand-in: tests/gpu/fake_finetune.py, which takes --profile like the fake loop) and its steps.
FINETUNE=${GPU_CHECK_FINETUNE:-examples/finetune_gpt.py}
FINETUNE_STEPS=${GPU_CHECK_FINETUNE_STEPS:-200}
# The Rodinia stand-ins: host program + kernels (a GPU: nvcc with the CUDA kernels; the fake: gcc with
# tests/fakes/rodinia_kernels_fake.c and GPU_CHECK_RODINIA_LIBS naming the fake runtime).
BUILD_RODINIA=${GPU_CHECK_RODINIA_BUILD:-nvcc -cudart shared -O2 -I tests/fakes -o}  # + OUT SRCS [LIBS]
RODINIA_KERNELS=${GPU_CHECK_RODINIA_KERNELS:-tests/gpu/rodinia_kernels.cu}
RODINIA_LIBS=${GPU_CHECK_RODINIA_LIBS:-}

[ -x "$BUNDLE/memq" ] || { echo "gpu-check: $BUNDLE/memq missing: run scripts/gpu-bundle.sh here first and carry .gpu-bundle"; exit 2; }
top=$(mktemp -d /tmp/gpu-check.XXXXXX)
W=$top/gpu-check
mkdir -p "$W"/{cuda_all,torch,finetune,rodinia,timings,logs} "$OUT"
exec > >(tee "$W/logs/gpu-check.log") 2>&1
cd "$REPO"
# shellcheck source=/dev/null
MEMQ_BUNDLE=$BUNDLE . "$BUNDLE/env.sh"
export PYTHONUNBUFFERED=1
MEMQ="$BUNDLE/memq"
STATUS=$W/logs/status.txt  # "STEP EXIT-CODE" lines

step() {  # step NAME CMD...: run, log to logs/NAME.log, remember the exit code
	local name=$1 t0 rc
	shift
	t0=$(date +%s%N)
	# memq record passes SIGTERM on to its command and still stops the session.
	timeout --kill-after=20 "$STEP_TIMEOUT_S" "$@" >"$W/logs/$name.log" 2>&1
	rc=$?
	echo "$name $rc" >>"$STATUS"
	printf 'gpu-check: %-24s rc=%-3s %6d ms\n' "$name" "$rc" $((($(date +%s%N) - t0) / 1000000))
	[ $rc = 0 ] || tail -5 "$W/logs/$name.log"
	return $rc
}

echo "gpu-check: $(date -u +%FT%TZ) on $(hostname), work dir $W"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$W/logs/nvidia-smi.txt" 2>&1
# The bundle runs here: its LTTng starts (glibc new enough, nothing missing) and the
# preload library loads with the bundle's LTTng-UST.
step bundle-lttng "$BUNDLE/bin/lttng" --version
ls -la /dev/null /dev/shm /var/run >"$W/logs/devices.txt" 2>&1
step bundle-preload env LD_PRELOAD="$BUNDLE/python/ctf2perfetto/lib/libmemq_preload.so" true
# shellcheck disable=SC2086  # word-split on purpose: a command line
step build-cuda-all $BUILD_CUDA_ALL "$W/cuda_all.bin" tests/gpu/cuda_all.cu $BUILD_LIBS

# 1. Every wrapped call, untraced (what the program does on its own), then recorded with the default settings:
#    memq must not change a single result.
step cuda-all-untraced "$W/cuda_all.bin" "$W/cuda_all/untraced.jsonl"
step cuda-all "$MEMQ" record -o "$W/cuda_all/trace" -- "$W/cuda_all.bin" "$W/cuda_all/calls.jsonl"

# 2. The training loop with the profiler on, recorded with the default settings (heap wrapper, content
#    fingerprints, runtime and driver API): copies, segments, pinned memory, and whether the
#    DataLoader's label uploads are told apart from repeats by their content.
if [ -n "${GPU_CHECK_LOOP:-}" ]; then
	profiled=(python3 "$LOOP" --profile "$W/torch/profile.json")
else
	profiled=(python3 -m ctf2perfetto.torchprof -o "$W/torch/profile.json" "$LOOP")
fi
step torch-profiled "$MEMQ" record -o "$W/torch/trace" -- \
	"${profiled[@]}" --log "$W/torch/loop.json" --steps "$LOOP_STEPS"

# 3. The LLM fine-tune with the profiler on, default settings: labels that change every step, a loss
#    mask re-uploaded unchanged every micro-batch, checkpoints copied to the host, eval .item().
#    The profiler records device activity only, without [memory] events: with operators, 200 steps make a
#    Kineto trace of hundreds of MB (the CPU preset's 28 micro-batches: 29 MB). Only its copy and memset events
#    travel back (finetune/profile.json; the counts of what was left out in finetune/profile-trim.json).
if [ -n "${GPU_CHECK_FINETUNE:-}" ]; then
	finetune=(python3 "$FINETUNE" --profile "$W/finetune/profile-full.json")
else
	finetune=(python3 -m ctf2perfetto.torchprof --activities cuda --no-memory -o "$W/finetune/profile-full.json"
		"$FINETUNE" --device cuda)
fi
STEP_TIMEOUT_S=$((STEP_TIMEOUT_S + 90)) step finetune-profiled "$MEMQ" record -o "$W/finetune/trace" -- \
	"${finetune[@]}" --log "$W/finetune/run.json" --steps "$FINETUNE_STEPS"
step finetune-profile-trim python3 - "$W/finetune/profile-full.json" "$W/finetune/profile.json" \
	"$W/finetune/profile-trim.json" <<'EOF'
import collections, json, os, sys
full, out, counts = sys.argv[1:]
doc = json.load(open(full))
events = doc.get("traceEvents") or []
keep = [e for e in events if e.get("cat") in ("gpu_memcpy", "gpu_memset") or e.get("ph") == "M"]
json.dump(dict(doc, traceEvents=keep), open(out, "w"))
json.dump({"bytes": os.path.getsize(full), "events": len(events), "kept": len(keep),
           "categories": collections.Counter(str(e.get("cat")) for e in events).most_common(12)}, open(counts, "w"))
os.remove(full)
EOF

# 4. GVProf's Rodinia findings: each stand-in as the original and as GVProf's fix, default settings
#    (streamcluster also with --content full: every byte fingerprinted).
# shellcheck disable=SC2086  # word-split on purpose: a command line
step build-rodinia $BUILD_RODINIA "$W/rodinia_work.bin" tests/fakes/rodinia_work.c "$RODINIA_KERNELS" $RODINIA_LIBS
for program in backprop streamcluster cfd bfs; do
	for variant in orig fix; do
		step "rodinia-$program-$variant" "$MEMQ" record -o "$W/rodinia/$program-$variant" -- \
			"$W/rodinia_work.bin" "$program" "$variant" "$W/rodinia/$program-$variant.jsonl"
	done
done
for variant in orig fix; do
	step "rodinia-streamcluster-full-$variant" "$MEMQ" record -o "$W/rodinia/streamcluster-full-$variant" \
		--content full -- "$W/rodinia_work.bin" streamcluster "$variant" "$W/rodinia/streamcluster-full-$variant.jsonl"
done

# 5. Timings, alternating so drift hits both sides alike: the loop untraced, traced with
#    the default settings, and traced with --api cuda; then the cudaMemcpyAsync bench, likewise.
#    Traces of timing runs are not kept (only their memq-record.json).
for i in $(seq 1 "$ROUNDS"); do
	[ "$SECONDS" -lt "$BUDGET_S" ] || { echo "gpu-check: ${SECONDS} s spent: no more loop rounds"; break; }
	step "loop-untraced-$i" python3 "$LOOP" --log "$W/timings/loop-untraced-$i.json" --steps "$TIMING_STEPS"
	for mode in default cuda; do
		api=(); [ $mode = cuda ] && api=(--api cuda)
		step "loop-$mode-$i" "$MEMQ" record -o "$top/t" --force "${api[@]}" -- \
			python3 "$LOOP" --log "$W/timings/loop-$mode-$i.json" --steps "$TIMING_STEPS"
		cp "$top/t/memq-record.json" "$W/timings/loop-$mode-$i.record.json" 2>/dev/null
		rm -rf "$top/t"
	done
done
# The bench runs on one core (the same for every run) when taskset is there: a few hundred ns per call
# is the figure, and the spread between cores and migrations of a shared VM is larger than that.
PIN=(); command -v taskset >/dev/null && PIN=(taskset -c "$(($(nproc) - 1))")
for i in $(seq 1 "$BENCH_ROUNDS"); do
	[ "$SECONDS" -lt "$((BUDGET_S + 60))" ] || { echo "gpu-check: ${SECONDS} s spent: no more bench rounds"; break; }
	step "bench-untraced-$i" "${PIN[@]}" "$W/cuda_all.bin" --bench "$BENCH_CALLS" "$W/timings/bench-untraced-$i.json"
	for mode in default cuda; do
		api=(); [ $mode = cuda ] && api=(--api cuda)
		step "bench-$mode-$i" "${PIN[@]}" "$MEMQ" record -o "$top/t" --force "${api[@]}" -- \
			"$W/cuda_all.bin" --bench "$BENCH_CALLS" "$W/timings/bench-$mode-$i.json"
		cp "$top/t/memq-record.json" "$W/timings/bench-$mode-$i.record.json" 2>/dev/null
		rm -rf "$top/t"
	done
done

# 6. What ran where, the medians, and the archive.
python3 - "$W" "$BUNDLE/MANIFEST" <<'EOF'
import json, statistics, subprocess, sys
from pathlib import Path
w, manifest = Path(sys.argv[1]), Path(sys.argv[2])
status = {name: int(rc) for name, rc in (line.split() for line in (w / "logs" / "status.txt").read_text().splitlines())}
def run(*cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout.strip()
    except Exception as exc:  # a missing tool is a fact to record, not a failure
        return f"unavailable: {exc}"
info = {"status": status,
        "nvidia_smi": " ".join((w / "logs" / "nvidia-smi.txt").read_text().strip().splitlines()[-1:]),
        "nvcc": run("nvcc", "--version").splitlines()[-1:],
        "python": sys.version.split()[0],
        "torch": run(sys.executable, "-c", "import torch; print(torch.__version__, torch.version.cuda)"),
        "kernel": run("uname", "-r"), "lttng": run("lttng", "--version"),
        "bundle": manifest.read_text().splitlines() if manifest.is_file() else []}
(w / "info.json").write_text(json.dumps(info, indent=1) + "\n")
def values(pattern, key):
    out = []
    for p in sorted((w / "timings").glob(pattern)):
        try:
            out.append(json.loads(p.read_text())[key])
        except (ValueError, KeyError):
            pass
    return out
def med(xs):
    return statistics.median(xs) if xs else None
timings = {"loop_s": {m: values(f"loop-{m}-[0-9].json", "loop_s") + values(f"loop-{m}-[0-9][0-9].json", "loop_s") for m in ("untraced", "default", "cuda")},
           "bench_ns_per_call": {m: values(f"bench-{m}-[0-9].json", "ns_per_call") + values(f"bench-{m}-[0-9][0-9].json", "ns_per_call") for m in ("untraced", "default", "cuda")}}
u = med(timings["loop_s"]["untraced"])
timings["loop_slowdown"] = {m: (med(timings["loop_s"][m]) / u if u and timings["loop_s"][m] else None)
                            for m in ("default", "cuda")}
b = timings["bench_ns_per_call"]
timings["memcpy_async_cost_ns"] = (med(b["default"]) - med(b["untraced"])) if b["default"] and b["untraced"] else None
(w / "timings.json").write_text(json.dumps(timings, indent=1) + "\n")
print("gpu-check: timings", json.dumps({k: timings[k] for k in ("loop_slowdown", "memcpy_async_cost_ns")}))
EOF

archive=$OUT/gpu-check.tar.gz
tar -czf "$archive" -C "$top" gpu-check
size=$(stat -c %s "$archive")
# Too big to come back: leave out the largest streams, one trace at a time, until it fits (the reader says
# which trace it lacks).
for cut in finetune/trace/ust torch/trace/ust; do
	[ "$size" -gt $MAX_ARCHIVE ] || break
	echo "gpu-check: archive is $((size >> 20)) MiB; leaving out $cut"
	rm -rf "${W:?}/$cut"
	tar -czf "$archive" -C "$top" gpu-check
	size=$(stat -c %s "$archive")
done
failed=$(awk '$2 != 0 {print $1}' "$STATUS" | tr '\n' ' ')
echo "gpu-check: wrote $archive ($(($(stat -c %s "$archive") >> 10)) KiB); failed steps: ${failed:-none}"
[ -z "$failed" ]
