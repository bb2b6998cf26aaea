/*
 * HIP runtime wrappers (libamdhip64). Signatures from hip_runtime_api.h;
 * hipError_t is an int, hipStream_t / hipMemPool_t are pointers and
 * hipDeviceptr_t is void *. Versioned references (hipMalloc@hip_4.2) bind to
 * these unversioned definitions.
 */
#include "memq_wrap.h"

#define HIP MEMQ_RT_HIP

ALLOC_PS(HIP, hipMalloc, MEMQ_MEM_DEVICE)
ALLOC_PSF(HIP, hipMallocManaged, MEMQ_MEM_MANAGED)
ALLOC_PSF(HIP, hipHostMalloc, MEMQ_MEM_PINNED)
ALLOC_PSF(HIP, hipExtHostAlloc, MEMQ_MEM_PINNED)
ALLOC_PSF(HIP, hipHostAlloc, MEMQ_MEM_PINNED)
ALLOC_PS(HIP, hipMallocHost, MEMQ_MEM_PINNED)
ALLOC_ASYNC(HIP, hipMallocAsync)
ALLOC_POOL(HIP, hipMallocFromPoolAsync)
ALLOC_PITCH(HIP, hipMallocPitch)

FREE_P(HIP, hipFree)
FREE_ASYNC(HIP, hipFreeAsync)
FREE_P(HIP, hipHostFree)
FREE_P(HIP, hipFreeHost)
REGISTER(HIP, hipHostRegister)
UNREGISTER(HIP, hipHostUnregister)

COPY(HIP, hipMemcpy, 0)
COPY_ASYNC(HIP, hipMemcpyAsync)
COPY_ASYNC(HIP, hipMemcpyWithStream)
COPY_FIXED(HIP, hipMemcpyHtoD, MEMQ_HTOD)
COPY_FIXED(HIP, hipMemcpyDtoH, MEMQ_DTOH)
COPY_FIXED(HIP, hipMemcpyDtoD, MEMQ_DTOD)
COPY_FIXED_ASYNC(HIP, hipMemcpyHtoDAsync, MEMQ_HTOD)
COPY_FIXED_ASYNC(HIP, hipMemcpyDtoHAsync, MEMQ_DTOH)
COPY_FIXED_ASYNC(HIP, hipMemcpyDtoDAsync, MEMQ_DTOD)
COPY_2D(HIP, hipMemcpy2D, 0)
COPY_2D_ASYNC(HIP, hipMemcpy2DAsync)
COPY_PEER(HIP, hipMemcpyPeer)
COPY_PEER_ASYNC(HIP, hipMemcpyPeerAsync)

SET(HIP, hipMemset, int, 1, 0)
SET_ASYNC(HIP, hipMemsetAsync, int, 1)
SET(HIP, hipMemsetD8, unsigned char, 1, 0)
SET_ASYNC(HIP, hipMemsetD8Async, unsigned char, 1)
SET(HIP, hipMemsetD16, unsigned short, 2, 0)
SET_ASYNC(HIP, hipMemsetD16Async, unsigned short, 2)
SET(HIP, hipMemsetD32, int, 4, 0)
SET_ASYNC(HIP, hipMemsetD32Async, int, 4)

SYNC_STREAM(HIP, hipStreamSynchronize)
SYNC_DEVICE(HIP, hipDeviceSynchronize)
SET_DEVICE(HIP, hipSetDevice)

/* hipMemPrefetchAsync(const void *dev_ptr, size_t count, int device, hipStream_t) */
WRAPPER(HIP, hipMemPrefetchAsync, prefetch, (const void *p, size_t n, int device, void *stream),
	(p, n, device, stream), EMIT_PREFETCH(hipMemPrefetchAsync, p, n, device, stream))

/* hipMemAdvise(const void *dev_ptr, size_t count, hipMemoryAdvise, int device) */
WRAPPER(HIP, hipMemAdvise, advise, (const void *p, size_t n, int advice, int device),
	(p, n, advice, device), EMIT_ADVISE(hipMemAdvise, p, n, advice, device))

/* 3D copies: hipMemcpy3D(const hipMemcpy3DParms *), hipMemcpy3DAsync(..., hipStream_t) */
#include "memq_reach.h"
COPY_3D(HIP, hipMemcpy3D, 0)
COPY_3D_ASYNC(HIP, hipMemcpy3DAsync)

/*
 * Per-thread default stream entry points (hip_runtime_api.h with
 * HIP_API_PER_THREAD_DEFAULT_STREAM: code built with
 * -fgpu-default-stream=per-thread calls these instead): stream 0 there is
 * the calling thread's default stream, recorded as 0x2 (hipStreamPerThread,
 * MEMQ_STREAM).
 */
COPY(HIP, hipMemcpy_spt, 0)
COPY_ASYNC(HIP, hipMemcpyAsync_spt)
SET(HIP, hipMemset_spt, int, 1, 0)
SET_ASYNC(HIP, hipMemsetAsync_spt, int, 1)
COPY_2D(HIP, hipMemcpy2D_spt, 0)
COPY_2D_ASYNC(HIP, hipMemcpy2DAsync_spt)
COPY_3D(HIP, hipMemcpy3D_spt, 0)
COPY_3D_ASYNC(HIP, hipMemcpy3DAsync_spt)
SYNC_STREAM(HIP, hipStreamSynchronize_spt)

/* ROCm 7.1: hipMemPrefetchAsync_v2(const void *, size_t, hipMemLocation, unsigned int flags, hipStream_t),
 * hipMemAdvise_v2(const void *, size_t, hipMemoryAdvise, hipMemLocation) */
WRAPPER(HIP, hipMemPrefetchAsync_v2, prefetch,
	(const void *p, size_t n, struct memq_location loc, unsigned int flags, void *stream), (p, n, loc, flags, stream),
	EMIT_PREFETCH(hipMemPrefetchAsync_v2, p, n, memq_location_device(loc), stream))
WRAPPER(HIP, hipMemAdvise_v2, advise, (const void *p, size_t n, int advice, struct memq_location loc),
	(p, n, advice, loc), EMIT_ADVISE(hipMemAdvise_v2, p, n, advice, memq_location_device(loc)))
