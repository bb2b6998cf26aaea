/*
 * memq preload library: memq's own libc heap wrappers.
 *
 * malloc, calloc, realloc, reallocarray, memalign, posix_memalign,
 * aligned_alloc, valloc, pvalloc and free forward to the next allocator in
 * the link chain (glibc, or jemalloc/tcmalloc/mimalloc when one is
 * interposed after us) and account for each block by its usable size
 * (malloc_usable_size of that same allocator), on both sides, so an
 * allocation and its free always agree without a table lookup per free:
 *  - a block of at least MEMQ_HOST_MIN_SIZE usable bytes is an event
 *    (memq:host_alloc / memq:host_free, the free carrying the size) and an
 *    entry of the live allocation table (kind host), for capture-window
 *    snapshots and copies;
 *  - a smaller one is counted in its thread (count and bytes, allocated and
 *    freed); the counts go out as memq:host_small at least every 10 ms while
 *    the thread uses the heap, at thread exit and at process exit.
 *
 * The hard cases, each handled where it arises below:
 *  - bootstrap: finding the real functions (dlsym) may allocate; those
 *    requests get memory from a static buffer that free, realloc and
 *    malloc_usable_size recognise;
 *  - recursion: LTTng and the allocation table run inside our wrappers and
 *    may allocate; a per-thread guard forwards such calls untouched;
 *  - threads: counts live in the thread (initial-exec TLS, no lock on the
 *    fast path); a registry lets the process exit write every thread's
 *    counts, a pthread key destructor writes them at thread exit;
 *  - fork: the child starts with the parent's live small blocks as its own
 *    (it inherited them), so frees of them do not drive its counter below
 *    zero; registry and locks are reset;
 *  - errno: free and the accounting never change it; posix_memalign returns
 *    its error and leaves errno as it found it;
 *  - exit: after this library's destructor has written the last counts,
 *    every wrapper only forwards (LTTng is torn down after us; a runtime's
 *    teardown threads may still allocate);
 *  - the threshold never changes within a process (read once, at the first
 *    call), so blocks counted small stay small when freed.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "memq_heap.h"
#include "memq_wrap.h"

#define TLS_IE __attribute__((tls_model("initial-exec")))
#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)
#define CALLER __builtin_return_address(0)

extern char **environ;

/* ---------------------------------------------------------------------- */
/* The real allocator                                                      */
/* ---------------------------------------------------------------------- */

struct heap_real {
	void *(*malloc)(size_t);
	void (*free)(void *);
	void *(*calloc)(size_t, size_t);
	void *(*realloc)(void *, size_t);
	void *(*memalign)(size_t, size_t);
	int (*posix_memalign)(void **, size_t, size_t);
	void *(*aligned_alloc)(size_t, size_t);
	void *(*valloc)(size_t);
	void *(*pvalloc)(size_t);
	size_t (*usable)(void *);
};

static struct heap_real real;
static int real_ready;                       /* atomic: every pointer of `real` is set */
static __thread int resolving TLS_IE;        /* this thread is inside resolve_real() */

static void die(const char *msg)
{
	if (write(2, msg, strlen(msg)) < 0) {
		/* nothing more to say */
	}
	abort();
}

/* Whether two functions live in the same loaded object (dladdr does not allocate). */
static int same_object(void *a, void *b)
{
	Dl_info ia, ib;

	return dladdr(a, &ia) && dladdr(b, &ib) && ia.dli_fbase == ib.dli_fbase;
}

/* How the real functions are looked up. tests/test_heap.py builds a variant
 * whose lookup allocates first, as glibc's dlsym does on its error path, to
 * drive the bootstrap buffer below. */
#ifndef MEMQ_HEAP_LOOKUP
#define MEMQ_HEAP_LOOKUP memq_real_dlsym
#endif
void *MEMQ_HEAP_LOOKUP(void *handle, const char *name);

/*
 * The next definitions after this library (RTLD_NEXT, through libc's own
 * dlsym: our exported dlsym is memq_dl.c's). Several threads may resolve at
 * once: they store the same values. Allocations made meanwhile by this
 * thread (dlsym's) come from the bootstrap buffer.
 */
static const struct heap_real *resolve_real(void)
{
	struct heap_real r;
	int saved_errno = errno;

	if (resolving)
		return NULL;
	resolving = 1;
	r.malloc = (void *(*)(size_t)) MEMQ_HEAP_LOOKUP(RTLD_NEXT, "malloc");
	r.free = (void (*)(void *)) MEMQ_HEAP_LOOKUP(RTLD_NEXT, "free");
	r.calloc = (void *(*)(size_t, size_t)) MEMQ_HEAP_LOOKUP(RTLD_NEXT, "calloc");
	r.realloc = (void *(*)(void *, size_t)) MEMQ_HEAP_LOOKUP(RTLD_NEXT, "realloc");
	r.memalign = (void *(*)(size_t, size_t)) MEMQ_HEAP_LOOKUP(RTLD_NEXT, "memalign");
	r.posix_memalign = (int (*)(void **, size_t, size_t)) MEMQ_HEAP_LOOKUP(RTLD_NEXT, "posix_memalign");
	r.aligned_alloc = (void *(*)(size_t, size_t)) MEMQ_HEAP_LOOKUP(RTLD_NEXT, "aligned_alloc");
	r.valloc = (void *(*)(size_t)) MEMQ_HEAP_LOOKUP(RTLD_NEXT, "valloc");
	r.pvalloc = (void *(*)(size_t)) MEMQ_HEAP_LOOKUP(RTLD_NEXT, "pvalloc");
	r.usable = (size_t (*)(void *)) MEMQ_HEAP_LOOKUP(RTLD_NEXT, "malloc_usable_size");
	resolving = 0;
	errno = saved_errno;
	if (!r.malloc || !r.free || !r.calloc || !r.realloc || !r.memalign)
		die("memq: libmemq_preload.so cannot find the C library's malloc family (dlsym RTLD_NEXT)\n");
	/* Sizes must come from the allocator that made the block: an allocator
	 * interposed after us without malloc_usable_size would get glibc's,
	 * which cannot read its blocks. Then nothing is accounted. */
	if (r.usable && !same_object((void *) r.malloc, (void *) r.usable))
		r.usable = NULL;
	__atomic_store_n(&real.malloc, r.malloc, __ATOMIC_RELAXED);
	__atomic_store_n(&real.free, r.free, __ATOMIC_RELAXED);
	__atomic_store_n(&real.calloc, r.calloc, __ATOMIC_RELAXED);
	__atomic_store_n(&real.realloc, r.realloc, __ATOMIC_RELAXED);
	__atomic_store_n(&real.memalign, r.memalign, __ATOMIC_RELAXED);
	__atomic_store_n(&real.posix_memalign, r.posix_memalign, __ATOMIC_RELAXED);
	__atomic_store_n(&real.aligned_alloc, r.aligned_alloc, __ATOMIC_RELAXED);
	__atomic_store_n(&real.valloc, r.valloc, __ATOMIC_RELAXED);
	__atomic_store_n(&real.pvalloc, r.pvalloc, __ATOMIC_RELAXED);
	__atomic_store_n(&real.usable, r.usable, __ATOMIC_RELAXED);
	__atomic_store_n(&real_ready, 1, __ATOMIC_RELEASE);
	return &real;
}

/* The real functions, or NULL while this thread is finding them (bootstrap). */
static inline const struct heap_real *get_real(void)
{
	if (LIKELY(__atomic_load_n(&real_ready, __ATOMIC_ACQUIRE)))
		return &real;
	return resolve_real();
}

/* ---------------------------------------------------------------------- */
/* Bootstrap buffer: what dlsym allocates before the real functions exist  */
/* ---------------------------------------------------------------------- */

/* glibc's dlsym allocates nothing on success (its error text on failure);
 * LTTng's wrapper gets by with 4 KiB. Never reused, so always zeroed. */
#define BOOT_SIZE (64u << 10)
#define BOOT_HEADER 16u                      /* holds the block's size; keeps 16-byte alignment */

static unsigned char boot_buf[BOOT_SIZE] __attribute__((aligned(64)));
static size_t boot_used;                     /* atomic */

static inline int is_boot(const void *p)
{
	return (uintptr_t) p - (uintptr_t) boot_buf < BOOT_SIZE;
}

static void *boot_alloc(size_t align, size_t n)
{
	size_t used = __atomic_load_n(&boot_used, __ATOMIC_RELAXED), start, end;

	if (align < BOOT_HEADER)
		align = BOOT_HEADER;
	do {
		start = (used + BOOT_HEADER + align - 1) & ~(align - 1);
		if (n > BOOT_SIZE || start + n > BOOT_SIZE)
			die("memq: bootstrap heap exhausted while resolving malloc\n");
		end = (start + n + BOOT_HEADER - 1) & ~(size_t) (BOOT_HEADER - 1);
	} while (!__atomic_compare_exchange_n(&boot_used, &used, end, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
	*(size_t *) (boot_buf + start - sizeof(size_t)) = n;
	return boot_buf + start;
}

static inline size_t boot_size(const void *p)
{
	return *(const size_t *) ((const unsigned char *) p - sizeof(size_t));
}

/* ---------------------------------------------------------------------- */
/* Settings and state                                                      */
/* ---------------------------------------------------------------------- */

enum heap_mode {
	HEAP_UNKNOWN = 0,                    /* settings not read yet */
	HEAP_OFF = 1,                        /* forward only */
	HEAP_ON = 2,                         /* account and record */
	HEAP_DONE = 3,                       /* the process is exiting: forward only */
};

static int heap_mode;                        /* atomic enum heap_mode */
static uint64_t min_size;                    /* MEMQ_HOST_MIN_SIZE */
static uint64_t flush_every_ns;              /* on the coarse clock */
static clockid_t flush_clock = CLOCK_MONOTONIC_COARSE;

/* Non-zero while this thread runs the wrappers' own work (table, LTTng): its
 * allocations then are memq's, not the application's, and are forwarded. */
static __thread int guard TLS_IE;

static int parse_size(const char *text, uint64_t *out)
{
	uint64_t v = 0;

	if (!text || !*text)
		return -1;
	for (; *text; text++) {
		if (*text < '0' || *text > '9' || v > (UINT64_MAX - 9) / 10)
			return -1;
		v = v * 10 + (uint64_t) (*text - '0');
	}
	*out = v;
	return 0;
}

/*
 * Read once, at the first call with an environment (the first allocation of
 * a process comes after ld.so has set `environ`; if it ever did not, calls
 * are forwarded uncounted until it is). getenv does not allocate.
 */
static int read_settings(void)
{
	struct timespec res;
	int mode;

	if (!environ)
		return HEAP_UNKNOWN;
	mode = parse_size(getenv(MEMQ_ENV_HOST_MIN_SIZE), &min_size) == 0 ? HEAP_ON : HEAP_OFF;
	/* The coarse clock costs ~5 ns but lags by up to its resolution: flush
	 * that much early. Where it is too coarse (HZ=100), read the precise one. */
	if (clock_getres(CLOCK_MONOTONIC_COARSE, &res) == 0 && res.tv_sec == 0
	    && (uint64_t) res.tv_nsec * 2 <= MEMQ_HEAP_FLUSH_NS) {
		flush_every_ns = MEMQ_HEAP_FLUSH_NS - (uint64_t) res.tv_nsec;
	} else {
		flush_clock = CLOCK_MONOTONIC;
		flush_every_ns = MEMQ_HEAP_FLUSH_NS;
	}
	{
		int expected = HEAP_UNKNOWN;

		__atomic_compare_exchange_n(&heap_mode, &expected, mode, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
		return expected == HEAP_UNKNOWN ? mode : expected;
	}
}

/* Whether this call is the application's and is to be accounted. */
static inline int accounting(void)
{
	int mode = __atomic_load_n(&heap_mode, __ATOMIC_ACQUIRE);

	if (UNLIKELY(mode == HEAP_UNKNOWN))
		mode = read_settings();
	return mode == HEAP_ON && !guard && real.usable;
}

/* ---------------------------------------------------------------------- */
/* Small blocks: per-thread counts                                         */
/* ---------------------------------------------------------------------- */

enum { N_ALLOC_COUNT, N_ALLOC_BYTES, N_FREE_COUNT, N_FREE_BYTES, N_COUNTS };

enum link_state {
	UNLINKED = 0,                        /* counted nothing yet */
	LINKED = 1,                          /* in the registry */
	EXITED = 2,                          /* thread-exit destructor ran: each block goes out at once */
	SELF_ONLY = 3,                       /* no thread key could be had: flushes itself, not at exit */
};

/*
 * One thread's small blocks. `n` is cumulative and written only by its
 * thread (relaxed stores: no lock prefix on the fast path); `sent` is what
 * memq:host_small events have reported, changed only under `flushing`, by the
 * thread or by a sweep (process exit, snapshot) from another thread.
 */
struct heap_thread {
	uint64_t n[N_COUNTS];
	uint64_t sent[N_COUNTS];
	uint64_t next_flush_ns;
	struct heap_thread *prev, *next;
	int link;                            /* enum link_state */
	int flushing;                        /* atomic flag */
};

static __thread struct heap_thread self TLS_IE;

/* Threads with counts, for the sweeps; their TLS outlives membership (the
 * thread-exit destructor unlinks under the lock). */
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct heap_thread registry = { .prev = &registry, .next = &registry };
/* Cumulative counts of the threads that left the registry (for a fork child). */
static uint64_t retired[N_COUNTS];
static pthread_key_t exit_key;
static int exit_key_state;                   /* atomic: 0 none, 1 creating, 2 ready, 3 failed */

static inline uint64_t clock_now(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (uint64_t) ts.tv_sec * 1000000000ull + (uint64_t) ts.tv_nsec;
}

/*
 * Around LTTng's code: its blocking wait and consumer wake-up are
 * cancellation points, and a thread cancelled there would leave its flush
 * flag or table lock taken (its own thread-exit flush would then wait
 * forever). Costs two flag updates per event.
 */
static inline int cancel_off(void)
{
	int old = PTHREAD_CANCEL_ENABLE;

	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old);
	return old;
}

static inline void cancel_restore(int old)
{
	pthread_setcancelstate(old, &old);
}

static void emit_small(const struct memq_host_small_rec *r)
{
	int saved_errno = errno, cancel = cancel_off();

	guard++;
	memq_process_events_due();
	lttng_ust_do_tracepoint(memq, host_small, r, NULL);
	guard--;
	cancel_restore(cancel);
	errno = saved_errno;
}

/*
 * Writes what `t` counted since its last memq:host_small (nothing when that
 * is nothing, or when no session records the event: the counts then wait,
 * so a session started later still sees every live small block). `wait`:
 * a sweep waits for the owner's flush in progress; the owner skips instead.
 */
static void flush_thread(struct heap_thread *t, int wait)
{
	struct memq_host_small_rec rec;
	uint64_t now[N_COUNTS];

	while (__atomic_exchange_n(&t->flushing, 1, __ATOMIC_ACQUIRE)) {
		if (!wait)
			return;
		sched_yield();   /* the owner may be waiting for LTTng buffer space (blocking mode) */
	}
	if (lttng_ust_tracepoint_enabled(memq, host_small)) {
		for (int i = 0; i < N_COUNTS; i++)
			now[i] = __atomic_load_n(&t->n[i], __ATOMIC_RELAXED);
		rec.alloc_count = now[N_ALLOC_COUNT] - t->sent[N_ALLOC_COUNT];
		rec.alloc_bytes = now[N_ALLOC_BYTES] - t->sent[N_ALLOC_BYTES];
		rec.free_count = now[N_FREE_COUNT] - t->sent[N_FREE_COUNT];
		rec.free_bytes = now[N_FREE_BYTES] - t->sent[N_FREE_BYTES];
		if (rec.alloc_count || rec.free_count) {
			emit_small(&rec);
			memcpy(t->sent, now, sizeof(now));
		}
	}
	__atomic_store_n(&t->flushing, 0, __ATOMIC_RELEASE);
}

/* pthread key destructor: the thread's last counts go out; it leaves the registry. */
static void thread_exit(void *arg)
{
	struct heap_thread *t = arg;

	if (t != &self)
		return;
	/* After the process exit's sweep (a runtime's threads can outlive it), LTTng is being
	 * torn down: nothing more is written, the thread only leaves the registry. */
	if (__atomic_load_n(&heap_mode, __ATOMIC_ACQUIRE) != HEAP_DONE)
		flush_thread(t, 1);
	pthread_mutex_lock(&registry_lock);
	t->prev->next = t->next;
	t->next->prev = t->prev;
	t->prev = t->next = t;
	for (int i = 0; i < N_COUNTS; i++)
		retired[i] += t->n[i];
	t->link = EXITED;
	pthread_mutex_unlock(&registry_lock);
}

static int exit_key_ready(void)
{
	int state = __atomic_load_n(&exit_key_state, __ATOMIC_ACQUIRE), expected = 0;

	if (state >= 2)
		return state == 2;
	if (__atomic_compare_exchange_n(&exit_key_state, &expected, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		state = pthread_key_create(&exit_key, thread_exit) == 0 ? 2 : 3;
		__atomic_store_n(&exit_key_state, state, __ATOMIC_RELEASE);
		return state == 2;
	}
	while ((state = __atomic_load_n(&exit_key_state, __ATOMIC_ACQUIRE)) == 1)
		sched_yield();
	return state == 2;
}

/*
 * First count of a thread: join the registry. The main thread needs no exit
 * hook (its TLS lives to the end; the process exit sweeps it); another
 * thread gets the key whose destructor runs at its exit.
 */
static void link_thread(struct heap_thread *t)
{
	int main_thread = getpid() == (pid_t) syscall(SYS_gettid);

	guard++;     /* pthread_setspecific may allocate its second-level block */
	if (!main_thread && (!exit_key_ready() || pthread_setspecific(exit_key, t) != 0)) {
		t->link = SELF_ONLY;
	} else {
		pthread_mutex_lock(&registry_lock);
		t->next = &registry;
		t->prev = registry.prev;
		registry.prev->next = t;
		registry.prev = t;
		t->link = LINKED;
		pthread_mutex_unlock(&registry_lock);
	}
	guard--;
}

/*
 * A thread's periodic flush, inside capture windows only (counted, so a
 * closing window waits for it). Outside them the counts wait: the next
 * window's opening sweep (memq_heap_flush_all) writes them, so its host
 * live bytes start right. Thread and process exit flush ungated: nothing is
 * lost, at the cost of a host_small outside a window.
 */
static void flush_gated(struct heap_thread *t)
{
	int how = memq_window_commit(memq_recording_from(memq_nesting));

	if (how) {
		flush_thread(t, 0);
		memq_window_done(how);
	}
}

/* slot: N_ALLOC_COUNT or N_FREE_COUNT. */
static inline void count_small(int slot, size_t usable)
{
	struct heap_thread *t = &self;

	__atomic_store_n(&t->n[slot], t->n[slot] + 1, __ATOMIC_RELAXED);
	__atomic_store_n(&t->n[slot + 1], t->n[slot + 1] + usable, __ATOMIC_RELAXED);
	if (LIKELY(t->link == LINKED || t->link == SELF_ONLY)) {
		uint64_t now;

		if (!lttng_ust_tracepoint_enabled(memq, host_small))
			return;
		now = clock_now(flush_clock);
		if (LIKELY(now < t->next_flush_ns))
			return;
		t->next_flush_ns = now + flush_every_ns;
		flush_gated(t);
	} else if (t->link == UNLINKED) {
		link_thread(t);
	} else {
		/* EXITED: after its destructor, a dying thread's blocks go out one by one */
		int saved_errno = errno;

		pthread_mutex_lock(&registry_lock);
		retired[slot]++;
		retired[slot + 1] += usable;
		pthread_mutex_unlock(&registry_lock);
		errno = saved_errno;
		flush_thread(t, 1);
	}
}

void memq_heap_flush_all(void)
{
	int saved_errno = errno;

	guard++;
	pthread_mutex_lock(&registry_lock);
	for (struct heap_thread *t = registry.next; t != &registry; t = t->next)
		flush_thread(t, 1);
	pthread_mutex_unlock(&registry_lock);
	if (self.link == SELF_ONLY)
		flush_thread(&self, 1);
	guard--;
	errno = saved_errno;
}

/* ---------------------------------------------------------------------- */
/* Blocks at or above the threshold: events and table entries              */
/* ---------------------------------------------------------------------- */

static void big_alloc(int api, void *p, size_t usable, uint64_t requested, void *ip)
{
	struct memq_host_rec rec;
	int saved_errno, cancel, counted, late, window, how;

	if (!lttng_ust_tracepoint_enabled(memq, host_alloc))
		return;
	saved_errno = errno;
	cancel = cancel_off();
	guard++;
	memq_process_events_due();
	/* The window read before the insert, as for the runtimes' calls (memq_core.c): read
	 * after it, an insert the opening snapshot listed could be written a second time. */
	window = memq_window_enter_from(memq_nesting, &counted);
	rec = (struct memq_host_rec) { .api = (uint16_t) api, .ptr = U64(p), .size = usable,
		.requested = requested };
	late = memq_table_insert(&(struct memq_table_entry) { .ptr = rec.ptr, .size = usable, .api = (uint16_t) api,
		.device = -1, .kind = MEMQ_MEM_HOST });
	if (window) {
		if ((how = memq_window_commit(window)))
			lttng_ust_do_tracepoint(memq, host_alloc, &rec, ip);
		memq_window_done(how);
	} else if ((how = memq_window_commit(late))) {
		/* outside the window, inserted after its opening snapshot passed: live at its start */
		struct memq_alloc_rec live = { .api = (uint16_t) api, .mem_kind = MEMQ_MEM_HOST, .device = -1,
			.ptr = rec.ptr, .size = usable, .begin_ns = memq_now_ns() };

		lttng_ust_do_tracepoint(memq, live, &live, ip);
		memq_window_done(how);
	}
	memq_window_leave(counted);
	guard--;
	cancel_restore(cancel);
	errno = saved_errno;
}

/*
 * Before the real free, so that an allocation another thread gets at the
 * same address right after cannot be recorded (or enter the table) before
 * this free. Returns whether the block's table entry was taken.
 */
static int big_free(int api, void *p, size_t usable, void *ip)
{
	struct memq_alloc_info info;
	struct memq_host_rec rec;
	int enabled = lttng_ust_tracepoint_enabled(memq, host_free), saved_errno, taken, cancel, counted, window, how;

	if (!enabled && !__atomic_load_n(&memq_table_live, __ATOMIC_RELAXED))
		return 0;
	saved_errno = errno;
	cancel = cancel_off();
	guard++;
	/* The window read before the take: read after it, a free the opening snapshot did not
	 * list (taken before its shard was) could be written in the window, matching nothing. */
	window = memq_window_enter_from(memq_nesting, &counted);
	taken = memq_release_take(U64(p), 0, &info);
	/* outside windows only a free the opening snapshot listed (info.raced) */
	if (enabled && (how = memq_window_commit(window ? window : info.raced))) {
		rec = (struct memq_host_rec) { .api = (uint16_t) api, .ptr = U64(p), .size = usable };
		lttng_ust_do_tracepoint(memq, host_free, &rec, ip);
		memq_window_done(how);
	}
	memq_window_leave(counted);
	guard--;
	cancel_restore(cancel);
	errno = saved_errno;
	return taken;
}

/* A block the application got from the real allocator. */
static void account_alloc(int api, void *p, uint64_t requested, void *ip)
{
	size_t usable = real.usable(p);

	if (usable < min_size)
		count_small(N_ALLOC_COUNT, usable);
	else
		big_alloc(api, p, usable, requested, ip);
}

/* A block about to go back to the real allocator (`usable` read before). */
static void account_free(int api, void *p, size_t usable, void *ip)
{
	if (usable < min_size)
		count_small(N_FREE_COUNT, usable);
	else
		big_free(api, p, usable, ip);
}

/* ---------------------------------------------------------------------- */
/* The wrappers                                                            */
/* ---------------------------------------------------------------------- */

MEMQ_EXPORT void *malloc(size_t n)
{
	const struct heap_real *r = get_real();
	void *p;

	if (UNLIKELY(!r))
		return boot_alloc(16, n);
	p = r->malloc(n);
	if (p && accounting())
		account_alloc(MEMQ_API_malloc, p, n, CALLER);
	return p;
}

MEMQ_EXPORT void free(void *p)
{
	const struct heap_real *r;

	if (!p || UNLIKELY(is_boot(p)))
		return;                       /* free(NULL); bootstrap blocks are never reused */
	r = get_real();
	if (UNLIKELY(!r))
		return;                       /* (a pointer we never handed out: nothing to free it with) */
	if (accounting())
		account_free(MEMQ_API_free, p, r->usable(p), CALLER);
	r->free(p);
}

MEMQ_EXPORT void *calloc(size_t nmemb, size_t size)
{
	const struct heap_real *r = get_real();
	size_t total;
	void *p;

	if (UNLIKELY(!r)) {
		if (__builtin_mul_overflow(nmemb, size, &total)) {
			errno = ENOMEM;
			return NULL;
		}
		return boot_alloc(16, total);         /* the buffer is never reused: zeroed */
	}
	p = r->calloc(nmemb, size);                   /* it checks nmemb * size for overflow */
	if (p && accounting())
		account_alloc(MEMQ_API_calloc, p, (uint64_t) nmemb * size, CALLER);
	return p;
}

/*
 * realloc, in the events' terms: the old block is freed and the new one
 * allocated, even in place, so each side is decided by its own usable size
 * (a block can cross the threshold either way). The free goes out before the
 * call (see big_free); if the call fails the block is still the caller's and
 * is recorded again. realloc(p, 0) frees p (glibc returns NULL; an allocator
 * that returns a block gets that block recorded).
 */
static void *do_realloc(void *p, size_t n, void *ip)
{
	const struct heap_real *r = get_real();
	size_t old_usable = 0;
	int acct, big_old = 0, taken = 0;
	void *q;

	if (UNLIKELY(!r || (p && is_boot(p)))) {
		/* a bootstrap block moves to real memory (or, while resolving, within the buffer) */
		size_t old = p ? boot_size(p) : 0;

		if (p && !is_boot(p)) {
			errno = ENOMEM;       /* resolving: no real allocator to reach yet */
			return NULL;
		}
		if (p && !n)
			return NULL;          /* realloc(p, 0) frees; bootstrap blocks are never reused */
		q = r ? r->malloc(n) : boot_alloc(16, n);
		if (q && p)
			memcpy(q, p, old < n ? old : n);
		if (q && r && accounting())
			account_alloc(MEMQ_API_realloc, q, n, ip);
		return q;
	}
	acct = accounting();
	if (p && acct) {
		old_usable = r->usable(p);
		big_old = old_usable >= min_size;
		if (big_old)
			taken = big_free(MEMQ_API_realloc, p, old_usable, ip);
	}
	q = r->realloc(p, n);
	if (!acct)
		return q;
	if (!q && p && n) {
		/* failed: p is still live, as it was: recorded again, its table entry back */
		if (big_old && lttng_ust_tracepoint_enabled(memq, host_alloc))
			big_alloc(MEMQ_API_realloc, p, old_usable, old_usable, ip);
		else if (taken) {
			int saved_errno = errno;   /* the caller reads realloc's ENOMEM */

			guard++;
			memq_table_put(U64(p), 0, old_usable, MEMQ_MEM_HOST);
			guard--;
			errno = saved_errno;
		}
		return q;
	}
	if (p && !big_old)
		count_small(N_FREE_COUNT, old_usable);
	if (q)
		account_alloc(MEMQ_API_realloc, q, n, ip);
	return q;
}

MEMQ_EXPORT void *realloc(void *p, size_t n)
{
	return do_realloc(p, n, CALLER);
}

MEMQ_EXPORT void *reallocarray(void *p, size_t nmemb, size_t size)
{
	size_t total;

	if (__builtin_mul_overflow(nmemb, size, &total)) {
		errno = ENOMEM;
		return NULL;
	}
	return do_realloc(p, total, CALLER);
}

MEMQ_EXPORT void *memalign(size_t align, size_t n)
{
	const struct heap_real *r = get_real();
	void *p;

	if (UNLIKELY(!r))
		return boot_alloc(align, n);
	p = r->memalign(align, n);
	if (p && accounting())
		account_alloc(MEMQ_API_memalign, p, n, CALLER);
	return p;
}

MEMQ_EXPORT void *aligned_alloc(size_t align, size_t n)
{
	const struct heap_real *r = get_real();
	void *p;

	if (UNLIKELY(!r))
		return boot_alloc(align, n);
	p = r->aligned_alloc ? r->aligned_alloc(align, n) : r->memalign(align, n);
	if (p && accounting())
		account_alloc(MEMQ_API_aligned_alloc, p, n, CALLER);
	return p;
}

/* posix_memalign reports through its result: errno is left as the caller had it. */
MEMQ_EXPORT int posix_memalign(void **out, size_t align, size_t n)
{
	const struct heap_real *r = get_real();
	int saved_errno = errno, rc;

	if (UNLIKELY(!r)) {
		if (!align || (align & (align - 1)) || align % sizeof(void *))
			return EINVAL;
		*out = boot_alloc(align, n);
		return 0;
	}
	if (r->posix_memalign) {
		rc = r->posix_memalign(out, align, n);
	} else {
		void *p = r->memalign(align, n);

		rc = p ? 0 : ENOMEM;
		if (p)
			*out = p;
	}
	if (rc == 0 && accounting())
		account_alloc(MEMQ_API_posix_memalign, *out, n, CALLER);
	errno = saved_errno;
	return rc;
}

MEMQ_EXPORT void *valloc(size_t n)
{
	const struct heap_real *r = get_real();
	void *p;

	if (UNLIKELY(!r))
		return boot_alloc((size_t) getpagesize(), n);
	p = r->valloc ? r->valloc(n) : r->memalign((size_t) getpagesize(), n);
	if (p && accounting())
		account_alloc(MEMQ_API_valloc, p, n, CALLER);
	return p;
}

MEMQ_EXPORT void *pvalloc(size_t n)
{
	const struct heap_real *r = get_real();
	size_t page = (size_t) getpagesize();
	void *p;

	if (UNLIKELY(!r))
		return boot_alloc(page, (n + page - 1) & ~(page - 1));
	p = r->pvalloc ? r->pvalloc(n) : r->memalign(page, (n + page - 1) & ~(page - 1));
	if (p && accounting())
		account_alloc(MEMQ_API_pvalloc, p, n, CALLER);
	return p;
}

MEMQ_EXPORT size_t malloc_usable_size(void *p)
{
	const struct heap_real *r;

	if (!p)
		return 0;
	if (UNLIKELY(is_boot(p)))
		return boot_size(p);
	r = get_real();
	return r && r->usable ? r->usable(p) : 0;
}

/* ---------------------------------------------------------------------- */
/* Process life: fork and exit                                             */
/* ---------------------------------------------------------------------- */

static void fork_prepare(void)
{
	pthread_mutex_lock(&registry_lock);
}

static void fork_parent(void)
{
	pthread_mutex_unlock(&registry_lock);
}

/*
 * The child is a new process with only this thread, and the parent's heap:
 * its live small blocks (every thread's counts, exited ones included) become
 * this thread's first allocations, not yet written; the parent writes its
 * own pending counts itself.
 */
static void fork_child(void)
{
	uint64_t total[N_COUNTS];

	memcpy(total, retired, sizeof(total));
	for (struct heap_thread *t = registry.next; t != &registry; t = t->next)
		for (int i = 0; i < N_COUNTS; i++)
			total[i] += t->n[i];
	if (self.link == SELF_ONLY || self.link == EXITED)
		for (int i = 0; i < N_COUNTS; i++)
			total[i] += self.n[i];
	memset(retired, 0, sizeof(retired));
	memset(self.n, 0, sizeof(self.n));
	memset(self.sent, 0, sizeof(self.sent));
	self.n[N_ALLOC_COUNT] = total[N_ALLOC_COUNT] > total[N_FREE_COUNT]
		? total[N_ALLOC_COUNT] - total[N_FREE_COUNT] : 0;
	self.n[N_ALLOC_BYTES] = total[N_ALLOC_BYTES] > total[N_FREE_BYTES]
		? total[N_ALLOC_BYTES] - total[N_FREE_BYTES] : 0;
	self.next_flush_ns = 0;
	self.flushing = 0;
	registry.prev = registry.next = &registry;
	if (self.link != UNLINKED) {
		self.next = &registry;
		self.prev = &registry;
		registry.next = registry.prev = &self;
		self.link = LINKED;
	}
	pthread_mutex_init(&registry_lock, NULL);
}

/* After memq_core.c's constructor (linked before this file). */
static void __attribute__((constructor)) heap_init(void)
{
	if (__atomic_load_n(&heap_mode, __ATOMIC_ACQUIRE) == HEAP_UNKNOWN)
		read_settings();
	pthread_atfork(fork_prepare, fork_parent, fork_child);
}

/*
 * Runs before memq_core.c's destructor (memq:clock "end") and before
 * liblttng-ust's: every thread's counts go out while LTTng still records,
 * then the wrappers only forward.
 */
static void __attribute__((destructor)) heap_fini(void)
{
	if (__atomic_load_n(&heap_mode, __ATOMIC_ACQUIRE) != HEAP_ON)
		return;
	memq_heap_flush_all();
	__atomic_store_n(&heap_mode, HEAP_DONE, __ATOMIC_RELEASE);
}
