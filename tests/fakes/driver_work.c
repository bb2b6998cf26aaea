/*
 * Driver-API workload (test only): reaches GPU memory calls the ways that go
 * around a dynamically linked runtime, and logs each call (worklog.h) with
 * the event and exported name memq must record.
 *
 *   driver_work direct LOG     the CUDA driver API called by name (libcuda.so.1, linked)
 *   driver_work procaddr LOG   the same functions fetched with cuGetProcAddress (v1 and _v2, the
 *                              per-thread flag, an entry the driver returns with no exported name)
 *   driver_work vmm LOG        a VMM allocator: reserve, create, map two handles, copy into them
 *                              (twice: a repeat), unmap both with one call, release
 *   driver_work runtime LOG    the HIP and CUDA runtimes dlopen'ed RTLD_LOCAL and their functions
 *                              taken with dlsym/dlvsym: copies (3D included), HIP VMM, and a driver
 *                              function from cudaGetDriverEntryPoint
 *   driver_work next LOG       dlsym(RTLD_NEXT) from this program must find what follows it (under
 *                              memq: memq's wrapper, the same as RTLD_DEFAULT); exit 1 if not
 * Exit status: the number of calls that did not return what was expected.
 */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "fake_mem.h"
#include "worklog.h"

typedef unsigned long long CUdeviceptr;
typedef void *CUstream;
struct location { int type, id; };
struct alloc_prop { int type, handle_types; struct location location; void *win32; unsigned char flags[8]; };

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

int cuInit(unsigned);
int cuCtxGetDevice(int *);
int cuStreamCreate(CUstream *, unsigned);
int cuMemAlloc_v2(CUdeviceptr *, size_t);
int cuMemAllocPitch_v2(CUdeviceptr *, size_t *, size_t, size_t, unsigned);
int cuMemAllocManaged(CUdeviceptr *, size_t, unsigned);
int cuMemAllocHost_v2(void **, size_t);
int cuMemHostAlloc(void **, size_t, unsigned);
int cuMemHostRegister_v2(void *, size_t, unsigned);
int cuMemHostUnregister(void *);
int cuMemFree_v2(CUdeviceptr);
int cuMemFreeHost(void *);
int cuMemAllocAsync(CUdeviceptr *, size_t, CUstream);
int cuMemFreeAsync(CUdeviceptr, CUstream);
int cuMemcpy(CUdeviceptr, CUdeviceptr, size_t);
int cuMemcpy_ptds(CUdeviceptr, CUdeviceptr, size_t);
int cuMemcpyAsync(CUdeviceptr, CUdeviceptr, size_t, CUstream);
int cuMemcpyHtoD_v2(CUdeviceptr, const void *, size_t);
int cuMemcpyHtoD_v2_ptds(CUdeviceptr, const void *, size_t);
int cuMemcpyDtoH_v2(void *, CUdeviceptr, size_t);
int cuMemcpyDtoD_v2(CUdeviceptr, CUdeviceptr, size_t);
int cuMemcpyHtoDAsync_v2(CUdeviceptr, const void *, size_t, CUstream);
int cuMemcpyDtoHAsync_v2(void *, CUdeviceptr, size_t, CUstream);
int cuMemcpy2D_v2(const CUDA_MEMCPY2D *);
int cuMemcpy3D_v2(const CUDA_MEMCPY3D *);
int cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D *, CUstream);
int cuMemsetD8_v2(CUdeviceptr, unsigned char, size_t);
int cuMemsetD16_v2(CUdeviceptr, unsigned short, size_t);
int cuMemsetD32_v2(CUdeviceptr, unsigned, size_t);
int cuMemsetD32Async(CUdeviceptr, unsigned, size_t, CUstream);
int cuMemPrefetchAsync(CUdeviceptr, size_t, int, CUstream);
int cuMemPrefetchAsync_v2(CUdeviceptr, size_t, struct location, unsigned, CUstream);
int cuStreamSynchronize(CUstream);
int cuCtxSynchronize(void);
int cuMemcpyPeer(CUdeviceptr, void *, CUdeviceptr, void *, size_t);
int cuMemcpyPeerAsync(CUdeviceptr, void *, CUdeviceptr, void *, size_t, CUstream);
int cuMemAdvise(CUdeviceptr, size_t, int, int);
int cuMemAdvise_v2(CUdeviceptr, size_t, int, struct location);
int cuMemAddressReserve(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
int cuMemAddressFree(CUdeviceptr, size_t);
int cuMemCreate(unsigned long long *, size_t, const struct alloc_prop *, unsigned long long);
int cuMemRelease(unsigned long long);
int cuMemMap(CUdeviceptr, size_t, size_t, unsigned long long, unsigned long long);
int cuMemUnmap(CUdeviceptr, size_t);
int cuGetProcAddress(const char *, void **, int, unsigned long long);
int cuGetProcAddress_v2(const char *, void **, int, unsigned long long, int *);

enum { HOST = 1, PINNED = 2, REGISTERED = 3, DEVICE = 4, MANAGED = 5 };
enum { H2H = 0, H2D = 1, D2H = 2, D2D = 3, DEFAULT = 4 };
enum { MT_HOST = 1, MT_DEVICE = 2 };   /* CUmemorytype */
#define PER_THREAD ((CUstream) 0x2)
#define PV(x) ((void *) (uintptr_t) (x))

static int failures;

static int ok(int r)
{
	failures += r != 0;
	return r;
}

/* ---- the driver API by name ---- */
static void direct(void)
{
	CUdeviceptr d = 0, d2 = 0, pitched = 0, managed = 0, async = 0;
	void *pinned = NULL, *pinned2 = NULL;
	char *host = malloc(1 << 16), *back = malloc(1 << 16);
	size_t pitch = 0;
	CUstream s;
	int r;

	ok(cuInit(0));
	ok(cuStreamCreate(&s, 0));
	r = ok(cuMemAlloc_v2(&d, 4096));
	log_alloc("alloc", "cuMemAlloc_v2", PV(d), 4096, DEVICE, NULL, 0, 0, 0, 0, r);
	r = ok(cuMemAlloc_v2(&d2, 4096));
	log_alloc("alloc", "cuMemAlloc_v2", PV(d2), 4096, DEVICE, NULL, 0, 0, 0, 0, r);
	r = ok(cuMemAllocPitch_v2(&pitched, &pitch, 100, 8, 4));
	log_alloc("alloc", "cuMemAllocPitch_v2", PV(pitched), pitch * 8, DEVICE, NULL, 0, 100, 8, 0, r);
	r = ok(cuMemAllocManaged(&managed, 8192, 1));
	log_alloc("alloc", "cuMemAllocManaged", PV(managed), 8192, MANAGED, NULL, 1, 0, 0, 0, r);
	r = ok(cuMemAllocHost_v2(&pinned, 4096));
	log_alloc("alloc", "cuMemAllocHost_v2", pinned, 4096, PINNED, NULL, 0, 0, 0, 0, r);
	r = ok(cuMemHostAlloc(&pinned2, 2048, 4));
	log_alloc("alloc", "cuMemHostAlloc", pinned2, 2048, PINNED, NULL, 4, 0, 0, 0, r);
	r = ok(cuMemHostRegister_v2(host, 1 << 16, 1));
	log_alloc("register", "cuMemHostRegister_v2", host, 1 << 16, REGISTERED, NULL, 1, 0, 0, 0, r);
	r = ok(cuMemAllocAsync(&async, 1024, s));
	log_alloc("alloc", "cuMemAllocAsync", PV(async), 1024, DEVICE, s, 0, 0, 0, 0, r);

	memset(host, 7, 4096);
	log_copy("cuMemcpyHtoD_v2", PV(d), host, 4096, H2D, NULL, -1, 0, 0, 0, 0, 0, ok(cuMemcpyHtoD_v2(d, host, 4096)));
	log_copy("cuMemcpyHtoD_v2_ptds", PV(d), host, 512, H2D, PER_THREAD, -1, 0, 0, 0, 0, 0,
		ok(cuMemcpyHtoD_v2_ptds(d, host, 512)));
	log_copy("cuMemcpyDtoD_v2", PV(d2), PV(d), 4096, D2D, NULL, -1, 0, 0, 0, 0, 0, ok(cuMemcpyDtoD_v2(d2, d, 4096)));
	/* peer copies (what cudaMemcpyPeer becomes under the static runtime): contexts, not devices */
	log_copy("cuMemcpyPeer", PV(d2), PV(d), 1024, D2D, NULL, -1, 0, 0, 0, 0, 0, ok(cuMemcpyPeer(d2, NULL, d, NULL, 1024)));
	log_copy("cuMemcpyPeerAsync", PV(d), PV(d2), 512, D2D, s, -1, 0, 0, 0, 0, 0,
		ok(cuMemcpyPeerAsync(d, NULL, d2, NULL, 512, s)));
	log_copy("cuMemcpyDtoH_v2", back, PV(d2), 4096, D2H, NULL, -1, 0, 0, 0, 0, 0, ok(cuMemcpyDtoH_v2(back, d2, 4096)));
	log_copy("cuMemcpy", PV(managed), PV(d), 1024, DEFAULT, NULL, -1, 0, 0, 0, 0, 0, ok(cuMemcpy(managed, d, 1024)));
	log_copy("cuMemcpy_ptds", PV(d2), PV(managed), 256, DEFAULT, PER_THREAD, -1, 0, 0, 0, 0, 0,
		ok(cuMemcpy_ptds(d2, managed, 256)));
	log_copy("cuMemcpyAsync", PV(async), PV(d), 1024, DEFAULT, s, -1, 0, 0, 0, 0, 0, ok(cuMemcpyAsync(async, d, 1024, s)));
	log_copy("cuMemcpyHtoDAsync_v2", PV(d), pinned, 4096, H2D, s, -1, 0, 0, 0, 0, 0,
		ok(cuMemcpyHtoDAsync_v2(d, pinned, 4096, s)));
	log_copy("cuMemcpyDtoHAsync_v2", pinned2, PV(d), 2048, D2H, s, -1, 0, 0, 0, 0, 0,
		ok(cuMemcpyDtoHAsync_v2(pinned2, d, 2048, s)));

	/* 2D: 8 rows of 100 bytes from host rows 128 apart into the pitched rows, at (x 4, y 1) */
	CUDA_MEMCPY2D c2 = { .srcMemoryType = MT_HOST, .srcHost = host, .srcPitch = 128,
		.dstXInBytes = 4, .dstY = 1, .dstMemoryType = MT_DEVICE, .dstDevice = pitched, .dstPitch = pitch,
		.WidthInBytes = 96, .Height = 7 };
	log_copy("cuMemcpy2D_v2", (char *) PV(pitched) + pitch + 4, host, 96 * 7, H2D, NULL, -1, 96, 7, pitch, 128,
		0, ok(cuMemcpy2D_v2(&c2)));
	/* 3D: 2 slices of 3 rows of 40 bytes, host (pitch 64, 4 rows a slice) -> managed (pitch 128, 5 rows),
	 * starting at host slice 0 row 1 and managed x 8 */
	CUDA_MEMCPY3D c3 = { .srcY = 1, .srcMemoryType = MT_HOST, .srcHost = host, .srcPitch = 64, .srcHeight = 4,
		.dstXInBytes = 8, .dstMemoryType = MT_DEVICE, .dstDevice = managed, .dstPitch = 128, .dstHeight = 5,
		.WidthInBytes = 40, .Height = 3, .Depth = 2 };
	log_copy3d("cuMemcpy3D_v2", managed + 8, (uintptr_t) host + 64, 40, 3, 2, H2D, NULL, 128, 64, 640, 256, 0,
		ok(cuMemcpy3D_v2(&c3)));
	CUDA_MEMCPY3D back3 = { .srcMemoryType = MT_DEVICE, .srcDevice = managed, .srcPitch = 128, .srcHeight = 5,
		.dstMemoryType = MT_HOST, .dstHost = back, .dstPitch = 64, .dstHeight = 4,
		.WidthInBytes = 64, .Height = 4, .Depth = 2 };
	log_copy3d("cuMemcpy3DAsync_v2", (uintptr_t) back, managed, 64, 4, 2, D2H, s, 64, 128, 256, 640, 0,
		ok(cuMemcpy3DAsync_v2(&back3, s)));

	log_set("cuMemsetD8_v2", PV(d), 0xab, 4096, NULL, 0, ok(cuMemsetD8_v2(d, 0xab, 4096)));
	log_set("cuMemsetD16_v2", PV(d2), 0x1234, 2 * 100, NULL, 0, ok(cuMemsetD16_v2(d2, 0x1234, 100)));
	log_set("cuMemsetD32_v2", PV(d), 7, 4 * 64, NULL, 0, ok(cuMemsetD32_v2(d, 7, 64)));
	log_set("cuMemsetD32Async", PV(async), 9, 4 * 16, s, 0, ok(cuMemsetD32Async(async, 9, 16, s)));
	log_prefetch("cuMemPrefetchAsync", PV(managed), 8192, 1, s, 0, ok(cuMemPrefetchAsync(managed, 8192, 1, s)));
	log_prefetch("cuMemPrefetchAsync_v2", PV(managed), 4096, 0, s, 0,
		ok(cuMemPrefetchAsync_v2(managed, 4096, (struct location) { 1, 0 }, 0, s)));
	log_advise("cuMemAdvise", PV(managed), 8192, 3, 0, 0, ok(cuMemAdvise(managed, 8192, 3, 0)));
	log_advise("cuMemAdvise_v2", PV(managed), 4096, 1, 0, 0,
		ok(cuMemAdvise_v2(managed, 4096, 1, (struct location) { 1, 0 })));
	log_sync("cuStreamSynchronize", s, 0, ok(cuStreamSynchronize(s)));
	log_sync("cuCtxSynchronize", NULL, 0, ok(cuCtxSynchronize()));

	log_free("free", "cuMemFreeAsync", PV(async), 1024, DEVICE, s, 0, ok(cuMemFreeAsync(async, s)));
	log_free("unregister", "cuMemHostUnregister", host, 1 << 16, REGISTERED, NULL, 0, ok(cuMemHostUnregister(host)));
	log_free("free", "cuMemFreeHost", pinned2, 2048, PINNED, NULL, 0, ok(cuMemFreeHost(pinned2)));
	log_free("free", "cuMemFreeHost", pinned, 4096, PINNED, NULL, 0, ok(cuMemFreeHost(pinned)));
	log_free("free", "cuMemFree_v2", PV(managed), 8192, MANAGED, NULL, 0, ok(cuMemFree_v2(managed)));
	log_free("free", "cuMemFree_v2", PV(pitched), pitch * 8, DEVICE, NULL, 0, ok(cuMemFree_v2(pitched)));
	log_free("free", "cuMemFree_v2", PV(d2), 4096, DEVICE, NULL, 0, ok(cuMemFree_v2(d2)));
	log_free("free", "cuMemFree_v2", PV(d), 4096, DEVICE, NULL, 0, ok(cuMemFree_v2(d)));
	free(host);
	free(back);
}

/* ---- the same functions through cuGetProcAddress ---- */
typedef int (*alloc_t)(CUdeviceptr *, size_t);
typedef int (*free_t)(CUdeviceptr);
typedef int (*ctxsync_t)(void *);
typedef int (*htod_t)(CUdeviceptr, const void *, size_t);
typedef int (*htod_async_t)(CUdeviceptr, const void *, size_t, CUstream);
typedef int (*set8_t)(CUdeviceptr, unsigned char, size_t);
typedef int (*gpa_t)(const char *, void **, int, unsigned long long);
typedef int (*gpa2_t)(const char *, void **, int, unsigned long long, int *);

static void procaddr(void)
{
	void *fn[6] = { 0 };
	gpa2_t gpa2 = NULL;
	CUdeviceptr d = 0;
	char host[4096];
	int status = -1, r;

	memset(host, 3, sizeof(host));
	ok(cuInit(0));
	/* v1 lookup of the allocation, CUDA 12 version: the driver returns cuMemAlloc_v2 */
	ok(cuGetProcAddress("cuMemAlloc", &fn[0], 12000, 0));
	ok(cuGetProcAddress_v2("cuMemcpyHtoD", &fn[1], 12000, 0, &status));
	ok(status);
	/* the per-thread default stream flag: cuMemcpyHtoDAsync_v2_ptsz, an entry with no exported name */
	ok(cuGetProcAddress_v2("cuMemcpyHtoDAsync", &fn[2], 12000, 2, NULL));
	/* cuMemsetD8_v2: also returned with no exported name at its address */
	ok(cuGetProcAddress("cuMemsetD8", &fn[3], 12000, 0));
	/* cuGetProcAddress through itself, then a free through that */
	ok(cuGetProcAddress("cuGetProcAddress", (void **) &gpa2, 12000, 0));
	ok(gpa2 ? gpa2("cuMemFree", &fn[4], 12000, 0, NULL) : 1);
	/* CUDA 13: the driver answers "cuCtxSynchronize" with cuCtxSynchronize_v2(ctx), another ABI */
	ok(cuGetProcAddress("cuCtxSynchronize", &fn[5], 13000, 0));
	if (failures)
		return;
	r = ok(((alloc_t) fn[0])(&d, 4096));
	log_alloc("alloc", "cuMemAlloc_v2", PV(d), 4096, DEVICE, NULL, 0, 0, 0, 0, r);
	log_copy("cuMemcpyHtoD_v2", PV(d), host, 4096, H2D, NULL, -1, 0, 0, 0, 0, 0, ok(((htod_t) fn[1])(d, host, 4096)));
	log_copy("cuMemcpyHtoDAsync_v2_ptsz", PV(d), host, 1024, H2D, PER_THREAD, -1, 0, 0, 0, 0, 0,
		ok(((htod_async_t) fn[2])(d, host, 1024, PER_THREAD)));
	log_set("cuMemsetD8_v2", PV(d), 1, 4096, NULL, 0, ok(((set8_t) fn[3])(d, 1, 4096)));
	log_free("free", "cuMemFree_v2", PV(d), 4096, DEVICE, NULL, 0, ok(((free_t) fn[4])(d)));
	log_sync("cuCtxSynchronize_v2", NULL, 0, ok(((ctxsync_t) fn[5])(NULL)));
}

/* ---- a VMM allocator (PyTorch expandable segments, NCCL) ---- */
#define SEG (2u << 20)
static void vmm(void)
{
	struct alloc_prop prop = { .type = 1, .location = { 1, 1 } };   /* pinned, device 1 */
	unsigned long long h[2];
	CUdeviceptr base = 0;
	char *host = malloc(SEG);
	int r;

	memset(host, 5, SEG);
	ok(cuInit(0));
	ok(cuMemAddressReserve(&base, 2 * SEG, 0, 0, 0));
	for (int i = 0; i < 2; i++) {
		ok(cuMemCreate(&h[i], SEG, &prop, 0));
		r = ok(cuMemMap(base + i * (CUdeviceptr) SEG, SEG, 0, h[i], 0));
		log_alloc("alloc", "cuMemMap", PV(base + i * (CUdeviceptr) SEG), SEG, DEVICE, NULL, h[i], 0, 0, 1, r);
	}
	/* the same 64 KiB uploaded twice (the second a repeat), then 1 MiB across the two mappings */
	for (int i = 0; i < 2; i++)
		log_copy("cuMemcpyHtoD_v2", PV(base), host, 65536, H2D, NULL, -1, 0, 0, 0, 0, 0,
			ok(cuMemcpyHtoD_v2(base, host, 65536)));
	log_copy("cuMemcpyHtoD_v2", PV(base + SEG - 524288), host, 1048576, H2D, NULL, -1, 0, 0, 0, 0, 0,
		ok(cuMemcpyHtoD_v2(base + SEG - 524288, host, 1048576)));
	/* one unmap ends both mappings: one memq:free each */
	r = ok(cuMemUnmap(base, 2 * SEG));
	for (int i = 0; i < 2; i++)
		log_free("free", "cuMemUnmap", PV(base + i * (CUdeviceptr) SEG), SEG, DEVICE, NULL, 1, r);
	for (int i = 0; i < 2; i++)
		ok(cuMemRelease(h[i]));
	ok(cuMemAddressFree(base, 2 * SEG));
	free(host);
}

/* ---- runtimes loaded RTLD_LOCAL, functions by dlsym ---- */
typedef int (*rt_alloc_t)(void **, size_t);
typedef int (*rt_free_t)(void *);
typedef int (*rt_copy_t)(void *, const void *, size_t, int);
typedef int (*rt_copy3d_t)(const struct fake_copy3d_parms *);
typedef int (*rt_copy3d_async_t)(const struct fake_copy3d_parms *, void *);
typedef int (*entry_t)(const char *, void **, unsigned long long, int *);
typedef int (*hip_reserve_t)(void **, size_t, size_t, void *, unsigned long long);
typedef int (*hip_create_t)(void **, size_t, const struct alloc_prop *, unsigned long long);
typedef int (*hip_map_t)(void *, size_t, size_t, void *, unsigned long long);
typedef int (*hip_unmap_t)(void *, size_t);
typedef int (*hip_release_t)(void *);

static void *must(void *lib, const char *name)
{
	void *fn = lib ? dlsym(lib, name) : NULL;

	if (!fn) {
		fprintf(stderr, "driver_work: %s not found\n", name);
		exit(100);
	}
	return fn;
}

static void runtime_copies(void *lib, const char *prefix)
{
	char name[64], host[8192], back[8192];
	void *d = NULL;
	int r;

	memset(host, 9, sizeof(host));
	snprintf(name, sizeof(name), "%sMalloc", prefix);
	r = ok(((rt_alloc_t) must(lib, name))(&d, 8192));
	log_alloc("alloc", name, d, 8192, DEVICE, NULL, 0, 0, 0, 0, r);
	snprintf(name, sizeof(name), "%sMemcpy", prefix);
	log_copy(name, d, host, 8192, H2D, NULL, -1, 0, 0, 0, 0, 0, ok(((rt_copy_t) must(lib, name))(d, host, 8192, H2D)));
	/* 3D: 2 slices of 4 rows of 32 bytes, device (pitch 256, 8 rows a slice) -> host (pitch 64, 16 rows) */
	struct fake_copy3d_parms p = {
		.src_pos = { 16, 2, 0 }, .src_ptr = { d, 256, 256, 8 },
		.dst_pos = { 0, 0, 1 }, .dst_ptr = { back, 64, 64, 16 },
		.extent = { 32, 4, 2 }, .kind = D2H };
	snprintf(name, sizeof(name), "%sMemcpy3D", prefix);
	log_copy3d(name, P(back) + 1024, P(d) + 2 * 256 + 16, 32, 4, 2, D2H, NULL, 64, 256, 1024, 2048, 0,
		ok(((rt_copy3d_t) must(lib, name))(&p)));
	snprintf(name, sizeof(name), "%sMemcpy3DAsync", prefix);
	log_copy3d(name, P(back) + 1024, P(d) + 2 * 256 + 16, 32, 4, 2, D2H, PV(0xd5), 64, 256, 1024, 2048, 0,
		ok(((rt_copy3d_async_t) must(lib, name))(&p, PV(0xd5))));
	/* the CUDA free by dlvsym (the fake runtime's symbols carry the real version name) */
	snprintf(name, sizeof(name), "%sFree", prefix);
	rt_free_t release = (rt_free_t) (strcmp(prefix, "cuda") ? dlsym(lib, name) : dlvsym(lib, name, "libcudart.so.12"));
	log_free("free", name, d, 8192, DEVICE, NULL, 0, release ? ok(release(d)) : ok(1));
}

static void runtime(const char *dir)
{
	char path[4200];
	void *hip, *cuda;

	snprintf(path, sizeof(path), "%s/libamdhip64.so", dir);
	hip = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	snprintf(path, sizeof(path), "%s/libcudart.so.12", dir);
	cuda = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	runtime_copies(hip, "hip");
	runtime_copies(cuda, "cuda");

	/* HIP VMM: one 2 MiB mapping on device 1 */
	struct alloc_prop prop = { .type = 1, .location = { 1, 1 } };
	void *base = NULL, *h = NULL;
	int r;

	ok(((hip_reserve_t) must(hip, "hipMemAddressReserve"))(&base, SEG, 0, NULL, 0));
	ok(((hip_create_t) must(hip, "hipMemCreate"))(&h, SEG, &prop, 0));
	r = ok(((hip_map_t) must(hip, "hipMemMap"))(base, SEG, 0, h, 0));
	log_alloc("alloc", "hipMemMap", base, SEG, DEVICE, NULL, P(h), 0, 0, 1, r);
	log_free("free", "hipMemUnmap", base, SEG, DEVICE, NULL, 1, ok(((hip_unmap_t) must(hip, "hipMemUnmap"))(base, SEG)));
	ok(((hip_release_t) must(hip, "hipMemRelease"))(h));

	/* a driver function handed out by the CUDA runtime */
	void *fn = NULL;
	CUdeviceptr d = 0;
	int status = -1;

	ok(((entry_t) must(cuda, "cudaGetDriverEntryPoint"))("cuMemAlloc", &fn, 0, &status));
	r = fn ? ok(((alloc_t) fn)(&d, 4096)) : ok(1);
	log_alloc("alloc", "cuMemAlloc_v2", PV(d), 4096, DEVICE, NULL, 0, 0, 0, 0, r);
	log_free("free", "cuMemFree_v2", PV(d), 4096, DEVICE, NULL, 0, ok(cuMemFree_v2(d)));
}

int main(int argc, char **argv)
{
	if (argc != 3 || !(worklog = fopen(argv[2], "a")))
		return 2;
	if (!strcmp(argv[1], "direct"))
		direct();
	else if (!strcmp(argv[1], "procaddr"))
		procaddr();
	else if (!strcmp(argv[1], "vmm"))
		vmm();
	else if (!strcmp(argv[1], "next"))
		failures = dlsym(RTLD_NEXT, "cuMemAlloc_v2") != dlsym(RTLD_DEFAULT, "cuMemAlloc_v2");
	else if (!strcmp(argv[1], "runtime")) {
		char dir[4000];
		const char *slash;

		/* the fakes sit next to this program */
		slash = strrchr(argv[0], '/');
		snprintf(dir, sizeof(dir), "%.*s", slash ? (int) (slash - argv[0]) : 1, slash ? argv[0] : ".");
		runtime(dir);
	} else
		return 2;
	fclose(worklog);
	return failures;
}
