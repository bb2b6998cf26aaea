/*
 * Capture windows (issue 10): `memq record --delay/--duration` and
 * `--capture-range profiler-api`.
 *
 * Mechanism: the LTTng session runs for the whole command and the preload
 * library gates its own events. Why not start the session late instead:
 *  - a window needs the allocations made before it (so copies and frees in
 *    it resolve): the library must keep its allocation table outside
 *    windows anyway, and only it can write that table out at the instant a
 *    window opens (memq:live, one per live tracked allocation);
 *  - profiler-API windows open inside the program's own call
 *    (cudaProfilerStart returns and the next call is already in the
 *    window): no outside `lttng start` can be that exact;
 *  - the preload writes memq:window open/close itself, so the bounds of
 *    every window are exact and in the trace, per process.
 * `memq record` passes the window in MEMQ_CAPTURE (see memq_window.c); a
 * process without it records everything, as before.
 *
 * The gate: memq_recording() says whether events may be written now (a
 * window is open, or no windows were asked for). Calls outside windows still
 * keep the allocation table (memq_core.c: the call is "untraced", c->traced
 * = 0). Untraced calls whose table insert or removal raced with a window's
 * snapshot write their event anyway (memq_table_insert / memq_table_take
 * say so), so a window never misses an allocation nor lists a freed one.
 */
#ifndef MEMQ_WINDOW_H
#define MEMQ_WINDOW_H

#include <stdint.h>

/* 1: events may be written; 0: outside every window; -1: not decided yet
 * (before the constructor, or in a forked child before its first call). */
extern int memq_window_gate;

int memq_window_gate_slow(void);

/* Wrapper calls in progress (counted only while windows are asked for): a
 * closing window waits for them, so that every event of a call begun inside
 * the window, or racing with its opening, precedes its close. */
extern unsigned long memq_window_inflight;
extern int memq_window_counting;

/* Count a call that may write an event (before it reads the gate); 1 when counted. */
static inline int memq_window_enter(void)
{
	if (!__atomic_load_n(&memq_window_counting, __ATOMIC_RELAXED))
		return 0;
	__atomic_add_fetch(&memq_window_inflight, 1, __ATOMIC_SEQ_CST);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);   /* counted before the gate is read */
	return 1;
}

static inline void memq_window_leave(int counted)
{
	if (counted)
		__atomic_sub_fetch(&memq_window_inflight, 1, __ATOMIC_RELEASE);
}

/* Whether events may be written now. Call only under the nesting guard
 * (memq_nesting > 0): the first call in a forked child writes its window
 * events. */
static inline int memq_recording(void)
{
	int g = __atomic_load_n(&memq_window_gate, __ATOMIC_ACQUIRE);

	return __builtin_expect(g >= 0, 1) ? g : memq_window_gate_slow();
}

/* memq_recording() for code outside the nesting guard (the heap wrappers):
 * `nested` (memq_nesting) non-zero means the window code itself may be
 * running on this thread, which must not take its lock again: undecided
 * then reads as closed. */
static inline int memq_recording_from(int nested)
{
	int g = __atomic_load_n(&memq_window_gate, __ATOMIC_ACQUIRE);

	return __builtin_expect(g >= 0, 1) ? g : nested ? 0 : memq_window_gate_slow();
}

/* Constructor (reads MEMQ_CAPTURE, starts the timer of a --delay/--duration
 * window) and destructor (closes an open window, cause `exit`). */
void memq_window_init(void);
void memq_window_exit(void);

#endif /* MEMQ_WINDOW_H */
