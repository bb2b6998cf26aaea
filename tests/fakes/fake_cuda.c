/*
 * Fake CUDA runtime (test only): libcudart.so.12 with the real exported names
 * and C signatures of every function memq wraps, the per-thread-stream
 * exports (_ptds / _ptsz, which call the plain functions through the PLT),
 * and the device queries the preload library makes. Device memory lives in
 * host RAM (fake_mem.h).
 *
 * FAKE_CUDA_VERSION (default 12040, 13000 built as libcudart.so.13) is what
 * cudaRuntimeGetVersion reports;
 * from 13000 on, cudaMemPrefetchAsync / cudaMemAdvise take the CUDA 13
 * arguments (struct cudaMemLocation), as the real runtime does.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>

#include "fake_mem.h"

typedef int cudaError_t;
typedef void *cudaStream_t;
typedef void *cudaMemPool_t;
struct cudaMemLocation { int type; int id; };

enum {
	cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2,
	cudaErrorInvalidMemcpyDirection = 21, cudaErrorInvalidDevice = 101, cudaErrorNotReady = 600,
};

/* Built as libcudart.so.13 with -DFAKE_CUDA_DEFAULT_VERSION=13000. */
#ifndef FAKE_CUDA_DEFAULT_VERSION
#define FAKE_CUDA_DEFAULT_VERSION 12040
#endif

static int version(void)
{
	const char *s = getenv("FAKE_CUDA_VERSION");

	return s ? atoi(s) : FAKE_CUDA_DEFAULT_VERSION;
}

/* Test only (not a CUDA function): whether `p` is a live allocation of THIS
 * copy of the runtime; a process with two copies can tell which one served
 * a call. */
int fake_owns(void *p)
{
	int found = 0;

	pthread_mutex_lock(&fake_lock);
	for (int i = 0; i < FAKE_MAX_ALLOCS && !found; i++)
		found = fake_allocs[i].ptr == p;
	pthread_mutex_unlock(&fake_lock);
	return found;
}

static cudaError_t alloc(void **p, size_t n, int kind)
{
	if (!p)
		return cudaErrorInvalidValue;
	*p = fake_mem_alloc(n, kind);
	return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}

static cudaError_t release(void *p, unsigned kinds)
{
	if (!p)
		return cudaSuccess;
	return fake_mem_free(p, kinds) ? cudaErrorInvalidValue : cudaSuccess;
}

static int valid_device(int d) { return d >= 0 && d < fake_device_count(); }

cudaError_t cudaRuntimeGetVersion(int *v) { *v = version(); return cudaSuccess; }
/* Profiler range (torch.cuda.profiler.start/stop call these): no effect without a profiler. */
cudaError_t cudaProfilerStart(void) { return cudaSuccess; }
cudaError_t cudaProfilerStop(void) { return cudaSuccess; }
cudaError_t cudaGetDeviceCount(int *n) { *n = fake_device_count(); return cudaSuccess; }
cudaError_t cudaGetDevice(int *d) { *d = fake_current_device; return cudaSuccess; }
cudaError_t cudaSetDevice(int d)
{
	if (!valid_device(d))
		return cudaErrorInvalidDevice;
	fake_current_device = d;
	return cudaSuccess;
}
/* cudaDeviceProp begins with char name[256], then cudaUUID_t uuid (16 bytes);
 * the rest is left zero. */
cudaError_t cudaGetDeviceProperties_v2(void *prop, int d)
{
	if (!valid_device(d))
		return cudaErrorInvalidDevice;
	snprintf((char *) prop, 256, "Fake CUDA GPU %d", d);
	fake_uuid((unsigned char *) prop + 256, d);
	return cudaSuccess;
}
cudaError_t cudaDeviceGetPCIBusId(char *pciBusId, int len, int d)
{
	if (!valid_device(d))
		return cudaErrorInvalidDevice;
	if (!pciBusId || len <= 0)
		return cudaErrorInvalidValue;
	fake_pci_bus_id(pciBusId, len, d);
	return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(void *prop, int d) { return cudaGetDeviceProperties_v2(prop, d); }
cudaError_t cudaDeviceGetAttribute(int *v, int attr, int d)
{
	if (!valid_device(d))
		return cudaErrorInvalidDevice;
	/* 18 = cudaDevAttrIntegrated, 88 = cudaDevAttrPageableMemoryAccess */
	*v = (attr == 18 || attr == 88) ? fake_unified() : 0;
	return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t *s)
{
	static unsigned long next = 0xc7000;
	*s = (cudaStream_t) __atomic_add_fetch(&next, 0x100, __ATOMIC_RELAXED);
	return cudaSuccess;
}

#define DEV_KINDS ((1u << FAKE_DEVICE) | (1u << FAKE_MANAGED))
cudaError_t cudaMalloc(void **p, size_t n) { return alloc(p, n, FAKE_DEVICE); }
cudaError_t cudaMallocManaged(void **p, size_t n, unsigned f) { (void) f; return alloc(p, n, FAKE_MANAGED); }
cudaError_t cudaMallocHost(void **p, size_t n) { return alloc(p, n, FAKE_PINNED); }
cudaError_t cudaHostAlloc(void **p, size_t n, unsigned f) { (void) f; return alloc(p, n, FAKE_PINNED); }
cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t s) { (void) s; return alloc(p, n, FAKE_DEVICE); }
cudaError_t cudaMallocAsync_ptsz(void **p, size_t n, cudaStream_t s) { return cudaMallocAsync(p, n, s); }
cudaError_t cudaMallocFromPoolAsync(void **p, size_t n, cudaMemPool_t pool, cudaStream_t s)
{
	(void) pool; (void) s;
	return alloc(p, n, FAKE_DEVICE);
}
cudaError_t cudaMallocFromPoolAsync_ptsz(void **p, size_t n, cudaMemPool_t pool, cudaStream_t s) { return cudaMallocFromPoolAsync(p, n, pool, s); }
cudaError_t cudaMallocPitch(void **p, size_t *pitch, size_t w, size_t h)
{
	*pitch = fake_pitch(w);
	return alloc(p, *pitch * h, FAKE_DEVICE);
}
cudaError_t cudaFree(void *p) { return release(p, DEV_KINDS); }
cudaError_t cudaFreeAsync(void *p, cudaStream_t s) { (void) s; return release(p, DEV_KINDS); }
cudaError_t cudaFreeAsync_ptsz(void *p, cudaStream_t s) { return cudaFreeAsync(p, s); }
cudaError_t cudaFreeHost(void *p) { return release(p, 1u << FAKE_PINNED); }
cudaError_t cudaHostRegister(void *p, size_t n, unsigned f) { (void) f; return p && n ? cudaSuccess : cudaErrorInvalidValue; }
cudaError_t cudaHostUnregister(void *p) { return p ? cudaSuccess : cudaErrorInvalidValue; }

static cudaError_t copy(int async, cudaStream_t st, void *d, const void *s, size_t n, int kind)
{
	if (!fake_copy_kind_ok(kind) || kind == 1024)
		return cudaErrorInvalidMemcpyDirection;
	fake_copy(async, st, d, s, n);
	return cudaSuccess;
}
cudaError_t cudaMemcpy(void *d, const void *s, size_t n, int kind) { return copy(0, 0, d, s, n, kind); }
cudaError_t cudaMemcpy_ptds(void *d, const void *s, size_t n, int kind) { return cudaMemcpy(d, s, n, kind); }
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, int kind, cudaStream_t st) { return copy(1, st, d, s, n, kind); }
cudaError_t cudaMemcpyAsync_ptsz(void *d, const void *s, size_t n, int kind, cudaStream_t st) { return cudaMemcpyAsync(d, s, n, kind, st); }
static cudaError_t copy2d(int async, cudaStream_t st, void *d, size_t dp, const void *s, size_t sp, size_t w, size_t h, int kind)
{
	if (!fake_copy_kind_ok(kind) || kind == 1024)
		return cudaErrorInvalidMemcpyDirection;
	if (w > dp || w > sp)
		return cudaErrorInvalidValue;
	fake_copy_rows(async, st, d, dp, s, sp, w, h);
	return cudaSuccess;
}
cudaError_t cudaMemcpy2D(void *d, size_t dp, const void *s, size_t sp, size_t w, size_t h, int kind) { return copy2d(0, 0, d, dp, s, sp, w, h, kind); }
cudaError_t cudaMemcpy2D_ptds(void *d, size_t dp, const void *s, size_t sp, size_t w, size_t h, int kind) { return cudaMemcpy2D(d, dp, s, sp, w, h, kind); }
cudaError_t cudaMemcpy2DAsync(void *d, size_t dp, const void *s, size_t sp, size_t w, size_t h, int kind, cudaStream_t st)
{
	return copy2d(1, st, d, dp, s, sp, w, h, kind);
}
cudaError_t cudaMemcpy2DAsync_ptsz(void *d, size_t dp, const void *s, size_t sp, size_t w, size_t h, int kind, cudaStream_t st) { return cudaMemcpy2DAsync(d, dp, s, sp, w, h, kind, st); }
static cudaError_t peer(int async, cudaStream_t st, void *d, int dd, const void *s, int sd, size_t n)
{
	if (!valid_device(dd) || !valid_device(sd))
		return cudaErrorInvalidDevice;
	fake_copy(async, st, d, s, n);
	return cudaSuccess;
}
cudaError_t cudaMemcpyPeer(void *d, int dd, const void *s, int sd, size_t n) { return peer(0, 0, d, dd, s, sd, n); }
cudaError_t cudaMemcpyPeerAsync(void *d, int dd, const void *s, int sd, size_t n, cudaStream_t st) { return peer(1, st, d, dd, s, sd, n); }
cudaError_t cudaMemset(void *d, int v, size_t n) { fake_fill(0, 0, d, (unsigned char) v, n, 1); return cudaSuccess; }
cudaError_t cudaMemset_ptds(void *d, int v, size_t n) { return cudaMemset(d, v, n); }
cudaError_t cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t st) { fake_fill(1, st, d, (unsigned char) v, n, 1); return cudaSuccess; }
cudaError_t cudaMemsetAsync_ptsz(void *d, int v, size_t n, cudaStream_t st) { return cudaMemsetAsync(d, v, n, st); }

/* The new (CUDA 13, *_v2) forms: a location instead of a device number. */
static cudaError_t check_location(struct cudaMemLocation loc)
{
	if (loc.type == 1)
		return valid_device(loc.id) ? cudaSuccess : cudaErrorInvalidDevice;
	return loc.type >= 2 && loc.type <= 4 ? cudaSuccess : cudaErrorInvalidValue;
}
cudaError_t cudaMemPrefetchAsync_v2(const void *p, size_t n, struct cudaMemLocation loc, unsigned flags, cudaStream_t st)
{
	(void) n; (void) st;
	return !p || flags ? cudaErrorInvalidValue : check_location(loc);
}
cudaError_t cudaMemPrefetchAsync_v2_ptsz(const void *p, size_t n, struct cudaMemLocation loc, unsigned flags, cudaStream_t st)
{
	return cudaMemPrefetchAsync_v2(p, n, loc, flags, st);
}
cudaError_t cudaMemAdvise_v2(const void *p, size_t n, int advice, struct cudaMemLocation loc)
{
	(void) n;
	return !p || advice < 1 || advice > 6 ? cudaErrorInvalidValue : check_location(loc);
}
/*
 * The un-suffixed names: CUDA 12 (int device) or CUDA 13 (location) form
 * depending on the version this fake pretends to be. Declared with 64-bit
 * integer parameters so one definition can read either form.
 */
static struct cudaMemLocation location_of(uint64_t bits)
{
	struct cudaMemLocation loc;

	memcpy(&loc, &bits, sizeof(loc));
	return loc;
}
cudaError_t cudaMemPrefetchAsync(const void *p, size_t n, uint64_t a3, uint64_t a4, uint64_t a5)
{
	if (version() >= 13000)
		return cudaMemPrefetchAsync_v2(p, n, location_of(a3), (unsigned) a4, (cudaStream_t) a5);
	if ((int) a3 != -1 && !valid_device((int) a3))
		return cudaErrorInvalidDevice;
	return p ? cudaSuccess : cudaErrorInvalidValue;
}
cudaError_t cudaMemPrefetchAsync_ptsz(const void *p, size_t n, uint64_t a3, uint64_t a4, uint64_t a5) { return cudaMemPrefetchAsync(p, n, a3, a4, a5); }
cudaError_t cudaMemAdvise(const void *p, size_t n, int advice, uint64_t a4)
{
	if (version() >= 13000)
		return cudaMemAdvise_v2(p, n, advice, location_of(a4));
	if ((int) a4 != -1 && !valid_device((int) a4))
		return cudaErrorInvalidDevice;
	return !p || advice < 1 || advice > 6 ? cudaErrorInvalidValue : cudaSuccess;
}
/* errno 5 on entry becomes 6: see fake_hip.c */
cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
	fake_drain((uintptr_t) s, ULONG_MAX);
	errno = errno == 5 ? 6 : 99;
	return cudaSuccess;
}
cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t s) { return cudaStreamSynchronize(s); }
cudaError_t cudaDeviceSynchronize(void) { fake_drain(FAKE_ALL_STREAMS, ULONG_MAX); return cudaSuccess; }

/* Events and stream capture (fake_mem.h). */
FAKE_EVENT_API(cuda, cudaSuccess, cudaErrorInvalidValue, cudaErrorNotReady)
cudaError_t cudaEventCreateWithFlags(void **e, unsigned f) { (void) f; return cudaEventCreate(e); }
cudaError_t cudaEventRecord_ptsz(void *e, cudaStream_t s) { return cudaEventRecord(e, s); }
cudaError_t cudaEventRecordWithFlags(void *e, cudaStream_t s, unsigned f) { (void) f; return cudaEventRecord(e, s); }

/* 3D copies (cudaMemcpy3DParms, fake_mem.h). */
cudaError_t cudaMemcpy3D(const struct fake_copy3d_parms *p) { return fake_copy3d(0, 0, p) ? cudaErrorInvalidValue : cudaSuccess; }
cudaError_t cudaMemcpy3DAsync(const struct fake_copy3d_parms *p, cudaStream_t st) { return fake_copy3d(1, st, p) ? cudaErrorInvalidValue : cudaSuccess; }

/*
 * cudaGetDriverEntryPoint(symbol, funcPtr, flags, driverStatus) (CUDA 12):
 * what the driver's cuGetProcAddress returns for the runtime's version, as
 * the real runtime does (it loads libcuda.so.1 itself).
 */
cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **pfn, unsigned long long flags, int *status)
{
	typedef int (*get_proc_t)(const char *, void **, int, unsigned long long, int *);
	void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	get_proc_t get = driver ? (get_proc_t) dlsym(driver, "cuGetProcAddress_v2") : NULL;

	if (!get)
		return cudaErrorInvalidValue;
	return get(symbol, pfn, version(), flags, status) ? cudaErrorInvalidValue : cudaSuccess;
}
