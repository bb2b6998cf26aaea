/*
 * Wrapper shapes shared by the HIP and CUDA wrappers: both runtimes expose
 * the same call shapes under different names, so each shape is written once
 * here and instantiated per function in memq_hip.c / memq_cuda.c.
 *
 * Every wrapper is three fronts and the functions behind them:
 *  - the exported front, the fast path: when its call site's route (the
 *    runtime object answering this caller, memq_route.c) is cached with the
 *    real function and the event is disabled (no session), it tail-calls the
 *    real function after four loads, without even a stack frame;
 *  - MEMQ_BOUND stand-ins, bound once each to a function an entry-point
 *    lookup found (dlsym on a runtime's handle, cuGetProcAddress): a second
 *    copy of a runtime gets its own stand-in, traced like the first;
 *  - behind them (not inlined, so the fronts stay frameless): slow_<name>
 *    finds the caller's route and real function, stand_in<k>_slow_<name>
 *    the bound function's route, and traced_<name>(real, route, ARGS..., ip)
 *    makes the call: the recursion guard, and for traced calls the bracket
 *    (begin time, current device, errno kept) and one event at the end.
 *
 * Handles (streams, pools) are `void *` and enums are `int` in both runtimes'
 * C ABI, so the shapes use those types.
 */
#ifndef MEMQ_WRAP_H
#define MEMQ_WRAP_H

#include "memq_content.h"
#include "memq_core.h"

#define MEMQ_EXPORT __attribute__((visibility("default")))
#define MEMQ_UNPAREN(...) __VA_ARGS__
#define MEMQ_NOINLINE __attribute__((noinline))

#define U64(x) ((uint64_t) (uintptr_t) (x))

/*
 * Stream ids: one stream, one id. 0 and 0x1 (cudaStreamLegacy,
 * hipStreamLegacy, CU_STREAM_LEGACY) are the legacy default stream: 0; 0x2
 * (cudaStreamPerThread, hipStreamPerThread, CU_STREAM_PER_THREAD) is the
 * calling thread's per-thread default stream: 0x2. In a per-thread-stream
 * entry point (the _ptsz/_ptds/_spt exports code built with a per-thread
 * default stream calls) stream 0 means the per-thread stream: 0x2.
 */
#define MEMQ_STREAM_LEGACY 0x1
#define MEMQ_STREAM_PER_THREAD 0x2
static inline uint64_t memq_stream_id(uint64_t stream, int per_thread_entry)
{
	if (stream == 0)
		return per_thread_entry ? MEMQ_STREAM_PER_THREAD : 0;
	return stream == MEMQ_STREAM_LEGACY ? 0 : stream;
}

/* Whether a name (a string literal: folded at compile time) ends with `suffix`. */
#define MEMQ_ENDS_WITH(str, suffix) \
	(sizeof(str) >= sizeof(suffix) && !__builtin_memcmp((str) + sizeof(str) - sizeof(suffix), suffix, sizeof(suffix)))
#define MEMQ_PER_THREAD_ENTRY(name) \
	(MEMQ_ENDS_WITH(#name, "_ptsz") || MEMQ_ENDS_WITH(#name, "_ptds") || MEMQ_ENDS_WITH(#name, "_spt"))
/* The recorded id of the stream `strm` given to `name`. */
#define MEMQ_STREAM(name, strm) memq_stream_id(U64(strm), MEMQ_PER_THREAD_ENTRY(name))
#define MEMQ_STREAM_PTR(name, strm) ((void *) (uintptr_t) MEMQ_STREAM(name, strm))

/* cudaMemLocation == CUmemLocation == hipMemLocation; type 1 = a device. */
struct memq_location { int type, id; };
static inline int memq_location_device(struct memq_location loc)
{
	return loc.type == 1 ? loc.id : -1;
}

/* The slot of a wrapped name, with its stand-ins (declared here, defined by MEMQ_FRONTS). */
#define MEMQ_WRAPPED_FN(rt, name, params)                                   \
	typedef int (*name##_fn) params;                                    \
	static int memq_stand_in0_##name params;                            \
	static int memq_stand_in1_##name params;                            \
	MEMQ_EXPORT int name params;                                        \
	static void *const memq_stand_ins_##name[MEMQ_BOUND] = {            \
		(void *) memq_stand_in0_##name, (void *) memq_stand_in1_##name }; \
	MEMQ_SYM_SLOT(name, rt, memq_stand_ins_##name, (void *) name)

/* traced_<name>'s parameters: the real function, its route, the call's own, the call site. */
#define MEMQ_TRACED_PARAMS(name, params) (name##_fn real, int route, MEMQ_UNPAREN params, void *ip)

/* Stand-in k: the front for the function bound[k], and its slow path. */
#define MEMQ_STAND_IN(rt, name, k, slow_needed, params, args)                \
	static MEMQ_NOINLINE int stand_in##k##_slow_##name(MEMQ_UNPAREN params, void *ip) \
	{                                                                    \
		name##_fn real = (name##_fn) __atomic_load_n(&memq_sym_##name.bound[k], __ATOMIC_ACQUIRE); \
		return traced_##name(real, memq_route_of((void *) real, rt), MEMQ_UNPAREN args, ip); \
	}                                                                    \
	static int memq_stand_in##k##_##name params                          \
	{                                                                    \
		name##_fn real = (name##_fn) __atomic_load_n(&memq_sym_##name.bound[k], __ATOMIC_ACQUIRE); \
		if (__builtin_expect(!(slow_needed), 1))                     \
			return real args;                                    \
		return stand_in##k##_slow_##name(MEMQ_UNPAREN args, __builtin_return_address(0)); \
	}

/*
 * The exported front and the stand-ins of `name` (after traced_<name>):
 * they take their slow paths when `slow_needed` (the event is recorded, a
 * release with a non-empty table) or nothing is cached yet.
 */
#define MEMQ_FRONTS(rt, name, slow_needed, params, args)                     \
	static MEMQ_NOINLINE int slow_##name(MEMQ_UNPAREN params, void *ip)  \
	{                                                                    \
		int route;                                                   \
		name##_fn real = (name##_fn) memq_caller_fn(&memq_sym_##name, ip, rt, &route); \
		if (!real)                                                   \
			return MEMQ_ERR_NO_RUNTIME;                          \
		return traced_##name(real, route, MEMQ_UNPAREN args, ip);    \
	}                                                                    \
	MEMQ_EXPORT int name params                                          \
	{                                                                    \
		void *ra = __builtin_return_address(0);                      \
		int route = memq_route_cached(ra, rt);                       \
		name##_fn real = (name##_fn) __atomic_load_n(&memq_sym_##name.fn[route], __ATOMIC_ACQUIRE); \
		if (__builtin_expect(real && !(slow_needed), 1))             \
			return real args;                                    \
		if (real)                                                    \
			return traced_##name(real, route, MEMQ_UNPAREN args, ra); \
		return slow_##name(MEMQ_UNPAREN args, ra);                   \
	}                                                                    \
	MEMQ_STAND_IN(rt, name, 0, slow_needed, params, args)                \
	MEMQ_STAND_IN(rt, name, 1, slow_needed, params, args)

/*
 * WRAPPER(rt, name, event, PARAMS, ARGS, BODY): PARAMS is the typed
 * parameter list, ARGS the names. BODY runs after a traced real call, with
 * `c` (the call) and `r` (its result) in scope, and emits the event.
 * WRAPPER_PRE(..., (PRE), (BODY)) also runs PRE (in parentheses) in a traced
 * call, before the real call; what it declares is in scope in BODY.
 */
#define WRAPPER_PRE(rt, name, event, params, args, pre, body)                \
	MEMQ_WRAPPED_FN(rt, name, params);                                   \
	static MEMQ_NOINLINE int traced_##name MEMQ_TRACED_PARAMS(name, params) \
	{                                                                    \
		struct memq_call c;                                          \
		int r;                                                       \
		if (!memq_begin_at(&c, lttng_ust_tracepoint_enabled(memq, event), rt, route, ip)) \
			return real args;                                    \
		MEMQ_UNPAREN pre                                             \
		r = real args;                                               \
		memq_after(&c);                                              \
		MEMQ_UNPAREN body                                            \
		return r;                                                    \
	}                                                                    \
	MEMQ_FRONTS(rt, name, MEMQ_RECORDS(event, rt), params, args)

#define WRAPPER(rt, name, event, params, args, body)                         \
	WRAPPER_PRE(rt, name, event, params, args, (), (body))

/* ---- allocations: *out is the new pointer when r == 0 ---- */
#define EMIT_ALLOC(name, kind, out, bytes, strm, flg, w, h, registered)      \
	{                                                                    \
		struct memq_alloc_rec rec = {                                \
			.api = MEMQ_API_##name, .mem_kind = (kind),          \
			.result = r, .ptr = r == 0 ? (out) : 0,              \
			.size = (bytes), .stream = MEMQ_STREAM(name, strm), .flags = (flg),\
			.width = (w), .height = (h) };                       \
		memq_emit_alloc(&c, &rec, (registered));                     \
	}

#define ALLOC_PS(rt, name, kind)                                             \
	WRAPPER(rt, name, alloc, (void **p, size_t n), (p, n),               \
		EMIT_ALLOC(name, kind, U64(*p), n, 0, 0, 0, 0, 0))

#define ALLOC_PSF(rt, name, kind)                                            \
	WRAPPER(rt, name, alloc, (void **p, size_t n, unsigned int flags), (p, n, flags), \
		EMIT_ALLOC(name, kind, U64(*p), n, 0, flags, 0, 0, 0))

#define ALLOC_ASYNC(rt, name)                                                \
	WRAPPER(rt, name, alloc, (void **p, size_t n, void *stream), (p, n, stream), \
		EMIT_ALLOC(name, MEMQ_MEM_DEVICE, U64(*p), n, stream, 0, 0, 0, 0))

#define ALLOC_POOL(rt, name)                                                 \
	WRAPPER(rt, name, alloc, (void **p, size_t n, void *pool, void *stream), (p, n, pool, stream), \
		EMIT_ALLOC(name, MEMQ_MEM_DEVICE, U64(*p), n, stream, 0, 0, 0, 0))

/* size = pitch * height: what the allocation really occupies. */
#define ALLOC_PITCH(rt, name)                                                \
	WRAPPER(rt, name, alloc, (void **p, size_t *pitch, size_t w, size_t h), (p, pitch, w, h), \
		EMIT_ALLOC(name, MEMQ_MEM_DEVICE, U64(*p), r == 0 ? (uint64_t) *pitch * h : 0, 0, 0, w, h, 0))

#define REGISTER(rt, name)                                                   \
	WRAPPER(rt, name, register, (void *p, size_t n, unsigned int flags), (p, n, flags), \
		EMIT_ALLOC(name, MEMQ_MEM_REGISTERED, U64(p), n, 0, flags, 0, 0, 1))

/*
 * Releases: the table entry is taken out before the real call, traced or
 * not, so the fast path also needs the table to be empty (no allocation was
 * recorded in this process).
 */
#define RELEASE(rt, name, event, registered, params, args, strm)             \
	MEMQ_WRAPPED_FN(rt, name, params);                                   \
	static MEMQ_NOINLINE int traced_##name MEMQ_TRACED_PARAMS(name, params) \
	{                                                                    \
		struct memq_alloc_info info;                                 \
		struct memq_call c;                                          \
		int r, taken, traced, saved_errno;                           \
		traced = memq_begin_at(&c, lttng_ust_tracepoint_enabled(memq, event), rt, route, ip); \
		/* the table's locks must not show through errno */          \
		saved_errno = errno;                                         \
		taken = memq_release_take(U64(p), registered, &info);        \
		if (traced)                                                  \
			c.raced = info.raced;                                \
		errno = saved_errno;                                         \
		r = real args;                                               \
		saved_errno = errno;                                         \
		memq_release_done(U64(p), registered, taken, &info, r);      \
		errno = saved_errno;                                         \
		if (traced) {                                                \
			memq_after(&c);                                      \
			struct memq_free_rec rec = {                         \
				.api = MEMQ_API_##name, .mem_kind = info.kind,\
				.result = r, .ptr = U64(p),                  \
				.size = info.size, .stream = MEMQ_STREAM(name, strm) }; \
			memq_emit_free(&c, &rec, registered);                \
		}                                                            \
		return r;                                                    \
	}                                                                    \
	MEMQ_FRONTS(rt, name, MEMQ_RECORDS(event, rt)                        \
		    || __atomic_load_n(&memq_table_live, __ATOMIC_RELAXED), params, args)

#define FREE_P(rt, name) RELEASE(rt, name, free, 0, (void *p), (p), 0)
#define FREE_ASYNC(rt, name) RELEASE(rt, name, free, 0, (void *p, void *stream), (p, stream), stream)
#define UNREGISTER(rt, name) RELEASE(rt, name, unregister, 1, (void *p), (p), 0)

/* ---- copies ---- */
/*
 * COPY_WRAPPER(rt, name, PARAMS, ARGS, async, INIT): INIT fills `rec` (the
 * memq:copy record) from the arguments before the real call, so that the
 * content fingerprints (memq_content.h) are taken before it; `async`: the
 * copy completes later than the call (stream-ordered).
 */
#define COPY_WRAPPER(rt, name, params, args, async, init)                    \
	WRAPPER_PRE(rt, name, copy, params, args,                            \
		(struct memq_copy_rec rec; init; memq_content_before(&c, &rec, rt, async);), \
		(rec.result = r; memq_emit_copy(&c, &rec);))

#define COPY_INIT(name, d, s, n, k, strm, w, h, dp, sp)                      \
	memq_copy_init(&rec, MEMQ_API_##name, d, s, n, k, MEMQ_STREAM_PTR(name, strm), w, h, dp, sp)

/* (dst, src, bytes, kind) on `strm` (a constant for the synchronous calls) */
#define COPY(rt, name, strm)                                                 \
	COPY_WRAPPER(rt, name, (void *d, const void *s, size_t n, int kind), (d, s, n, kind), 0, \
		COPY_INIT(name, d, s, n, kind, strm, 0, 0, 0, 0))

#define COPY_ASYNC(rt, name)                                                 \
	COPY_WRAPPER(rt, name, (void *d, const void *s, size_t n, int kind, void *stream), \
		(d, s, n, kind, stream), 1, COPY_INIT(name, d, s, n, kind, stream, 0, 0, 0, 0))

/* hipMemcpyHtoD and friends: the direction is in the name. */
#define COPY_FIXED(rt, name, kind)                                           \
	COPY_WRAPPER(rt, name, (void *d, void *s, size_t n), (d, s, n), 0,   \
		COPY_INIT(name, d, s, n, kind, 0, 0, 0, 0, 0))

#define COPY_FIXED_ASYNC(rt, name, kind)                                     \
	COPY_WRAPPER(rt, name, (void *d, void *s, size_t n, void *stream), (d, s, n, stream), 1, \
		COPY_INIT(name, d, s, n, kind, stream, 0, 0, 0, 0))

/* 2D: bytes moved = width * height. */
#define COPY_2D(rt, name, strm)                                              \
	COPY_WRAPPER(rt, name,                                               \
		(void *d, size_t dp, const void *s, size_t sp, size_t w, size_t h, int kind), \
		(d, dp, s, sp, w, h, kind), 0,                               \
		COPY_INIT(name, d, s, (uint64_t) w * h, kind, strm, w, h, dp, sp))

#define COPY_2D_ASYNC(rt, name)                                              \
	COPY_WRAPPER(rt, name,                                               \
		(void *d, size_t dp, const void *s, size_t sp, size_t w, size_t h, int kind, void *stream), \
		(d, dp, s, sp, w, h, kind, stream), 1,                       \
		COPY_INIT(name, d, s, (uint64_t) w * h, kind, stream, w, h, dp, sp))

/* Peer copies: device = destination device, src_device = source device. */
#define PEER_INIT(name, d, dd, s, sd, n, strm)                               \
	(COPY_INIT(name, d, s, n, MEMQ_DTOD, strm, 0, 0, 0, 0), rec.device = (dd), rec.src_device = (sd))

#define COPY_PEER(rt, name)                                                  \
	COPY_WRAPPER(rt, name, (void *d, int dd, const void *s, int sd, size_t n), \
		(d, dd, s, sd, n), 0, PEER_INIT(name, d, dd, s, sd, n, 0))

#define COPY_PEER_ASYNC(rt, name)                                            \
	COPY_WRAPPER(rt, name, (void *d, int dd, const void *s, int sd, size_t n, void *stream), \
		(d, dd, s, sd, n, stream), 1, PEER_INIT(name, d, dd, s, sd, n, stream))

/* ---- sets: `vt` is the value's type, bytes = count * `elem` ---- */
#define EMIT_SET(name, d, v, n, strm)                                        \
	{                                                                    \
		struct memq_set_rec rec = {                                  \
			.api = MEMQ_API_##name, .dst = U64(d), .value = (v), \
			.bytes = (n), .stream = MEMQ_STREAM(name, strm), .result = r }; \
		memq_emit_set(&c, &rec);                                     \
	}

#define SET(rt, name, vt, elem, strm)                                        \
	WRAPPER(rt, name, set, (void *d, vt v, size_t count), (d, v, count), \
		EMIT_SET(name, d, (int32_t) v, (uint64_t) count * (elem), strm))

#define SET_ASYNC(rt, name, vt, elem)                                        \
	WRAPPER(rt, name, set, (void *d, vt v, size_t count, void *stream), (d, v, count, stream), \
		EMIT_SET(name, d, (int32_t) v, (uint64_t) count * (elem), stream))

/* ---- synchronisations and device selection ---- */
/* `scope`: what a successful call completes (memq_emit_sync). */
#define EMIT_SYNC(name, strm, scope)                                         \
	{                                                                    \
		struct memq_sync_rec rec = {                                 \
			.api = MEMQ_API_##name, .stream = MEMQ_STREAM(name, strm), .result = r }; \
		memq_emit_sync(&c, &rec, (scope));                           \
	}

/* Stream synchronisations and queries: they cover what was issued before them. */
#define SYNC_STREAM(rt, name)                                                \
	WRAPPER_PRE(rt, name, sync, (void *stream), (stream),                \
		(uint64_t issued = memq_content_issued();), (EMIT_SYNC(name, stream, issued)))

/* No parameters: WRAPPER's parameter splicing needs at least one, so the
 * same pieces written out without. */
#define SYNC_DEVICE(rt, name)                                                \
	typedef int (*name##_fn)(void);                                      \
	static int memq_stand_in0_##name(void);                              \
	static int memq_stand_in1_##name(void);                              \
	MEMQ_EXPORT int name(void);                                          \
	static void *const memq_stand_ins_##name[MEMQ_BOUND] = {             \
		(void *) memq_stand_in0_##name, (void *) memq_stand_in1_##name }; \
	MEMQ_SYM_SLOT(name, rt, memq_stand_ins_##name, (void *) name);       \
	static MEMQ_NOINLINE int traced_##name(name##_fn real, int route, void *ip) \
	{                                                                    \
		struct memq_call c;                                          \
		uint64_t issued;                                             \
		int r;                                                       \
		if (!memq_begin_at(&c, lttng_ust_tracepoint_enabled(memq, sync), rt, route, ip)) \
			return real();                                       \
		issued = memq_content_issued();                              \
		r = real();                                                  \
		memq_after(&c);                                              \
		EMIT_SYNC(name, 0, issued)                                   \
		return r;                                                    \
	}                                                                    \
	static MEMQ_NOINLINE int slow_##name(void *ip)                       \
	{                                                                    \
		int route;                                                   \
		name##_fn real = (name##_fn) memq_caller_fn(&memq_sym_##name, ip, rt, &route); \
		return real ? traced_##name(real, route, ip) : MEMQ_ERR_NO_RUNTIME; \
	}                                                                    \
	MEMQ_EXPORT int name(void)                                           \
	{                                                                    \
		void *ra = __builtin_return_address(0);                      \
		name##_fn real = (name##_fn) memq_fast(&memq_sym_##name, ra, rt); \
		if (__builtin_expect(real && !MEMQ_RECORDS(sync, rt), 1))    \
			return real();                                       \
		return slow_##name(ra);                                      \
	}                                                                    \
	SYNC_DEVICE_STAND_IN(rt, name, 0)                                    \
	SYNC_DEVICE_STAND_IN(rt, name, 1)

#define SYNC_DEVICE_STAND_IN(rt, name, k)                                    \
	static int memq_stand_in##k##_##name(void)                           \
	{                                                                    \
		name##_fn real = (name##_fn) __atomic_load_n(&memq_sym_##name.bound[k], __ATOMIC_ACQUIRE); \
		if (__builtin_expect(!MEMQ_RECORDS(sync, rt), 1))            \
			return real();                                       \
		return traced_##name(real, memq_route_of((void *) real, rt), __builtin_return_address(0)); \
	}

#define EMIT_SET_DEVICE(name, dev)                                           \
	{                                                                    \
		struct memq_set_device_rec rec = {                           \
			.api = MEMQ_API_##name, .new_device = (dev), .result = r }; \
		memq_emit_set_device(&c, &rec);                              \
	}

#define SET_DEVICE(rt, name)                                                 \
	WRAPPER(rt, name, set_device, (int dev), (dev), EMIT_SET_DEVICE(name, dev))

/* ---- managed memory hints ---- */
#define EMIT_PREFETCH(name, p, n, dst_dev, strm)                             \
	{                                                                    \
		struct memq_prefetch_rec rec = {                             \
			.api = MEMQ_API_##name, .ptr = U64(p), .bytes = (n), \
			.dst_device = (dst_dev), .stream = MEMQ_STREAM(name, strm), \
			.result = r };                                       \
		memq_emit_prefetch(&c, &rec);                                \
	}

#define EMIT_ADVISE(name, p, n, adv, target)                                 \
	{                                                                    \
		struct memq_advise_rec rec = {                               \
			.api = MEMQ_API_##name, .ptr = U64(p), .bytes = (n), \
			.advice = (adv), .target_device = (target),          \
			.result = r };                                       \
		memq_emit_advise(&c, &rec);                                  \
	}

#endif /* MEMQ_WRAP_H */
