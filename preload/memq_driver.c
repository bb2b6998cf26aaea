/*
 * CUDA driver API wrappers (libcuda.so.1), cuGetProcAddress and the
 * runtimes' entry-point lookups, and the virtual memory management (VMM)
 * calls of CUDA and HIP.
 *
 * Signatures from cuda.h (CUDA 12/13): CUresult is an int, CUdeviceptr an
 * unsigned long long and CUstream/CUcontext pointers; in the x86-64 and
 * AArch64 C ABIs a CUdeviceptr travels like a pointer, so the shapes of
 * memq_wrap.h (void * parameters) serve the driver too. The names are the
 * exported ones (cuMemAlloc_v2, cuMemcpyHtoD_v2_ptds, ...): cuda.h maps the
 * plain names onto them, and cuGetProcAddress returns them.
 *
 * A runtime call that reaches a wrapped driver call (cudaMalloc ->
 * cuMemAlloc_v2) is one event: the driver wrapper runs nested
 * (memq_nesting) and goes straight to the real function. A program that
 * reaches the driver without a wrapped runtime call (static cudart, JAX,
 * direct driver use) gets the driver events.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "memq_elf.h"
#include "memq_reach.h"

#define DRV MEMQ_RT_CUDRV
#define HIP MEMQ_RT_HIP
#define CUDA MEMQ_RT_CUDA
#define PER_THREAD ((void *) 0x2)     /* CU_STREAM_PER_THREAD */

/* ---------------------------------------------------------------------- */
/* Allocations, frees, host registration                                   */
/* ---------------------------------------------------------------------- */

ALLOC_PS(DRV, cuMemAlloc_v2, MEMQ_MEM_DEVICE)
ALLOC_PSF(DRV, cuMemAllocManaged, MEMQ_MEM_MANAGED)
ALLOC_PS(DRV, cuMemAllocHost_v2, MEMQ_MEM_PINNED)
ALLOC_PSF(DRV, cuMemHostAlloc, MEMQ_MEM_PINNED)
ALLOC_ASYNC(DRV, cuMemAllocAsync)
ALLOC_ASYNC(DRV, cuMemAllocAsync_ptsz)
ALLOC_POOL(DRV, cuMemAllocFromPoolAsync)
ALLOC_POOL(DRV, cuMemAllocFromPoolAsync_ptsz)
REGISTER(DRV, cuMemHostRegister_v2)
UNREGISTER(DRV, cuMemHostUnregister)
FREE_P(DRV, cuMemFree_v2)
FREE_P(DRV, cuMemFreeHost)
FREE_ASYNC(DRV, cuMemFreeAsync)
FREE_ASYNC(DRV, cuMemFreeAsync_ptsz)

/* cuMemAllocPitch_v2(CUdeviceptr *, size_t *pitch, size_t width, size_t height,
 * unsigned int element_size): size = pitch * height, as for the runtimes. */
WRAPPER(DRV, cuMemAllocPitch_v2, alloc, (void **p, size_t *pitch, size_t w, size_t h, unsigned int elem),
	(p, pitch, w, h, elem),
	EMIT_ALLOC(cuMemAllocPitch_v2, MEMQ_MEM_DEVICE, U64(*p), r == 0 ? (uint64_t) *pitch * h : 0, 0, 0, w, h, 0))

/* ---------------------------------------------------------------------- */
/* Linear copies and sets                                                  */
/* ---------------------------------------------------------------------- */

/* cuMemcpy: unified addressing, the direction is the runtime's to find. */
COPY_FIXED(DRV, cuMemcpy, MEMQ_DEFAULT)
COPY_FIXED_ASYNC(DRV, cuMemcpyAsync, MEMQ_DEFAULT)
COPY_FIXED_ASYNC(DRV, cuMemcpyAsync_ptsz, MEMQ_DEFAULT)
COPY_FIXED(DRV, cuMemcpyHtoD_v2, MEMQ_HTOD)
COPY_FIXED(DRV, cuMemcpyDtoH_v2, MEMQ_DTOH)
COPY_FIXED(DRV, cuMemcpyDtoD_v2, MEMQ_DTOD)
COPY_FIXED_ASYNC(DRV, cuMemcpyHtoDAsync_v2, MEMQ_HTOD)
COPY_FIXED_ASYNC(DRV, cuMemcpyDtoHAsync_v2, MEMQ_DTOH)
COPY_FIXED_ASYNC(DRV, cuMemcpyDtoDAsync_v2, MEMQ_DTOD)
COPY_FIXED_ASYNC(DRV, cuMemcpyHtoDAsync_v2_ptsz, MEMQ_HTOD)
COPY_FIXED_ASYNC(DRV, cuMemcpyDtoHAsync_v2_ptsz, MEMQ_DTOH)
COPY_FIXED_ASYNC(DRV, cuMemcpyDtoDAsync_v2_ptsz, MEMQ_DTOD)

/* The _ptds exports (per-thread default stream) record stream 0x2, like cudart's. */
#define COPY_FIXED_PTDS(name, kind)                                          \
	COPY_WRAPPER(DRV, name, (void *d, void *s, size_t n), (d, s, n), 0,  \
		COPY_INIT(name, d, s, n, kind, PER_THREAD, 0, 0, 0, 0))
COPY_FIXED_PTDS(cuMemcpy_ptds, MEMQ_DEFAULT)
COPY_FIXED_PTDS(cuMemcpyHtoD_v2_ptds, MEMQ_HTOD)
COPY_FIXED_PTDS(cuMemcpyDtoH_v2_ptds, MEMQ_DTOH)
COPY_FIXED_PTDS(cuMemcpyDtoD_v2_ptds, MEMQ_DTOD)

SET(DRV, cuMemsetD8_v2, unsigned char, 1, 0)
SET(DRV, cuMemsetD16_v2, unsigned short, 2, 0)
SET(DRV, cuMemsetD32_v2, unsigned int, 4, 0)
SET(DRV, cuMemsetD8_v2_ptds, unsigned char, 1, PER_THREAD)
SET(DRV, cuMemsetD16_v2_ptds, unsigned short, 2, PER_THREAD)
SET(DRV, cuMemsetD32_v2_ptds, unsigned int, 4, PER_THREAD)
SET_ASYNC(DRV, cuMemsetD8Async, unsigned char, 1)
SET_ASYNC(DRV, cuMemsetD16Async, unsigned short, 2)
SET_ASYNC(DRV, cuMemsetD32Async, unsigned int, 4)
SET_ASYNC(DRV, cuMemsetD8Async_ptsz, unsigned char, 1)
SET_ASYNC(DRV, cuMemsetD16Async_ptsz, unsigned short, 2)
SET_ASYNC(DRV, cuMemsetD32Async_ptsz, unsigned int, 4)

SYNC_STREAM(DRV, cuStreamSynchronize)
SYNC_STREAM(DRV, cuStreamSynchronize_ptsz)
SYNC_DEVICE(DRV, cuCtxSynchronize)
/* CUDA 13's form, with the context to synchronise: what cuGetProcAddress returns
 * for "cuCtxSynchronize" at version 13000 (the CUDA 13 runtime's device sync). */
/* A context other than the current one: its device is not known here, so it completes no copy (issued 0). */
WRAPPER_PRE(DRV, cuCtxSynchronize_v2, sync, (void *ctx), (ctx),
	(uint64_t issued = ctx ? 0 : memq_content_issued();), (EMIT_SYNC(cuCtxSynchronize_v2, 0, issued)))

/* cuMemPrefetchAsync(CUdeviceptr, size_t, CUdevice, CUstream): the exported
 * name keeps this form for good; the CUmemLocation form is the _v2 export
 * (cuda.h maps the plain name onto it from CUDA 13 on). */
WRAPPER(DRV, cuMemPrefetchAsync, prefetch, (void *p, size_t n, int device, void *stream),
	(p, n, device, stream), EMIT_PREFETCH(cuMemPrefetchAsync, p, n, device, stream))
WRAPPER(DRV, cuMemPrefetchAsync_ptsz, prefetch, (void *p, size_t n, int device, void *stream),
	(p, n, device, stream), EMIT_PREFETCH(cuMemPrefetchAsync_ptsz, p, n, device, stream))

WRAPPER(DRV, cuMemPrefetchAsync_v2, prefetch, (void *p, size_t n, struct memq_location loc, unsigned int flags, void *stream),
	(p, n, loc, flags, stream), EMIT_PREFETCH(cuMemPrefetchAsync_v2, p, n, memq_location_device(loc), stream))
WRAPPER(DRV, cuMemPrefetchAsync_v2_ptsz, prefetch, (void *p, size_t n, struct memq_location loc, unsigned int flags, void *stream),
	(p, n, loc, flags, stream), EMIT_PREFETCH(cuMemPrefetchAsync_v2_ptsz, p, n, memq_location_device(loc), stream))
WRAPPER(DRV, cuMemAdvise_v2, advise, (void *p, size_t n, int advice, struct memq_location loc),
	(p, n, advice, loc), EMIT_ADVISE(cuMemAdvise_v2, p, n, advice, memq_location_device(loc)))

/* cuMemcpyPeer[Async](dst, dst context, src, src context, bytes[, stream]):
 * what cudaMemcpyPeer becomes under nvcc's static runtime. The devices sit
 * behind the contexts; asking the driver for them here would cost a call per
 * copy, so the event gives the current device and src_device -1 (unknown). */
#define CU_COPY_PEER(name, strm)                                             \
	COPY_WRAPPER(DRV, name, (void *d, void *dctx, const void *s, void *sctx, size_t n), \
		(d, dctx, s, sctx, n), 0, COPY_INIT(name, d, s, n, MEMQ_DTOD, strm, 0, 0, 0, 0))
#define CU_COPY_PEER_ASYNC(name)                                             \
	COPY_WRAPPER(DRV, name, (void *d, void *dctx, const void *s, void *sctx, size_t n, void *stream), \
		(d, dctx, s, sctx, n, stream), 1, COPY_INIT(name, d, s, n, MEMQ_DTOD, stream, 0, 0, 0, 0))
CU_COPY_PEER(cuMemcpyPeer, 0)
CU_COPY_PEER(cuMemcpyPeer_ptds, PER_THREAD)
CU_COPY_PEER_ASYNC(cuMemcpyPeerAsync)
CU_COPY_PEER_ASYNC(cuMemcpyPeerAsync_ptsz)

/* cuMemAdvise(ptr, bytes, advice, CUdevice) and cuMemAdvise_v2(..., CUmemLocation):
 * what cudaMemAdvise becomes under the static runtime. */
WRAPPER(DRV, cuMemAdvise, advise, (void *p, size_t n, int advice, int device),
	(p, n, advice, device), EMIT_ADVISE(cuMemAdvise, p, n, advice, device))

/* ---------------------------------------------------------------------- */
/* 2D and 3D copies described by a struct                                  */
/* ---------------------------------------------------------------------- */

enum { CU_MEMORYTYPE_HOST = 1, CU_MEMORYTYPE_DEVICE = 2, CU_MEMORYTYPE_ARRAY = 3, CU_MEMORYTYPE_UNIFIED = 4 };

/* CUDA_MEMCPY2D (cuda.h) */
struct cu_copy2d {
	size_t src_x, src_y; int src_type; const void *src_host; uint64_t src_device; void *src_array;
	size_t src_pitch;
	size_t dst_x, dst_y; int dst_type; void *dst_host; uint64_t dst_device; void *dst_array;
	size_t dst_pitch;
	size_t width, height;
};

/* CUDA_MEMCPY3D (cuda.h) */
struct cu_copy3d {
	size_t src_x, src_y, src_z, src_lod; int src_type; const void *src_host; uint64_t src_device;
	void *src_array; void *reserved0; size_t src_pitch, src_height;
	size_t dst_x, dst_y, dst_z, dst_lod; int dst_type; void *dst_host; uint64_t dst_device;
	void *dst_array; void *reserved1; size_t dst_pitch, dst_height;
	size_t width, height, depth;
};

/* Base address of one side (0 for arrays: they have no address). */
static uint64_t cu_side(int type, const void *host, uint64_t device)
{
	if (type == CU_MEMORYTYPE_HOST)
		return U64(host);
	return type == CU_MEMORYTYPE_DEVICE || type == CU_MEMORYTYPE_UNIFIED ? device : 0;
}

/* memcpy kind from the two memory types; unified memory: Default (the runtime decides). */
static int cu_kind(int src_type, int dst_type)
{
	int src_dev = src_type != CU_MEMORYTYPE_HOST, dst_dev = dst_type != CU_MEMORYTYPE_HOST;

	if (src_type == CU_MEMORYTYPE_UNIFIED || dst_type == CU_MEMORYTYPE_UNIFIED)
		return MEMQ_DEFAULT;
	return src_dev ? (dst_dev ? MEMQ_DTOD : MEMQ_DTOH) : (dst_dev ? MEMQ_HTOD : MEMQ_HTOH);
}

static void cu_copy2d_rec(struct memq_copy_rec *rec, int api, const struct cu_copy2d *p, void *stream)
{
	uint64_t src = cu_side(p->src_type, p->src_host, p->src_device);
	uint64_t dst = cu_side(p->dst_type, p->dst_host, p->dst_device);

	*rec = (struct memq_copy_rec) {
		.api = api, .kind = cu_kind(p->src_type, p->dst_type), .stream = U64(stream),
		.src_device = -1,
		.src = src ? src + (uint64_t) p->src_y * p->src_pitch + p->src_x : 0,
		.dst = dst ? dst + (uint64_t) p->dst_y * p->dst_pitch + p->dst_x : 0,
		.bytes = (uint64_t) p->width * p->height, .width = p->width, .height = p->height,
		.dpitch = p->dst_pitch, .spitch = p->src_pitch,
	};
}

static void cu_copy3d_rec(struct memq_copy_rec *rec, int api, const struct cu_copy3d *p, void *stream)
{
	uint64_t src = cu_side(p->src_type, p->src_host, p->src_device);
	uint64_t dst = cu_side(p->dst_type, p->dst_host, p->dst_device);
	uint64_t sslice = (uint64_t) p->src_pitch * p->src_height, dslice = (uint64_t) p->dst_pitch * p->dst_height;

	*rec = (struct memq_copy_rec) {
		.api = api, .kind = cu_kind(p->src_type, p->dst_type), .stream = U64(stream),
		.src_device = -1,
		.src = src ? src + p->src_z * sslice + (uint64_t) p->src_y * p->src_pitch + p->src_x : 0,
		.dst = dst ? dst + p->dst_z * dslice + (uint64_t) p->dst_y * p->dst_pitch + p->dst_x : 0,
		.bytes = (uint64_t) p->width * p->height * p->depth,
		.width = p->width, .height = p->height, .depth = p->depth,
		.dpitch = p->dst_pitch, .spitch = p->src_pitch, .dslice = dslice, .sslice = sslice,
	};
}

/* (a NULL description: recorded with no addresses, the runtime's error in `result`) */
#define CU_COPY_INIT(fill, name, p, strm)                                    \
	(p ? fill(&rec, MEMQ_API_##name, p, MEMQ_STREAM_PTR(name, strm))     \
	   : memq_copy_init(&rec, MEMQ_API_##name, 0, 0, 0, MEMQ_DEFAULT, MEMQ_STREAM_PTR(name, strm), 0, 0, 0, 0))
#define CU_COPY_STRUCT(fill, type, name, strm)                               \
	COPY_WRAPPER(DRV, name, (const type *p), (p), 0, CU_COPY_INIT(fill, name, p, strm))
#define CU_COPY_STRUCT_ASYNC(fill, type, name)                               \
	COPY_WRAPPER(DRV, name, (const type *p, void *stream), (p, stream), 1, \
		CU_COPY_INIT(fill, name, p, stream))

CU_COPY_STRUCT(cu_copy2d_rec, struct cu_copy2d, cuMemcpy2D_v2, 0)
CU_COPY_STRUCT(cu_copy2d_rec, struct cu_copy2d, cuMemcpy2D_v2_ptds, PER_THREAD)
CU_COPY_STRUCT(cu_copy2d_rec, struct cu_copy2d, cuMemcpy2DUnaligned_v2, 0)
CU_COPY_STRUCT(cu_copy2d_rec, struct cu_copy2d, cuMemcpy2DUnaligned_v2_ptds, PER_THREAD)
CU_COPY_STRUCT_ASYNC(cu_copy2d_rec, struct cu_copy2d, cuMemcpy2DAsync_v2)
CU_COPY_STRUCT_ASYNC(cu_copy2d_rec, struct cu_copy2d, cuMemcpy2DAsync_v2_ptsz)
CU_COPY_STRUCT(cu_copy3d_rec, struct cu_copy3d, cuMemcpy3D_v2, 0)
CU_COPY_STRUCT(cu_copy3d_rec, struct cu_copy3d, cuMemcpy3D_v2_ptds, PER_THREAD)
CU_COPY_STRUCT_ASYNC(cu_copy3d_rec, struct cu_copy3d, cuMemcpy3DAsync_v2)
CU_COPY_STRUCT_ASYNC(cu_copy3d_rec, struct cu_copy3d, cuMemcpy3DAsync_v2_ptsz)

/* ---------------------------------------------------------------------- */
/* Virtual memory management (CUDA and HIP share the shapes)               */
/* ---------------------------------------------------------------------- */

/*
 * A mapping is the allocation copies resolve to: memq:alloc (api
 * cuMemMap/hipMemMap, device memory, flags = the physical handle, device =
 * the handle's device). cuMemUnmap/hipMemUnmap is memq:free with the
 * unmapped range. Handle creation, release and address reservation
 * allocate nothing a copy can reach, so they are not events; the wrappers
 * only remember each handle's device, with a count of its mappings, so that
 * a release before the last unmap (legal: the memory lives until then) and
 * one handle mapped at several addresses keep their device. Mappings live in
 * a small interval list, so an unmap of part of a mapping keeps the rest.
 * VMM calls are rare (a few per segment): fixed arrays and one lock.
 */
#define VMM_HANDLES 4096
#define VMM_MAPS 16384

struct vmm_handle { uint64_t handle; int device; int maps; int released; };
struct vmm_map { uint64_t addr, size, handle; };

static struct vmm_handle vmm_handles[VMM_HANDLES];
static struct vmm_map vmm_maps[VMM_MAPS];
static pthread_mutex_t vmm_lock = PTHREAD_MUTEX_INITIALIZER;

static struct vmm_handle *vmm_find_handle(uint64_t handle)
{
	for (int i = 0; i < VMM_HANDLES; i++)
		if (vmm_handles[i].handle == handle && handle)
			return &vmm_handles[i];
	return NULL;
}

static void vmm_drop_if_unused(struct vmm_handle *h)
{
	if (h && h->released && h->maps <= 0)
		memset(h, 0, sizeof(*h));
}

/* The allocation properties' location (CUmemAllocationProp == hipMemAllocationProp). */
struct vmm_prop { int type, handle_types; struct memq_location location; };

static void vmm_created(uint64_t handle, const struct vmm_prop *prop)
{
	pthread_mutex_lock(&vmm_lock);
	for (int i = 0; i < VMM_HANDLES; i++) {
		if (!vmm_handles[i].handle) {
			vmm_handles[i] = (struct vmm_handle) { handle, prop ? memq_location_device(prop->location) : -1, 0, 0 };
			break;
		}
	}
	pthread_mutex_unlock(&vmm_lock);
}

static void vmm_released(uint64_t handle)
{
	pthread_mutex_lock(&vmm_lock);
	struct vmm_handle *h = vmm_find_handle(handle);

	if (h) {
		h->released = 1;
		vmm_drop_if_unused(h);
	}
	pthread_mutex_unlock(&vmm_lock);
}

/* Records a mapping; returns the handle's device (-1 when the handle was created untraced). */
static int vmm_mapped(uint64_t addr, uint64_t size, uint64_t handle)
{
	int device = -1;

	pthread_mutex_lock(&vmm_lock);
	struct vmm_handle *h = vmm_find_handle(handle);

	if (h) {
		h->maps++;
		device = h->device;
	}
	for (int i = 0; i < VMM_MAPS; i++) {
		if (!vmm_maps[i].size) {
			vmm_maps[i] = (struct vmm_map) { addr, size, handle };
			break;
		}
	}
	pthread_mutex_unlock(&vmm_lock);
	return device;
}

/* A mapping an unmap ended. */
struct vmm_ended { uint64_t addr, size; int device; };
#define VMM_ENDED_MAX 64

/*
 * Ends mappings that [addr, addr + size) touches, whole (CUDA allows
 * unmapping only whole mappings; one unmap may span several adjacent ones),
 * at most VMM_ENDED_MAX per call: fills `out` and returns how many ended.
 */
static int vmm_unmapped(uint64_t addr, uint64_t size, struct vmm_ended *out)
{
	uint64_t end = addr + size;
	int n = 0;

	pthread_mutex_lock(&vmm_lock);
	for (int i = 0; i < VMM_MAPS && n < VMM_ENDED_MAX; i++) {
		struct vmm_map m = vmm_maps[i];
		struct vmm_handle *h;

		if (!m.size || m.addr >= end || m.addr + m.size <= addr)
			continue;
		h = vmm_find_handle(m.handle);
		out[n++] = (struct vmm_ended) { m.addr, m.size, h ? h->device : -1 };
		vmm_maps[i].size = 0;
		if (h) {
			h->maps--;
			vmm_drop_if_unused(h);
		}
	}
	pthread_mutex_unlock(&vmm_lock);
	return n;
}

/*
 * The memq:free events of one unmap, then the end of the call: one event
 * per mapping it ended (the model ends allocations by their start address),
 * all with the call's begin time; one with the call's own range when it
 * ended no known mapping (a failed call, a mapping made before the session).
 */
static void vmm_emit_unmap(struct memq_call *c, int api, uint64_t p, uint64_t n, int r)
{
	struct vmm_ended ended[VMM_ENDED_MAX];
	struct memq_alloc_info info;
	int how;
	int k, total = 0;

	do {
		k = r == 0 ? vmm_unmapped(p, n, ended) : 0;
		for (int i = 0; i < k; i++) {
			struct memq_free_rec rec = {
				.api = api, .mem_kind = MEMQ_MEM_DEVICE, .result = r, .ptr = ended[i].addr,
				.size = ended[i].size, .device = ended[i].device >= 0 ? ended[i].device : c->device,
				.begin_ns = c->begin_ns };

			memq_release_take(ended[i].addr, 0, &info);
			/* raced: see memq_emit_free */
			how = memq_window_commit(c->traced ? c->window : info.raced);
			if (how) {
				if (!c->traced)
					rec.begin_ns = memq_now_ns();
				lttng_ust_do_tracepoint(memq, free, &rec, c->ip);
				memq_window_done(how);
			}
		}
		total += k;
	} while (k == VMM_ENDED_MAX);
	if (!total && (how = memq_window_commit(c->traced ? c->window : 0))) {
		struct memq_free_rec rec = {
			.api = api, .mem_kind = MEMQ_MEM_DEVICE, .result = r, .ptr = p, .size = n,
			.device = c->device, .begin_ns = c->begin_ns };

		lttng_ust_do_tracepoint(memq, free, &rec, c->ip);
		memq_window_done(how);
	}
	memq_end(c);
}

/*
 * The bookkeeping runs only while a session records (the event is enabled),
 * like the allocation table: without a session a VMM call is forwarded after
 * one load. Untraced handles and mappings report device -1.
 */
#define EMIT_VMM_MAP(name)                                                   \
	{                                                                    \
		int device = r == 0 ? vmm_mapped(U64(p), n, U64(h)) : -1;    \
		struct memq_alloc_rec rec = {                                \
			.api = MEMQ_API_##name, .mem_kind = MEMQ_MEM_DEVICE, \
			.result = r, .ptr = r == 0 ? U64(p) : 0, .size = n, .flags = U64(h) }; \
		if (device >= 0)                                             \
			c.device = device;                                   \
		/* the unmap frees it: not the allocation table's business */ \
		memq_emit_alloc(&c, &rec, 0);                                \
	}

#define VMM_WRAPPERS(rt, prefix, handle_t)                                   \
	MEMQ_EXPORTED_FN(rt, int, prefix##MemCreate, (handle_t *h, size_t n, const struct vmm_prop *prop, \
		unsigned long long flags));                                  \
	int prefix##MemCreate(handle_t *h, size_t n, const struct vmm_prop *prop, unsigned long long flags) \
	{                                                                    \
		prefix##MemCreate_fn real = MEMQ_REAL_CALLER(prefix##MemCreate); \
		int r;                                                       \
		if (!real)                                                   \
			return MEMQ_ERR_NO_RUNTIME;                          \
		r = real(h, n, prop, flags);                                 \
		if (r == 0 && h && MEMQ_RECORDS(alloc, rt)) {                \
			int saved = errno;                                   \
			vmm_created(U64(*h), prop);                          \
			errno = saved;                                       \
		}                                                            \
		return r;                                                    \
	}                                                                    \
	MEMQ_EXPORTED_FN(rt, int, prefix##MemRelease, (handle_t h));         \
	int prefix##MemRelease(handle_t h)                                   \
	{                                                                    \
		prefix##MemRelease_fn real = MEMQ_REAL_CALLER(prefix##MemRelease); \
		int r;                                                       \
		if (!real)                                                   \
			return MEMQ_ERR_NO_RUNTIME;                          \
		r = real(h);                                                 \
		if (r == 0 && MEMQ_TRACING(alloc, rt)) {                     \
			int saved = errno;                                   \
			vmm_released(U64(h));                                \
			errno = saved;                                       \
		}                                                            \
		return r;                                                    \
	}                                                                    \
	WRAPPER(rt, prefix##MemMap, alloc, (void *p, size_t n, size_t offset, handle_t h, unsigned long long flags), \
		(p, n, offset, h, flags), EMIT_VMM_MAP(prefix##MemMap))     \
	WRAPPER(rt, prefix##MemUnmap, free, (void *p, size_t n), (p, n),     \
		vmm_emit_unmap(&c, MEMQ_API_##prefix##MemUnmap, U64(p), n, r);)

VMM_WRAPPERS(DRV, cu, unsigned long long)
VMM_WRAPPERS(HIP, hip, void *)

/* ---------------------------------------------------------------------- */
/* Entry-point lookups: cuGetProcAddress, cudaGetDriverEntryPoint*,        */
/* hipGetProcAddress hand out the wrappers                                 */
/* ---------------------------------------------------------------------- */

/* Whether memq wraps the driver function exported as `name`. */
static int driver_wrapped(const char *name)
{
	struct memq_sym *sym = memq_sym_find(name);

	return sym && sym->runtime == DRV;
}

/* Whether the library that holds `fn` exports `name` (a _v2 memq may not wrap);
 * read from its symbol table (memq_elf.c), no dlopen/dlsym: dlerror() untouched. */
static int exported_beside(void *fn, const char *name)
{
	return memq_object_lookup(fn, name) != NULL;
}

/*
 * The exported name a lookup of `symbol` stands for when the function it
 * returned (`fn`) is not an exported symbol (dladdr cannot name it): derived
 * the way the driver picks versions: _v2 from CUDA 3.2 (cuMemHostRegister_v2:
 * 6.5, cuMemPrefetchAsync_v2 and cuCtxSynchronize_v2: 13.0), _ptsz/_ptds
 * with the per-thread flag. A wrapper is handed out only for the form the
 * driver really returns: where a _v2 exists that memq does not wrap, or an
 * old form memq does not wrap (cuMemAlloc with a 32-bit size), NULL. A
 * wrapper for another form would call the driver's function with the wrong
 * arguments (seen on an H100: cuCtxSynchronize_v2 handed to a no-argument
 * wrapper made every traced cudaDeviceSynchronize fail with 709).
 */
static const char *driver_name_by_rule(const char *symbol, void *fn, int version, int per_thread, char name[128])
{
	static const char *const per_thread_suffixes[] = { "_ptsz", "_ptds", "" };
	int since = !strcmp(symbol, "cuMemHostRegister") ? 6050
		: !strcmp(symbol, "cuMemPrefetchAsync") || !strcmp(symbol, "cuCtxSynchronize") ? 13000 : 3020;

	for (int v = version >= since ? 0 : 1; v < 2; v++) {
		for (int s = per_thread ? 0 : 2; s < 3; s++) {
			snprintf(name, 128, "%s%s%s", symbol, v == 0 ? "_v2" : "", per_thread_suffixes[s]);
			if (driver_wrapped(name))
				return name;
			if (v == 0 && exported_beside(fn, name))
				return NULL;
		}
	}
	return NULL;
}

/* The exported name of a function, when `fn` is exactly a dynamic symbol. */
static const char *symbol_name(void *fn)
{
	Dl_info info;

	return dladdr(fn, &info) && info.dli_saddr == fn ? info.dli_sname : NULL;
}

MEMQ_EXPORTED_FN(DRV, int, cuGetProcAddress, (const char *symbol, void **pfn, int version, unsigned long long flags));
MEMQ_EXPORTED_FN(DRV, int, cuGetProcAddress_v2, (const char *symbol, void **pfn, int version,
	unsigned long long flags, int *status));

/*
 * What a lookup hands to the program: memq's stand-in for a wrapped driver
 * function, bound to the very function the lookup returned (`fn`);
 * anything else unchanged. A lookup of cuGetProcAddress itself gets memq's
 * (both ABIs: the v1 and _v2 signatures).
 */
static void *driver_substitute(const char *symbol, void *fn, int version, unsigned long long flags)
{
	const char *name;
	char ruled[128];

	if (!fn || !symbol || memq_is_ours(fn))
		return fn;
	name = symbol_name(fn);
	if (!strcmp(symbol, "cuGetProcAddress"))
		return memq_wrapper_for((name ? !strcmp(name, "cuGetProcAddress_v2") : version >= 12000)
			? "cuGetProcAddress_v2" : "cuGetProcAddress", fn);
	/* An exported function is exactly what its name says: memq's wrapper of that name or
	 * nothing (never a wrapper of another form of the same call). */
	if (name && !driver_wrapped(name))
		return fn;
	if (!name)  /* 2: CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM */
		name = driver_name_by_rule(symbol, fn, version, (flags & 2) != 0, ruled);
	return name ? memq_wrapper_for(name, fn) : fn;
}

/* The lookups themselves are rare (start-up): no fast path, never an event. */
int cuGetProcAddress(const char *symbol, void **pfn, int version, unsigned long long flags)
{
	cuGetProcAddress_fn real = MEMQ_REAL_CALLER(cuGetProcAddress);
	int r;

	if (!real)
		return MEMQ_ERR_NO_RUNTIME;
	r = real(symbol, pfn, version, flags);
	if (r == 0 && pfn)
		*pfn = driver_substitute(symbol, *pfn, version, flags);
	return r;
}

int cuGetProcAddress_v2(const char *symbol, void **pfn, int version, unsigned long long flags, int *status)
{
	cuGetProcAddress_v2_fn real = MEMQ_REAL_CALLER(cuGetProcAddress_v2);
	int r;

	if (!real)
		return MEMQ_ERR_NO_RUNTIME;
	r = real(symbol, pfn, version, flags, status);
	if (r == 0 && pfn)
		*pfn = driver_substitute(symbol, *pfn, version, flags);
	return r;
}

/*
 * cudaGetDriverEntryPoint(symbol, funcPtr, flags[, driverStatus]) (CUDA 11.3:
 * three parameters, 12.0: four; passing the fourth to an 11.x runtime is
 * harmless) and cudaGetDriverEntryPointByVersion(symbol, funcPtr,
 * cudaVersion, flags, driverStatus) (12.5). The runtime's flags use the
 * driver's values (cudaEnablePerThreadDefaultStream = 2).
 */
MEMQ_EXPORTED_FN(CUDA, int, cudaGetDriverEntryPoint, (const char *symbol, void **pfn, unsigned long long flags,
	void *status));
int cudaGetDriverEntryPoint(const char *symbol, void **pfn, unsigned long long flags, void *status)
{
	int route = memq_route(__builtin_return_address(0), CUDA);
	cudaGetDriverEntryPoint_fn real = MEMQ_REAL_AT(cudaGetDriverEntryPoint, route);
	int r;

	if (!real)
		return MEMQ_ERR_NO_RUNTIME;
	r = real(symbol, pfn, flags, status);
	if (r == 0 && pfn)
		*pfn = driver_substitute(symbol, *pfn, memq_route_cuda_major(route) * 1000, flags);
	return r;
}

MEMQ_EXPORTED_FN(CUDA, int, cudaGetDriverEntryPointByVersion, (const char *symbol, void **pfn, unsigned int version,
	unsigned long long flags, void *status));
int cudaGetDriverEntryPointByVersion(const char *symbol, void **pfn, unsigned int version,
	unsigned long long flags, void *status)
{
	cudaGetDriverEntryPointByVersion_fn real = MEMQ_REAL_CALLER(cudaGetDriverEntryPointByVersion);
	int r;

	if (!real)
		return MEMQ_ERR_NO_RUNTIME;
	r = real(symbol, pfn, version, flags, status);
	if (r == 0 && pfn)
		*pfn = driver_substitute(symbol, *pfn, (int) version, flags);
	return r;
}

/*
 * hipGetProcAddress(symbol, pfn, hipVersion, flags, status) returns HIP
 * runtime functions by their exported names: memq's stand-in for that name,
 * when memq wraps it.
 */
MEMQ_EXPORTED_FN(HIP, int, hipGetProcAddress, (const char *symbol, void **pfn, int version, uint64_t flags,
	void *status));
int hipGetProcAddress(const char *symbol, void **pfn, int version, uint64_t flags, void *status)
{
	hipGetProcAddress_fn real = MEMQ_REAL_CALLER(hipGetProcAddress);
	int r;

	if (!real)
		return MEMQ_ERR_NO_RUNTIME;
	r = real(symbol, pfn, version, flags, status);
	if (r == 0 && pfn && *pfn && symbol) {
		const char *name = symbol_name(*pfn);

		*pfn = memq_wrapper_for(name ? name : symbol, *pfn);
	}
	return r;
}

/* ---------------------------------------------------------------------- */
/* Driver device queries (memq_core.c: current device, memq:device)        */
/* ---------------------------------------------------------------------- */

MEMQ_REAL_FN(DRV, int, cuCtxGetDevice, (int *));
MEMQ_REAL_FN(DRV, int, cuDeviceGetCount, (int *));
MEMQ_REAL_FN(DRV, int, cuDeviceGetName, (char *, int, int));
MEMQ_REAL_FN(DRV, int, cuDeviceGetAttribute, (int *, int, int));
MEMQ_REAL_FN(DRV, int, cuDeviceGetUuid_v2, (void *, int));
MEMQ_REAL_FN(DRV, int, cuDeviceGetUuid, (void *, int));
MEMQ_REAL_FN(DRV, int, cuDeviceGetPCIBusId, (char *, int, int));

int memq_driver_current_device(int route)
{
	cuCtxGetDevice_fn get = MEMQ_REAL_AT(cuCtxGetDevice, route);
	int dev = -1;

	if (!get || get(&dev) != 0)
		dev = -1;
	return dev;
}

/* CU_DEVICE_ATTRIBUTE_INTEGRATED / _PAGEABLE_MEMORY_ACCESS (= the runtime's numbers) */
#define CU_ATTR_INTEGRATED 18
#define CU_ATTR_PAGEABLE_MEMORY_ACCESS 88

void memq_driver_describe_devices(int route)
{
	cuDeviceGetCount_fn count = MEMQ_REAL_AT(cuDeviceGetCount, route);
	cuDeviceGetName_fn get_name = MEMQ_REAL_AT(cuDeviceGetName, route);
	cuDeviceGetAttribute_fn attr = MEMQ_REAL_AT(cuDeviceGetAttribute, route);
	/* cuDeviceGetUuid_v2 (CUDA 11.4+: the MIG instance's UUID under MIG), else v1. */
	cuDeviceGetUuid_fn get_uuid = (cuDeviceGetUuid_fn) MEMQ_REAL_AT(cuDeviceGetUuid_v2, route);
	cuDeviceGetPCIBusId_fn get_bus = MEMQ_REAL_AT(cuDeviceGetPCIBusId, route);
	int n = 0;

	if (!get_uuid)
		get_uuid = MEMQ_REAL_AT(cuDeviceGetUuid, route);
	if (!count || count(&n) != 0)
		return;
	for (int dev = 0; dev < n; dev++) {
		char name[256] = "", uuid[MEMQ_UUID_TEXT], bus[64] = "";
		unsigned char raw[16] = { 0 };   /* CUuuid: char bytes[16] */
		int integrated = 0, pageable = 0;

		/* CUdevice is the ordinal (what cuDeviceGet returns for it). */
		if (get_uuid && get_uuid(raw, dev) != 0)
			memset(raw, 0, sizeof(raw));
		memq_uuid_text(uuid, raw);
		if (get_bus && get_bus(bus, sizeof(bus), dev) != 0)
			bus[0] = '\0';
		bus[sizeof(bus) - 1] = '\0';

		if (get_name && get_name(name, sizeof(name), dev) != 0)
			name[0] = '\0';
		name[sizeof(name) - 1] = '\0';
		if (attr && attr(&integrated, CU_ATTR_INTEGRATED, dev) != 0)
			integrated = 0;
		if (attr && attr(&pageable, CU_ATTR_PAGEABLE_MEMORY_ACCESS, dev) != 0)
			pageable = 0;
		memq_content_device(MEMQ_RT_CUDRV, dev, integrated || pageable);
		lttng_ust_do_tracepoint(memq, device, MEMQ_RT_CUDA, dev, name,
			!!integrated, !!(integrated || pageable), uuid, bus, NULL);
	}
}
