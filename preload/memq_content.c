/*
 * Content fingerprints of copies: see memq_content.h (the hooks),
 * memq_hash.h (the hash) and docs/EVENTS.md "Content fingerprints".
 *
 * Which side the CPU may read at the call:
 *  - a range inside a traced allocation: pinned or registered memory unless
 *    write-combined / I/O memory (flag 0x4 in every runtime: uncached, very
 *    slow to read), device or managed memory only on a device that reports
 *    unified memory (memq:device): never a discrete GPU's memory, and never
 *    a managed page the CPU would migrate;
 *  - a range in no traced allocation: when the copy's kind says that side is
 *    the host (pageable memory); a Default-kind copy's untraced side is not
 *    read;
 *  - never a range an asynchronous copy still in flight writes, and nothing
 *    of a copy made during stream capture (nothing executes then).
 * The destination after the copy: at return for a synchronous copy (the
 * source's fingerprint when that was taken: the copy made them equal); for
 * an asynchronous one (and device-to-device copies, asynchronous to the host
 * even when "synchronous") at the first completion point that covers it:
 * stream, device or event synchronisation, or a successful stream or event
 * query. Those later reads go through process_vm_readv: the memory may have
 * been freed meanwhile, and a failed read only loses the fingerprint; a traced
 * free of the destination, or a later traced write into it, drops it.
 *
 * Bookkeeping is bounded: PENDING_MAX copies awaiting completion (a copy
 * beyond that gets no after-fingerprint, counted in the exit report),
 * EVENTS_MAX recorded events (direct-mapped: an event pushed out covers
 * nothing), a sorted array of the runtime's live allocations. Each has one
 * lock; none is held while hashing or emitting; all are taken across fork()
 * (pthread_atfork), and the child starts afresh (no work in flight there).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "memq_content.h"
#include "memq_hash.h"
#include "memq_wrap.h"

int memq_content_mode = MEMQ_CONTENT_SAMPLED;
unsigned long memq_content_dropped;      /* copies that found the pending table full */

static uint64_t copy_seq;                /* per-process copy counter (memq:copy seq) */
static uint64_t issued;                  /* asynchronous copies filed so far */

/* Private bits of memq_copy_rec.content between the hooks, cleared before the event. */
enum { X_DST_READABLE = 0x10, X_LATER = 0x20 };

/* The copy's kind says which side is host memory (HtoH, HtoD / HtoH, DtoH). */
#define KIND_SRC_HOST(k) ((k) == MEMQ_HTOH || (k) == MEMQ_HTOD)
#define KIND_DST_HOST(k) ((k) == MEMQ_HTOH || (k) == MEMQ_DTOH)
#define KIND_DTOD(k) ((k) == MEMQ_DTOD || (k) == MEMQ_DTOD_NOCU)
/* hipHostMallocWriteCombined / cudaHostAllocWriteCombined / CU_MEMHOSTALLOC_WRITECOMBINED, and the
 * registration flag hipHostRegisterIoMemory / cudaHostRegisterIoMemory / CU_MEMHOSTREGISTER_IOMEMORY */
#define FLAG_UNREADABLE_HOST 0x4u

/* HIP (runtime and VMM) and CUDA (runtime and driver): the two families of streams and devices. */
enum { FAMILY_HIP = 0, FAMILY_CUDA = 1 };

static int family_of_api(int api)
{
	return memq_api_is_hip(api) ? FAMILY_HIP : FAMILY_CUDA;
}

static int family_of_runtime(int runtime)
{
	return runtime == MEMQ_RT_HIP ? FAMILY_HIP : FAMILY_CUDA;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t) ts.tv_sec * 1000000000ull + (uint64_t) ts.tv_nsec;
}

/*
 * Signal handlers: a GPU free made by a signal handler that interrupted this
 * thread while it held one of the locks below would wait for its own thread
 * (memq_release_take calls memq_content_release on every release, traced or
 * not; everything else here runs only in traced calls, which a call nested in
 * one never is). A thread counts the locks it holds (initial-exec TLS, no
 * allocation); a release on a thread that holds one leaves the lists alone
 * (memq_content_release).
 */
static __thread int inside __attribute__((tls_model("initial-exec")));

static void rd_lock(pthread_rwlock_t *l) { inside++; pthread_rwlock_rdlock(l); }
static void wr_lock(pthread_rwlock_t *l) { inside++; pthread_rwlock_wrlock(l); }
static void rw_unlock(pthread_rwlock_t *l) { pthread_rwlock_unlock(l); inside--; }
static void mu_lock(pthread_mutex_t *l) { inside++; pthread_mutex_lock(l); }
static void mu_unlock(pthread_mutex_t *l) { pthread_mutex_unlock(l); inside--; }

/* ---------------------------------------------------------------------- */
/* Streams: which handle names which queue                                 */
/* ---------------------------------------------------------------------- */

static __thread uint64_t my_tid __attribute__((tls_model("initial-exec")));

/* A stream id as recorded (memq_wrap.h, MEMQ_STREAM: 0 the legacy default stream, 0x2
 * the calling thread's per-thread default stream) to the queue it names: each
 * thread's per-thread stream is its own queue. */
#define KEY_PER_THREAD (1ull << 63)

static uint64_t stream_key(uint64_t stream)
{
	if (stream == MEMQ_STREAM_PER_THREAD) {
		if (!my_tid)
			my_tid = (uint64_t) syscall(SYS_gettid);
		return KEY_PER_THREAD | my_tid;
	}
	return stream;
}

/* Stream capture (CUDA graphs): nothing executes, so no fingerprint means anything. */
MEMQ_REAL_FN(MEMQ_RT_HIP, int, hipStreamIsCapturing, (void *, int *));
MEMQ_REAL_FN(MEMQ_RT_CUDA, int, cudaStreamIsCapturing, (void *, int *));
MEMQ_REAL_FN(MEMQ_RT_CUDRV, int, cuStreamIsCapturing, (void *, int *));

/* Whether the recorded `stream` is being captured, asked of the runtime object (`route`)
 * that answers the copy: another runtime copy in the process has its own streams. */
static int capturing(int runtime, int route, uint64_t stream)
{
	int (*query)(void *, int *) = runtime == MEMQ_RT_HIP ? MEMQ_REAL_AT(hipStreamIsCapturing, route)
		: runtime == MEMQ_RT_CUDA ? MEMQ_REAL_AT(cudaStreamIsCapturing, route)
		: MEMQ_REAL_AT(cuStreamIsCapturing, route);
	int status = 0;

	/* The legacy stream is never captured, and asking about it during a global-mode
	 * capture would invalidate that capture. */
	if (!query || stream == 0)
		return 0;
	if (query((void *) (uintptr_t) stream, &status) != 0)
		return 1;                 /* cannot tell: do not read */
	return status != 0;           /* active or invalidated capture */
}

/* ---------------------------------------------------------------------- */
/* Devices with unified memory (from memq:device)                          */
/* ---------------------------------------------------------------------- */

#define MAX_DEVICES 256
static uint8_t unified[2][MAX_DEVICES];

void memq_content_device(int runtime, int device, int is_unified)
{
	if (device >= 0 && device < MAX_DEVICES)
		__atomic_store_n(&unified[family_of_runtime(runtime)][device], (uint8_t) !!is_unified, __ATOMIC_RELAXED);
}

static int device_unified(int family, int device)
{
	return device >= 0 && device < MAX_DEVICES && __atomic_load_n(&unified[family][device], __ATOMIC_RELAXED);
}

/* ---------------------------------------------------------------------- */
/* The runtime's live allocations, by address                              */
/* ---------------------------------------------------------------------- */

struct range {
	uint64_t lo, hi;
	int32_t device;
	uint8_t kind, registered, family, unreadable_host;
};

static struct range *ranges;      /* sorted by lo; memory from mmap (never the heap) */
static size_t nranges, cranges;  /* nranges: written under the lock, also read without it */
static pthread_rwlock_t ranges_lock = PTHREAD_RWLOCK_INITIALIZER;

/* First index whose lo is > addr. */
static size_t ranges_upper(uint64_t addr)
{
	size_t lo = 0, hi = nranges;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (ranges[mid].lo <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static int ranges_reserve(void)
{
	size_t cap = cranges ? cranges * 2 : 1024;
	struct range *grown;

	if (nranges < cranges)
		return 0;
	grown = mmap(NULL, cap * sizeof(*grown), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (grown == MAP_FAILED)
		return -1;
	if (ranges) {
		memcpy(grown, ranges, nranges * sizeof(*grown));
		munmap(ranges, cranges * sizeof(*grown));
	}
	ranges = grown;
	cranges = cap;
	return 0;
}

void memq_content_alloc(const struct memq_alloc_rec *r, int registered)
{
	struct range e = {
		.lo = r->ptr, .hi = r->ptr + r->size, .device = r->device, .kind = r->mem_kind,
		.registered = (uint8_t) !!registered, .family = (uint8_t) family_of_api(r->api),
		.unreadable_host = (r->mem_kind == MEMQ_MEM_PINNED || registered) && (r->flags & FLAG_UNREADABLE_HOST),
	};
	size_t at;

	if (memq_content_mode == MEMQ_CONTENT_OFF || !r->size)
		return;
	wr_lock(&ranges_lock);
	at = ranges_upper(e.lo);
	if (at && ranges[at - 1].lo == e.lo && ranges[at - 1].registered == e.registered) {
		ranges[at - 1] = e;            /* a free we never saw */
	} else if (ranges_reserve() == 0) {
		memmove(&ranges[at + 1], &ranges[at], (nranges - at) * sizeof(*ranges));
		ranges[at] = e;
		__atomic_store_n(&nranges, nranges + 1, __ATOMIC_RELAXED);   /* read without the lock: classify */
	}
	rw_unlock(&ranges_lock);
}

static void pending_forget(uint64_t lo, uint64_t hi);

/* A later write into a pending copy's destination: its after-fingerprint would show that write. */
void memq_content_written(uint64_t dst, uint64_t bytes)
{
	if (bytes)
		pending_forget(dst, dst + bytes);
}

void memq_content_release(uint64_t ptr, int registered)
{
	uint64_t hi = 0;

	/* A signal handler's free inside our own lock: the allocation's entry stays (a later
	 * allocation at its address replaces it), and a pending copy into it may still be
	 * hashed, through process_vm_readv, which fails harmlessly on unmapped memory. */
	if (inside)
		return;
	wr_lock(&ranges_lock);
	for (size_t at = ranges_upper(ptr); at > 0 && ranges[at - 1].lo == ptr; at--) {
		if (ranges[at - 1].registered == !!registered) {
			hi = ranges[at - 1].hi;
			memmove(&ranges[at - 1], &ranges[at], (nranges - at) * sizeof(*ranges));
			__atomic_store_n(&nranges, nranges - 1, __ATOMIC_RELAXED);
			break;
		}
	}
	rw_unlock(&ranges_lock);
	if (hi)
		pending_forget(ptr, hi);   /* its copies' destinations are no longer theirs */
}

/*
 * Whether the CPU may read a span now: by the traced allocation holding it
 * (1 / 0), or, in none, `host_by_kind` (the copy's kind says this side is
 * host memory). A span that straddles an allocation's edge is not read.
 * *device_side: whether it is device (or managed) memory. Under ranges_lock.
 */
static int readable_locked(const struct memq_span *s, int host_by_kind, int *device_side)
{
	int verdict = host_by_kind && s->addr;
	uint64_t lo, hi;

	*device_side = !host_by_kind;
	if (!s->addr)
		return 0;
	memq_span_extent(s, &lo, &hi);
	/* overlapping ranges are rare (a registration over heap blocks): look a few back */
	for (size_t at = ranges_upper(hi - 1), k = 0; at > 0 && k < 8; at--, k++) {
		const struct range *e = &ranges[at - 1];

		if (e->hi <= lo)
			continue;
		if (e->lo > lo || e->hi < hi) {
			verdict = 0;
			break;
		}
		*device_side = e->kind == MEMQ_MEM_DEVICE || e->kind == MEMQ_MEM_MANAGED;
		verdict = *device_side ? device_unified(e->family, e->device) : !e->unreadable_host;
		break;
	}
	return verdict;
}

/* Both sides of a copy (readable_locked), one lock; none when no allocation is traced. */
static void classify(const struct memq_copy_rec *r, const struct memq_span *src, const struct memq_span *dst,
	int ok[2], int device_side[2])
{
	int traced = __atomic_load_n(&nranges, __ATOMIC_RELAXED) != 0;

	if (traced)
		rd_lock(&ranges_lock);
	ok[0] = readable_locked(src, KIND_SRC_HOST(r->kind), &device_side[0]);
	ok[1] = readable_locked(dst, KIND_DST_HOST(r->kind), &device_side[1]);
	if (traced)
		rw_unlock(&ranges_lock);
}

/* ---------------------------------------------------------------------- */
/* Copies awaiting a completion point                                      */
/* ---------------------------------------------------------------------- */

#define PENDING_MAX 1024

struct pending {
	uint64_t ticket, seq, key, stream, lo, hi;
	struct memq_span dst;
	int32_t device;
	uint8_t family, used;
};

static struct pending pending[PENDING_MAX];
static int npending;                     /* atomic: used entries (0 = fast path) */
static pthread_mutex_t pending_lock = PTHREAD_MUTEX_INITIALIZER;

uint64_t memq_content_issued(void)
{
	return __atomic_load_n(&issued, __ATOMIC_ACQUIRE);
}

static int pending_add(const struct memq_copy_rec *r, const struct memq_span *dst)
{
	int done = -1;

	mu_lock(&pending_lock);
	for (int i = 0; i < PENDING_MAX; i++) {
		struct pending *p = &pending[i];

		if (p->used)
			continue;
		*p = (struct pending) {
			.ticket = __atomic_add_fetch(&issued, 1, __ATOMIC_ACQ_REL), .seq = r->seq,
			.key = stream_key(r->stream), .stream = r->stream, .dst = *dst,
			.device = r->device, .family = (uint8_t) family_of_api(r->api), .used = 1 };
		memq_span_extent(dst, &p->lo, &p->hi);
		__atomic_add_fetch(&npending, 1, __ATOMIC_RELEASE);
		done = 0;
		break;
	}
	mu_unlock(&pending_lock);
	if (done)
		__atomic_add_fetch(&memq_content_dropped, 1, __ATOMIC_RELAXED);
	return done;
}

/* Whether an asynchronous copy still writes into [lo, hi). */
static int in_flight(uint64_t lo, uint64_t hi)
{
	int hit = 0;

	if (!__atomic_load_n(&npending, __ATOMIC_ACQUIRE))
		return 0;
	mu_lock(&pending_lock);
	for (int i = 0; i < PENDING_MAX && !hit; i++)
		hit = pending[i].used && pending[i].lo < hi && lo < pending[i].hi;
	mu_unlock(&pending_lock);
	return hit;
}

static void pending_forget(uint64_t lo, uint64_t hi)
{
	if (!__atomic_load_n(&npending, __ATOMIC_ACQUIRE))
		return;
	mu_lock(&pending_lock);
	for (int i = 0; i < PENDING_MAX; i++) {
		if (pending[i].used && pending[i].lo < hi && lo < pending[i].hi) {
			pending[i].used = 0;
			__atomic_sub_fetch(&npending, 1, __ATOMIC_RELEASE);
		}
	}
	mu_unlock(&pending_lock);
}

/* What a completion point covers: one stream's copies up to a ticket, or a device's. */
struct scope {
	int family, device_wide;
	int32_t device;
	uint64_t key, bound;
};

static int covers(const struct scope *s, const struct pending *p)
{
	if (!p->used || p->family != s->family || p->ticket > s->bound)
		return 0;
	return s->device_wide ? p->device == s->device : p->key == s->key;
}

#define COMPLETE_BATCH 32

/* Hashes (safely) and reports every pending copy the scope covers; `api` is the completion call. */
static void complete(struct memq_call *c, int api, const struct scope *s)
{
	struct pending batch[COMPLETE_BATCH];
	int n;

	do {
		n = 0;
		if (!__atomic_load_n(&npending, __ATOMIC_ACQUIRE))
			return;
		mu_lock(&pending_lock);
		for (int i = 0; i < PENDING_MAX && n < COMPLETE_BATCH; i++) {
			if (covers(s, &pending[i])) {
				batch[n++] = pending[i];
				pending[i].used = 0;
				__atomic_sub_fetch(&npending, 1, __ATOMIC_RELEASE);
			}
		}
		mu_unlock(&pending_lock);
		for (int i = 0; i < n; i++) {
			struct memq_copy_done_rec rec = {
				.api = (uint16_t) api, .device = batch[i].device, .seq = batch[i].seq,
				.stream = batch[i].stream };

			if (memq_hash_span(&batch[i].dst, memq_content_mode, 1, &rec.dst_hash_after) == 0)
				lttng_ust_do_tracepoint(memq, copy_done, &rec, c->ip);
		}
	} while (n == COMPLETE_BATCH);
}

/* ---------------------------------------------------------------------- */
/* Events: the stream and issue count at their record                      */
/* ---------------------------------------------------------------------- */

#define EVENTS_MAX 4096

struct recorded_event {
	uint64_t handle, key, stream, bound;
	uint8_t family;
};

static struct recorded_event events[EVENTS_MAX];
static pthread_mutex_t events_lock = PTHREAD_MUTEX_INITIALIZER;

static struct recorded_event *event_slot(uint64_t handle)
{
	return &events[((handle >> 4) * 0x9E3779B97F4A7C15ull) >> 52];   /* top 12 bits: 4096 slots */
}

void memq_content_event_recorded(int runtime, uint64_t event, uint64_t stream, uint64_t bound)
{
	struct recorded_event *e = event_slot(event);

	mu_lock(&events_lock);
	*e = (struct recorded_event) { event, stream_key(stream), stream, bound,
		(uint8_t) family_of_runtime(runtime) };
	mu_unlock(&events_lock);
}

/* The event's record, 0 when it was not traced (or pushed out of the table). */
static int event_lookup(uint64_t handle, struct recorded_event *out)
{
	struct recorded_event *e = event_slot(handle);
	int found;

	mu_lock(&events_lock);
	found = handle && e->handle == handle;
	if (found)
		*out = *e;
	mu_unlock(&events_lock);
	return found;
}

uint64_t memq_content_event_stream(uint64_t event)
{
	struct recorded_event e;

	return event_lookup(event, &e) ? e.stream : 0;
}

/* ---------------------------------------------------------------------- */
/* Completion points                                                       */
/* ---------------------------------------------------------------------- */

static int is_device_sync(int api)
{
	return api == MEMQ_API_hipDeviceSynchronize || api == MEMQ_API_cudaDeviceSynchronize
		|| api == MEMQ_API_cuCtxSynchronize || api == MEMQ_API_cuCtxSynchronize_v2;
}

static int is_event_call(int api)
{
	return api == MEMQ_API_hipEventSynchronize || api == MEMQ_API_hipEventQuery
		|| api == MEMQ_API_cudaEventSynchronize || api == MEMQ_API_cudaEventQuery
		|| api == MEMQ_API_cuEventSynchronize || api == MEMQ_API_cuEventQuery;
}

void memq_content_synced(struct memq_call *c, const struct memq_sync_rec *r, uint64_t scope)
{
	struct scope s = { .family = family_of_api(r->api), .device = r->device, .bound = scope };

	if (r->result != 0 || !__atomic_load_n(&npending, __ATOMIC_ACQUIRE)
	    || !lttng_ust_tracepoint_enabled(memq, copy_done))
		return;
	if (is_event_call(r->api)) {
		struct recorded_event e;

		if (!event_lookup(scope, &e) || e.family != s.family)
			return;
		s.key = e.key;
		s.bound = e.bound;
	} else if (is_device_sync(r->api)) {
		s.device_wide = 1;
	} else {
		s.key = stream_key(r->stream);
	}
	complete(c, r->api, &s);
}

/* ---------------------------------------------------------------------- */
/* The copy hooks                                                          */
/* ---------------------------------------------------------------------- */

/* Both sides of a copy as spans (a linear copy: one row of `bytes`). */
static void copy_spans(const struct memq_copy_rec *r, struct memq_span *src, struct memq_span *dst)
{
	if (!r->height) {
		*src = (struct memq_span) { r->src, r->bytes, 1, r->bytes, 1, 0 };
		*dst = (struct memq_span) { r->dst, r->bytes, 1, r->bytes, 1, 0 };
		return;
	}
	*src = (struct memq_span) { r->src, r->width, r->height, r->spitch, r->depth ? r->depth : 1, r->sslice };
	*dst = (struct memq_span) { r->dst, r->width, r->height, r->dpitch, r->depth ? r->depth : 1, r->dslice };
}

/* 1 and the fingerprint when nothing in flight writes the (readable) span. */
static int fingerprint_now(const struct memq_span *s, uint64_t *out)
{
	uint64_t lo, hi;

	memq_span_extent(s, &lo, &hi);
	return !in_flight(lo, hi) && memq_hash_span(s, memq_content_mode, 0, out) == 0;
}

void memq_content_before(struct memq_call *c, struct memq_copy_rec *r, int runtime, int async)
{
	struct memq_span src, dst;
	int ok[2], device_side[2];
	uint8_t bits = 0;

	r->seq = __atomic_add_fetch(&copy_seq, 1, __ATOMIC_RELAXED);
	r->content_mode = (uint8_t) memq_content_mode;
	/* outside capture windows no copy event is written: nothing to fingerprint */
	if (memq_content_mode == MEMQ_CONTENT_OFF || !c->traced || !r->bytes || (r->height && !r->width))
		return;
	copy_spans(r, &src, &dst);
	classify(r, &src, &dst, ok, device_side);
	if ((ok[0] || ok[1]) && async && capturing(runtime, c->route, r->stream)) {
		errno = c->saved_errno;
		return;
	}
	if (ok[0] && fingerprint_now(&src, &r->src_hash))
		bits |= MEMQ_CONTENT_SRC;
	if (ok[1] && fingerprint_now(&dst, &r->dst_hash_before))
		bits |= MEMQ_CONTENT_DST_BEFORE;
	if (dst.addr) {           /* an earlier copy's after-fingerprint would show this one's write */
		uint64_t lo, hi;

		memq_span_extent(&dst, &lo, &hi);
		pending_forget(lo, hi);
	}
	if (ok[1])
		bits |= X_DST_READABLE;
	/* device to device: asynchronous to the host even from a "synchronous" call */
	if (async || KIND_DTOD(r->kind) || r->src_device >= 0 || (device_side[0] && device_side[1]))
		bits |= X_LATER;
	r->content = bits;
	if (bits & (MEMQ_CONTENT_SRC | MEMQ_CONTENT_DST_BEFORE))
		c->begin_ns = now_ns();   /* the call starts after the hashing */
	errno = c->saved_errno;       /* the real call sees the caller's errno, not the capture query's */
}

int memq_content_recorded(struct memq_copy_rec *r)
{
	uint8_t bits = r->content, out;
	struct memq_span src, dst;
	int later_on = lttng_ust_tracepoint_enabled(memq, copy_done);   /* where a later hash goes */

	r->content = 0;
	if (r->result != 0 || !bits) {   /* a failed call: no fingerprint means anything */
		r->src_hash = r->dst_hash_before = 0;
		return 0;
	}
	out = bits & (MEMQ_CONTENT_SRC | MEMQ_CONTENT_DST_BEFORE);
	if (bits & X_DST_READABLE) {
		copy_spans(r, &src, &dst);
		if (!(bits & X_LATER) && (bits & MEMQ_CONTENT_SRC)) {
			r->dst_hash_after = r->src_hash;    /* the copy made them equal */
			out |= MEMQ_CONTENT_DST_AFTER;
		} else if (later_on && !(bits & X_LATER)) {
			r->content = out | MEMQ_CONTENT_PENDING;
			return 1;                           /* hashed right after the event */
		} else if (later_on && pending_add(r, &dst) == 0) {
			out |= MEMQ_CONTENT_PENDING;
		}
	}
	r->content = out;
	return 0;
}

void memq_content_emitted(struct memq_call *c, const struct memq_copy_rec *r)
{
	struct memq_copy_done_rec rec = { .api = r->api, .device = r->device, .seq = r->seq, .stream = r->stream };
	struct memq_span src, dst;

	copy_spans(r, &src, &dst);
	if (memq_hash_span(&dst, memq_content_mode, 0, &rec.dst_hash_after) == 0)
		lttng_ust_do_tracepoint(memq, copy_done, &rec, c->ip);
}

/* ---------------------------------------------------------------------- */
/* Process life                                                            */
/* ---------------------------------------------------------------------- */

void memq_content_window_closed(void)
{
	mu_lock(&pending_lock);
	memset(pending, 0, sizeof(pending));
	__atomic_store_n(&npending, 0, __ATOMIC_RELEASE);
	mu_unlock(&pending_lock);
}

static void fork_prepare(void)
{
	pthread_rwlock_wrlock(&ranges_lock);
	pthread_mutex_lock(&pending_lock);
	pthread_mutex_lock(&events_lock);
}

static void fork_parent(void)
{
	pthread_mutex_unlock(&events_lock);
	pthread_mutex_unlock(&pending_lock);
	pthread_rwlock_unlock(&ranges_lock);
}

/*
 * The child has no GPU work in flight and its own thread id. Its locks start
 * afresh: glibc's rwlock remembers the writer's thread id, which the child's
 * thread does not share, so unlocking the inherited one would not work.
 */
static void fork_child(void)
{
	memset(pending, 0, sizeof(pending));
	npending = 0;
	memset(events, 0, sizeof(events));
	my_tid = 0;
	ranges_lock = (pthread_rwlock_t) PTHREAD_RWLOCK_INITIALIZER;
	pending_lock = (pthread_mutex_t) PTHREAD_MUTEX_INITIALIZER;
	events_lock = (pthread_mutex_t) PTHREAD_MUTEX_INITIALIZER;
}

static void __attribute__((constructor)) content_init(void)
{
	const char *mode = getenv("MEMQ_CONTENT");

	if (mode && !strcmp(mode, "off"))
		memq_content_mode = MEMQ_CONTENT_OFF;
	else if (mode && !strcmp(mode, "full"))
		memq_content_mode = MEMQ_CONTENT_FULL;
	else if (mode && *mode && strcmp(mode, "sampled"))
		fprintf(stderr, "memq: MEMQ_CONTENT=%s: expected off, sampled or full; using sampled\n", mode);
	pthread_atfork(fork_prepare, fork_parent, fork_child);
}
