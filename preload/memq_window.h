/*
 * Capture windows: `memq record --delay/--duration` and
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

/* The generation of the open window (> 0; 1 when no windows were asked for):
 * events may be written; 0: outside every window; -1: not decided yet
 * (before the constructor, or in a forked child before its first call). */
extern int memq_window_gate;

int memq_window_gate_slow(void);

/*
 * Which window an event belongs to, exactly (memq_window.c, "closing"):
 *  - a call takes the gate's generation when it begins (memq_window_enter)
 *    and its events belong to that window; untraced calls that raced with a
 *    snapshot take the generation the table gave them (memq_table_insert,
 *    memq_table_take);
 *  - an event is written only inside a commit bracket (memq_window_commit,
 *    memq_window_done) that finds its window still current: a closing
 *    window ends `current`, then waits for the brackets in progress (each
 *    one writes an event, nothing more: short), then writes its close. So
 *    no event ever follows its window's close or lands in a later window;
 *    one of a call still running past the close's bounded wait is not
 *    written (counted in memq_window_dropped, reported at exit).
 */
extern int memq_window_current;            /* the window opening or open, 0: none */
extern int memq_window_counting;           /* windows were asked for: calls and writes are counted */
extern unsigned long memq_window_inflight;  /* traced calls in progress */
extern unsigned long memq_window_writing;   /* commit brackets in progress */
extern unsigned long memq_window_dropped;   /* events whose window had closed */
extern __thread int memq_window_writing_self __attribute__((tls_model("initial-exec")));

/* The gate's window now (0: none). Call only under the nesting guard
 * (memq_nesting > 0): the first call in a forked child writes its window
 * events. */
static inline int memq_recording(void)
{
	int g = __atomic_load_n(&memq_window_gate, __ATOMIC_SEQ_CST);

	return __builtin_expect(g >= 0, 1) ? g : memq_window_gate_slow();
}

/* memq_recording() for code outside the nesting guard (the heap wrappers):
 * `nested` (memq_nesting) non-zero means the window code itself may be
 * running on this thread, which must not take its lock again: undecided
 * then reads as closed. */
static inline int memq_recording_from(int nested)
{
	int g = __atomic_load_n(&memq_window_gate, __ATOMIC_SEQ_CST);

	return __builtin_expect(g >= 0, 1) ? g : nested ? 0 : memq_window_gate_slow();
}

/* A call begins: the window its events belong to (0: none). A traced call
 * is counted until memq_window_leave(*counted): a closing window waits for
 * it (bounded). An untraced one is counted only for the instant it reads
 * the gate, so calls outside windows never hold a close up. */
static inline int memq_window_enter_from(int nested, int *counted)
{
	int g;

	*counted = 0;
	if (!__atomic_load_n(&memq_window_counting, __ATOMIC_RELAXED))
		return memq_recording_from(nested);
	__atomic_add_fetch(&memq_window_inflight, 1, __ATOMIC_SEQ_CST);   /* counted before the gate is read */
	g = memq_recording_from(nested);
	if (g > 0) {
		*counted = 1;
		return g;
	}
	__atomic_sub_fetch(&memq_window_inflight, 1, __ATOMIC_RELEASE);
	return 0;
}

/* memq_window_enter_from under the nesting guard (memq_recording's case). */
static inline int memq_window_enter(int *counted)
{
	return memq_window_enter_from(0, counted);
}

static inline void memq_window_leave(int counted)
{
	if (counted)
		__atomic_sub_fetch(&memq_window_inflight, 1, __ATOMIC_RELEASE);
}

/* Before writing an event of window `gen`: 0 = write nothing (no window, or
 * it has closed); else write it, then memq_window_done(the value). */
static inline int memq_window_commit(int gen)
{
	if (gen <= 0)
		return 0;
	if (!__atomic_load_n(&memq_window_counting, __ATOMIC_RELAXED))
		return 1;
	memq_window_writing_self++;   /* a close made from inside a bracket (a signal handler) skips it */
	__atomic_add_fetch(&memq_window_writing, 1, __ATOMIC_SEQ_CST);   /* counted before `current` is read */
	if (__atomic_load_n(&memq_window_current, __ATOMIC_SEQ_CST) == gen)
		return 2;
	__atomic_sub_fetch(&memq_window_writing, 1, __ATOMIC_RELEASE);
	memq_window_writing_self--;
	__atomic_add_fetch(&memq_window_dropped, 1, __ATOMIC_RELAXED);
	return 0;
}

static inline void memq_window_done(int how)
{
	if (how == 2) {
		__atomic_sub_fetch(&memq_window_writing, 1, __ATOMIC_RELEASE);
		memq_window_writing_self--;
	}
}

/* Constructor (reads MEMQ_CAPTURE, starts the timer of a --delay/--duration
 * window) and destructor (closes an open window, cause `exit`). */
void memq_window_init(void);
void memq_window_exit(void);

#endif /* MEMQ_WINDOW_H */
