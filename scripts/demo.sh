#!/usr/bin/env bash
# memq's main job end to end on this machine's defaults (embedded trace_processor,
# no GPU needed): record -> convert -> analyse -> annotate -> plot, three times,
# then the offload loop fixed (memq diff) and the answers on one page (memq report):
#   1. a real PyTorch CPU training loop (host heap),
#   2. a HIP offload loop (examples/hip_offload.py) run against the test suite's
#      fake HIP runtime, standing in for a GPU this machine does not have,
#   3. a 3-rank torchrun job: the per-rank table.
# Usage: scripts/demo.sh [OUTDIR]   (default out/demo; recreated)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-out/demo}
rm -rf "$OUT" && mkdir -p "$OUT"
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "1. PyTorch CPU training loop: record, convert, summary, leaks"
memq record -o "$OUT/torch" -- python3 examples/train_cpu.py --steps 30
ctf2perfetto "$OUT/torch" -o "$OUT/torch.pftrace"
memq summary "$OUT/torch.pftrace"
memq leaks "$OUT/torch.pftrace"

step "2. HIP offload loop on a simulated GPU: record, convert, duplicated, redundant"
python3 -c "import sys; from pathlib import Path; from tests.support.fakes import build_fakes; build_fakes(Path(sys.argv[1]))" "$OUT/fakegpu"
memq record -o "$OUT/offload" --api hip,libc -- python3 examples/hip_offload.py --hip-lib "$OUT/fakegpu/libamdhip64.so"
ctf2perfetto "$OUT/offload" -o "$OUT/offload.pftrace"
memq duplicated "$OUT/offload.pftrace"
memq redundant "$OUT/offload.pftrace"

step "3. A 3-rank torchrun job (gloo, CPU): the figures per rank, the job, the spread across ranks"
memq record -o "$OUT/job" -- torchrun --standalone --nproc_per_node 3 tests/fakes/ddp_loop.py 10
memq summary "$OUT/job" --by rank

step "4. Results on the timeline and in a figure"
memq annotate "$OUT/offload.pftrace" -o "$OUT/offload.annotated.pftrace"
memq plot "$OUT/offload.pftrace" -o "$OUT/offload.png"

step "5. The fix: keep the weights on the device, record again, compare"
memq record -o "$OUT/offload-fixed" --api hip,libc -- python3 examples/hip_offload.py --hip-lib "$OUT/fakegpu/libamdhip64.so" --keep-weights
ctf2perfetto "$OUT/offload-fixed" -o "$OUT/offload-fixed.pftrace"
memq diff "$OUT/offload.pftrace" "$OUT/offload-fixed.pftrace"

step "6. The answers on one page: what the loop wastes, where, the fix and its gain"
memq report "$OUT/offload.pftrace" -o "$OUT/report.html"
echo
echo "Done. Open $OUT/report.html in any browser (one self-contained file, no network)."
echo "The annotated trace in a local Perfetto UI (no internet needed):"
echo "    memq open $OUT/offload.annotated.pftrace"
echo "or load it at https://ui.perfetto.dev. Figure: $OUT/offload.png"
