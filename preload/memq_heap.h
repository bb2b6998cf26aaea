/*
 * memq preload library: the host heap at a size threshold
 * (memq_heap.c; events memq:host_alloc, memq:host_free, memq:host_small in
 * docs/EVENTS.md).
 *
 * The settings reach the library through the environment, which `memq
 * record` fills (ctf2perfetto/capture/preload.py, HOST_MIN_SIZE_ENV, must name the same
 * variables; tests/test_heap.py checks that they do).
 */
#ifndef MEMQ_HEAP_H
#define MEMQ_HEAP_H

/*
 * Blocks whose malloc_usable_size is at least this many bytes are events;
 * smaller ones are counted per thread. Decimal bytes; "0" makes every block
 * an event. Unset (or not a number): the wrappers only forward to the real
 * allocator, nothing is counted or recorded (`memq record --api` without
 * libc, or `--host-source lttng`).
 */
#define MEMQ_ENV_HOST_MIN_SIZE "MEMQ_HOST_MIN_SIZE"

/* memq:host_small goes out at least this often while a thread allocates or frees. */
#define MEMQ_HEAP_FLUSH_NS 10000000ull

/*
 * Writes a memq:host_small for every thread's counts not yet written (the
 * calling thread's events carry them all). For the process exit and for a
 * capture window's live snapshot, so that small blocks are in the trace up
 * to that moment.
 */
void memq_heap_flush_all(void);

#endif /* MEMQ_HEAP_H */
