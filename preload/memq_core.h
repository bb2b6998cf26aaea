/*
 * memq preload library: what every wrapper needs.
 *
 *  - lazy, thread-safe resolution of the real runtime functions;
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

/* A real function, resolved on first use and cached. */
struct memq_sym {
	const char *name;
	int runtime;             /* enum memq_runtime: which library to search */
	void *fn;                /* atomic; NULL until resolved */
};

void *memq_resolve(struct memq_sym *sym);

/* memq_dl.c: libc's dlsym (this library's own calls by name reach its
 * interposed one); the slot of a wrapped name; whether a function is
 * memq's; and what a lookup that found `fn` for `name` hands out: memq's
 * wrapper when it may stand for `fn`, else `fn`. */
void *memq_real_dlsym(void *handle, const char *name);
struct memq_sym *memq_sym_find(const char *name);
int memq_is_ours(const void *fn);
void *memq_wrapper_for(const char *name, void *fn);

/* Lock-free fast path; resolution races are benign (same answer). */
static inline void *memq_real(struct memq_sym *sym)
{
	void *fn = __atomic_load_n(&sym->fn, __ATOMIC_ACQUIRE);
	return fn ? fn : memq_resolve(sym);
}

/*
 * Defines `static struct memq_sym memq_sym_NAME` and a typedef NAME_fn for
 * the real function's type, given its return type and parameter list. A
 * pointer to the slot goes into section memq_syms, the table the lookups
 * (dlsym, cuGetProcAddress, ...) search by name.
 */
#define MEMQ_REAL_FN(rt, ret, name, params)                                 \
	typedef ret (*name##_fn) params;                                    \
	static struct memq_sym memq_sym_##name = { #name, rt, NULL };       \
	static struct memq_sym *const memq_symp_##name                      \
		__attribute__((section("memq_syms"), used)) = &memq_sym_##name
#define MEMQ_REAL(name) ((name##_fn) memq_real(&memq_sym_##name))

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
	/* an untraced release took an entry that the opening window's snapshot
	 * listed: its event is written anyway (memq_alloc_info.raced) */
	int raced;
	/* counted in memq_window_inflight (a closing window waits for it) */
	int inflight;
};

void memq_begin_slow(struct memq_call *c, int runtime, void *ip);

/*
 * Start tracing a call when `enabled` (lttng_ust_tracepoint_enabled(...))
 * and the thread is not already inside a wrapper; `ip` is the application's
 * call site. Returns 0 when the call is not to be traced. Outside capture
 * windows it returns 1 with c->traced = 0: the emitters then keep the
 * allocation table and write nothing (no clock is read).
 */
static inline int memq_begin(struct memq_call *c, int enabled, int runtime, void *ip)
{
	if (!enabled || memq_nesting)
		return 0;
	memq_begin_slow(c, runtime, ip);
	return 1;
}

/* After the real call: keep the errno it left. */
static inline void memq_after(struct memq_call *c)
{
	c->saved_errno = errno;
}

/* After the event: leave the guard, give the caller the real call's errno. */
static inline void memq_end(struct memq_call *c)
{
	if (c->inflight)
		__atomic_sub_fetch(&memq_window_inflight, 1, __ATOMIC_RELEASE);
	memq_nesting--;
	errno = c->saved_errno;
}

/* CLOCK_MONOTONIC now, in ns (LTTng's clock). */
uint64_t memq_now_ns(void);

/* The current device (-1 when the runtime cannot tell), via the real API. */
int memq_current_device(int runtime);

/* CUDA runtime major version (12, 13, ...): decides prefetch/advise ABI. */
int memq_cuda_major(void);

/* ---- live allocation table (sharded hash, memory from mmap) ---- */
struct memq_alloc_info {
	uint64_t size;
	uint8_t kind;            /* enum memq_mem_kind */
	/* set by memq_table_take: the snapshot of the capture window opening
	 * (or open) now listed this entry, so a caller outside the window must
	 * write its free anyway (memq_window.h) */
	uint8_t raced;
};

/* One tracked allocation, as a window's snapshot (memq:live) reports it. */
struct memq_table_entry {
	uint64_t ptr, size;
	uint16_t api;            /* allocating function (enum memq_api); 0 if not known */
	int16_t device;          /* -1 if not known */
	uint8_t kind;            /* enum memq_mem_kind */
	uint8_t registered;
};

/* `registered` separates host-register ranges from allocations. */
void memq_table_put(uint64_t ptr, int registered, uint64_t size, uint8_t kind);
/* memq_table_put with the allocating function and device. Returns 1 when the
 * snapshot of the capture window opening now has passed this entry's shard
 * already: a caller outside the window then writes it as memq:live itself. */
int memq_table_insert(const struct memq_table_entry *e);
int memq_table_take(uint64_t ptr, int registered, struct memq_alloc_info *out);
/* Every entry to `fn`, each shard under its lock (memq_window.c). */
void memq_table_snapshot(uint32_t gen, void (*fn)(const struct memq_table_entry *, void *), void *arg);
void memq_table_snapshot_end(void);
extern unsigned long memq_table_live;

/*
 * Release bracket for frees/unregisters, traced or not: the entry leaves the
 * table BEFORE the real free (so a concurrent allocation that gets the same
 * address cannot lose its entry) and goes back if the free fails.
 */
static inline int memq_release_take(uint64_t ptr, int registered, struct memq_alloc_info *info)
{
	info->size = 0;
	info->kind = MEMQ_MEM_UNKNOWN;
	info->raced = 0;
	if (!__atomic_load_n(&memq_table_live, __ATOMIC_RELAXED) || !ptr)
		return 0;
	return memq_table_take(ptr, registered, info);
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
void memq_emit_sync(struct memq_call *c, struct memq_sync_rec *r);
void memq_emit_set_device(struct memq_call *c, struct memq_set_device_rec *r);

#endif /* MEMQ_CORE_H */
