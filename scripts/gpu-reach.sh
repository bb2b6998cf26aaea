#!/usr/bin/env bash
# The ways a real job reaches the CUDA runtime without the dynamic linker's help,
# recorded on a lent GPU machine in one call, after scripts/gpu-check.sh
# and with the same bundle:
#
#   device run  carry [".gpu-bundle"]  command "bash scripts/gpu-reach.sh"
#
# Writes $OUT/gpu-reach.tar.gz: gpu-reach/
#   static/       tests/gpu/cuda_all.cu built with nvcc's default static runtime (calls reach
#                 libcuda through cuGetProcAddress): calls.jsonl + trace/
#   expandable/   tests/gpu/torch_loop.py with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
#                 (the caching allocator on cuMemCreate/cuMemMap): loop.json + trace/
#   ctypes/       tests/gpu/ctypes_cudart.py (the runtime dlopen'ed RTLD_LOCAL by ctypes)
#   jax/          tests/gpu/jax_step.py (XLA: static runtime, driver entry points)
#   logs/, status.txt
# Then, here: python3 -m tools.gpu_check --reach gpu-reach.tar.gz
set -uo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
BUNDLE=${MEMQ_BUNDLE_DIR:-$REPO/.gpu-bundle}
OUT=${OUT:?set OUT to the directory that receives gpu-reach.tar.gz}
STEP_TIMEOUT_S=${GPU_CHECK_STEP_TIMEOUT_S:-150}
[ -x "$BUNDLE/memq" ] || { echo "gpu-reach: $BUNDLE/memq missing: run scripts/gpu-bundle.sh here first and carry .gpu-bundle"; exit 2; }
top=$(mktemp -d /tmp/gpu-reach.XXXXXX)
W=$top/gpu-reach
mkdir -p "$W"/{static,expandable,ctypes,jax,logs} "$OUT"
exec > >(tee "$W/logs/gpu-reach.log") 2>&1
cd "$REPO"
# shellcheck source=/dev/null
MEMQ_BUNDLE=$BUNDLE . "$BUNDLE/env.sh"
export PYTHONUNBUFFERED=1
MEMQ="$BUNDLE/memq"
step() {
	local name=$1 rc
	shift
	timeout --kill-after=20 "$STEP_TIMEOUT_S" "$@" >"$W/logs/$name.log" 2>&1
	rc=$?
	echo "$name $rc" >>"$W/status.txt"
	echo "gpu-reach: $name rc=$rc"
	[ $rc = 0 ] || tail -5 "$W/logs/$name.log"
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$W/logs/nvidia-smi.txt" 2>&1
python3 -c 'import torch; print(torch.__version__, torch.version.cuda)' >"$W/logs/torch.txt" 2>&1
python3 -c 'import sys; print(sys.version.split()[0])' >"$W/logs/python.txt" 2>&1
step build-static nvcc -O2 -I tests/fakes -o "$W/cuda_all_static.bin" tests/gpu/cuda_all.cu
step static "$MEMQ" record -o "$W/static/trace" --api cuda -- "$W/cuda_all_static.bin" "$W/static/calls.jsonl"
step expandable env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "$MEMQ" record -o "$W/expandable/trace" \
	--api cuda -- python3 tests/gpu/torch_loop.py --log "$W/expandable/loop.json" --steps 20
step ctypes "$MEMQ" record -o "$W/ctypes/trace" --api cuda -- python3 tests/gpu/ctypes_cudart.py "$W/ctypes/calls.jsonl"
step jax "$MEMQ" record -o "$W/jax/trace" --api cuda -- python3 tests/gpu/jax_step.py "$W/jax/log.json"
tar -czf "$OUT/gpu-reach.tar.gz" -C "$top" gpu-reach
echo "gpu-reach: wrote $OUT/gpu-reach.tar.gz ($(($(stat -c %s "$OUT/gpu-reach.tar.gz") >> 10)) KiB)"
