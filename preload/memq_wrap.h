/*
 * Wrapper shapes shared by the HIP and CUDA wrappers: both runtimes expose
 * the same call shapes under different names, so each shape is written once
 * here and instantiated per function in memq_hip.c / memq_cuda.c.
 *
 * Every wrapper: resolves the real function (lazily, cached), and when the
 * event is disabled or the thread is already inside a wrapper, tail-calls it
 * with nothing else done. Otherwise it brackets the real call (begin time,
 * current device, errno kept) and emits one event at the end.
 *
 * Handles (streams, pools) are `void *` and enums are `int` in both runtimes'
 * C ABI, so the shapes use those types.
 */
#ifndef MEMQ_WRAP_H
#define MEMQ_WRAP_H

#include "memq_core.h"

#define MEMQ_EXPORT __attribute__((visibility("default")))

#define U64(x) ((uint64_t) (uintptr_t) (x))

/* Common head: `real` resolved, `c` begun or the call already returned. */
#define WRAP_HEAD(rt, name, event, args)                                     \
	name##_fn real = MEMQ_REAL(name);                                    \
	struct memq_call c;                                                  \
	int r;                                                               \
	if (!real)                                                           \
		return MEMQ_ERR_NO_RUNTIME;                                  \
	if (!MEMQ_BEGIN(&c, lttng_ust_tracepoint_enabled(memq, event), rt))  \
		return real args;                                            \
	r = real args;                                                       \
	memq_after(&c)

/* ---- allocations: *out is the new pointer when r == 0 ---- */
#define EMIT_ALLOC(name, kind, out, bytes, strm, flg, w, h, registered)      \
	do {                                                                 \
		struct memq_alloc_rec rec = {                                \
			.api = MEMQ_API_##name, .mem_kind = (kind),          \
			.result = r, .ptr = r == 0 ? (out) : 0,              \
			.size = (bytes), .stream = U64(strm), .flags = (flg),\
			.width = (w), .height = (h) };                       \
		memq_emit_alloc(&c, &rec, (registered));                     \
	} while (0)

#define ALLOC_PS(rt, name, kind)                                             \
	MEMQ_REAL_FN(rt, int, name, (void **, size_t));                      \
	MEMQ_EXPORT int name(void **p, size_t n)                             \
	{                                                                    \
		WRAP_HEAD(rt, name, alloc, (p, n));                          \
		EMIT_ALLOC(name, kind, U64(*p), n, 0, 0, 0, 0, 0);           \
		return r;                                                    \
	}

#define ALLOC_PSF(rt, name, kind)                                            \
	MEMQ_REAL_FN(rt, int, name, (void **, size_t, unsigned int));        \
	MEMQ_EXPORT int name(void **p, size_t n, unsigned int flags)         \
	{                                                                    \
		WRAP_HEAD(rt, name, alloc, (p, n, flags));                   \
		EMIT_ALLOC(name, kind, U64(*p), n, 0, flags, 0, 0, 0);       \
		return r;                                                    \
	}

#define ALLOC_ASYNC(rt, name)                                                \
	MEMQ_REAL_FN(rt, int, name, (void **, size_t, void *));              \
	MEMQ_EXPORT int name(void **p, size_t n, void *stream)               \
	{                                                                    \
		WRAP_HEAD(rt, name, alloc, (p, n, stream));                  \
		EMIT_ALLOC(name, MEMQ_MEM_DEVICE, U64(*p), n, stream, 0, 0, 0, 0); \
		return r;                                                    \
	}

#define ALLOC_POOL(rt, name)                                                 \
	MEMQ_REAL_FN(rt, int, name, (void **, size_t, void *, void *));      \
	MEMQ_EXPORT int name(void **p, size_t n, void *pool, void *stream)   \
	{                                                                    \
		WRAP_HEAD(rt, name, alloc, (p, n, pool, stream));            \
		EMIT_ALLOC(name, MEMQ_MEM_DEVICE, U64(*p), n, stream, 0, 0, 0, 0); \
		return r;                                                    \
	}

/* size = pitch * height: what the allocation really occupies. */
#define ALLOC_PITCH(rt, name)                                                \
	MEMQ_REAL_FN(rt, int, name, (void **, size_t *, size_t, size_t));    \
	MEMQ_EXPORT int name(void **p, size_t *pitch, size_t w, size_t h)    \
	{                                                                    \
		WRAP_HEAD(rt, name, alloc, (p, pitch, w, h));                \
		EMIT_ALLOC(name, MEMQ_MEM_DEVICE, U64(*p),                   \
			r == 0 ? (uint64_t) *pitch * h : 0, 0, 0, w, h, 0);  \
		return r;                                                    \
	}

#define REGISTER(rt, name)                                                   \
	MEMQ_REAL_FN(rt, int, name, (void *, size_t, unsigned int));         \
	MEMQ_EXPORT int name(void *p, size_t n, unsigned int flags)          \
	{                                                                    \
		WRAP_HEAD(rt, name, register, (p, n, flags));                \
		EMIT_ALLOC(name, MEMQ_MEM_REGISTERED, U64(p), n, 0, flags, 0, 0, 1); \
		return r;                                                    \
	}

/* ---- releases: the table entry is taken out before the real call ---- */
#define RELEASE(rt, name, event, registered, params, args, strm)             \
	MEMQ_REAL_FN(rt, int, name, params);                                 \
	MEMQ_EXPORT int name params                                          \
	{                                                                    \
		name##_fn real = MEMQ_REAL(name);                            \
		struct memq_alloc_info info;                                 \
		struct memq_call c;                                          \
		int r, taken;                                                \
		if (!real)                                                   \
			return MEMQ_ERR_NO_RUNTIME;                          \
		if (!MEMQ_BEGIN(&c, lttng_ust_tracepoint_enabled(memq, event), rt)) { \
			taken = memq_release_take(U64(p), registered, &info);\
			r = real args;                                       \
			memq_release_done(U64(p), registered, taken, &info, r); \
			return r;                                            \
		}                                                            \
		taken = memq_release_take(U64(p), registered, &info);        \
		r = real args;                                               \
		memq_after(&c);                                              \
		memq_release_done(U64(p), registered, taken, &info, r);      \
		{                                                            \
			struct memq_free_rec rec = {                         \
				.api = MEMQ_API_##name, .mem_kind = info.kind,\
				.result = r, .ptr = U64(p),                  \
				.size = info.size, .stream = U64(strm) };    \
			memq_emit_free(&c, &rec, registered);                \
		}                                                            \
		return r;                                                    \
	}

#define FREE_P(rt, name) RELEASE(rt, name, free, 0, (void *p), (p), 0)
#define FREE_ASYNC(rt, name) RELEASE(rt, name, free, 0, (void *p, void *stream), (p, stream), stream)
#define UNREGISTER(rt, name) RELEASE(rt, name, unregister, 1, (void *p), (p), 0)

/* ---- copies ---- */
#define EMIT_COPY(name, d, s, n, k, strm, w, h, dp, sp)                      \
	do {                                                                 \
		struct memq_copy_rec rec = {                                 \
			.api = MEMQ_API_##name, .dst = U64(d), .src = U64(s),\
			.bytes = (n), .kind = (k), .stream = U64(strm),      \
			.src_device = -1, .width = (w), .height = (h),       \
			.dpitch = (dp), .spitch = (sp), .result = r };       \
		memq_emit_copy(&c, &rec);                                    \
	} while (0)

/* (dst, src, bytes, kind) on `strm` (a constant for the synchronous calls) */
#define COPY(rt, name, strm)                                                 \
	MEMQ_REAL_FN(rt, int, name, (void *, const void *, size_t, int));    \
	MEMQ_EXPORT int name(void *d, const void *s, size_t n, int kind)     \
	{                                                                    \
		WRAP_HEAD(rt, name, copy, (d, s, n, kind));                  \
		EMIT_COPY(name, d, s, n, kind, strm, 0, 0, 0, 0);            \
		return r;                                                    \
	}

#define COPY_ASYNC(rt, name)                                                 \
	MEMQ_REAL_FN(rt, int, name, (void *, const void *, size_t, int, void *)); \
	MEMQ_EXPORT int name(void *d, const void *s, size_t n, int kind, void *stream) \
	{                                                                    \
		WRAP_HEAD(rt, name, copy, (d, s, n, kind, stream));          \
		EMIT_COPY(name, d, s, n, kind, stream, 0, 0, 0, 0);          \
		return r;                                                    \
	}

/* hipMemcpyHtoD and friends: the direction is in the name. */
#define COPY_FIXED(rt, name, kind)                                           \
	MEMQ_REAL_FN(rt, int, name, (void *, void *, size_t));               \
	MEMQ_EXPORT int name(void *d, void *s, size_t n)                     \
	{                                                                    \
		WRAP_HEAD(rt, name, copy, (d, s, n));                        \
		EMIT_COPY(name, d, s, n, kind, 0, 0, 0, 0, 0);               \
		return r;                                                    \
	}

#define COPY_FIXED_ASYNC(rt, name, kind)                                     \
	MEMQ_REAL_FN(rt, int, name, (void *, void *, size_t, void *));       \
	MEMQ_EXPORT int name(void *d, void *s, size_t n, void *stream)       \
	{                                                                    \
		WRAP_HEAD(rt, name, copy, (d, s, n, stream));                \
		EMIT_COPY(name, d, s, n, kind, stream, 0, 0, 0, 0);          \
		return r;                                                    \
	}

/* 2D: bytes moved = width * height. */
#define COPY_2D(rt, name, strm)                                              \
	MEMQ_REAL_FN(rt, int, name, (void *, size_t, const void *, size_t, size_t, size_t, int)); \
	MEMQ_EXPORT int name(void *d, size_t dp, const void *s, size_t sp, size_t w, size_t h, int kind) \
	{                                                                    \
		WRAP_HEAD(rt, name, copy, (d, dp, s, sp, w, h, kind));       \
		EMIT_COPY(name, d, s, (uint64_t) w * h, kind, strm, w, h, dp, sp); \
		return r;                                                    \
	}

#define COPY_2D_ASYNC(rt, name)                                              \
	MEMQ_REAL_FN(rt, int, name, (void *, size_t, const void *, size_t, size_t, size_t, int, void *)); \
	MEMQ_EXPORT int name(void *d, size_t dp, const void *s, size_t sp, size_t w, size_t h, int kind, void *stream) \
	{                                                                    \
		WRAP_HEAD(rt, name, copy, (d, dp, s, sp, w, h, kind, stream)); \
		EMIT_COPY(name, d, s, (uint64_t) w * h, kind, stream, w, h, dp, sp); \
		return r;                                                    \
	}

/* Peer copies: device = destination device, src_device = source device. */
#define EMIT_PEER(name, d, dd, s, sd, n, strm)                               \
	do {                                                                 \
		struct memq_copy_rec rec = {                                 \
			.api = MEMQ_API_##name, .dst = U64(d), .src = U64(s),\
			.bytes = (n), .kind = MEMQ_DTOD, .stream = U64(strm),\
			.device = (dd), .src_device = (sd), .result = r };   \
		memq_emit_copy(&c, &rec);                                    \
	} while (0)

#define COPY_PEER(rt, name)                                                  \
	MEMQ_REAL_FN(rt, int, name, (void *, int, const void *, int, size_t)); \
	MEMQ_EXPORT int name(void *d, int dd, const void *s, int sd, size_t n) \
	{                                                                    \
		WRAP_HEAD(rt, name, copy, (d, dd, s, sd, n));                \
		EMIT_PEER(name, d, dd, s, sd, n, 0);                         \
		return r;                                                    \
	}

#define COPY_PEER_ASYNC(rt, name)                                            \
	MEMQ_REAL_FN(rt, int, name, (void *, int, const void *, int, size_t, void *)); \
	MEMQ_EXPORT int name(void *d, int dd, const void *s, int sd, size_t n, void *stream) \
	{                                                                    \
		WRAP_HEAD(rt, name, copy, (d, dd, s, sd, n, stream));        \
		EMIT_PEER(name, d, dd, s, sd, n, stream);                    \
		return r;                                                    \
	}

/* ---- sets: `vt` is the value's type, bytes = count * `elem` ---- */
#define EMIT_SET(name, d, v, n, strm)                                        \
	do {                                                                 \
		struct memq_set_rec rec = {                                  \
			.api = MEMQ_API_##name, .dst = U64(d), .value = (v), \
			.bytes = (n), .stream = U64(strm), .result = r };    \
		memq_emit_set(&c, &rec);                                     \
	} while (0)

#define SET(rt, name, vt, elem, strm)                                              \
	MEMQ_REAL_FN(rt, int, name, (void *, vt, size_t));                   \
	MEMQ_EXPORT int name(void *d, vt v, size_t count)                    \
	{                                                                    \
		WRAP_HEAD(rt, name, set, (d, v, count));                     \
		EMIT_SET(name, d, (int32_t) v, (uint64_t) count * (elem), strm); \
		return r;                                                    \
	}

#define SET_ASYNC(rt, name, vt, elem)                                              \
	MEMQ_REAL_FN(rt, int, name, (void *, vt, size_t, void *));           \
	MEMQ_EXPORT int name(void *d, vt v, size_t count, void *stream)      \
	{                                                                    \
		WRAP_HEAD(rt, name, set, (d, v, count, stream));             \
		EMIT_SET(name, d, (int32_t) v, (uint64_t) count * (elem), stream); \
		return r;                                                    \
	}

/* ---- synchronisations and device selection ---- */
#define EMIT_SYNC(name, strm)                                                \
	do {                                                                 \
		struct memq_sync_rec rec = {                                 \
			.api = MEMQ_API_##name, .stream = U64(strm), .result = r }; \
		memq_emit_sync(&c, &rec);                                    \
	} while (0)

#define SYNC_STREAM(rt, name)                                                \
	MEMQ_REAL_FN(rt, int, name, (void *));                               \
	MEMQ_EXPORT int name(void *stream)                                   \
	{                                                                    \
		WRAP_HEAD(rt, name, sync, (stream));                         \
		EMIT_SYNC(name, stream);                                     \
		return r;                                                    \
	}

#define SYNC_DEVICE(rt, name)                                                \
	MEMQ_REAL_FN(rt, int, name, (void));                                 \
	MEMQ_EXPORT int name(void)                                           \
	{                                                                    \
		WRAP_HEAD(rt, name, sync, ());                               \
		EMIT_SYNC(name, 0);                                          \
		return r;                                                    \
	}

#define SET_DEVICE(rt, name)                                                 \
	MEMQ_REAL_FN(rt, int, name, (int));                                  \
	MEMQ_EXPORT int name(int dev)                                        \
	{                                                                    \
		WRAP_HEAD(rt, name, set_device, (dev));                      \
		{                                                            \
			struct memq_set_device_rec rec = {                   \
				.api = MEMQ_API_##name, .new_device = dev,   \
				.result = r };                               \
			memq_emit_set_device(&c, &rec);                      \
		}                                                            \
		return r;                                                    \
	}

/* ---- managed memory hints ---- */
#define EMIT_PREFETCH(name, p, n, dst_dev, strm)                             \
	do {                                                                 \
		struct memq_prefetch_rec rec = {                             \
			.api = MEMQ_API_##name, .ptr = U64(p), .bytes = (n), \
			.dst_device = (dst_dev), .stream = U64(strm),        \
			.result = r };                                       \
		memq_emit_prefetch(&c, &rec);                                \
	} while (0)

#define EMIT_ADVISE(name, p, n, adv, target)                                 \
	do {                                                                 \
		struct memq_advise_rec rec = {                               \
			.api = MEMQ_API_##name, .ptr = U64(p), .bytes = (n), \
			.advice = (adv), .target_device = (target),          \
			.result = r };                                       \
		memq_emit_advise(&c, &rec);                                  \
	} while (0)

#endif /* MEMQ_WRAP_H */
