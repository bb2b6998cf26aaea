/*
 * memq preload library: what every wrapper needs.
 *
 *  - lazy, thread-safe resolution of the real runtime functions, per caller
 *    (memq_route.c);
 *  - the per-thread recursion guard and the call bracket (begin/end) that
 *    keeps errno intact and reads clocks only when an event is enabled;
 *  - the table of live allocations, so frees report what they free;
 *  - the once-per-process memq:clock / memq:device events.
 */
#ifndef MEMQ_CORE_H
#define MEMQ_CORE_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include "memq_api.h"
#include "memq_tp.h"
#include "memq_window.h"

/* hipErrorNotInitialized == cudaErrorInitializationError == 3: what a
 * wrapper returns when the real function cannot be found at all. */
#define MEMQ_ERR_NO_RUNTIME 3

/*
 * A wrapped (or queried) name: its real function per route (memq_route.c:
 * the loaded runtime object that answers a caller), and the functions
 * entry-point lookups handed out for it.
 */
#define MEMQ_ROUTE_BITS 4
#define MEMQ_ROUTES (1 << MEMQ_ROUTE_BITS)   /* route 0 = none; 1..15: runtime objects */
#define MEMQ_BOUND 2             /* functions lookups may hand out per name */
struct memq_sym {
	const char *name;
	int runtime;                 /* enum memq_runtime */
	void *const *stand_ins;      /* the wrappers standing for bound[k] (memq_wrap.h), or NULL */
	void *exported;              /* memq's exported definition, NULL for the queries memq makes */
	void *fn[MEMQ_ROUTES];       /* atomic; [route]: the function in that object, NULL until looked up */
	void *bound[MEMQ_BOUND];     /* atomic; set once: what a lookup found (dlsym, cuGetProcAddress) */
};

/* ---- routes (memq_route.c) ---- */
#define MEMQ_ROUTE_CACHE_BITS 14
extern uint64_t memq_route_cache[];

/* Cache entry of a call site: (code << 2 | runtime) << MEMQ_ROUTE_BITS | route. */
static inline uint64_t memq_route_key(const void *code, int runtime)
{
	return (uint64_t) (uintptr_t) code << 2 | (uint64_t) runtime;
}

/* The home slot: the address's low bits (+ the runtime, so that one call site
 * calling two runtimes, e.g. libffi's, has both), no multiply on the fast
 * path. Call sites are at least two bytes apart; ones 16 KiB apart share a
 * home slot and probe on in memq_route. */
static inline size_t memq_route_slot(const void *code, int runtime)
{
	return ((uintptr_t) code + (unsigned) runtime) & ((1u << MEMQ_ROUTE_CACHE_BITS) - 1);
}

/* The cached route of a call site (its home slot only), 0 when not cached. */
static inline int memq_route_cached(const void *code, int runtime)
{
	uint64_t key = memq_route_key(code, runtime);
	uint64_t other = __atomic_load_n(&memq_route_cache[memq_route_slot(code, runtime)], __ATOMIC_RELAXED)
		^ key << MEMQ_ROUTE_BITS;

	return other < MEMQ_ROUTES ? (int) other : 0;   /* the same key leaves only the route */
}

/* The route of code at `code` (a caller's return address, a function a
 * lookup found), NULL: the first loaded runtime; 0 when none is loaded. */
int memq_route(const void *code, int runtime);
/* `sym`'s function in `route`'s object (looked up once), NULL if none. */
void *memq_sym_at(struct memq_sym *sym, int route);
/* CUDA runtime major version (12, 13, ...) of a route: decides prefetch/advise ABI. */
int memq_route_cuda_major(int route);
/* After a dlclose: forget routes to objects no longer loaded. */
void memq_routes_unloaded(void);
/* memq_dl.c: every name's function cached for `route` dropped (the route is reused). */
void memq_syms_forget(int route);

/* The exported wrapper's fast path: the function for its caller, when cached. */
static inline void *memq_fast(struct memq_sym *sym, const void *ra, int runtime)
{
	return __atomic_load_n(&sym->fn[memq_route_cached(ra, runtime)], __ATOMIC_ACQUIRE);
}

/* memq_sym_at, its cached answer inline. */
static inline void *memq_sym_fn(struct memq_sym *sym, int route)
{
	void *fn = route > 0 && route < MEMQ_ROUTES ? __atomic_load_n(&sym->fn[route], __ATOMIC_ACQUIRE) : NULL;

	return fn ? fn : memq_sym_at(sym, route);
}

/* The route of `code` (cached: inline; else found), like memq_route. */
static inline int memq_route_of(const void *code, int runtime)
{
	int route = memq_route_cached(code, runtime);

	return route ? route : memq_route(code, runtime);
}

/* The function for the caller at `ra` and its route, resolved when not cached. */
static inline void *memq_caller_fn(struct memq_sym *sym, const void *ra, int runtime, int *route)
{
	void *fn;

	*route = memq_route_cached(ra, runtime);
	fn = __atomic_load_n(&sym->fn[*route], __ATOMIC_ACQUIRE);
	if (!fn) {
		*route = memq_route(ra, runtime);
		fn = memq_sym_at(sym, *route);
	}
	return fn;
}

/* memq_dl.c: the slot of a wrapped name; whether a function is memq's; and
 * what a lookup that found `fn` for `name` hands out: a stand-in bound to
 * `fn`, memq's exported wrapper (per-caller routing), or `fn`. */
void *memq_real_dlsym(void *handle, const char *name);
struct memq_sym *memq_sym_find(const char *name);
int memq_is_ours(const void *fn);
void *memq_wrapper_for(const char *name, void *fn);

/*
 * Defines `static struct memq_sym memq_sym_NAME` and a typedef NAME_fn for
 * the real function's type, given its return type and parameter list. A
 * pointer to the slot goes into section memq_syms, the table the lookups
 * (dlsym, cuGetProcAddress, ...) search by name. MEMQ_EXPORTED_FN: for a
 * name memq exports (a lookup hands out memq's definition, which routes by
 * its caller).
 */
#define MEMQ_SYM_SLOT(name, rt, stand_ins, exported)                        \
	static struct memq_sym memq_sym_##name = { #name, rt, stand_ins, exported, { NULL }, { NULL } }; \
	static struct memq_sym *const memq_symp_##name                      \
		__attribute__((section("memq_syms"), used)) = &memq_sym_##name
#define MEMQ_REAL_FN(rt, ret, name, params)                                 \
	typedef ret (*name##_fn) params;                                    \
	MEMQ_SYM_SLOT(name, rt, NULL, NULL)
#define MEMQ_EXPORTED_FN(rt, ret, name, params)                             \
	typedef ret (*name##_fn) params;                                    \
	__attribute__((visibility("default"))) ret name params;             \
	MEMQ_SYM_SLOT(name, rt, NULL, (void *) name)
#define MEMQ_REAL_AT(name, route) ((name##_fn) memq_sym_fn(&memq_sym_##name, (route)))
/* In an exported function: the real function for its caller. */
#define MEMQ_REAL_CALLER(name) \
	MEMQ_REAL_AT(name, memq_route_of(__builtin_return_address(0), memq_sym_##name.runtime))
/* The first loaded runtime's: for code with no caller to route by. */
#define MEMQ_REAL(name) MEMQ_REAL_AT(name, memq_route(NULL, memq_sym_##name.runtime))
/* In an exported function's fast path: the caller's function when cached, else NULL. */
#define MEMQ_LOADED(name) \
	((name##_fn) memq_fast(&memq_sym_##name, __builtin_return_address(0), memq_sym_##name.runtime))

/*
 * Recursion guard. Non-zero while this thread is inside a traced wrapper:
 * a runtime that calls its own exported functions (hipMemcpyHtoD calling
 * hipMemcpy, cudaMemcpy_ptds calling cudaMemcpy) reaches our wrappers again
 * through its PLT; those nested calls go straight to the real function and
 * are not traced, so one user call is one event. initial-exec TLS: the
 * library is LD_PRELOADed (static TLS block), and global-dynamic TLS access
 * may itself call malloc (the bug fixed in lttng-ust 2.13.8's libc wrapper).
 */
extern __thread int memq_nesting __attribute__((tls_model("initial-exec")));

/* One traced call in progress. */
struct memq_call {
	uint64_t begin_ns;
	void *ip;                /* the application's call site */
	int device;              /* current device at the call */
	int saved_errno;
	/* 1: the call's event is written; 0: outside every capture window, only
	 * the allocation table is kept (memq_window.h) */
	int traced;
	int window;              /* the window its events belong to (memq_window_enter), 0: none */
	/* an untraced release took an entry that the opening window's snapshot
	 * listed: its event is written anyway, for that window (memq_alloc_info.raced) */
	int raced;
	/* counted in memq_window_inflight (a closing window waits for it) */
	int inflight;
	int route;               /* the runtime object answering it */
};

void memq_begin_slow(struct memq_call *c, int runtime, int route, void *ip);

/* Whether `runtime`'s calls are traced, given its event is enabled: the
 * memq:gate_* events (memq_tp.h) select one runtime, else all are. */
static inline int memq_runtime_on(int runtime)
{
	int hip = lttng_ust_tracepoint_enabled(memq, gate_hip);
	int cuda = lttng_ust_tracepoint_enabled(memq, gate_cuda);

	return runtime == MEMQ_RT_HIP ? hip || !cuda : cuda || !hip;
}

/* `event` of `runtime` is to be recorded. */
#define MEMQ_TRACING(event, runtime) \
	(lttng_ust_tracepoint_enabled(memq, event) && memq_runtime_on(runtime))
/* ... by this call: not one a traced call makes inside the runtime (the
 * wrappers' fast-path test; nested calls skip the slow path altogether). */
#define MEMQ_RECORDS(event, runtime) (MEMQ_TRACING(event, runtime) && !memq_nesting)

/*
 * Start tracing a call when `enabled` (lttng_ust_tracepoint_enabled(...)),
 * the runtime is not gated off and the thread is not already inside a
 * wrapper; `ip` is the application's call site, `route` the runtime object
 * answering the call (< 0: find it from `ip`). Returns 0 when the call is
 * not to be traced. Outside capture windows it returns 1 with c->traced = 0:
 * the emitters then keep the allocation table and write nothing (no clock is
 * read).
 */
static inline int memq_begin_at(struct memq_call *c, int enabled, int runtime, int route, void *ip)
{
	if (!enabled || memq_nesting || !memq_runtime_on(runtime))
		return 0;
	memq_begin_slow(c, runtime, route, ip);
	return 1;
}

/* The same, the runtime object found from `ip` (its caller's). */
static inline int memq_begin(struct memq_call *c, int enabled, int runtime, void *ip)
{
	return memq_begin_at(c, enabled, runtime, -1, ip);
}

/* After the real call: keep the errno it left. */
static inline void memq_after(struct memq_call *c)
{
	c->saved_errno = errno;
}

/* After the event: leave the guard, give the caller the real call's errno. */
static inline void memq_end(struct memq_call *c)
{
	memq_window_leave(c->inflight);
	memq_nesting--;
	errno = c->saved_errno;
}

/* CLOCK_MONOTONIC now, in ns (LTTng's clock). */
uint64_t memq_now_ns(void);

/* memq:identity and memq:clock "start" when still due (a forked child that only uses the heap, e.g. a
 * data-loader worker, which exits through _exit: its destructor never runs). From the heap wrappers' event
 * paths, under their guard. */
void memq_process_events_due(void);

/* A 16-byte device UUID as text, "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
 * (nvidia-smi's form); "" when every byte is 0 (the runtime did not say). */
#define MEMQ_UUID_TEXT 48
void memq_uuid_text(char out[MEMQ_UUID_TEXT], const unsigned char bytes[16]);

/* The current device (-1 when the runtime cannot tell), via the real API of
 * the runtime object `route`. */
int memq_current_device(int runtime, int route);

/* ---- live allocation table (sharded hash, memory from mmap) ---- */
struct memq_alloc_info {
	uint64_t size;
	uint8_t kind;            /* enum memq_mem_kind */
	/* set by memq_table_take: the snapshot of the capture window opening
	 * (or open) now listed this entry, so a caller outside the window must
	 * write its free anyway, for that window: its generation (memq_window.h);
	 * 0: no race */
	int raced;
};

/* One tracked allocation, as a window's snapshot (memq:live) reports it. */
struct memq_table_entry {
	uint64_t ptr, size;
	uint16_t api;            /* allocating function (enum memq_api); 0 if not known */
	int16_t device;          /* -1 if not known */
	uint8_t kind;            /* enum memq_mem_kind */
	uint8_t registered;
};

/*
 * `registered` is the key space (0..255, compared exactly): 1 keeps
 * host-register ranges apart from allocations (0). Safe to call from a
 * signal handler: one that interrupted its own thread inside the table
 * drops its put / finds nothing (counted in memq_table_dropped).
 */
void memq_table_put(uint64_t ptr, int registered, uint64_t size, uint8_t kind);
/* memq_table_put with the allocating function and device. Returns the window's
 * generation when the snapshot of the capture window opening now has passed
 * this entry's shard already (a caller outside the window then writes it as
 * memq:live itself, for that window), else 0. */
int memq_table_insert(const struct memq_table_entry *e);
int memq_table_take(uint64_t ptr, int registered, struct memq_alloc_info *out);
/* Every entry to `fn`, each shard under its lock (memq_window.c). */
void memq_table_snapshot(uint32_t gen, void (*fn)(const struct memq_table_entry *, void *), void *arg);
void memq_table_snapshot_end(void);
extern unsigned long memq_table_live;     /* non-zero while the table holds entries */
extern unsigned long memq_table_dropped;  /* puts/takes the table could not make */

/* ---- content fingerprints (memq_content.c): what they need to know ---- */
void memq_content_alloc(const struct memq_alloc_rec *r, int registered);
void memq_content_release(uint64_t ptr, int registered);
void memq_content_written(uint64_t dst, uint64_t bytes);
void memq_content_device(int runtime, int device, int unified);
void memq_content_synced(struct memq_call *c, const struct memq_sync_rec *r, uint64_t scope);
/* A capture window closed: copies still waiting for their after-fingerprint get none. */
void memq_content_window_closed(void);

/*
 * Release bracket for frees/unregisters, traced or not: the entry leaves the
 * table BEFORE the real free (so a concurrent allocation that gets the same
 * address cannot lose its entry) and goes back if the free fails.
 */
static inline int memq_release_take(uint64_t ptr, int registered, struct memq_alloc_info *info)
{
	int taken;

	info->size = 0;
	info->kind = MEMQ_MEM_UNKNOWN;
	info->raced = 0;
	if (!__atomic_load_n(&memq_table_live, __ATOMIC_RELAXED) || !ptr)
		return 0;
	taken = memq_table_take(ptr, registered, info);
	if (taken)
		memq_content_release(ptr, registered);
	return taken;
}

static inline void memq_release_done(uint64_t ptr, int registered, int taken,
	const struct memq_alloc_info *info, int result)
{
	if (taken && result != 0)
		memq_table_put(ptr, registered, info->size, info->kind);
}

void memq_table_fork_prepare(void);
void memq_table_fork_parent(void);
void memq_table_fork_child(void);

/* ---- emitters: fill the record's common fields, emit, end the call ---- */
void memq_emit_alloc(struct memq_call *c, struct memq_alloc_rec *r, int registered);
void memq_emit_free(struct memq_call *c, struct memq_free_rec *r, int registered);
void memq_emit_copy(struct memq_call *c, struct memq_copy_rec *r);
void memq_emit_set(struct memq_call *c, struct memq_set_rec *r);
void memq_emit_prefetch(struct memq_call *c, struct memq_prefetch_rec *r);
void memq_emit_advise(struct memq_call *c, struct memq_advise_rec *r);
/* `scope`: what a successful call completes (memq_content_synced): the issue count read
 * before the call for stream/device synchronisations, the event handle for event ones. */
void memq_emit_sync(struct memq_call *c, struct memq_sync_rec *r, uint64_t scope);
void memq_emit_set_device(struct memq_call *c, struct memq_set_device_rec *r);

#endif /* MEMQ_CORE_H */
