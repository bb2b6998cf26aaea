/*
 * Content fingerprints: the hash of the bytes one side of a copy
 * holds. Pure functions, no LTTng: bench/content_missrate.py compiles this
 * file on its own to measure what `sampled` misses.
 *
 * A side is a *span*: `depth` slices of `height` rows of `width` bytes, rows
 * `pitch` apart, slices `slice` apart (a linear copy is one row). Its
 * *content* is the logical byte sequence, rows concatenated, so a copy's
 * source and destination hash alike when they hold the same bytes, whatever
 * their pitches.
 *
 * Hash: XXH3-64 (xxHash, header-only: XXH_INLINE_ALL, no runtime
 * dependency), seeded with the length.
 *  - full:    every byte (streamed row by row);
 *  - sampled: MEMQ_SAMPLE_BLOCKS blocks of MEMQ_SAMPLE_BLOCK bytes at
 *             offsets spread evenly over the sequence (block i at
 *             (len - B) * i / (N - 1), rounded down to a multiple of B so
 *             that an aligned span reads one cache line per block), the
 *             first at 0, the last ending at its end; spans up to N * B
 *             bytes are hashed whole (then sampled == full).
 */
#ifndef MEMQ_HASH_H
#define MEMQ_HASH_H

#include <stdint.h>

#define MEMQ_SAMPLE_BLOCKS 16
#define MEMQ_SAMPLE_BLOCK 64

/* = enum memq_content_mode (memq_api.h) */
#define MEMQ_HASH_SAMPLED 1
#define MEMQ_HASH_FULL 2

struct memq_span {
	uint64_t addr, width, height, pitch, depth, slice;
};

static inline uint64_t memq_span_bytes(const struct memq_span *s)
{
	return s->width * s->height * s->depth;
}

/* [*lo, *hi): from the first byte to one past the last byte the span reads. */
static inline void memq_span_extent(const struct memq_span *s, uint64_t *lo, uint64_t *hi)
{
	*lo = s->addr;
	*hi = s->addr + (s->depth - 1) * s->slice + (s->height - 1) * s->pitch + s->width;
}

/*
 * Fingerprint of what `s` holds now (mode MEMQ_HASH_SAMPLED or _FULL).
 * `safe`: read through process_vm_readv, which fails instead of faulting
 * when the memory is gone (a deferred hash of memory that may have been
 * freed meanwhile). Returns 0, or -1 when a safe read failed (no hash).
 */
int memq_hash_span(const struct memq_span *s, int mode, int safe, uint64_t *out);

#endif /* MEMQ_HASH_H */
