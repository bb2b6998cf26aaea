/*
 * CUDA runtime wrappers (libcudart). Signatures from cuda_runtime_api.h
 * (12.x, 13.0); cudaError_t is an int, cudaStream_t / cudaMemPool_t are
 * pointers. Code built with --default-stream per-thread calls the _ptds
 * (synchronous, recorded on stream 0x2 = cudaStreamPerThread) and _ptsz
 * (stream-taking) exports instead: wrapped as well.
 */
#include <string.h>

#include "memq_wrap.h"

#define CUDA MEMQ_RT_CUDA
#define CUDA_STREAM_PER_THREAD ((void *) 0x2)

ALLOC_PS(CUDA, cudaMalloc, MEMQ_MEM_DEVICE)
ALLOC_PSF(CUDA, cudaMallocManaged, MEMQ_MEM_MANAGED)
ALLOC_PS(CUDA, cudaMallocHost, MEMQ_MEM_PINNED)
ALLOC_PSF(CUDA, cudaHostAlloc, MEMQ_MEM_PINNED)
ALLOC_ASYNC(CUDA, cudaMallocAsync)
ALLOC_ASYNC(CUDA, cudaMallocAsync_ptsz)
ALLOC_POOL(CUDA, cudaMallocFromPoolAsync)
ALLOC_POOL(CUDA, cudaMallocFromPoolAsync_ptsz)
ALLOC_PITCH(CUDA, cudaMallocPitch)

FREE_P(CUDA, cudaFree)
FREE_ASYNC(CUDA, cudaFreeAsync)
FREE_ASYNC(CUDA, cudaFreeAsync_ptsz)
FREE_P(CUDA, cudaFreeHost)
REGISTER(CUDA, cudaHostRegister)
UNREGISTER(CUDA, cudaHostUnregister)

COPY(CUDA, cudaMemcpy, 0)
COPY(CUDA, cudaMemcpy_ptds, CUDA_STREAM_PER_THREAD)
COPY_ASYNC(CUDA, cudaMemcpyAsync)
COPY_ASYNC(CUDA, cudaMemcpyAsync_ptsz)
COPY_2D(CUDA, cudaMemcpy2D, 0)
COPY_2D(CUDA, cudaMemcpy2D_ptds, CUDA_STREAM_PER_THREAD)
COPY_2D_ASYNC(CUDA, cudaMemcpy2DAsync)
COPY_2D_ASYNC(CUDA, cudaMemcpy2DAsync_ptsz)
COPY_PEER(CUDA, cudaMemcpyPeer)
COPY_PEER_ASYNC(CUDA, cudaMemcpyPeerAsync)

SET(CUDA, cudaMemset, int, 1, 0)
SET(CUDA, cudaMemset_ptds, int, 1, CUDA_STREAM_PER_THREAD)
SET_ASYNC(CUDA, cudaMemsetAsync, int, 1)
SET_ASYNC(CUDA, cudaMemsetAsync_ptsz, int, 1)

SYNC_STREAM(CUDA, cudaStreamSynchronize)
SYNC_STREAM(CUDA, cudaStreamSynchronize_ptsz)
SYNC_DEVICE(CUDA, cudaDeviceSynchronize)
SET_DEVICE(CUDA, cudaSetDevice)

/*
 * Prefetch and advise changed signature in CUDA 13: the int device became a
 * struct cudaMemLocation { enum cudaMemLocationType type; int id; } (and
 * prefetch gained `unsigned int flags`); 12.2+ exports the new form as
 * *_v2. The wrappers below take every argument as a 64-bit integer, which
 * receives either form unchanged (the 8-byte struct travels in one integer
 * register, like an int or a pointer, in the x86-64 and AArch64 C ABIs),
 * then call the real function with the types of the runtime actually
 * loaded (memq_cuda_major: cudaRuntimeGetVersion, else the soname).
 * These hints are rare, so they skip memq_wrap.h's frameless fast path.
 */
struct cuda_location {
	int type;                /* 1 = device, 2..4 = host / host NUMA */
	int id;
};

#define CUDA_LOCATION_DEVICE 1
#define CUDA_CPU_DEVICE_ID (-1)

static struct cuda_location as_location(uint64_t bits)
{
	struct cuda_location loc;

	memcpy(&loc, &bits, sizeof(loc));
	return loc;
}

static int location_device(struct cuda_location loc)
{
	return loc.type == CUDA_LOCATION_DEVICE ? loc.id : CUDA_CPU_DEVICE_ID;
}

typedef int (*prefetch12_fn)(const void *, size_t, int, void *);
typedef int (*prefetch13_fn)(const void *, size_t, struct cuda_location, unsigned int, void *);
typedef int (*advise12_fn)(const void *, size_t, int, int);
typedef int (*advise13_fn)(const void *, size_t, int, struct cuda_location);

/* The call with the loaded runtime's types; *dst_dev / *strm for the event. */
static int prefetch_call(void *real, int new_form, const void *p, size_t n,
	uint64_t a3, uint64_t a4, uint64_t a5, int *dst_dev, void **strm)
{
	if (!new_form) {
		*dst_dev = (int) a3;
		*strm = (void *) (uintptr_t) a4;
		return ((prefetch12_fn) real)(p, n, (int) a3, *strm);
	}
	*dst_dev = location_device(as_location(a3));
	*strm = (void *) (uintptr_t) a5;
	return ((prefetch13_fn) real)(p, n, as_location(a3), (unsigned int) a4, *strm);
}

static int advise_call(void *real, int new_form, const void *p, size_t n,
	int advice, uint64_t a4, int *target)
{
	if (!new_form) {
		*target = (int) a4;
		return ((advise12_fn) real)(p, n, advice, (int) a4);
	}
	*target = location_device(as_location(a4));
	return ((advise13_fn) real)(p, n, advice, as_location(a4));
}

#define PREFETCH(name, new_form)                                             \
	MEMQ_REAL_FN(CUDA, int, name, (void));                               \
	MEMQ_EXPORT int name(const void *p, size_t n, uint64_t a3, uint64_t a4, uint64_t a5) \
	{                                                                    \
		void *real = memq_real(&memq_sym_##name), *strm;             \
		struct memq_call c;                                          \
		int r, dst_dev, form;                                        \
		if (!real)                                                   \
			return MEMQ_ERR_NO_RUNTIME;                          \
		form = (new_form);                                           \
		if (!memq_begin(&c, lttng_ust_tracepoint_enabled(memq, prefetch), CUDA, \
				__builtin_return_address(0)))                \
			return prefetch_call(real, form, p, n, a3, a4, a5, &dst_dev, &strm); \
		r = prefetch_call(real, form, p, n, a3, a4, a5, &dst_dev, &strm); \
		memq_after(&c);                                              \
		EMIT_PREFETCH(name, p, n, dst_dev, strm)                     \
		return r;                                                    \
	}

#define ADVISE(name, new_form)                                               \
	MEMQ_REAL_FN(CUDA, int, name, (void));                               \
	MEMQ_EXPORT int name(const void *p, size_t n, int advice, uint64_t a4) \
	{                                                                    \
		void *real = memq_real(&memq_sym_##name);                    \
		struct memq_call c;                                          \
		int r, target, form;                                         \
		if (!real)                                                   \
			return MEMQ_ERR_NO_RUNTIME;                          \
		form = (new_form);                                           \
		if (!memq_begin(&c, lttng_ust_tracepoint_enabled(memq, advise), CUDA, \
				__builtin_return_address(0)))                \
			return advise_call(real, form, p, n, advice, a4, &target); \
		r = advise_call(real, form, p, n, advice, a4, &target);      \
		memq_after(&c);                                              \
		EMIT_ADVISE(name, p, n, advice, target)                      \
		return r;                                                    \
	}

PREFETCH(cudaMemPrefetchAsync, memq_cuda_major() >= 13)
PREFETCH(cudaMemPrefetchAsync_ptsz, memq_cuda_major() >= 13)
PREFETCH(cudaMemPrefetchAsync_v2, 1)
ADVISE(cudaMemAdvise, memq_cuda_major() >= 13)
ADVISE(cudaMemAdvise_v2, 1)

/* 3D copies (issue 15): cudaMemcpy3D(const cudaMemcpy3DParms *), *Async(..., cudaStream_t) */
#include "memq_reach.h"
COPY_3D(CUDA, cudaMemcpy3D, 0)
COPY_3D(CUDA, cudaMemcpy3D_ptds, CUDA_STREAM_PER_THREAD)
COPY_3D_ASYNC(CUDA, cudaMemcpy3DAsync)
COPY_3D_ASYNC(CUDA, cudaMemcpy3DAsync_ptsz)
