/*
 * Content fingerprints: see memq_hash.h.
 *
 * Why xxHash's XXH3: the fastest well-kept non-cryptographic hash in Debian
 * (libxxhash-dev), 64-bit output, ~20-30 GB/s per core on cached data, and
 * header-only with XXH_INLINE_ALL, so the preload library gains no runtime
 * dependency. A fingerprint only has to tell "changed" from "unchanged" for
 * one range; it is not an adversarial setting.
 */
#define _GNU_SOURCE
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "memq_hash.h"

/* ---- reading a span's bytes, directly or safely ---- */

#define IOV_BATCH 64
#define FULL_SAFE_CHUNK (256u << 10)

/*
 * Copies bytes into a local buffer, in order. Directly (memcpy) or, `safe`,
 * queued as process_vm_readv iovecs on the process itself, flushed in
 * batches: a page that is no longer mapped makes the read fail (EFAULT)
 * instead of faulting.
 */
struct reader {
	int safe, failed;
	struct iovec remote[IOV_BATCH];
	int k;
	unsigned char *local;    /* where the queued bytes land */
	uint64_t queued;
};

static void reader_flush(struct reader *rd)
{
	struct iovec local = { rd->local, rd->queued };

	if (rd->k && !rd->failed
	    && process_vm_readv(getpid(), &local, 1, rd->remote, (unsigned long) rd->k, 0) != (ssize_t) rd->queued)
		rd->failed = 1;
	rd->k = 0;
	rd->local += rd->queued;
	rd->queued = 0;
}

static void reader_copy(struct reader *rd, unsigned char *dst, uint64_t addr, uint64_t n)
{
	if (!rd->safe) {
		memcpy(dst, (const void *) (uintptr_t) addr, n);
		return;
	}
	if (rd->k == IOV_BATCH || (rd->k && dst != rd->local + rd->queued))
		reader_flush(rd);
	if (!rd->k)
		rd->local = dst;
	rd->remote[rd->k++] = (struct iovec) { (void *) (uintptr_t) addr, n };
	rd->queued += n;
}

static inline uint64_t row_addr(const struct memq_span *s, uint64_t row)
{
	return s->addr + (row / s->height) * s->slice + (row % s->height) * s->pitch;
}

/* Where logical byte `off` of the span lies. */
static inline const void *byte_at(const struct memq_span *s, uint64_t off)
{
	return (const void *) (uintptr_t) (row_addr(s, off / s->width) + off % s->width);
}

/* Logical bytes [off, off + n) of the span into buf. */
static void gather(struct reader *rd, const struct memq_span *s, uint64_t off, uint64_t n, unsigned char *buf)
{
	while (n) {
		uint64_t row = off / s->width, in = off % s->width;
		uint64_t take = s->width - in < n ? s->width - in : n;

		reader_copy(rd, buf, row_addr(s, row) + in, take);
		buf += take;
		off += take;
		n -= take;
	}
}

/* ---- the two modes ---- */

static int hash_sampled(const struct memq_span *s, uint64_t len, int safe, uint64_t *out)
{
	unsigned char buf[MEMQ_SAMPLE_BLOCKS * MEMQ_SAMPLE_BLOCK];
	struct reader rd = { .safe = safe };
	uint64_t off[MEMQ_SAMPLE_BLOCKS], span = len - MEMQ_SAMPLE_BLOCK, step, rest;
	const unsigned last = MEMQ_SAMPLE_BLOCKS - 1;
	int linear = s->height == 1 && s->depth == 1;

	if (len <= sizeof(buf)) {
		gather(&rd, s, 0, len, buf);
		if (safe)
			reader_flush(&rd);
		if (rd.failed)
			return -1;
		*out = XXH3_64bits_withSeed(buf, len, len);
		return 0;
	}
	/* Block i at floor(span * i / last), span = len - B (without a 128-bit division: span =
	 * step * last + rest), rounded down to a multiple of B but for the last one, which ends
	 * at len: an aligned span then reads one cache line per block. */
	step = span / last;
	rest = span % last;
	for (unsigned i = 0; i < MEMQ_SAMPLE_BLOCKS; i++) {
		off[i] = step * i + rest * i / last;
		if (i < last)
			off[i] &= ~(uint64_t) (MEMQ_SAMPLE_BLOCK - 1);
		if (!safe) {   /* far apart and often not cached: wait for them all at once */
			__builtin_prefetch(linear ? (const void *) (uintptr_t) (s->addr + off[i]) : byte_at(s, off[i]));
			__builtin_prefetch(linear ? (const void *) (uintptr_t) (s->addr + off[i] + MEMQ_SAMPLE_BLOCK - 1)
					   : byte_at(s, off[i] + MEMQ_SAMPLE_BLOCK - 1));
		}
	}
	for (unsigned i = 0; i < MEMQ_SAMPLE_BLOCKS; i++) {
		if (linear && !safe)
			memcpy(buf + i * MEMQ_SAMPLE_BLOCK, (const void *) (uintptr_t) (s->addr + off[i]), MEMQ_SAMPLE_BLOCK);
		else
			gather(&rd, s, off[i], MEMQ_SAMPLE_BLOCK, buf + i * MEMQ_SAMPLE_BLOCK);
	}
	if (safe)
		reader_flush(&rd);
	if (rd.failed)
		return -1;
	*out = XXH3_64bits_withSeed(buf, sizeof(buf), len);
	return 0;
}

static int hash_full(const struct memq_span *s, uint64_t len, int safe, uint64_t *out)
{
	XXH3_state_t state;
	uint64_t rows = s->height * s->depth;

	if (!safe && rows == 1) {
		*out = XXH3_64bits_withSeed((const void *) (uintptr_t) s->addr, len, len);
		return 0;
	}
	XXH3_INITSTATE(&state);
	XXH3_64bits_reset_withSeed(&state, len);
	if (!safe) {
		/* streaming equals the one-shot hash of the concatenated rows */
		for (uint64_t r = 0; r < rows; r++)
			XXH3_64bits_update(&state, (const void *) (uintptr_t) row_addr(s, r), s->width);
	} else {
		/* a buffer of its own: deferred hashes run on any thread, rarely */
		unsigned char *buf = mmap(NULL, FULL_SAFE_CHUNK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			-1, 0);
		int failed = 0;

		if (buf == MAP_FAILED)
			return -1;
		for (uint64_t off = 0; off < len && !failed; off += FULL_SAFE_CHUNK) {
			uint64_t n = len - off < FULL_SAFE_CHUNK ? len - off : FULL_SAFE_CHUNK;
			struct reader rd = { .safe = 1 };

			gather(&rd, s, off, n, buf);
			reader_flush(&rd);
			failed = rd.failed;
			if (!failed)
				XXH3_64bits_update(&state, buf, n);
		}
		munmap(buf, FULL_SAFE_CHUNK);
		if (failed)
			return -1;
	}
	*out = XXH3_64bits_digest(&state);
	return 0;
}

int memq_hash_span(const struct memq_span *s, int mode, int safe, uint64_t *out)
{
	uint64_t len = memq_span_bytes(s);

	if (!len)
		return -1;
	return mode == MEMQ_HASH_FULL ? hash_full(s, len, safe, out) : hash_sampled(s, len, safe, out);
}
