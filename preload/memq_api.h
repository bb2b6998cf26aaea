/*
 * memq preload library: the wrapped API list and the records passed to the
 * tracepoints.
 *
 * MEMQ_APIS is the single list of wrapped functions. It generates the
 * `memq:api` enum of the trace metadata (label = function name, value = the
 * stable number below) and the MEMQ_API_<name> constants used by the
 * wrappers. Numbers are part of the trace contract (docs/EVENTS.md): never
 * renumber, only append. HIP uses 1..99, CUDA 101..199.
 */
#ifndef MEMQ_API_H
#define MEMQ_API_H

#include <stdint.h>

#define MEMQ_APIS(X)                                                          \
	X(hipMalloc, 1) X(hipMallocManaged, 2) X(hipHostMalloc, 3)             \
	X(hipExtHostAlloc, 4) X(hipHostAlloc, 5) X(hipMallocHost, 6)           \
	X(hipMallocAsync, 7) X(hipMallocFromPoolAsync, 8) X(hipMallocPitch, 9) \
	X(hipFree, 10) X(hipFreeAsync, 11) X(hipHostFree, 12)                  \
	X(hipFreeHost, 13) X(hipHostRegister, 14) X(hipHostUnregister, 15)     \
	X(hipMemcpy, 16) X(hipMemcpyAsync, 17) X(hipMemcpyWithStream, 18)      \
	X(hipMemcpyHtoD, 19) X(hipMemcpyDtoH, 20) X(hipMemcpyDtoD, 21)         \
	X(hipMemcpyHtoDAsync, 22) X(hipMemcpyDtoHAsync, 23)                    \
	X(hipMemcpyDtoDAsync, 24) X(hipMemcpy2D, 25) X(hipMemcpy2DAsync, 26)   \
	X(hipMemcpyPeer, 27) X(hipMemcpyPeerAsync, 28) X(hipMemset, 29)        \
	X(hipMemsetAsync, 30) X(hipMemsetD8, 31) X(hipMemsetD8Async, 32)       \
	X(hipMemsetD16, 33) X(hipMemsetD16Async, 34) X(hipMemsetD32, 35)       \
	X(hipMemsetD32Async, 36) X(hipMemPrefetchAsync, 37)                    \
	X(hipMemAdvise, 38) X(hipStreamSynchronize, 39)                        \
	X(hipDeviceSynchronize, 40) X(hipSetDevice, 41)                        \
	X(cudaMalloc, 101) X(cudaMallocManaged, 102) X(cudaMallocHost, 103)    \
	X(cudaHostAlloc, 104) X(cudaMallocAsync, 105)                          \
	X(cudaMallocFromPoolAsync, 106) X(cudaMallocPitch, 107)                \
	X(cudaFree, 108) X(cudaFreeAsync, 109) X(cudaFreeHost, 110)            \
	X(cudaHostRegister, 111) X(cudaHostUnregister, 112)                    \
	X(cudaMemcpy, 113) X(cudaMemcpyAsync, 114) X(cudaMemcpy2D, 115)        \
	X(cudaMemcpy2DAsync, 116) X(cudaMemcpyPeer, 117)                       \
	X(cudaMemcpyPeerAsync, 118) X(cudaMemset, 119) X(cudaMemsetAsync, 120) \
	X(cudaMemPrefetchAsync, 121) X(cudaMemPrefetchAsync_v2, 122)           \
	X(cudaMemAdvise, 123) X(cudaMemAdvise_v2, 124)                         \
	X(cudaStreamSynchronize, 125) X(cudaDeviceSynchronize, 126)            \
	X(cudaSetDevice, 127) X(cudaMallocAsync_ptsz, 128)                     \
	X(cudaMallocFromPoolAsync_ptsz, 129) X(cudaFreeAsync_ptsz, 130)        \
	X(cudaMemcpy_ptds, 131) X(cudaMemcpyAsync_ptsz, 132)                   \
	X(cudaMemcpy2D_ptds, 133) X(cudaMemcpy2DAsync_ptsz, 134)               \
	X(cudaMemset_ptds, 135) X(cudaMemsetAsync_ptsz, 136)                   \
	X(cudaMemPrefetchAsync_ptsz, 137) X(cudaStreamSynchronize_ptsz, 138)

#define MEMQ_API_CONST(name, value) MEMQ_API_##name = value,
enum memq_api { MEMQ_APIS(MEMQ_API_CONST) };
#undef MEMQ_API_CONST

/* = ctf2perfetto.events.MemKind */
enum memq_mem_kind {
	MEMQ_MEM_UNKNOWN = 0,
	MEMQ_MEM_HOST = 1,
	MEMQ_MEM_PINNED = 2,
	MEMQ_MEM_REGISTERED = 3,
	MEMQ_MEM_DEVICE = 4,
	MEMQ_MEM_MANAGED = 5,
};

enum memq_runtime { MEMQ_RT_HIP = 1, MEMQ_RT_CUDA = 2 };

/* hipMemcpyKind / cudaMemcpyKind values (identical in both runtimes). */
enum memq_copy_kind {
	MEMQ_HTOH = 0, MEMQ_HTOD = 1, MEMQ_DTOH = 2, MEMQ_DTOD = 3,
	MEMQ_DEFAULT = 4, MEMQ_DTOD_NOCU = 1024,
};

/*
 * One record per event class. The tracepoints take a pointer to a record
 * (LTTNG_UST_TP_ARGS is limited to 10 arguments; a copy has 14 fields).
 */
struct memq_alloc_rec {
	uint16_t api; uint8_t mem_kind; int32_t device, result;
	uint64_t ptr, size, stream, flags, width, height, begin_ns;
};
struct memq_free_rec {
	uint16_t api; uint8_t mem_kind; int32_t device, result;
	uint64_t ptr, size, stream, begin_ns;
};
struct memq_copy_rec {
	uint16_t api; int32_t kind, device, src_device, result;
	uint64_t dst, src, bytes, stream, width, height, dpitch, spitch, begin_ns;
};
struct memq_set_rec {
	uint16_t api; int32_t value, device, result;
	uint64_t dst, bytes, stream, begin_ns;
};
struct memq_prefetch_rec {
	uint16_t api; int32_t dst_device, device, result;
	uint64_t ptr, bytes, stream, begin_ns;
};
struct memq_advise_rec {
	uint16_t api; int32_t advice, target_device, device, result;
	uint64_t ptr, bytes, begin_ns;
};
struct memq_sync_rec {
	uint16_t api; int32_t device, result;
	uint64_t stream, begin_ns;
};
struct memq_set_device_rec {
	uint16_t api; int32_t new_device, device, result;
	uint64_t begin_ns;
};

#endif /* MEMQ_API_H */
