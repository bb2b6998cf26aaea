/*
 * CUDA runtime wrappers (libcudart). Signatures from cuda_runtime_api.h
 * (12.x, 13.0); cudaError_t is an int, cudaStream_t / cudaMemPool_t are
 * pointers. Code built with --default-stream per-thread calls the _ptds
 * (synchronous) and _ptsz (stream-taking) exports instead: wrapped as well,
 * their default stream recorded as 0x2 = cudaStreamPerThread (MEMQ_STREAM).
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
 * *_v2. The wrappers take every argument as a 64-bit integer, which receives
 * either form unchanged (the 8-byte struct travels in one integer register,
 * like an int or a pointer, in the x86-64 and AArch64 C ABIs) and passes it
 * on unchanged; only the event decodes them, in the form of the runtime
 * answering the call (its route: memq_route_cuda_major, from
 * cudaRuntimeGetVersion, else the soname). Two runtimes in one process
 * (12 and 13) each get their own form.
 */
static int location_device(uint64_t bits)
{
	struct memq_location loc;

	memcpy(&loc, &bits, sizeof(loc));
	return memq_location_device(loc);
}

/* Whether the call was in the CUDA 13 / _v2 form. */
static int new_form(int v2, int route)
{
	return v2 || memq_route_cuda_major(route) >= 13;
}

#define EMIT_CUDA_PREFETCH(name, v2)                                         \
	{                                                                    \
		int form = new_form(v2, c.route);                            \
		EMIT_PREFETCH(name, p, n, form ? location_device(a3) : (int) a3, \
			(void *) (uintptr_t) (form ? a5 : a4))               \
	}

#define PREFETCH(name, v2)                                                   \
	WRAPPER(CUDA, name, prefetch, (const void *p, size_t n, uint64_t a3, uint64_t a4, uint64_t a5), \
		(p, n, a3, a4, a5), EMIT_CUDA_PREFETCH(name, v2))

#define ADVISE(name, v2)                                                     \
	WRAPPER(CUDA, name, advise, (const void *p, size_t n, int advice, uint64_t a4), (p, n, advice, a4), \
		EMIT_ADVISE(name, p, n, advice, new_form(v2, c.route) ? location_device(a4) : (int) a4))

PREFETCH(cudaMemPrefetchAsync, 0)
PREFETCH(cudaMemPrefetchAsync_ptsz, 0)
PREFETCH(cudaMemPrefetchAsync_v2, 1)
PREFETCH(cudaMemPrefetchAsync_v2_ptsz, 1)
ADVISE(cudaMemAdvise, 0)
ADVISE(cudaMemAdvise_v2, 1)

/* 3D copies: cudaMemcpy3D(const cudaMemcpy3DParms *), *Async(..., cudaStream_t) */
#include "memq_reach.h"
COPY_3D(CUDA, cudaMemcpy3D, 0)
COPY_3D(CUDA, cudaMemcpy3D_ptds, CUDA_STREAM_PER_THREAD)
COPY_3D_ASYNC(CUDA, cudaMemcpy3DAsync)
COPY_3D_ASYNC(CUDA, cudaMemcpy3DAsync_ptsz)
