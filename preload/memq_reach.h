/*
 * memq preload library: 3D copy geometry shared by the HIP,
 * CUDA runtime and CUDA driver wrappers, and the hooks memq_core.c calls
 * for the CUDA driver (device queries) and the end-of-process reach report.
 *
 * A 3D copy is written as rows of rows: `depth` slices of `height` rows of
 * `width` bytes; rows are `dpitch`/`spitch` apart within a slice, slices
 * `dslice`/`sslice` apart. dst/src are the first byte copied (the copy's
 * position already applied).
 */
#ifndef MEMQ_REACH_H
#define MEMQ_REACH_H

#include "memq_wrap.h"

/* cudaMemcpy3DParms == hipMemcpy3DParms (cuda_runtime_api.h / hip_runtime_api.h). */
struct memq_pos { size_t x, y, z; };
struct memq_pitched_ptr { void *ptr; size_t pitch, xsize, ysize; };
struct memq_extent { size_t width, height, depth; };
struct memq_rt_copy3d {
	void *src_array;
	struct memq_pos src_pos;
	struct memq_pitched_ptr src_ptr;
	void *dst_array;
	struct memq_pos dst_pos;
	struct memq_pitched_ptr dst_ptr;
	struct memq_extent extent;
	int kind;
};

/* First byte of a pitched 3D region at a position; 0 for arrays (no address). */
static inline uint64_t memq_pitched_at(const struct memq_pitched_ptr *p, const void *array,
	const struct memq_pos *pos)
{
	if (array || !p->ptr)
		return 0;
	return U64(p->ptr) + ((uint64_t) pos->z * p->ysize + pos->y) * p->pitch + pos->x;
}

/* The memq:copy record of a runtime 3D copy. */
static inline void memq_rt_copy3d_rec(struct memq_copy_rec *rec, int api, const struct memq_rt_copy3d *p,
	void *stream)
{
	const struct memq_extent *e = &p->extent;

	*rec = (struct memq_copy_rec) {
		.api = api, .kind = p->kind, .stream = U64(stream), .src_device = -1,
		.dst = memq_pitched_at(&p->dst_ptr, p->dst_array, &p->dst_pos),
		.src = memq_pitched_at(&p->src_ptr, p->src_array, &p->src_pos),
		.bytes = (uint64_t) e->width * e->height * e->depth,
		.width = e->width, .height = e->height, .depth = e->depth,
		.dpitch = p->dst_ptr.pitch, .spitch = p->src_ptr.pitch,
		.dslice = (uint64_t) p->dst_ptr.pitch * p->dst_ptr.ysize,
		.sslice = (uint64_t) p->src_ptr.pitch * p->src_ptr.ysize,
	};
}

/* (a NULL description: recorded with no addresses, the runtime's error in `result`) */
#define RT_COPY_3D_INIT(name, p, strm)                                       \
	(p ? memq_rt_copy3d_rec(&rec, MEMQ_API_##name, p, MEMQ_STREAM_PTR(name, strm)) \
	   : memq_copy_init(&rec, MEMQ_API_##name, 0, 0, 0, MEMQ_DEFAULT, MEMQ_STREAM_PTR(name, strm), 0, 0, 0, 0))

#define COPY_3D(rt, name, strm)                                              \
	COPY_WRAPPER(rt, name, (const struct memq_rt_copy3d *p), (p), 0, RT_COPY_3D_INIT(name, p, strm))

#define COPY_3D_ASYNC(rt, name)                                              \
	COPY_WRAPPER(rt, name, (const struct memq_rt_copy3d *p, void *stream), (p, stream), 1, \
		RT_COPY_3D_INIT(name, p, stream))

/* CUDA driver (the runtime object `route`): the current context's device
 * (-1 without one), and memq:device. */
int memq_driver_current_device(int route);
void memq_driver_describe_devices(int route);

/* Traced calls per runtime (enum memq_runtime index), for the exit report:
 * counted in one of MEMQ_CALL_STRIPES cache lines per thread, so that
 * threads tracing at the same time do not bounce one line between them. */
#define MEMQ_CALL_STRIPES 16
struct memq_call_counts { unsigned long n[4]; } __attribute__((aligned(64)));
extern struct memq_call_counts memq_traced_calls[MEMQ_CALL_STRIPES];
extern __thread unsigned memq_call_stripe __attribute__((tls_model("initial-exec")));
unsigned memq_call_stripe_assign(void);

static inline void memq_count_traced(int runtime)
{
	unsigned stripe = memq_call_stripe ? memq_call_stripe : memq_call_stripe_assign();

	__atomic_add_fetch(&memq_traced_calls[stripe - 1].n[runtime], 1, __ATOMIC_RELAXED);
}

/* Asynchronous copies left without an after-fingerprint (memq_content.c: too many awaiting completion). */
extern unsigned long memq_content_dropped;
/* At process exit: when `memq record` asked for it (MEMQ_REACH_DIR), write which GPU
 * libraries this process loaded and how many of their calls were traced. */
void memq_reach_report(void);

#endif /* MEMQ_REACH_H */
