/*
 * memq preload library: the wrapped API list and the records passed to the
 * tracepoints.
 *
 * MEMQ_APIS is the single list of wrapped functions. It generates the
 * `memq:api` enum of the trace metadata (label = function name, value = the
 * stable number below) and the MEMQ_API_<name> constants used by the
 * wrappers. Numbers are part of the trace contract (docs/EVENTS.md): never
 * renumber, only append. Which family a number belongs to is MEMQ_API_RANGES_*
 * below.
 */
#ifndef MEMQ_API_H
#define MEMQ_API_H

#include <stdint.h>

/*
 * The number ranges of each family of calls, written only here: HIP runtime
 * and HIP VMM, CUDA runtime and CUDA driver, memq's own libc heap wrappers.
 * The recorder's event filters come from the same list
 * (ctf2perfetto/capture/api_ranges.py; tests/test_preload_build.py checks the
 * two agree and that every number of MEMQ_APIS lies in its family's range).
 */
#define MEMQ_API_RANGES_HIP(X) X(1, 99) X(401, 449)
#define MEMQ_API_RANGES_CUDA(X) X(101, 199) X(301, 399)
#define MEMQ_API_RANGES_LIBC(X) X(501, 519)
#define MEMQ_API_IN_RANGE(lo, hi) || (api >= (lo) && api <= (hi))

static inline int memq_api_is_hip(int api)
{
	return 0 MEMQ_API_RANGES_HIP(MEMQ_API_IN_RANGE);
}

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
	X(cudaMemPrefetchAsync_ptsz, 137) X(cudaStreamSynchronize_ptsz, 138)  \
	MEMQ_APIS_REACH(X)

/*
 * How calls are reached (docs/EVENTS.md): 3D runtime copies (HIP 60..79, CUDA 150..169), the CUDA
 * driver API (301..399) and HIP VMM (401..449). VMM handle creation,
 * release and address reservation allocate nothing visible to copies, so
 * they have no number: only mappings (cuMemMap/hipMemMap) and unmaps are
 * events.
 */
#define MEMQ_APIS_REACH(X)                                                    \
	X(hipMemcpy3D, 60) X(hipMemcpy3DAsync, 61)                             \
	X(cudaMemcpy3D, 150) X(cudaMemcpy3DAsync, 151)                         \
	X(cudaMemcpy3D_ptds, 152) X(cudaMemcpy3DAsync_ptsz, 153)               \
	X(cuMemAlloc_v2, 301) X(cuMemAllocPitch_v2, 302)                       \
	X(cuMemAllocManaged, 303) X(cuMemAllocHost_v2, 304)                    \
	X(cuMemHostAlloc, 305) X(cuMemHostRegister_v2, 306)                    \
	X(cuMemHostUnregister, 307) X(cuMemFree_v2, 308) X(cuMemFreeHost, 309) \
	X(cuMemAllocAsync, 310) X(cuMemAllocAsync_ptsz, 311)                   \
	X(cuMemAllocFromPoolAsync, 312) X(cuMemAllocFromPoolAsync_ptsz, 313)   \
	X(cuMemFreeAsync, 314) X(cuMemFreeAsync_ptsz, 315)                     \
	X(cuMemcpy, 316) X(cuMemcpy_ptds, 317)                                 \
	X(cuMemcpyAsync, 318) X(cuMemcpyAsync_ptsz, 319)                       \
	X(cuMemcpyHtoD_v2, 320) X(cuMemcpyHtoD_v2_ptds, 321)                   \
	X(cuMemcpyDtoH_v2, 322) X(cuMemcpyDtoH_v2_ptds, 323)                   \
	X(cuMemcpyDtoD_v2, 324) X(cuMemcpyDtoD_v2_ptds, 325)                   \
	X(cuMemcpyHtoDAsync_v2, 326) X(cuMemcpyHtoDAsync_v2_ptsz, 327)         \
	X(cuMemcpyDtoHAsync_v2, 328) X(cuMemcpyDtoHAsync_v2_ptsz, 329)         \
	X(cuMemcpyDtoDAsync_v2, 330) X(cuMemcpyDtoDAsync_v2_ptsz, 331)         \
	X(cuMemcpy2D_v2, 332) X(cuMemcpy2D_v2_ptds, 333)                       \
	X(cuMemcpy2DUnaligned_v2, 334) X(cuMemcpy2DUnaligned_v2_ptds, 335)     \
	X(cuMemcpy2DAsync_v2, 336) X(cuMemcpy2DAsync_v2_ptsz, 337)             \
	X(cuMemcpy3D_v2, 338) X(cuMemcpy3D_v2_ptds, 339)                       \
	X(cuMemcpy3DAsync_v2, 340) X(cuMemcpy3DAsync_v2_ptsz, 341)             \
	X(cuMemsetD8_v2, 342) X(cuMemsetD8_v2_ptds, 343)                       \
	X(cuMemsetD16_v2, 344) X(cuMemsetD16_v2_ptds, 345)                     \
	X(cuMemsetD32_v2, 346) X(cuMemsetD32_v2_ptds, 347)                     \
	X(cuMemsetD8Async, 348) X(cuMemsetD8Async_ptsz, 349)                   \
	X(cuMemsetD16Async, 350) X(cuMemsetD16Async_ptsz, 351)                 \
	X(cuMemsetD32Async, 352) X(cuMemsetD32Async_ptsz, 353)                 \
	X(cuMemPrefetchAsync, 354) X(cuMemPrefetchAsync_ptsz, 355)             \
	X(cuMemPrefetchAsync_v2, 356) X(cuMemPrefetchAsync_v2_ptsz, 357)       \
	X(cuStreamSynchronize, 358) X(cuStreamSynchronize_ptsz, 359)           \
	X(cuCtxSynchronize, 360) X(cuMemMap, 361) X(cuMemUnmap, 362)           \
	X(cuMemcpyPeer, 368) X(cuMemcpyPeer_ptds, 369)                         \
	X(cuMemcpyPeerAsync, 370) X(cuMemcpyPeerAsync_ptsz, 371)               \
	X(cuMemAdvise, 372) X(cuMemAdvise_v2, 373) X(cuCtxSynchronize_v2, 374)  \
	X(hipMemMap, 401) X(hipMemUnmap, 402)                                  \
	MEMQ_APIS_CAPTURE(X)

/*
 * Reserved up front for the capture features (docs/EVENTS.md, "Capture
 * layout"); a number here reserves the name even before its wrapper exists.
 *  - host heap, memq's own libc wrapper: 501..519
 *  - profiler API that opens/closes capture windows: HIP 82..83,
 *    CUDA 170..171, driver 363..364
 *  - completion points for content fingerprints: event/stream
 *    synchronize and query, HIP 84..86, CUDA 172..174, driver 365..367
 *  - per-thread-stream and ROCm 7 entry points: HIP 87..95,
 *    CUDA 175, and the HIP per-thread 3D copies in the 3D range (62, 63)
 */
#define MEMQ_APIS_CAPTURE(X)                                                  \
	X(malloc, 501) X(calloc, 502) X(realloc, 503) X(memalign, 504)         \
	X(posix_memalign, 505) X(aligned_alloc, 506) X(valloc, 507)            \
	X(pvalloc, 508) X(free, 509)                                           \
	X(hipProfilerStart, 82) X(hipProfilerStop, 83)                         \
	X(cudaProfilerStart, 170) X(cudaProfilerStop, 171)                     \
	X(cuProfilerStart, 363) X(cuProfilerStop, 364)                         \
	X(hipEventSynchronize, 84) X(hipEventQuery, 85) X(hipStreamQuery, 86)  \
	X(cudaEventSynchronize, 172) X(cudaEventQuery, 173)                    \
	X(cudaStreamQuery, 174)                                                \
	X(cuEventSynchronize, 365) X(cuEventQuery, 366) X(cuStreamQuery, 367)  \
	X(hipMemcpy_spt, 87) X(hipMemcpyAsync_spt, 88) X(hipMemset_spt, 89)    \
	X(hipMemsetAsync_spt, 90) X(hipMemcpy2D_spt, 91)                       \
	X(hipMemcpy2DAsync_spt, 92) X(hipStreamSynchronize_spt, 93)            \
	X(hipMemPrefetchAsync_v2, 94) X(hipMemAdvise_v2, 95)                   \
	X(cudaMemPrefetchAsync_v2_ptsz, 175)                                   \
	X(hipMemcpy3D_spt, 62) X(hipMemcpy3DAsync_spt, 63)

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

/* MEMQ_RT_CUDRV: the CUDA driver (libcuda); its devices are described as
 * runtime "cuda" (the same devices). */
enum memq_runtime { MEMQ_RT_HIP = 1, MEMQ_RT_CUDA = 2, MEMQ_RT_CUDRV = 3 };

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
	/* appended for content fingerprints (older traces lack them) */
	uint64_t seq; uint8_t content; uint8_t content_mode;
	uint64_t src_hash, dst_hash_before, dst_hash_after;
	/* appended for 3D copies (older traces lack them) */
	uint64_t depth, dslice, sslice;
};
/* memq:copy `content` bits: which fingerprints the record holds. */
enum memq_content_bits {
	MEMQ_CONTENT_SRC = 1,          /* src_hash: the source at the call */
	MEMQ_CONTENT_DST_BEFORE = 2,   /* dst_hash_before: the destination before the call */
	MEMQ_CONTENT_DST_AFTER = 4,    /* dst_hash_after: the destination at return (sync copies) */
	MEMQ_CONTENT_PENDING = 8,      /* after-hash comes later, in a memq:copy_done with this seq */
};
/* memq:copy `content_mode`: the `memq record --content` setting in force. */
enum memq_content_mode { MEMQ_CONTENT_OFF = 0, MEMQ_CONTENT_SAMPLED = 1, MEMQ_CONTENT_FULL = 2 };

/* memq:copy_done: an asynchronous copy's destination, hashed at the
 * first completion point (api = the synchronising call) that covers it. */
struct memq_copy_done_rec {
	uint16_t api; int32_t device;
	uint64_t seq, stream, dst_hash_after;
};

/* memq:host_alloc / memq:host_free: one host heap block at or
 * above the threshold. size = malloc_usable_size (both sides agree),
 * requested = what the caller asked for (0 for frees). */
struct memq_host_rec {
	uint16_t api;
	uint64_t ptr, size, requested;
};
/* memq:host_small: this thread's blocks below the threshold since
 * its previous host_small (usable sizes). */
struct memq_host_small_rec {
	uint64_t alloc_count, alloc_bytes, free_count, free_bytes;
};

/* memq:window: a capture window opens (open = 1) or closes. */
enum memq_window_cause { MEMQ_WINDOW_DELAY = 1, MEMQ_WINDOW_DURATION = 2, MEMQ_WINDOW_PROFILER_API = 3,
	MEMQ_WINDOW_EXIT = 4 };
struct memq_window_rec {
	uint16_t api;            /* the profiler call, 0 for timer/exit causes */
	uint8_t open, cause;     /* enum memq_window_cause */
	uint32_t index;          /* 0, 1, ... per process */
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

/* memq:lib_load / memq:lib_unload: one loaded object (memq_libmap.h). baddr: its
 * first PT_LOAD segment's address; memsz: the span of its PT_LOAD segments;
 * path: realpath() of its file, the executable from /proc/self/exe, or
 * "[name]" when its name is no file (the vDSO); build_id: its GNU build-id
 * note (build_id_len 0: none). LTTng's bin_info statedump says the same. */
#define MEMQ_BUILD_ID_MAX 64
struct memq_lib_rec {
	uint64_t baddr, memsz;
	const char *path;
	uint8_t build_id_len;
	uint8_t build_id[MEMQ_BUILD_ID_MAX];
};

#endif /* MEMQ_API_H */
