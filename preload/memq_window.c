/*
 * Capture windows (the mechanism and why: memq_window.h).
 *
 * MEMQ_CAPTURE, set by `memq record`:
 *   time:START:END   one window, CLOCK_MONOTONIC ns (absolute, so every
 *                    process of the command, exec'd or forked, agrees);
 *                    END 0 = until the process exits
 *   profiler         windows opened by hip/cuda/cuProfilerStart and closed
 *                    by ...Stop, as often as the program calls them
 * Unset or empty: no windows, everything is recorded (the gate stays open).
 *
 * A window opens: memq:window (open = 1), then memq:live for every entry of
 * the allocation table, then the gate opens. It closes: the gate closes,
 * the events of its calls are written (or, for a call still running after
 * CLOSE_WAIT_NS, not at all: window_close_locked), then memq:window (open = 0). Windows are per process (`index` counts them
 * in each process). A time window is opened and closed by a timer thread
 * (exact bounds, nothing added to the wrappers' path); a process still in
 * its window at exit closes it with cause `exit` from the destructor.
 *
 * Hard cases:
 *  - fork: the child inherits the table and the open/closed state but not
 *    the timer thread, and it cannot write events from the fork handler
 *    (liblttng-ust-fork registers it after the handlers). The gate is set
 *    to "undecided" and the child's first wrapped call (memq_recording)
 *    writes its own window open and snapshot and restarts the timer.
 *  - threads: open/close are serialised by `lock`; the snapshot takes each
 *    table shard's lock in turn, and untraced calls racing with it write
 *    their own event (memq_table.c, raced()).
 *  - the timer thread blocks every signal (they stay the program's).
 *  - errno: the profiler wrappers keep the real call's errno.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "memq_heap.h"
#include "memq_wrap.h"

enum { MODE_NONE, MODE_TIME, MODE_PROFILER };

int memq_window_gate = -1;
int memq_window_current;
unsigned long memq_window_inflight __attribute__((aligned(64)));
unsigned long memq_window_writing __attribute__((aligned(64)));
unsigned long memq_window_dropped;
__thread int memq_window_writing_self __attribute__((tls_model("initial-exec")));
int memq_window_counting;          /* windows were asked for: traced calls are counted */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
/* Under `lock` (mode and the bounds are written once, before any reader). */
static int mode = -1;             /* -1: MEMQ_CAPTURE not read yet */
static uint64_t start_ns, end_ns;  /* MODE_TIME */
static int is_open, open_cause;
static uint32_t next_index;        /* windows opened so far in this process */
static int generation = 1;         /* the last window's (gate value, table marks); 1: no windows */
static int child_pending;          /* a forked child that has not written its window yet */
static int initialised;            /* the constructor ran (fork handlers, timer) */
static int exiting;                /* the destructor ran: no window opens any more */

static void set_gate(int g)
{
	__atomic_store_n(&memq_window_gate, g, __ATOMIC_RELEASE);
}

static int parse_capture(const char *text)
{
	unsigned long long a, b;
	char tail;

	if (!text || !*text)
		return MODE_NONE;
	if (!strcmp(text, "profiler"))
		return MODE_PROFILER;
	if (sscanf(text, "time:%llu:%llu%c", &a, &b, &tail) == 2 && (!b || b > a)) {
		start_ns = a;
		end_ns = b;
		return MODE_TIME;
	}
	fprintf(stderr, "memq: ignoring MEMQ_CAPTURE=%s (expected time:START:END or profiler): recording everything\n",
		text);
	return MODE_NONE;
}

static void read_mode_locked(void)
{
	if (mode >= 0)
		return;
	mode = parse_capture(getenv("MEMQ_CAPTURE"));
	__atomic_store_n(&memq_window_counting, mode != MODE_NONE, __ATOMIC_RELAXED);
	/* Until the constructor: windows are opened by it, never before. */
	set_gate(mode == MODE_NONE ? generation : 0);
}

/* ---- opening and closing (under `lock`) ---------------------------------- */

static void emit_window(int open, int cause, int api)
{
	struct memq_window_rec rec = { .api = (uint16_t) api, .open = (uint8_t) open, .cause = (uint8_t) cause,
		.index = next_index };

	if (lttng_ust_tracepoint_enabled(memq, window))
		lttng_ust_do_tracepoint(memq, window, &rec, NULL);
}

static void emit_live(const struct memq_table_entry *e, void *arg)
{
	struct memq_alloc_rec r = { .api = e->api, .mem_kind = e->kind, .device = e->device,
		.ptr = e->ptr, .size = e->size, .begin_ns = *(const uint64_t *) arg };

	lttng_ust_do_tracepoint(memq, live, &r, NULL);
}

static void window_open_locked(int cause, int api)
{
	uint64_t now;

	if (is_open || exiting)
		return;
	memq_nesting++;                /* what LTTng does in here is not the program's */
	emit_window(1, cause, api);
	now = memq_now_ns();
	generation = generation == INT_MAX ? 2 : generation + 1;   /* never 0 nor 1 (no windows) */
	/* Events of this window may be written from now on (after its open event);
	 * the gate is still closed: calls racing with the snapshot are untraced and
	 * write their own event where the snapshot passed them (memq_table.c). */
	__atomic_store_n(&memq_window_current, generation, __ATOMIC_SEQ_CST);
	if (lttng_ust_tracepoint_enabled(memq, live))
		memq_table_snapshot((uint32_t) generation, emit_live, &now);
	/* the heap's small blocks: their totals so far (what went on outside windows) */
	memq_heap_flush_all();
	is_open = 1;
	open_cause = cause;
	set_gate(generation);
	memq_nesting--;
}

/*
 * Closing. Traced calls still running when the gate closed usually end in
 * microseconds: wait for them (their events belong to the window: calls
 * begun in it), but never more than CLOSE_WAIT_NS: a call blocked longer (a
 * synchronisation, a thread stuck at exit) must not hold the program's
 * profiler Stop. Then the window stops being `current`: an event still to
 * be written for it is not written (memq_window_commit; counted, reported
 * at exit), and the events being written now are waited for, without a
 * limit: a commit bracket writes one event and nothing else (in blocking
 * mode it may wait for buffer space, as the close itself would). So the
 * close follows every event of its window, and no event of it comes later.
 * Only traced calls are counted in the first wait: untraced ones (every
 * call between windows) never hold it up.
 */
#define CLOSE_WAIT_NS 1000000000ull

static void wait_count(const unsigned long *count, unsigned long self, uint64_t limit_ns)
{
	struct timespec pause = { .tv_sec = 0, .tv_nsec = 50000 };
	uint64_t deadline = limit_ns ? memq_now_ns() + limit_ns : UINT64_MAX;

	__atomic_thread_fence(__ATOMIC_SEQ_CST);   /* the store that ends it before the count's load */
	while (__atomic_load_n(count, __ATOMIC_SEQ_CST) > self && memq_now_ns() < deadline)
		nanosleep(&pause, NULL);
}

static void window_close_locked(int cause, int api)
{
	if (!is_open)
		return;
	memq_nesting++;
	memq_table_snapshot_end();
	__atomic_store_n(&memq_window_gate, 0, __ATOMIC_SEQ_CST);
	wait_count(&memq_window_inflight, 0, CLOSE_WAIT_NS);
	__atomic_store_n(&memq_window_current, 0, __ATOMIC_SEQ_CST);
	/* a close made by a signal handler inside this thread's own bracket: not that one */
	wait_count(&memq_window_writing, (unsigned long) memq_window_writing_self, 0);
	memq_heap_flush_all();          /* small blocks up to the close */
	memq_content_window_closed();   /* copies still waiting for an after-fingerprint get none */
	is_open = 0;
	emit_window(0, cause, api);
	next_index++;
	memq_nesting--;
}

/* ---- time windows: the timer thread -------------------------------------- */

static void sleep_until(uint64_t ns)
{
	struct timespec ts = { .tv_sec = (time_t) (ns / 1000000000u), .tv_nsec = (long) (ns % 1000000000u) };

	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0)
		;                      /* EINTR: keep waiting */
}

static void *timer_main(void *arg)
{
	(void) arg;
	if (memq_now_ns() < start_ns) {
		sleep_until(start_ns);
		pthread_mutex_lock(&lock);
		window_open_locked(MEMQ_WINDOW_DELAY, 0);
		pthread_mutex_unlock(&lock);
	}
	if (end_ns) {
		sleep_until(end_ns);
		pthread_mutex_lock(&lock);
		window_close_locked(MEMQ_WINDOW_DURATION, 0);
		pthread_mutex_unlock(&lock);
	}
	return NULL;
}

/*
 * Opens the window now when the process starts inside it, and starts the
 * timer for what is still to come. Without a timer (thread creation failed)
 * the process records from now on, rather than silently nothing.
 */
static void time_window_start_locked(void)
{
	uint64_t now = memq_now_ns();
	pthread_attr_t attr;
	pthread_t thread;
	sigset_t all, old;
	int failed;

	if (end_ns && now >= end_ns)
		return;                /* started after the window: nothing to record */
	if (now >= start_ns)
		window_open_locked(MEMQ_WINDOW_DELAY, 0);
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);   /* the thread inherits a full mask */
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	failed = pthread_create(&thread, &attr, timer_main, NULL);
	pthread_attr_destroy(&attr);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (failed) {
		fprintf(stderr, "memq: cannot start the capture-window timer: recording from now on\n");
		window_open_locked(MEMQ_WINDOW_DELAY, 0);
		return;
	}
	pthread_setname_np(thread, "memq-window");
}

/* ---- process life ---------------------------------------------------------- */

static void fork_prepare(void)
{
	pthread_mutex_lock(&lock);
}

static void fork_parent(void)
{
	pthread_mutex_unlock(&lock);
}

static void fork_child(void)
{
	pthread_mutex_unlock(&lock);   /* held by this thread across fork: valid to unlock */
	/* The other threads' calls and brackets in progress are not in the child:
	 * their counts would hold its closes (the last one forever). */
	__atomic_store_n(&memq_window_inflight, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&memq_window_writing, (unsigned long) memq_window_writing_self, __ATOMIC_RELAXED);
	child_pending = 1;
	set_gate(-1);
}

void memq_window_init(void)
{
	pthread_mutex_lock(&lock);
	read_mode_locked();
	if (!initialised && mode != MODE_NONE) {
		initialised = 1;
		/* Registered after the table's handlers: its prepare runs first, so
		 * `lock` is taken before the shard locks, as in a snapshot. */
		pthread_atfork(fork_prepare, fork_parent, fork_child);
		if (mode == MODE_TIME)
			time_window_start_locked();
	}
	pthread_mutex_unlock(&lock);
}

/* A forked child's first call: its own window events, and its own timer. */
static void child_resume_locked(void)
{
	child_pending = 0;
	if (is_open) {
		is_open = 0;           /* the parent's window: this process writes its own */
		window_open_locked(open_cause, 0);
	}
	if (mode == MODE_TIME && (!end_ns || memq_now_ns() < end_ns))
		time_window_start_locked();
}

int memq_window_gate_slow(void)
{
	int g;

	pthread_mutex_lock(&lock);
	read_mode_locked();
	if (child_pending) {
		child_resume_locked();
		set_gate(mode == MODE_NONE || is_open ? generation : 0);
	}
	g = __atomic_load_n(&memq_window_gate, __ATOMIC_ACQUIRE);
	pthread_mutex_unlock(&lock);
	return g > 0 ? g : 0;
}

void memq_window_exit(void)
{
	pthread_mutex_lock(&lock);
	if (!child_pending)
		window_close_locked(MEMQ_WINDOW_EXIT, 0);
	exiting = 1;                   /* the timer may wake during teardown: it opens nothing */
	pthread_mutex_unlock(&lock);
	if (__atomic_load_n(&memq_window_dropped, __ATOMIC_RELAXED))
		fprintf(stderr, "memq: %lu events of calls still running %.1f s after their capture window closed "
			"were not recorded\n", __atomic_load_n(&memq_window_dropped, __ATOMIC_RELAXED), CLOSE_WAIT_NS / 1e9);
}

/* ---- the profiler API: hip/cuda/cuProfilerStart and Stop ---------------------
 *
 * Forwarded always; with --capture-range profiler-api a Start opens a window
 * (a no-op when one is open) and a Stop closes it, whatever the runtime
 * answered (the call says what the program wants recorded; a runtime with no
 * profiler attached may return an error). The real call runs under the
 * nesting guard: cudaProfilerStart reaching cuProfilerStart is one window,
 * attributed to the outer call.
 */
static void profiler_call(int api, int opens)
{
	pthread_mutex_lock(&lock);
	if (mode == MODE_PROFILER) {
		if (opens)
			window_open_locked(MEMQ_WINDOW_PROFILER_API, api);
		else
			window_close_locked(MEMQ_WINDOW_PROFILER_API, api);
	}
	pthread_mutex_unlock(&lock);
}

#define PROFILER(rt, name, opens)                                            \
	MEMQ_REAL_FN(rt, int, name, (void));                                 \
	MEMQ_EXPORT int name(void)                                           \
	{                                                                    \
		name##_fn real = MEMQ_REAL(name);                            \
		int r, saved_errno;                                          \
		if (!real)                                                   \
			return MEMQ_ERR_NO_RUNTIME;                          \
		if (memq_nesting)                                            \
			return real();                                       \
		memq_nesting++;                                              \
		r = real();                                                  \
		saved_errno = errno;                                         \
		if (lttng_ust_tracepoint_enabled(memq, window)) {            \
			memq_recording();  /* a forked child: its window first */ \
			profiler_call(MEMQ_API_##name, opens);               \
		}                                                            \
		memq_nesting--;                                              \
		errno = saved_errno;                                         \
		return r;                                                    \
	}

PROFILER(MEMQ_RT_HIP, hipProfilerStart, 1)
PROFILER(MEMQ_RT_HIP, hipProfilerStop, 0)
PROFILER(MEMQ_RT_CUDA, cudaProfilerStart, 1)
PROFILER(MEMQ_RT_CUDA, cudaProfilerStop, 0)
PROFILER(MEMQ_RT_CUDRV, cuProfilerStart, 1)
PROFILER(MEMQ_RT_CUDRV, cuProfilerStop, 0)
