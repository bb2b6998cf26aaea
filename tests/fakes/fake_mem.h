/*
 * Test-only "device memory" for the fake HIP and CUDA runtimes: every
 * allocation is an anonymous mmap in host RAM (not the libc heap, so the
 * libc wrapper does not see the runtime's memory as application heap), and a
 * small registry validates frees the way a real runtime does.
 */
#ifndef FAKE_MEM_H
#define FAKE_MEM_H

#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define FAKE_MAX_ALLOCS 65536
#define FAKE_HUGE (1ull << 44)   /* larger requests fail: out of memory */

struct fake_alloc { void *ptr; size_t len; int kind; };
static struct fake_alloc fake_allocs[FAKE_MAX_ALLOCS];
static pthread_mutex_t fake_lock = PTHREAD_MUTEX_INITIALIZER;

enum { FAKE_DEVICE = 1, FAKE_PINNED = 2, FAKE_MANAGED = 3 };

static void *fake_mem_alloc(size_t n, int kind)
{
	size_t len = n ? n : 1;
	void *p;

	if (n >= FAKE_HUGE)
		return NULL;
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	pthread_mutex_lock(&fake_lock);
	for (int i = 0; i < FAKE_MAX_ALLOCS; i++) {
		if (!fake_allocs[i].ptr) {
			fake_allocs[i] = (struct fake_alloc) { p, len, kind };
			pthread_mutex_unlock(&fake_lock);
			return p;
		}
	}
	pthread_mutex_unlock(&fake_lock);
	munmap(p, len);
	return NULL;
}

static void fake_drain(uintptr_t stream, unsigned long upto);
#define FAKE_ALL_STREAMS UINTPTR_MAX

/* 0 on success, -1 when `p` is not a live allocation of one of `kinds`. A free waits for all
 * work first, as cudaFree/hipFree do. */
static int fake_mem_free(void *p, unsigned kinds)
{
	fake_drain(FAKE_ALL_STREAMS, ULONG_MAX);
	pthread_mutex_lock(&fake_lock);
	for (int i = 0; i < FAKE_MAX_ALLOCS; i++) {
		if (fake_allocs[i].ptr == p && (kinds & (1u << fake_allocs[i].kind))) {
			munmap(p, fake_allocs[i].len);
			fake_allocs[i].ptr = NULL;
			pthread_mutex_unlock(&fake_lock);
			return 0;
		}
	}
	pthread_mutex_unlock(&fake_lock);
	return -1;
}

/*
 * The fake "device" really moves bytes. By default it finishes an
 * asynchronous call before the call returns. With FAKE_GPU_DEFER=1 the work
 * waits in a queue until a completion point covers it, as on a GPU: a stream
 * or device synchronisation, an event synchronisation, a stream or event
 * query (a query that finds work pending answers "not ready" and lets the
 * device finish that work, so the next one answers "done"), a synchronous
 * copy or set (it waits for all work, like the legacy default stream) or a
 * free. Work issued on a stream being captured is dropped: nothing executes
 * during capture, and the fakes never launch graphs.
 */
struct fake_op {
	uintptr_t stream;
	unsigned long ticket;
	char *dst;
	const char *src;              /* NULL: fill with `value`, `elem` bytes per element */
	size_t dpitch, spitch, width, height, depth, dslice, sslice, elem;
	unsigned value;
};

#define FAKE_OPS 4096
#define FAKE_CAPTURES 16
static struct fake_op fake_ops[FAKE_OPS];
static int fake_nops;
static unsigned long fake_tickets;
static uintptr_t fake_captured[FAKE_CAPTURES];
static pthread_mutex_t fake_ops_lock = PTHREAD_MUTEX_INITIALIZER;

static int fake_defer(void)
{
	const char *s = getenv("FAKE_GPU_DEFER");

	return s && strcmp(s, "1") == 0;
}

static void fake_run(const struct fake_op *op)
{
	for (size_t z = 0; z < op->depth; z++) {
		for (size_t y = 0; y < op->height; y++) {
			char *d = op->dst + z * op->dslice + y * op->dpitch;

			if (op->src)
				memmove(d, op->src + z * op->sslice + y * op->spitch, op->width);
			else
				for (size_t i = 0; i + op->elem <= op->width; i += op->elem)
					memcpy(d + i, &op->value, op->elem);
		}
	}
}

static int fake_capturing_locked(uintptr_t stream)
{
	for (int i = 0; i < FAKE_CAPTURES; i++)
		if (fake_captured[i] && fake_captured[i] == stream)
			return 1;
	return 0;
}

/* Runs (in issue order) and removes the queued work of `stream` (or all) issued up to ticket `upto`;
 * returns how many it ran. */
static int fake_drain_locked(uintptr_t stream, unsigned long upto)
{
	int kept = 0, ran = 0;

	for (int i = 0; i < fake_nops; i++) {
		struct fake_op *op = &fake_ops[i];

		if ((stream == FAKE_ALL_STREAMS || op->stream == stream) && op->ticket <= upto) {
			fake_run(op);
			ran++;
		} else {
			fake_ops[kept++] = *op;
		}
	}
	fake_nops = kept;
	return ran;
}

static void fake_drain(uintptr_t stream, unsigned long upto)
{
	pthread_mutex_lock(&fake_ops_lock);
	fake_drain_locked(stream, upto);
	pthread_mutex_unlock(&fake_ops_lock);
}

/* Issues work: asynchronous on `stream`, or synchronous (async = 0: after all earlier work). */
static void fake_issue(int async, struct fake_op op)
{
	if (!op.depth)
		op.depth = 1;
	pthread_mutex_lock(&fake_ops_lock);
	if (async && fake_capturing_locked(op.stream)) {
		/* recorded into a graph that never runs */
	} else if (!async || !fake_defer()) {
		fake_drain_locked(FAKE_ALL_STREAMS, ULONG_MAX);
		fake_run(&op);
	} else {
		if (fake_nops == FAKE_OPS)
			fake_drain_locked(FAKE_ALL_STREAMS, ULONG_MAX);
		op.ticket = ++fake_tickets;
		fake_ops[fake_nops++] = op;
	}
	pthread_mutex_unlock(&fake_ops_lock);
}

static void fake_copy_rows(int async, void *stream, void *d, size_t dp, const void *s, size_t sp, size_t w, size_t h)
{
	fake_issue(async, (struct fake_op) { .stream = (uintptr_t) stream, .dst = d, .src = s, .dpitch = dp,
		.spitch = sp, .width = w, .height = h });
}

/* FAKE_GPU_SLOW_COPY=N: a copy of exactly N bytes takes 1.5 s (a call still running when a
 * capture window closes, tests/test_windows.py). */
static void fake_slow_copy(size_t n)
{
	const char *s = getenv("FAKE_GPU_SLOW_COPY");
	struct timespec pause = { .tv_sec = 1, .tv_nsec = 500000000 };

	if (s && strtoull(s, NULL, 10) == n)
		while (nanosleep(&pause, &pause) != 0)
			;
}

static void fake_copy(int async, void *stream, void *d, const void *s, size_t n)
{
	fake_slow_copy(n);
	fake_copy_rows(async, stream, d, n, s, n, n, 1);
}

static void fake_fill(int async, void *stream, void *d, unsigned value, size_t count, size_t elem)
{
	fake_issue(async, (struct fake_op) { .stream = (uintptr_t) stream, .dst = d, .width = count * elem,
		.height = 1, .elem = elem, .value = value });
}

/* A stream query: 1 (not ready) when work was pending on it (now done), else 0. */
static int fake_stream_busy(void *stream)
{
	int ran;

	pthread_mutex_lock(&fake_ops_lock);
	ran = fake_drain_locked((uintptr_t) stream, ULONG_MAX);
	pthread_mutex_unlock(&fake_ops_lock);
	return ran > 0;
}

/* Events: a pool of handles (never the heap); an event covers its stream's work up to its record. */
struct fake_event { uintptr_t stream; unsigned long ticket; int used; };
#define FAKE_EVENTS 256
static struct fake_event fake_events[FAKE_EVENTS];

static void *fake_event_create(void)
{
	pthread_mutex_lock(&fake_ops_lock);
	for (int i = 0; i < FAKE_EVENTS; i++) {
		if (!fake_events[i].used) {
			fake_events[i] = (struct fake_event) { .used = 1 };
			pthread_mutex_unlock(&fake_ops_lock);
			return &fake_events[i];
		}
	}
	pthread_mutex_unlock(&fake_ops_lock);
	return NULL;
}

static int fake_event_destroy(void *e)
{
	struct fake_event *ev = e;

	if (!ev || ev < fake_events || ev >= fake_events + FAKE_EVENTS || !ev->used)
		return -1;
	ev->used = 0;
	return 0;
}

static int fake_event_record(void *e, void *stream)
{
	struct fake_event *ev = e;

	if (!ev || ev < fake_events || ev >= fake_events + FAKE_EVENTS || !ev->used)
		return -1;
	pthread_mutex_lock(&fake_ops_lock);
	ev->stream = (uintptr_t) stream;
	ev->ticket = fake_tickets;
	pthread_mutex_unlock(&fake_ops_lock);
	return 0;
}

/* Waits for (sync) or asks about (query) what an event covers: -1 invalid, 1 not ready (now done), 0 done. */
static int fake_event_wait(void *e, int query)
{
	struct fake_event *ev = e;
	int ran;

	if (!ev || ev < fake_events || ev >= fake_events + FAKE_EVENTS || !ev->used)
		return -1;
	pthread_mutex_lock(&fake_ops_lock);
	ran = fake_drain_locked(ev->stream, ev->ticket);
	pthread_mutex_unlock(&fake_ops_lock);
	return query && ran > 0;
}

/* Stream capture: 0, or -1 when the stream is already (begin) / not (end) being captured. */
static int fake_capture(void *stream, int begin)
{
	int done = -1;

	pthread_mutex_lock(&fake_ops_lock);
	if (begin && !fake_capturing_locked((uintptr_t) stream)) {
		for (int i = 0; i < FAKE_CAPTURES && done; i++)
			if (!fake_captured[i])
				fake_captured[i] = (uintptr_t) stream, done = 0;
	} else if (!begin) {
		for (int i = 0; i < FAKE_CAPTURES; i++)
			if (fake_captured[i] == (uintptr_t) stream && stream)
				fake_captured[i] = 0, done = 0;
	}
	pthread_mutex_unlock(&fake_ops_lock);
	return done;
}

static int fake_is_capturing(void *stream)
{
	int yes;

	pthread_mutex_lock(&fake_ops_lock);
	yes = fake_capturing_locked((uintptr_t) stream);
	pthread_mutex_unlock(&fake_ops_lock);
	return yes;
}

/*
 * The event and capture calls of a runtime whose names start with `pfx`
 * (hip, cuda) and whose error codes are ok / bad (invalid value) /
 * not_ready; extra names (per-thread, with flags) forward to these.
 */
#define FAKE_EVENT_API(pfx, ok, bad, not_ready)                               \
	int pfx##EventCreate(void **e) { return e && (*e = fake_event_create()) ? ok : bad; } \
	int pfx##EventDestroy(void *e) { return fake_event_destroy(e) ? bad : ok; } \
	int pfx##EventRecord(void *e, void *s) { return fake_event_record(e, s) ? bad : ok; } \
	int pfx##EventSynchronize(void *e) { return fake_event_wait(e, 0) < 0 ? bad : ok; } \
	int pfx##EventQuery(void *e)                                          \
	{                                                                     \
		int busy = fake_event_wait(e, 1);                             \
		return busy < 0 ? bad : busy ? not_ready : ok;                \
	}                                                                     \
	int pfx##StreamQuery(void *s) { return fake_stream_busy(s) ? not_ready : ok; } \
	int pfx##StreamBeginCapture(void *s, int mode) { (void) mode; return fake_capture(s, 1) ? bad : ok; } \
	int pfx##StreamEndCapture(void *s, void **graph)                      \
	{                                                                     \
		if (graph)                                                    \
			*graph = NULL;                                        \
		return fake_capture(s, 0) ? bad : ok;                         \
	}                                                                     \
	/* status: 0 none, 1 active (cudaStreamCaptureStatus / hipStreamCaptureStatus) */ \
	int pfx##StreamIsCapturing(void *s, int *status) { *status = fake_is_capturing(s); return ok; }

static int fake_device_count(void)
{
	const char *s = getenv("FAKE_GPU_COUNT");
	const char *visible = getenv("CUDA_VISIBLE_DEVICES");

	if (!visible || !*visible)
		visible = getenv("HIP_VISIBLE_DEVICES");
	if (visible && *visible) {  /* as a real runtime: only the GPUs listed */
		int n = 1;

		for (const char *c = visible; *c; c++)
			n += *c == ',';
		return n;
	}
	return s ? atoi(s) : 2;
}

/*
 * A device's stable identity, as a real machine gives it: the physical GPU
 * behind ordinal d is the d-th entry of CUDA_VISIBLE_DEVICES /
 * HIP_VISIBLE_DEVICES when set (ordinals differ per process, the identity
 * does not); its UUID is distinct per host and physical GPU, its PCI bus id
 * per physical GPU only (nodes of one model share bus ids).
 */
static int fake_physical(int d)
{
	const char *names[] = { "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES" };

	for (int n = 0; n < 2; n++) {
		const char *s = getenv(names[n]);

		if (!s || !*s)
			continue;
		for (int i = 0; *s; i++) {
			char *end;
			long v = strtol(s, &end, 10);

			if (end == s)
				break;
			if (i == d)
				return (int) v;
			s = *end == ',' ? end + 1 : end;
			if (*end != ',')
				break;
		}
	}
	return d;
}

static void fake_uuid(unsigned char out[16], int d)
{
	char host[256] = "";
	uint64_t h = 1469598103934665603ull;

	gethostname(host, sizeof(host) - 1);
	for (const char *c = host; *c; c++)
		h = (h ^ (unsigned char) *c) * 1099511628211ull;
	h = (h ^ (uint64_t) (fake_physical(d) + 1)) * 1099511628211ull;
	for (int i = 0; i < 16; i++) {
		h = (h ^ (uint64_t) i) * 1099511628211ull;
		out[i] = (unsigned char) (h >> 56);
	}
}

static void fake_pci_bus_id(char *out, int len, int d)
{
	if (len > 0)
		snprintf(out, (size_t) len, "0000:%02x:00.0", 0x18 + 0x20 * fake_physical(d));
}

static int fake_unified(void)
{
	const char *s = getenv("FAKE_GPU_UNIFIED");

	return s && strcmp(s, "1") == 0;
}

static int fake_copy_kind_ok(int kind)
{
	return (kind >= 0 && kind <= 4) || kind == 1024;
}

/* Pitched rows are padded to 256 bytes, as on real GPUs. */
static size_t fake_pitch(size_t width)
{
	return (width + 255) & ~(size_t) 255;
}

static __thread int fake_current_device;

/* cudaMemcpy3DParms == hipMemcpy3DParms (pitched pointers only; arrays are not faked). */
struct fake_pos { size_t x, y, z; };
struct fake_pitched { void *ptr; size_t pitch, xsize, ysize; };
struct fake_copy3d_parms {
	void *src_array; struct fake_pos src_pos; struct fake_pitched src_ptr;
	void *dst_array; struct fake_pos dst_pos; struct fake_pitched dst_ptr;
	struct { size_t width, height, depth; } extent;
	int kind;
};

static inline char *fake_pitched_at(const struct fake_pitched *p, const struct fake_pos *pos, size_t y, size_t z)
{
	return (char *) p->ptr + ((pos->z + z) * p->ysize + pos->y + y) * p->pitch + pos->x;
}

/* 0, or -1 for what a runtime refuses (arrays, rows wider than the pitch, a bad kind). */
static inline int fake_copy3d(int async, void *stream, const struct fake_copy3d_parms *p)
{
	if (p->src_array || p->dst_array || !fake_copy_kind_ok(p->kind)
	    || p->extent.width > p->src_ptr.pitch || p->extent.width > p->dst_ptr.pitch)
		return -1;
	fake_issue(async, (struct fake_op) {
		.stream = (uintptr_t) stream, .dst = fake_pitched_at(&p->dst_ptr, &p->dst_pos, 0, 0),
		.src = fake_pitched_at(&p->src_ptr, &p->src_pos, 0, 0), .dpitch = p->dst_ptr.pitch,
		.spitch = p->src_ptr.pitch, .width = p->extent.width, .height = p->extent.height,
		.depth = p->extent.depth, .dslice = p->dst_ptr.pitch * p->dst_ptr.ysize,
		.sslice = p->src_ptr.pitch * p->src_ptr.ysize });
	return 0;
}

/*
 * Virtual memory management as on a GPU: a reservation is PROT_NONE address
 * space, a physical handle a memfd (so two mappings of one handle share their
 * bytes), a mapping a MAP_FIXED shared mapping of it. Handles are memfd
 * numbers offset so that they never look like small integers. 0 or -1.
 */
#define FAKE_VMM_HANDLE_BASE 0xa110c0000ull

static inline void *fake_vmm_reserve(size_t n, uintptr_t hint)
{
	void *m = mmap((void *) hint, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	return m == MAP_FAILED ? NULL : m;
}

static inline int fake_vmm_free(uintptr_t p, size_t n) { return munmap((void *) p, n) ? -1 : 0; }

static inline int fake_vmm_create(unsigned long long *handle, size_t n)
{
	int fd = (int) syscall(SYS_memfd_create, "fake-vmm", 0);

	if (fd < 0 || n % 4096 || ftruncate(fd, (off_t) n))
		return -1;
	*handle = FAKE_VMM_HANDLE_BASE + (unsigned) fd;
	return 0;
}

/* The mappings keep the memory: closing the memfd is what release means. */
static inline int fake_vmm_release(unsigned long long handle) { return close((int) (handle - FAKE_VMM_HANDLE_BASE)); }

static inline int fake_vmm_map(uintptr_t p, size_t n, size_t offset, unsigned long long handle)
{
	return mmap((void *) p, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
		(int) (handle - FAKE_VMM_HANDLE_BASE), (off_t) offset) == MAP_FAILED ? -1 : 0;
}

/* Back to reserved address space. */
static inline int fake_vmm_unmap(uintptr_t p, size_t n)
{
	return mmap((void *) p, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0)
		== MAP_FAILED ? -1 : 0;
}

#endif
