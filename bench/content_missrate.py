"""What `--content sampled` misses, by the size of a change, and what fingerprints cost, measured.

Uses the preload library's own hash (preload/memq_hash.c, compiled alone by
tests/support/memq_hash.py) on a buffer of --size bytes (default 64 MiB):

* miss rate: for each change size, --trials times: one contiguous run of that many bytes at a
  uniformly random offset is changed (every byte flipped), and the sampled fingerprint is compared
  with the one before; `full` is checked to catch every change (it must: 0 misses). The expected
  rate, for comparison: a change is caught when it overlaps one of the 16 blocks of 64 bytes.
* cost (in C, the library's own code): a sampled fingerprint of a --size span whose blocks are not
  cached (spans at random places of a 1 GiB arena) and of one whose blocks are, and full-mode
  throughput (GB/s on one core) on --size bytes against a plain memcpy of them in the same run;
  best of --repeat.

    python3 bench/content_missrate.py [--size 67108864] [--trials 2000] [--repeat 5]
"""
from __future__ import annotations

import argparse
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from support.memq_hash import BLOCK, BLOCKS, FULL, PRELOAD, SAMPLED, HashLib, block_offsets  # noqa: E402
CHANGE_SIZES = (1, 64, 4096, 65536, 1 << 20, 4 << 20, 16 << 20)


def expected_miss(size: int, change: int) -> float:
    """1 - P(a random run of `change` bytes overlaps a sampled block)."""
    starts = block_offsets(size)
    positions = size - change + 1
    hit = set()
    for b in starts:  # offsets o with [o, o + change) overlapping [b, b + BLOCK)
        hit.update(range(max(0, b - change + 1), min(positions, b + BLOCK)))
    return 1 - len(hit) / positions


TIMING = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "memq_hash.h"

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

/* argv: span bytes, repeats. Prints: cold sampled ns, warm sampled ns, full GB/s, memcpy GB/s, full GB/s on
 * 1 MiB already in the caches. */
int main(int argc, char **argv)
{
	size_t size = strtoull(argv[1], NULL, 0), arena_size = (size_t) 1 << 30;
	int repeat = atoi(argv[2]), samples = 2000;
	unsigned char *arena = malloc(arena_size), *copy = malloc(size);
	double cold = 1e30, warm = 1e30, full = 1e30, mcpy = 1e30, cached = 1e30, t0;
	unsigned long long sum = 0, seed = 88172645463325252ull;
	uint64_t h;

	if (!arena || !copy || size > arena_size / 2)
		return 2;
	for (size_t i = 0; i < arena_size; i += 64)
		arena[i] = (unsigned char) i;
	for (int r = 0; r < repeat; r++) {
		/* cold: spans at random places of a 1 GiB arena, so their 16 blocks are rarely cached */
		t0 = now();
		for (int k = 0; k < samples; k++) {
			struct memq_span s;
			seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
			s = (struct memq_span) { (uint64_t) (arena + seed % (arena_size - size)), size, 1, size, 1, 0 };
			memq_hash_span(&s, MEMQ_HASH_SAMPLED, 0, &h);
			sum += h;
		}
		if ((now() - t0) / samples < cold)
			cold = (now() - t0) / samples;
		for (int batch = 0; batch < samples / 100; batch++) {   /* batches: the least preempted one */
			t0 = now();
			for (int k = 0; k < 100; k++) {
				struct memq_span s = { (uint64_t) arena, size, 1, size, 1, 0 };
				memq_hash_span(&s, MEMQ_HASH_SAMPLED, 0, &h);
				sum += h;
			}
			if ((now() - t0) / 100 < warm)
				warm = (now() - t0) / 100;
		}
		struct memq_span s = { (uint64_t) arena, size, 1, size, 1, 0 };
		t0 = now();
		memq_hash_span(&s, MEMQ_HASH_FULL, 0, &h);
		sum += h;
		if (now() - t0 < full)
			full = now() - t0;
		t0 = now();
		memcpy(copy, arena, size);
		if (now() - t0 < mcpy)
			mcpy = now() - t0;
		s.width = s.pitch = 1 << 20;        /* 1 MiB, hashed once before: in the caches */
		memq_hash_span(&s, MEMQ_HASH_FULL, 0, &h);
		t0 = now();
		memq_hash_span(&s, MEMQ_HASH_FULL, 0, &h);
		sum += h;
		if (now() - t0 < cached)
			cached = now() - t0;
	}
	printf("%.1f %.1f %.2f %.2f %.2f %llu\n", cold, warm, size / full, size / mcpy, (1 << 20) / cached, sum & 1);
	return 0;
}
"""


def timings(work: Path, size: int, repeat: int) -> str:
    """The cost lines, measured in C (best of `repeat`)."""
    exe = work / "hash_timing"
    (work / "timing.c").write_text(TIMING)
    subprocess.run(["gcc", "-O2", "-std=gnu11", f"-I{PRELOAD}", "-o", str(exe), str(work / "timing.c"),
                    str(PRELOAD / "memq_hash.c")], check=True)
    cold, warm, full, copy, cached, _ = subprocess.run([str(exe), str(size), str(repeat)], capture_output=True,
                                                       text=True, check=True).stdout.split()
    mib = size >> 20
    return (f"sampled fingerprint of a {mib} MiB span: {float(cold):.0f} ns when its blocks are not cached (random "
            f"places of a 1 GiB arena), {float(warm):.0f} ns when they are (best of {repeat} x 2000)\n"
            f"full fingerprint of {mib} MiB: {float(full):.1f} GB/s on one core (memcpy of it: {float(copy):.1f} "
            f"GB/s; of 1 MiB in the caches: {float(cached):.1f} GB/s); goal >= 10 GB/s: "
            f"{'met' if float(full) >= 10 else 'NOT met'} (ratio {float(full) / 10:.2f})")


def flip(data: np.ndarray, offset: int, n: int) -> None:
    """Change every byte of [offset, offset + n) (twice: back as it was)."""
    data[offset:offset + n] ^= 0xFF


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=64 << 20)
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    rng = random.Random(11)

    with tempfile.TemporaryDirectory(prefix="memq-hash-") as tmp:
        lib = HashLib(Path(tmp))
        buf = np.frombuffer(bytearray(rng.randbytes(args.size)), np.uint8)
        base = buf.ctypes.data
        print(f"miss rate of sampled ({BLOCKS} blocks of {BLOCK} B) on a {args.size / 2**20:.0f} MiB buffer, "
              f"{args.trials} random contiguous changes per size")
        print(f"{'change':>10}{'missed':>9}{'miss rate':>11}{'expected':>10}{'full missed':>13}")
        sampled0, full0 = lib.hash(base, args.size, mode=SAMPLED), lib.hash(base, args.size, mode=FULL)
        for change in (c for c in CHANGE_SIZES if c <= args.size):
            trials = args.trials if change <= 65536 else max(50, args.trials // 20)
            missed = full_missed = 0
            for _ in range(trials):
                at = rng.randrange(0, args.size - change + 1)
                flip(buf, at, change)
                missed += lib.hash(base, args.size, mode=SAMPLED) == sampled0
                if change <= 65536 or _ < 5:  # full hashes are slow: a few per large size
                    full_missed += lib.hash(base, args.size, mode=FULL) == full0
                flip(buf, at, change)
            label = f"{change} B" if change < 1024 else f"{change >> 10} KiB" if change < 1 << 20 else \
                f"{change >> 20} MiB"
            print(f"{label:>10}{missed:>9}{missed / trials:>11.4f}{expected_miss(args.size, change):>10.4f}"
                  f"{full_missed:>13}")

        print(timings(Path(tmp), args.size, args.repeat))
    return 0


if __name__ == "__main__":
    sys.exit(main())
