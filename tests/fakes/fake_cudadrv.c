/*
 * Fake CUDA driver (test only): libcuda.so.1 with the real exported names and
 * C signatures (cuda.h) of the memory API memq wraps, the VMM calls,
 * cuGetProcAddress (v1 and _v2) and the device queries the preload library
 * makes. Device memory lives in host RAM (fake_mem.h); VMM physical memory
 * is a memfd, so two mappings of one handle share their bytes as on a GPU.
 *
 * Like the real driver, cuGetProcAddress hands out the driver's own
 * functions, not what the dynamic linker would bind (memq's wrappers shadow
 * the exported names): each function is a local `impl_` definition with the
 * exported name as an alias, so a pointer taken inside this library is the
 * driver's own. Functions listed in HIDDEN below are instead returned as
 * internal functions with no exported name at that address (dladdr cannot
 * name them), like a driver that keeps a private table.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>

#include "fake_mem.h"

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef void *CUstream;
typedef void *CUcontext;
typedef unsigned long long CUmemGenericAllocationHandle;
struct CUmemLocation { int type; int id; };
struct CUmemAllocationProp { int type, handle_types; struct CUmemLocation location; void *win32; unsigned char flags[8]; };

typedef struct {
	size_t srcXInBytes, srcY; int srcMemoryType; const void *srcHost; CUdeviceptr srcDevice; void *srcArray;
	size_t srcPitch;
	size_t dstXInBytes, dstY; int dstMemoryType; void *dstHost; CUdeviceptr dstDevice; void *dstArray;
	size_t dstPitch;
	size_t WidthInBytes, Height;
} CUDA_MEMCPY2D;

typedef struct {
	size_t srcXInBytes, srcY, srcZ, srcLOD; int srcMemoryType; const void *srcHost; CUdeviceptr srcDevice;
	void *srcArray; void *reserved0; size_t srcPitch, srcHeight;
	size_t dstXInBytes, dstY, dstZ, dstLOD; int dstMemoryType; void *dstHost; CUdeviceptr dstDevice;
	void *dstArray; void *reserved1; size_t dstPitch, dstHeight;
	size_t WidthInBytes, Height, Depth;
} CUDA_MEMCPY3D;

enum {
	CUDA_SUCCESS = 0, CUDA_ERROR_INVALID_VALUE = 1, CUDA_ERROR_OUT_OF_MEMORY = 2,
	CUDA_ERROR_INVALID_DEVICE = 101, CUDA_ERROR_NOT_FOUND = 500, CUDA_ERROR_NOT_READY = 600,
};

#define P(x) ((void *) (uintptr_t) (x))
#define EXPORT(ret, name, params) static ret impl_##name params; \
	ret name params __attribute__((alias("impl_" #name), visibility("default"))); \
	static ret impl_##name params

static int valid_device(int d) { return d >= 0 && d < fake_device_count(); }
static int (*const unused_kind_check)(int) __attribute__((unused)) = fake_copy_kind_ok;  /* fake_mem.h: runtime-only */

EXPORT(CUresult, cuInit, (unsigned flags)) { (void) flags; return CUDA_SUCCESS; }
EXPORT(CUresult, cuDriverGetVersion, (int *v)) { *v = 12040; return CUDA_SUCCESS; }
EXPORT(CUresult, cuDeviceGetCount, (int *n)) { *n = fake_device_count(); return CUDA_SUCCESS; }
EXPORT(CUresult, cuDeviceGetName, (char *name, int len, int d))
{
	if (!valid_device(d))
		return CUDA_ERROR_INVALID_DEVICE;
	snprintf(name, (size_t) len, "Fake CUDA GPU %d", d);
	return CUDA_SUCCESS;
}
EXPORT(CUresult, cuDeviceGetAttribute, (int *v, int attr, int d))
{
	if (!valid_device(d))
		return CUDA_ERROR_INVALID_DEVICE;
	*v = (attr == 18 || attr == 88) ? fake_unified() : 0;
	return CUDA_SUCCESS;
}
typedef struct CUuuid_st { char bytes[16]; } CUuuid;
EXPORT(CUresult, cuDeviceGetUuid, (CUuuid *uuid, int d))
{
	if (!valid_device(d))
		return CUDA_ERROR_INVALID_DEVICE;
	if (!uuid)
		return CUDA_ERROR_INVALID_VALUE;
	fake_uuid((unsigned char *) uuid->bytes, d);
	return CUDA_SUCCESS;
}
EXPORT(CUresult, cuDeviceGetUuid_v2, (CUuuid *uuid, int d)) { return impl_cuDeviceGetUuid(uuid, d); }
EXPORT(CUresult, cuDeviceGetPCIBusId, (char *pciBusId, int len, int d))
{
	if (!valid_device(d))
		return CUDA_ERROR_INVALID_DEVICE;
	if (!pciBusId || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	fake_pci_bus_id(pciBusId, len, d);
	return CUDA_SUCCESS;
}
/* A context is its device number + 1 (the primary context of each device). */
EXPORT(CUresult, cuDevicePrimaryCtxRetain, (CUcontext *ctx, int d))
{
	if (!valid_device(d))
		return CUDA_ERROR_INVALID_DEVICE;
	*ctx = P(d + 1);
	return CUDA_SUCCESS;
}
EXPORT(CUresult, cuCtxSetCurrent, (CUcontext ctx)) { fake_current_device = (int) (uintptr_t) ctx - 1; return CUDA_SUCCESS; }
EXPORT(CUresult, cuCtxGetDevice, (int *d)) { *d = fake_current_device; return CUDA_SUCCESS; }
EXPORT(CUresult, cuProfilerStart, (void)) { return CUDA_SUCCESS; }
EXPORT(CUresult, cuProfilerStop, (void)) { return CUDA_SUCCESS; }
EXPORT(CUresult, cuStreamCreate, (CUstream *s, unsigned flags))
{
	static unsigned long next = 0xd7000;
	(void) flags;
	*s = P(__atomic_add_fetch(&next, 0x100, __ATOMIC_RELAXED));
	return CUDA_SUCCESS;
}

static CUresult alloc(void *p, size_t n, int kind)
{
	void *m;

	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	m = fake_mem_alloc(n, kind);
	memcpy(p, &m, sizeof(m));
	return m ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
#define DEV_KINDS ((1u << FAKE_DEVICE) | (1u << FAKE_MANAGED))
static CUresult release(void *p, unsigned kinds) { return fake_mem_free(p, kinds) ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS; }

EXPORT(CUresult, cuMemAlloc_v2, (CUdeviceptr *p, size_t n)) { return alloc(p, n, FAKE_DEVICE); }
EXPORT(CUresult, cuMemAllocPitch_v2, (CUdeviceptr *p, size_t *pitch, size_t w, size_t h, unsigned elem))
{
	if (elem != 4 && elem != 8 && elem != 16)
		return CUDA_ERROR_INVALID_VALUE;
	*pitch = fake_pitch(w);
	return alloc(p, *pitch * h, FAKE_DEVICE);
}
EXPORT(CUresult, cuMemAllocManaged, (CUdeviceptr *p, size_t n, unsigned f)) { (void) f; return alloc(p, n, FAKE_MANAGED); }
EXPORT(CUresult, cuMemAllocHost_v2, (void **p, size_t n)) { return alloc(p, n, FAKE_PINNED); }
EXPORT(CUresult, cuMemHostAlloc, (void **p, size_t n, unsigned f)) { (void) f; return alloc(p, n, FAKE_PINNED); }
EXPORT(CUresult, cuMemHostRegister_v2, (void *p, size_t n, unsigned f)) { (void) f; return p && n ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; }
EXPORT(CUresult, cuMemHostUnregister, (void *p)) { return p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; }
EXPORT(CUresult, cuMemFree_v2, (CUdeviceptr p)) { return release(P(p), DEV_KINDS); }
EXPORT(CUresult, cuMemFreeHost, (void *p)) { return release(p, 1u << FAKE_PINNED); }
EXPORT(CUresult, cuMemAllocAsync, (CUdeviceptr *p, size_t n, CUstream s)) { (void) s; return alloc(p, n, FAKE_DEVICE); }
EXPORT(CUresult, cuMemAllocAsync_ptsz, (CUdeviceptr *p, size_t n, CUstream s)) { (void) s; return alloc(p, n, FAKE_DEVICE); }
EXPORT(CUresult, cuMemFreeAsync, (CUdeviceptr p, CUstream s)) { (void) s; return release(P(p), DEV_KINDS); }
EXPORT(CUresult, cuMemFreeAsync_ptsz, (CUdeviceptr p, CUstream s)) { (void) s; return release(P(p), DEV_KINDS); }

static CUresult copy(int async, CUstream st, CUdeviceptr d, CUdeviceptr s, size_t n)
{
	fake_copy(async, st, P(d), P(s), n);
	return CUDA_SUCCESS;
}
EXPORT(CUresult, cuMemcpy, (CUdeviceptr d, CUdeviceptr s, size_t n)) { return copy(0, 0, d, s, n); }
EXPORT(CUresult, cuMemcpy_ptds, (CUdeviceptr d, CUdeviceptr s, size_t n)) { return copy(0, 0, d, s, n); }
EXPORT(CUresult, cuMemcpyAsync, (CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st)) { return copy(1, st, d, s, n); }
EXPORT(CUresult, cuMemcpyAsync_ptsz, (CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st)) { return copy(1, st, d, s, n); }
EXPORT(CUresult, cuMemcpyHtoD_v2, (CUdeviceptr d, const void *s, size_t n)) { return copy(0, 0, d, (uintptr_t) s, n); }
EXPORT(CUresult, cuMemcpyHtoD_v2_ptds, (CUdeviceptr d, const void *s, size_t n)) { return copy(0, 0, d, (uintptr_t) s, n); }
EXPORT(CUresult, cuMemcpyDtoH_v2, (void *d, CUdeviceptr s, size_t n)) { return copy(0, 0, (uintptr_t) d, s, n); }
EXPORT(CUresult, cuMemcpyDtoD_v2, (CUdeviceptr d, CUdeviceptr s, size_t n)) { return copy(0, 0, d, s, n); }
EXPORT(CUresult, cuMemcpyHtoDAsync_v2, (CUdeviceptr d, const void *s, size_t n, CUstream st)) { return copy(1, st, d, (uintptr_t) s, n); }
EXPORT(CUresult, cuMemcpyDtoHAsync_v2, (void *d, CUdeviceptr s, size_t n, CUstream st)) { return copy(1, st, (uintptr_t) d, s, n); }
EXPORT(CUresult, cuMemcpyDtoDAsync_v2, (CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st)) { return copy(1, st, d, s, n); }

static uintptr_t side(int type, const void *host, CUdeviceptr dev) { return type == 1 ? (uintptr_t) host : (uintptr_t) dev; }
static CUresult copy3d(int async, CUstream st, const CUDA_MEMCPY3D *p)
{
	uintptr_t s = side(p->srcMemoryType, p->srcHost, p->srcDevice), d = side(p->dstMemoryType, p->dstHost, p->dstDevice);

	if (p->WidthInBytes > p->srcPitch || p->WidthInBytes > p->dstPitch)
		return CUDA_ERROR_INVALID_VALUE;
	fake_issue(async, (struct fake_op) {
		.stream = (uintptr_t) st,
		.dst = P(d + (p->dstZ * p->dstHeight + p->dstY) * p->dstPitch + p->dstXInBytes),
		.src = P(s + (p->srcZ * p->srcHeight + p->srcY) * p->srcPitch + p->srcXInBytes),
		.dpitch = p->dstPitch, .spitch = p->srcPitch, .width = p->WidthInBytes, .height = p->Height,
		.depth = p->Depth ? p->Depth : 1, .dslice = p->dstHeight * p->dstPitch, .sslice = p->srcHeight * p->srcPitch });
	return CUDA_SUCCESS;
}
static CUresult copy2d(int async, CUstream st, const CUDA_MEMCPY2D *p)
{
	CUDA_MEMCPY3D q = {
		.srcXInBytes = p->srcXInBytes, .srcY = p->srcY, .srcMemoryType = p->srcMemoryType, .srcHost = p->srcHost,
		.srcDevice = p->srcDevice, .srcPitch = p->srcPitch, .srcHeight = 0,
		.dstXInBytes = p->dstXInBytes, .dstY = p->dstY, .dstMemoryType = p->dstMemoryType, .dstHost = p->dstHost,
		.dstDevice = p->dstDevice, .dstPitch = p->dstPitch, .dstHeight = 0,
		.WidthInBytes = p->WidthInBytes, .Height = p->Height, .Depth = 1,
	};
	return copy3d(async, st, &q);
}
EXPORT(CUresult, cuMemcpy2D_v2, (const CUDA_MEMCPY2D *p)) { return copy2d(0, 0, p); }
EXPORT(CUresult, cuMemcpy2DAsync_v2, (const CUDA_MEMCPY2D *p, CUstream st)) { return copy2d(1, st, p); }
EXPORT(CUresult, cuMemcpy3D_v2, (const CUDA_MEMCPY3D *p)) { return copy3d(0, 0, p); }
EXPORT(CUresult, cuMemcpy3DAsync_v2, (const CUDA_MEMCPY3D *p, CUstream st)) { return copy3d(1, st, p); }

static CUresult fill(int async, CUstream st, CUdeviceptr d, unsigned v, size_t n, size_t elem)
{
	fake_fill(async, st, P(d), v, n, elem);
	return CUDA_SUCCESS;
}
EXPORT(CUresult, cuMemsetD16_v2, (CUdeviceptr d, unsigned short v, size_t n)) { return fill(0, 0, d, v, n, 2); }
EXPORT(CUresult, cuMemsetD32_v2, (CUdeviceptr d, unsigned v, size_t n)) { return fill(0, 0, d, v, n, 4); }
EXPORT(CUresult, cuMemsetD32_v2_ptds, (CUdeviceptr d, unsigned v, size_t n)) { return fill(0, 0, d, v, n, 4); }
EXPORT(CUresult, cuMemsetD8Async, (CUdeviceptr d, unsigned char v, size_t n, CUstream st)) { return fill(1, st, d, v, n, 1); }
EXPORT(CUresult, cuMemsetD16Async, (CUdeviceptr d, unsigned short v, size_t n, CUstream st)) { return fill(1, st, d, v, n, 2); }
EXPORT(CUresult, cuMemsetD32Async, (CUdeviceptr d, unsigned v, size_t n, CUstream st)) { return fill(1, st, d, v, n, 4); }
EXPORT(CUresult, cuMemPrefetchAsync, (CUdeviceptr p, size_t n, int dev, CUstream st))
{
	(void) n; (void) st;
	return p && (dev == -1 || valid_device(dev)) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}
EXPORT(CUresult, cuMemPrefetchAsync_v2, (CUdeviceptr p, size_t n, struct CUmemLocation loc, unsigned flags, CUstream st))
{
	(void) n; (void) st;
	return p && !flags && (loc.type != 1 || valid_device(loc.id)) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
EXPORT(CUresult, cuMemcpyPeer, (CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n))
{
	(void) dc; (void) sc;
	return copy(0, 0, d, s, n);
}
EXPORT(CUresult, cuMemcpyPeerAsync, (CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n, CUstream st))
{
	(void) dc; (void) sc;
	return copy(1, st, d, s, n);
}
EXPORT(CUresult, cuMemAdvise, (CUdeviceptr p, size_t n, int advice, int dev))
{
	(void) n;
	return p && advice >= 1 && advice <= 6 && (dev == -1 || valid_device(dev)) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
EXPORT(CUresult, cuMemAdvise_v2, (CUdeviceptr p, size_t n, int advice, struct CUmemLocation loc))
{
	(void) n;
	return p && advice >= 1 && advice <= 6 && (loc.type != 1 || valid_device(loc.id)) ? CUDA_SUCCESS
											   : CUDA_ERROR_INVALID_VALUE;
}
/* errno 5 on entry becomes 6: the wrapper must leave errno to the driver */
EXPORT(CUresult, cuStreamSynchronize, (CUstream s))
{
	fake_drain((uintptr_t) s, ULONG_MAX);
	errno = errno == 5 ? 6 : 99;
	return CUDA_SUCCESS;
}
EXPORT(CUresult, cuCtxSynchronize, (void)) { fake_drain(FAKE_ALL_STREAMS, ULONG_MAX); return CUDA_SUCCESS; }
/* CUDA 13: the context to synchronise (NULL: the current one); a wrong one is refused, as the real driver
 * refuses it (CUDA_ERROR_INVALID_CONTEXT = 201). */
EXPORT(CUresult, cuCtxSynchronize_v2, (CUcontext ctx))
{
	if (ctx && (int) (uintptr_t) ctx - 1 != fake_current_device)
		return 201;
	fake_drain(FAKE_ALL_STREAMS, ULONG_MAX);
	return CUDA_SUCCESS;
}
EXPORT(CUresult, cuStreamQuery, (CUstream s)) { return fake_stream_busy(s) ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS; }

/* ---- events and stream capture (fake_mem.h) ---- */
EXPORT(CUresult, cuEventCreate, (void **e, unsigned f)) { (void) f; return e && (*e = fake_event_create()) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; }
EXPORT(CUresult, cuEventDestroy_v2, (void *e)) { return fake_event_destroy(e) ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS; }
EXPORT(CUresult, cuEventRecord, (void *e, CUstream s)) { return fake_event_record(e, s) ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS; }
EXPORT(CUresult, cuEventRecord_ptsz, (void *e, CUstream s)) { return fake_event_record(e, s) ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS; }
EXPORT(CUresult, cuEventSynchronize, (void *e)) { return fake_event_wait(e, 0) < 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS; }
EXPORT(CUresult, cuEventQuery, (void *e))
{
	int busy = fake_event_wait(e, 1);

	return busy < 0 ? CUDA_ERROR_INVALID_VALUE : busy ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}
EXPORT(CUresult, cuStreamBeginCapture_v2, (CUstream s, int mode)) { (void) mode; return fake_capture(s, 1) ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS; }
EXPORT(CUresult, cuStreamEndCapture, (CUstream s, void **graph))
{
	if (graph)
		*graph = NULL;
	return fake_capture(s, 0) ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}
EXPORT(CUresult, cuStreamIsCapturing, (CUstream s, int *status)) { *status = fake_is_capturing(s); return CUDA_SUCCESS; }

/* ---- VMM (fake_mem.h) ---- */
#define VMM_RESULT(x) ((x) ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS)
EXPORT(CUresult, cuMemAddressReserve, (CUdeviceptr *p, size_t n, size_t align, CUdeviceptr addr, unsigned long long f))
{
	void *m = fake_vmm_reserve(n, (uintptr_t) addr);

	(void) align; (void) f;
	*p = (uintptr_t) m;
	return m ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
EXPORT(CUresult, cuMemAddressFree, (CUdeviceptr p, size_t n)) { return VMM_RESULT(fake_vmm_free(p, n)); }
EXPORT(CUresult, cuMemCreate, (CUmemGenericAllocationHandle *h, size_t n, const struct CUmemAllocationProp *prop, unsigned long long f))
{
	(void) f;
	if (!prop || prop->location.type != 1 || !valid_device(prop->location.id))
		return CUDA_ERROR_INVALID_VALUE;
	return VMM_RESULT(fake_vmm_create(h, n));
}
EXPORT(CUresult, cuMemRelease, (CUmemGenericAllocationHandle h)) { return VMM_RESULT(fake_vmm_release(h)); }
EXPORT(CUresult, cuMemMap, (CUdeviceptr p, size_t n, size_t off, CUmemGenericAllocationHandle h, unsigned long long f))
{
	(void) f;
	return VMM_RESULT(fake_vmm_map(p, n, off, h));
}
EXPORT(CUresult, cuMemUnmap, (CUdeviceptr p, size_t n)) { return VMM_RESULT(fake_vmm_unmap(p, n)); }
EXPORT(CUresult, cuMemSetAccess, (CUdeviceptr p, size_t n, const void *desc, size_t count))
{
	(void) p; (void) n; (void) desc;
	return count ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ---- cuGetProcAddress ---- */
/* Internal twins with no exported name at their address (the HIDDEN ones). */
static CUresult hidden_cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n) { return fill(0, 0, d, v, n, 1); }
static CUresult hidden_cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr d, const void *s, size_t n, CUstream st) { return copy(1, st, d, (uintptr_t) s, n); }

struct entry { const char *name; void *fn; };
#define E(name) { #name, (void *) impl_##name },
static const struct entry entries[] = {
	E(cuInit) E(cuDriverGetVersion) E(cuDeviceGetCount) E(cuDeviceGetName) E(cuDeviceGetAttribute)
	E(cuDeviceGetUuid) E(cuDeviceGetUuid_v2) E(cuDeviceGetPCIBusId)
	E(cuDevicePrimaryCtxRetain) E(cuCtxSetCurrent) E(cuCtxGetDevice) E(cuStreamCreate) E(cuProfilerStart) E(cuProfilerStop)
	E(cuMemAlloc_v2) E(cuMemAllocPitch_v2) E(cuMemAllocManaged) E(cuMemAllocHost_v2) E(cuMemHostAlloc)
	E(cuMemHostRegister_v2) E(cuMemHostUnregister) E(cuMemFree_v2) E(cuMemFreeHost) E(cuMemAllocAsync)
	E(cuMemAllocAsync_ptsz) E(cuMemFreeAsync) E(cuMemFreeAsync_ptsz) E(cuMemcpy) E(cuMemcpy_ptds)
	E(cuMemcpyAsync) E(cuMemcpyAsync_ptsz) E(cuMemcpyHtoD_v2) E(cuMemcpyHtoD_v2_ptds) E(cuMemcpyDtoH_v2)
	E(cuMemcpyDtoD_v2) E(cuMemcpyHtoDAsync_v2) E(cuMemcpyDtoHAsync_v2) E(cuMemcpyDtoDAsync_v2)
	E(cuMemcpy2D_v2) E(cuMemcpy2DAsync_v2) E(cuMemcpy3D_v2) E(cuMemcpy3DAsync_v2) E(cuMemsetD16_v2)
	E(cuMemsetD32_v2) E(cuMemsetD32_v2_ptds) E(cuMemsetD8Async) E(cuMemsetD16Async) E(cuMemsetD32Async)
	E(cuMemPrefetchAsync) E(cuMemPrefetchAsync_v2) E(cuStreamSynchronize) E(cuCtxSynchronize)
	E(cuMemcpyPeer) E(cuMemcpyPeerAsync) E(cuMemAdvise) E(cuMemAdvise_v2) E(cuCtxSynchronize_v2)
	E(cuMemAddressReserve) E(cuMemAddressFree) E(cuMemCreate) E(cuMemRelease) E(cuMemMap) E(cuMemUnmap)
	E(cuMemSetAccess) E(cuStreamQuery) E(cuEventCreate) E(cuEventDestroy_v2) E(cuEventRecord) E(cuEventRecord_ptsz)
	E(cuEventSynchronize) E(cuEventQuery) E(cuStreamBeginCapture_v2) E(cuStreamEndCapture) E(cuStreamIsCapturing)
	{ "cuMemsetD8_v2", (void *) hidden_cuMemsetD8_v2 },
	{ "cuMemcpyHtoDAsync_v2_ptsz", (void *) hidden_cuMemcpyHtoDAsync_v2_ptsz },
	{ "cuGetProcAddress", NULL }, { "cuGetProcAddress_v2", NULL },  /* filled below */
	{ NULL, NULL },
};

static void *lookup(const char *name)
{
	for (const struct entry *e = entries; e->name; e++)
		if (!strcmp(e->name, name))
			return e->fn;
	return NULL;
}

static CUresult impl_cuGetProcAddress(const char *symbol, void **pfn, int version, unsigned long long flags);
static CUresult impl_cuGetProcAddress_v2(const char *symbol, void **pfn, int version, unsigned long long flags, int *status);

/* The driver's version rules: _v2 from CUDA 3.2 (cuMemHostRegister 6.5, cuMemPrefetchAsync 13.0, cuGetProcAddress
 * 12.0); with flag 2 (per-thread default stream) the _ptsz/_ptds variant where there is one. */
static CUresult get_proc(const char *symbol, void **pfn, int version, unsigned long long flags)
{
	static const char *const per_thread[] = { "_ptsz", "_ptds", "" };
	int since = !strcmp(symbol, "cuMemHostRegister") ? 6050
		: !strcmp(symbol, "cuMemPrefetchAsync") || !strcmp(symbol, "cuCtxSynchronize") ? 13000
		: !strcmp(symbol, "cuGetProcAddress") ? 12000 : 3020;
	const char *versions[2] = { version >= since ? "_v2" : "", "" };
	char name[128];

	if (!strcmp(symbol, "cuGetProcAddress")) {
		*pfn = version >= 12000 ? (void *) impl_cuGetProcAddress_v2 : (void *) impl_cuGetProcAddress;
		return CUDA_SUCCESS;
	}
	for (int v = 0; v < 2; v++)
		for (int s = flags & 2 ? 0 : 2; s < 3; s++) {
			snprintf(name, sizeof(name), "%s%s%s", symbol, versions[v], per_thread[s]);
			if ((*pfn = lookup(name)))
				return CUDA_SUCCESS;
		}
	*pfn = NULL;
	return CUDA_ERROR_NOT_FOUND;
}

static CUresult impl_cuGetProcAddress(const char *symbol, void **pfn, int version, unsigned long long flags)
{
	return get_proc(symbol, pfn, version, flags);
}
CUresult cuGetProcAddress(const char *, void **, int, unsigned long long)
	__attribute__((alias("impl_cuGetProcAddress"), visibility("default")));

static CUresult impl_cuGetProcAddress_v2(const char *symbol, void **pfn, int version, unsigned long long flags, int *status)
{
	CUresult r = get_proc(symbol, pfn, version, flags);

	if (status)
		*status = r == CUDA_SUCCESS ? 0 : 1;   /* CU_GET_PROC_ADDRESS_SUCCESS / _SYMBOL_NOT_FOUND */
	return r;
}
CUresult cuGetProcAddress_v2(const char *, void **, int, unsigned long long, int *)
	__attribute__((alias("impl_cuGetProcAddress_v2"), visibility("default")));

/* Exported names for the HIDDEN functions: distinct functions from what cuGetProcAddress returns. */
CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n) __attribute__((visibility("default")));
CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n) { return fill(0, 0, d, v, n, 1); }
CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr d, const void *s, size_t n, CUstream st) __attribute__((visibility("default")));
CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr d, const void *s, size_t n, CUstream st) { return copy(1, st, d, (uintptr_t) s, n); }
