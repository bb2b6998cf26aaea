/*
 * Wrapper shapes shared by the HIP and CUDA wrappers: both runtimes expose
 * the same call shapes under different names, so each shape is written once
 * here and instantiated per function in memq_hip.c / memq_cuda.c.
 *
 * Every wrapper is two functions:
 *  - the exported one, the fast path: when the real function is already
 *    resolved and the event is disabled (no session), it tail-calls the real
 *    function after two loads, without even a stack frame;
 *  - slow_<name> (not inlined): first-call resolution, the recursion guard,
 *    and for traced calls the bracket (begin time, current device, errno
 *    kept) and one event at the end.
 *
 * Handles (streams, pools) are `void *` and enums are `int` in both runtimes'
 * C ABI, so the shapes use those types.
 */
#ifndef MEMQ_WRAP_H
#define MEMQ_WRAP_H

#include "memq_core.h"

#define MEMQ_EXPORT __attribute__((visibility("default")))
#define MEMQ_UNPAREN(...) __VA_ARGS__

#define U64(x) ((uint64_t) (uintptr_t) (x))

#define MEMQ_LOADED(name) \
	((name##_fn) __atomic_load_n(&memq_sym_##name.fn, __ATOMIC_ACQUIRE))

/*
 * WRAPPER(rt, name, event, PARAMS, ARGS, BODY): PARAMS is the typed
 * parameter list, ARGS the names. BODY runs after a traced real call, with
 * `c` (the call) and `r` (its result) in scope, and emits the event.
 */
#define WRAPPER(rt, name, event, params, args, body)                         \
	MEMQ_REAL_FN(rt, int, name, params);                                 \
	static __attribute__((noinline)) int slow_##name(MEMQ_UNPAREN params, void *ip) \
	{                                                                    \
		name##_fn real = MEMQ_REAL(name);                            \
		struct memq_call c;                                          \
		int r;                                                       \
		if (!real)                                                   \
			return MEMQ_ERR_NO_RUNTIME;                          \
		if (!memq_begin(&c, lttng_ust_tracepoint_enabled(memq, event), rt, ip)) \
			return real args;                                    \
		r = real args;                                               \
		memq_after(&c);                                              \
		body                                                         \
		return r;                                                    \
	}                                                                    \
	MEMQ_EXPORT int name params                                          \
	{                                                                    \
		name##_fn real = MEMQ_LOADED(name);                          \
		if (__builtin_expect(real && !lttng_ust_tracepoint_enabled(memq, event), 1)) \
			return real args;                                    \
		return slow_##name(MEMQ_UNPAREN args, __builtin_return_address(0)); \
	}

/* ---- allocations: *out is the new pointer when r == 0 ---- */
#define EMIT_ALLOC(name, kind, out, bytes, strm, flg, w, h, registered)      \
	{                                                                    \
		struct memq_alloc_rec rec = {                                \
			.api = MEMQ_API_##name, .mem_kind = (kind),          \
			.result = r, .ptr = r == 0 ? (out) : 0,              \
			.size = (bytes), .stream = U64(strm), .flags = (flg),\
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
	MEMQ_REAL_FN(rt, int, name, params);                                 \
	static __attribute__((noinline)) int slow_##name(MEMQ_UNPAREN params, void *ip) \
	{                                                                    \
		name##_fn real = MEMQ_REAL(name);                            \
		struct memq_alloc_info info;                                 \
		struct memq_call c;                                          \
		int r, taken, traced, saved_errno;                           \
		if (!real)                                                   \
			return MEMQ_ERR_NO_RUNTIME;                          \
		traced = memq_begin(&c, lttng_ust_tracepoint_enabled(memq, event), rt, ip); \
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
				.size = info.size, .stream = U64(strm) };    \
			memq_emit_free(&c, &rec, registered);                \
		}                                                            \
		return r;                                                    \
	}                                                                    \
	MEMQ_EXPORT int name params                                          \
	{                                                                    \
		name##_fn real = MEMQ_LOADED(name);                          \
		if (__builtin_expect(real && !lttng_ust_tracepoint_enabled(memq, event) \
				     && !__atomic_load_n(&memq_table_live, __ATOMIC_RELAXED), 1)) \
			return real args;                                    \
		return slow_##name(MEMQ_UNPAREN args, __builtin_return_address(0)); \
	}

#define FREE_P(rt, name) RELEASE(rt, name, free, 0, (void *p), (p), 0)
#define FREE_ASYNC(rt, name) RELEASE(rt, name, free, 0, (void *p, void *stream), (p, stream), stream)
#define UNREGISTER(rt, name) RELEASE(rt, name, unregister, 1, (void *p), (p), 0)

/* ---- copies ---- */
#define EMIT_COPY(name, d, s, n, k, strm, w, h, dp, sp)                      \
	{                                                                    \
		struct memq_copy_rec rec = {                                 \
			.api = MEMQ_API_##name, .dst = U64(d), .src = U64(s),\
			.bytes = (n), .kind = (k), .stream = U64(strm),      \
			.src_device = -1, .width = (w), .height = (h),       \
			.dpitch = (dp), .spitch = (sp), .result = r };       \
		memq_emit_copy(&c, &rec);                                    \
	}

/* (dst, src, bytes, kind) on `strm` (a constant for the synchronous calls) */
#define COPY(rt, name, strm)                                                 \
	WRAPPER(rt, name, copy, (void *d, const void *s, size_t n, int kind), (d, s, n, kind), \
		EMIT_COPY(name, d, s, n, kind, strm, 0, 0, 0, 0))

#define COPY_ASYNC(rt, name)                                                 \
	WRAPPER(rt, name, copy, (void *d, const void *s, size_t n, int kind, void *stream), \
		(d, s, n, kind, stream), EMIT_COPY(name, d, s, n, kind, stream, 0, 0, 0, 0))

/* hipMemcpyHtoD and friends: the direction is in the name. */
#define COPY_FIXED(rt, name, kind)                                           \
	WRAPPER(rt, name, copy, (void *d, void *s, size_t n), (d, s, n),     \
		EMIT_COPY(name, d, s, n, kind, 0, 0, 0, 0, 0))

#define COPY_FIXED_ASYNC(rt, name, kind)                                     \
	WRAPPER(rt, name, copy, (void *d, void *s, size_t n, void *stream), (d, s, n, stream), \
		EMIT_COPY(name, d, s, n, kind, stream, 0, 0, 0, 0))

/* 2D: bytes moved = width * height. */
#define COPY_2D(rt, name, strm)                                              \
	WRAPPER(rt, name, copy,                                              \
		(void *d, size_t dp, const void *s, size_t sp, size_t w, size_t h, int kind), \
		(d, dp, s, sp, w, h, kind),                                  \
		EMIT_COPY(name, d, s, (uint64_t) w * h, kind, strm, w, h, dp, sp))

#define COPY_2D_ASYNC(rt, name)                                              \
	WRAPPER(rt, name, copy,                                              \
		(void *d, size_t dp, const void *s, size_t sp, size_t w, size_t h, int kind, void *stream), \
		(d, dp, s, sp, w, h, kind, stream),                          \
		EMIT_COPY(name, d, s, (uint64_t) w * h, kind, stream, w, h, dp, sp))

/* Peer copies: device = destination device, src_device = source device. */
#define EMIT_PEER(name, d, dd, s, sd, n, strm)                               \
	{                                                                    \
		struct memq_copy_rec rec = {                                 \
			.api = MEMQ_API_##name, .dst = U64(d), .src = U64(s),\
			.bytes = (n), .kind = MEMQ_DTOD, .stream = U64(strm),\
			.device = (dd), .src_device = (sd), .result = r };   \
		memq_emit_copy(&c, &rec);                                    \
	}

#define COPY_PEER(rt, name)                                                  \
	WRAPPER(rt, name, copy, (void *d, int dd, const void *s, int sd, size_t n), \
		(d, dd, s, sd, n), EMIT_PEER(name, d, dd, s, sd, n, 0))

#define COPY_PEER_ASYNC(rt, name)                                            \
	WRAPPER(rt, name, copy, (void *d, int dd, const void *s, int sd, size_t n, void *stream), \
		(d, dd, s, sd, n, stream), EMIT_PEER(name, d, dd, s, sd, n, stream))

/* ---- sets: `vt` is the value's type, bytes = count * `elem` ---- */
#define EMIT_SET(name, d, v, n, strm)                                        \
	{                                                                    \
		struct memq_set_rec rec = {                                  \
			.api = MEMQ_API_##name, .dst = U64(d), .value = (v), \
			.bytes = (n), .stream = U64(strm), .result = r };    \
		memq_emit_set(&c, &rec);                                     \
	}

#define SET(rt, name, vt, elem, strm)                                        \
	WRAPPER(rt, name, set, (void *d, vt v, size_t count), (d, v, count), \
		EMIT_SET(name, d, (int32_t) v, (uint64_t) count * (elem), strm))

#define SET_ASYNC(rt, name, vt, elem)                                        \
	WRAPPER(rt, name, set, (void *d, vt v, size_t count, void *stream), (d, v, count, stream), \
		EMIT_SET(name, d, (int32_t) v, (uint64_t) count * (elem), stream))

/* ---- synchronisations and device selection ---- */
#define EMIT_SYNC(name, strm)                                                \
	{                                                                    \
		struct memq_sync_rec rec = {                                 \
			.api = MEMQ_API_##name, .stream = U64(strm), .result = r }; \
		memq_emit_sync(&c, &rec);                                    \
	}

#define SYNC_STREAM(rt, name)                                                \
	WRAPPER(rt, name, sync, (void *stream), (stream), EMIT_SYNC(name, stream))

/* No parameters: WRAPPER's parameter splicing needs at least one, so a
 * dummy-free version written out. */
#define SYNC_DEVICE(rt, name)                                                \
	MEMQ_REAL_FN(rt, int, name, (void));                                 \
	static __attribute__((noinline)) int slow_##name(void *ip)           \
	{                                                                    \
		name##_fn real = MEMQ_REAL(name);                            \
		struct memq_call c;                                          \
		int r;                                                       \
		if (!real)                                                   \
			return MEMQ_ERR_NO_RUNTIME;                          \
		if (!memq_begin(&c, lttng_ust_tracepoint_enabled(memq, sync), rt, ip)) \
			return real();                                       \
		r = real();                                                  \
		memq_after(&c);                                              \
		EMIT_SYNC(name, 0)                                           \
		return r;                                                    \
	}                                                                    \
	MEMQ_EXPORT int name(void)                                           \
	{                                                                    \
		name##_fn real = MEMQ_LOADED(name);                          \
		if (__builtin_expect(real && !lttng_ust_tracepoint_enabled(memq, sync), 1)) \
			return real();                                       \
		return slow_##name(__builtin_return_address(0));             \
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
			.dst_device = (dst_dev), .stream = U64(strm),        \
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
