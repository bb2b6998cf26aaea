/*
 * Fake HIP runtime (test only): libamdhip64.so with the real exported names
 * and C signatures of every function memq wraps, plus the device queries the
 * preload library makes. Device memory lives in host RAM (fake_mem.h).
 * FAKE_GPU_COUNT (default 2) devices; FAKE_GPU_UNIFIED=1 reports an APU.
 *
 * The fixed-direction copies call others through the PLT (hipMemcpyHtoD ->
 * hipMemcpy, hipMemcpyHtoDAsync -> hipMemcpyAsync), as runtimes may: the
 * wrapper must record only the outer call. The other functions do not chain,
 * so bench/preload_overhead.py measures one wrapper per call.
 */
#include <errno.h>
#include <stdio.h>

#include "fake_mem.h"

typedef int hipError_t;
typedef void *hipStream_t;
typedef void *hipMemPool_t;

enum {
	hipSuccess = 0, hipErrorInvalidValue = 1, hipErrorOutOfMemory = 2,
	hipErrorInvalidMemcpyDirection = 21, hipErrorInvalidDevice = 101, hipErrorNotReady = 600,
};
#define ALLOC_KINDS(k) (1u << (k))

static hipError_t alloc(void **p, size_t n, int kind)
{
	if (!p)
		return hipErrorInvalidValue;
	*p = fake_mem_alloc(n, kind);
	return *p ? hipSuccess : hipErrorOutOfMemory;
}

static hipError_t release(void *p, int kind)
{
	if (!p)
		return hipSuccess;
	return fake_mem_free(p, ALLOC_KINDS(kind) | (kind == FAKE_DEVICE ? ALLOC_KINDS(FAKE_MANAGED) : 0))
		? hipErrorInvalidValue : hipSuccess;
}

hipError_t hipGetDeviceCount(int *n) { *n = fake_device_count(); return hipSuccess; }
hipError_t hipGetDevice(int *d) { *d = fake_current_device; return hipSuccess; }
hipError_t hipSetDevice(int d)
{
	if (d < 0 || d >= fake_device_count())
		return hipErrorInvalidDevice;
	fake_current_device = d;
	return hipSuccess;
}
hipError_t hipDeviceGetName(char *name, int len, int d)
{
	if (d < 0 || d >= fake_device_count())
		return hipErrorInvalidDevice;
	snprintf(name, (size_t) len, "Fake HIP GPU %d", d);
	return hipSuccess;
}
typedef struct hipUUID_t { char bytes[16]; } hipUUID;
hipError_t hipDeviceGetUuid(hipUUID *uuid, int d)
{
	if (d < 0 || d >= fake_device_count())
		return hipErrorInvalidDevice;
	if (!uuid)
		return hipErrorInvalidValue;
	fake_uuid((unsigned char *) uuid->bytes, d);
	return hipSuccess;
}
hipError_t hipDeviceGetPCIBusId(char *pciBusId, int len, int d)
{
	if (d < 0 || d >= fake_device_count())
		return hipErrorInvalidDevice;
	if (!pciBusId || len <= 0)
		return hipErrorInvalidValue;
	fake_pci_bus_id(pciBusId, len, d);
	return hipSuccess;
}
hipError_t hipDeviceGetAttribute(int *v, int attr, int d)
{
	if (d < 0 || d >= fake_device_count())
		return hipErrorInvalidDevice;
	/* 16 = hipDeviceAttributeIntegrated, 65 = hipDeviceAttributePageableMemoryAccess */
	*v = (attr == 16 || attr == 65) ? fake_unified() : 0;
	return hipSuccess;
}
hipError_t hipRuntimeGetVersion(int *v) { *v = 60300000; return hipSuccess; }
/* Profiler range (memq record --capture-range profiler-api): no effect without a profiler. */
hipError_t hipProfilerStart(void) { return hipSuccess; }
hipError_t hipProfilerStop(void) { return hipSuccess; }
hipError_t hipStreamCreate(hipStream_t *s)
{
	static unsigned long next = 0x57000;
	*s = (hipStream_t) __atomic_add_fetch(&next, 0x100, __ATOMIC_RELAXED);
	return hipSuccess;
}

hipError_t hipMalloc(void **p, size_t n) { return alloc(p, n, FAKE_DEVICE); }
hipError_t hipMallocManaged(void **p, size_t n, unsigned f) { (void) f; return alloc(p, n, FAKE_MANAGED); }
hipError_t hipHostMalloc(void **p, size_t n, unsigned f) { (void) f; return alloc(p, n, FAKE_PINNED); }
hipError_t hipExtHostAlloc(void **p, size_t n, unsigned f) { (void) f; return alloc(p, n, FAKE_PINNED); }
hipError_t hipHostAlloc(void **p, size_t n, unsigned f) { return hipHostMalloc(p, n, f); }
hipError_t hipMallocHost(void **p, size_t n) { return alloc(p, n, FAKE_PINNED); }
hipError_t hipMallocAsync(void **p, size_t n, hipStream_t s) { (void) s; return alloc(p, n, FAKE_DEVICE); }
hipError_t hipMallocFromPoolAsync(void **p, size_t n, hipMemPool_t pool, hipStream_t s)
{
	(void) pool; (void) s;
	return alloc(p, n, FAKE_DEVICE);
}
hipError_t hipMallocPitch(void **p, size_t *pitch, size_t w, size_t h)
{
	*pitch = fake_pitch(w);
	return alloc(p, *pitch * h, FAKE_DEVICE);
}
hipError_t hipFree(void *p) { return release(p, FAKE_DEVICE); }
hipError_t hipFreeAsync(void *p, hipStream_t s) { (void) s; return release(p, FAKE_DEVICE); }
hipError_t hipHostFree(void *p) { return release(p, FAKE_PINNED); }
hipError_t hipFreeHost(void *p) { return hipHostFree(p); }
hipError_t hipHostRegister(void *p, size_t n, unsigned f) { (void) f; return p && n ? hipSuccess : hipErrorInvalidValue; }
hipError_t hipHostUnregister(void *p) { return p ? hipSuccess : hipErrorInvalidValue; }

static hipError_t copy(int async, hipStream_t st, void *d, const void *s, size_t n, int kind)
{
	if (!fake_copy_kind_ok(kind))
		return hipErrorInvalidMemcpyDirection;
	fake_copy(async, st, d, s, n);
	return hipSuccess;
}
hipError_t hipMemcpy(void *d, const void *s, size_t n, int kind) { return copy(0, 0, d, s, n, kind); }
hipError_t hipMemcpyAsync(void *d, const void *s, size_t n, int kind, hipStream_t st) { return copy(1, st, d, s, n, kind); }
hipError_t hipMemcpyWithStream(void *d, const void *s, size_t n, int kind, hipStream_t st) { return copy(1, st, d, s, n, kind); }
hipError_t hipMemcpyHtoD(void *d, void *s, size_t n) { return hipMemcpy(d, s, n, 1); }
hipError_t hipMemcpyDtoH(void *d, void *s, size_t n) { return hipMemcpy(d, s, n, 2); }
hipError_t hipMemcpyDtoD(void *d, void *s, size_t n) { return hipMemcpy(d, s, n, 3); }
hipError_t hipMemcpyHtoDAsync(void *d, void *s, size_t n, hipStream_t st) { return hipMemcpyAsync(d, s, n, 1, st); }
hipError_t hipMemcpyDtoHAsync(void *d, void *s, size_t n, hipStream_t st) { return hipMemcpyAsync(d, s, n, 2, st); }
hipError_t hipMemcpyDtoDAsync(void *d, void *s, size_t n, hipStream_t st) { return hipMemcpyAsync(d, s, n, 3, st); }
static hipError_t copy2d(int async, hipStream_t st, void *d, size_t dp, const void *s, size_t sp, size_t w, size_t h, int kind)
{
	if (!fake_copy_kind_ok(kind))
		return hipErrorInvalidMemcpyDirection;
	if (w > dp || w > sp)
		return hipErrorInvalidValue;
	fake_copy_rows(async, st, d, dp, s, sp, w, h);
	return hipSuccess;
}
hipError_t hipMemcpy2D(void *d, size_t dp, const void *s, size_t sp, size_t w, size_t h, int kind) { return copy2d(0, 0, d, dp, s, sp, w, h, kind); }
hipError_t hipMemcpy2DAsync(void *d, size_t dp, const void *s, size_t sp, size_t w, size_t h, int kind, hipStream_t st)
{
	return copy2d(1, st, d, dp, s, sp, w, h, kind);
}
static hipError_t peer(int async, hipStream_t st, void *d, int dd, const void *s, int sd, size_t n)
{
	if (dd < 0 || sd < 0 || dd >= fake_device_count() || sd >= fake_device_count())
		return hipErrorInvalidDevice;
	fake_copy(async, st, d, s, n);
	return hipSuccess;
}
hipError_t hipMemcpyPeer(void *d, int dd, const void *s, int sd, size_t n) { return peer(0, 0, d, dd, s, sd, n); }
hipError_t hipMemcpyPeerAsync(void *d, int dd, const void *s, int sd, size_t n, hipStream_t st) { return peer(1, st, d, dd, s, sd, n); }

hipError_t hipMemset(void *d, int v, size_t n) { fake_fill(0, 0, d, (unsigned char) v, n, 1); return hipSuccess; }
hipError_t hipMemsetAsync(void *d, int v, size_t n, hipStream_t st) { fake_fill(1, st, d, (unsigned char) v, n, 1); return hipSuccess; }
hipError_t hipMemsetD8(void *d, unsigned char v, size_t n) { return hipMemset(d, v, n); }
hipError_t hipMemsetD8Async(void *d, unsigned char v, size_t n, hipStream_t st) { return hipMemsetAsync(d, v, n, st); }
hipError_t hipMemsetD16(void *d, unsigned short v, size_t n) { fake_fill(0, 0, d, v, n, 2); return hipSuccess; }
hipError_t hipMemsetD16Async(void *d, unsigned short v, size_t n, hipStream_t st) { fake_fill(1, st, d, v, n, 2); return hipSuccess; }
hipError_t hipMemsetD32(void *d, int v, size_t n) { fake_fill(0, 0, d, (unsigned) v, n, 4); return hipSuccess; }
hipError_t hipMemsetD32Async(void *d, int v, size_t n, hipStream_t st) { fake_fill(1, st, d, (unsigned) v, n, 4); return hipSuccess; }

hipError_t hipMemPrefetchAsync(const void *p, size_t n, int dev, hipStream_t st)
{
	(void) n; (void) st;
	return p && dev >= -1 && dev < fake_device_count() ? hipSuccess : hipErrorInvalidValue;
}
hipError_t hipMemAdvise(const void *p, size_t n, int advice, int dev)
{
	(void) n;
	return p && advice >= 1 && advice <= 6 && dev >= -1 && dev < fake_device_count() ? hipSuccess : hipErrorInvalidValue;
}
/* errno in, errno out: 5 on entry becomes 6, so a caller can tell that a
 * wrapper kept both the errno it was called with and the one left here. */
hipError_t hipStreamSynchronize(hipStream_t s)
{
	fake_drain((uintptr_t) s, ULONG_MAX);
	errno = errno == 5 ? 6 : 99;
	return hipSuccess;
}
hipError_t hipDeviceSynchronize(void) { fake_drain(FAKE_ALL_STREAMS, ULONG_MAX); return hipSuccess; }

/* Events and stream capture (fake_mem.h). */
FAKE_EVENT_API(hip, hipSuccess, hipErrorInvalidValue, hipErrorNotReady)

/* 3D copies (hipMemcpy3DParms) and virtual memory management (fake_mem.h). */
hipError_t hipMemcpy3D(const struct fake_copy3d_parms *p) { return fake_copy3d(0, 0, p) ? hipErrorInvalidValue : hipSuccess; }
hipError_t hipMemcpy3DAsync(const struct fake_copy3d_parms *p, hipStream_t st) { return fake_copy3d(1, st, p) ? hipErrorInvalidValue : hipSuccess; }

/* Per-thread default stream entry points (code built with -fgpu-default-stream=per-thread):
 * stream 0 there is the thread's default stream, hipStreamPerThread (0x2) to the fake device. */
static hipStream_t per_thread(hipStream_t st) { return st ? st : (hipStream_t) 2; }
hipError_t hipMemcpy_spt(void *d, const void *s, size_t n, int kind) { return hipMemcpy(d, s, n, kind); }
hipError_t hipMemcpyAsync_spt(void *d, const void *s, size_t n, int kind, hipStream_t st)
{
	return copy(1, per_thread(st), d, s, n, kind);
}
hipError_t hipMemset_spt(void *d, int v, size_t n) { return hipMemset(d, v, n); }
hipError_t hipMemsetAsync_spt(void *d, int v, size_t n, hipStream_t st) { return hipMemsetAsync(d, v, n, per_thread(st)); }
hipError_t hipMemcpy2D_spt(void *d, size_t dp, const void *s, size_t sp, size_t w, size_t h, int kind)
{
	return copy2d(0, 0, d, dp, s, sp, w, h, kind);
}
hipError_t hipMemcpy2DAsync_spt(void *d, size_t dp, const void *s, size_t sp, size_t w, size_t h, int kind, hipStream_t st)
{
	return copy2d(1, per_thread(st), d, dp, s, sp, w, h, kind);
}
hipError_t hipMemcpy3D_spt(const struct fake_copy3d_parms *p) { return hipMemcpy3D(p); }
hipError_t hipMemcpy3DAsync_spt(const struct fake_copy3d_parms *p, hipStream_t st) { return hipMemcpy3DAsync(p, per_thread(st)); }
hipError_t hipStreamSynchronize_spt(hipStream_t s) { fake_drain((uintptr_t) per_thread(s), ULONG_MAX); return hipSuccess; }

/* ROCm 7.1: prefetch and advise to a hipMemLocation {type, id} (1 = device, 2 = host). */
struct hip_location { int type, id; };
static hipError_t check_location(struct hip_location loc)
{
	if (loc.type == 1)
		return loc.id >= 0 && loc.id < fake_device_count() ? hipSuccess : hipErrorInvalidDevice;
	return loc.type >= 2 && loc.type <= 4 ? hipSuccess : hipErrorInvalidValue;
}
hipError_t hipMemPrefetchAsync_v2(const void *p, size_t n, struct hip_location loc, unsigned flags, hipStream_t st)
{
	(void) n; (void) st;
	return !p || flags ? hipErrorInvalidValue : check_location(loc);
}
hipError_t hipMemAdvise_v2(const void *p, size_t n, int advice, struct hip_location loc)
{
	(void) n;
	return !p || advice < 1 || advice > 6 ? hipErrorInvalidValue : check_location(loc);
}

struct hip_alloc_prop { int type, handle_types; struct hip_location location; };
#define VMM_RESULT(x) ((x) ? hipErrorInvalidValue : hipSuccess)
hipError_t hipMemAddressReserve(void **p, size_t n, size_t align, void *addr, unsigned long long f)
{
	(void) align; (void) f;
	*p = fake_vmm_reserve(n, (uintptr_t) addr);
	return *p ? hipSuccess : hipErrorOutOfMemory;
}
hipError_t hipMemAddressFree(void *p, size_t n) { return VMM_RESULT(fake_vmm_free((uintptr_t) p, n)); }
hipError_t hipMemCreate(void **h, size_t n, const struct hip_alloc_prop *prop, unsigned long long f)
{
	unsigned long long handle;

	(void) f;
	if (!prop || prop->location.type != 1 || prop->location.id < 0 || prop->location.id >= fake_device_count()
	    || fake_vmm_create(&handle, n))
		return hipErrorInvalidValue;
	*h = (void *) (uintptr_t) handle;
	return hipSuccess;
}
hipError_t hipMemRelease(void *h) { return VMM_RESULT(fake_vmm_release((uintptr_t) h)); }
hipError_t hipMemMap(void *p, size_t n, size_t off, void *h, unsigned long long f)
{
	(void) f;
	return VMM_RESULT(fake_vmm_map((uintptr_t) p, n, off, (uintptr_t) h));
}
hipError_t hipMemUnmap(void *p, size_t n) { return VMM_RESULT(fake_vmm_unmap((uintptr_t) p, n)); }
