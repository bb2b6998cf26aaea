/*
 * Content fingerprints of copies (docs/EVENTS.md "Content
 * fingerprints"): which side of a copy the CPU may read, when, and the
 * bookkeeping of asynchronous copies until a completion point covers them.
 *
 * A traced copy goes through three hooks:
 *   memq_content_before    before the real call: seq, the source and the
 *                          destination fingerprinted where readable (then
 *                          begin_ns is read again: hashing is not the call);
 *   memq_content_recorded  after it, before the event: keeps the
 *                          fingerprints only when the call succeeded, files
 *                          an asynchronous copy as pending;
 *   memq_content_emitted   after the event: a synchronous copy's
 *                          destination hashed now, in a memq:copy_done.
 * A successful synchronisation or query then completes the pending copies
 * it covers (memq_content_synced, called by memq_emit_sync).
 */
#ifndef MEMQ_CONTENT_H
#define MEMQ_CONTENT_H

#include "memq_core.h"

/* memq record --content (MEMQ_CONTENT): enum memq_content_mode. */
extern int memq_content_mode;

void memq_content_before(struct memq_call *c, struct memq_copy_rec *r, int runtime, int async);
int memq_content_recorded(struct memq_copy_rec *r);
void memq_content_emitted(struct memq_call *c, const struct memq_copy_rec *r);

/*
 * What a synchronisation called now will cover: the number of asynchronous
 * copies filed so far (read before the real call, so that a copy another
 * thread issues meanwhile is not taken as covered).
 */
uint64_t memq_content_issued(void);

/* Events (completion points): an event recorded on a stream (its recorded id, MEMQ_STREAM)
 * covers what was issued on it before (`bound` = memq_content_issued() before the record);
 * its stream, 0 if unknown. */
void memq_content_event_recorded(int runtime, uint64_t event, uint64_t stream, uint64_t bound);
uint64_t memq_content_event_stream(uint64_t event);

/* The memq:copy record of a linear or 2D copy (3D, peer and driver copies fill their own). */
static inline void memq_copy_init(struct memq_copy_rec *r, int api, const void *d, const void *s, uint64_t n,
	int kind, const void *stream, uint64_t w, uint64_t h, uint64_t dpitch, uint64_t spitch)
{
	*r = (struct memq_copy_rec) {
		.api = (uint16_t) api, .dst = (uint64_t) (uintptr_t) d, .src = (uint64_t) (uintptr_t) s,
		.bytes = n, .kind = kind, .stream = (uint64_t) (uintptr_t) stream, .src_device = -1,
		.width = w, .height = h, .dpitch = dpitch, .spitch = spitch };
}

#endif /* MEMQ_CONTENT_H */
