/*
 * HIP workload (test only): calls every HIP function memq wraps, with known
 * arguments, and logs each call (worklog.h). Built as libhipwork.so, linked
 * against the fake libamdhip64.so, so that it can run from a C program
 * (runtime in the global scope) or from Python via ctypes with RTLD_LOCAL
 * (runtime only in a local scope: dlsym(RTLD_NEXT) cannot find it).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "worklog.h"

typedef void *hipStream_t;
int hipStreamCreate(hipStream_t *);
int hipSetDevice(int);
int hipMalloc(void **, size_t);
int hipMallocManaged(void **, size_t, unsigned);
int hipHostMalloc(void **, size_t, unsigned);
int hipExtHostAlloc(void **, size_t, unsigned);
int hipHostAlloc(void **, size_t, unsigned);
int hipMallocHost(void **, size_t);
int hipMallocAsync(void **, size_t, hipStream_t);
int hipMallocFromPoolAsync(void **, size_t, void *, hipStream_t);
int hipMallocPitch(void **, size_t *, size_t, size_t);
int hipFree(void *);
int hipFreeAsync(void *, hipStream_t);
int hipHostFree(void *);
int hipFreeHost(void *);
int hipHostRegister(void *, size_t, unsigned);
int hipHostUnregister(void *);
int hipMemcpy(void *, const void *, size_t, int);
int hipMemcpyAsync(void *, const void *, size_t, int, hipStream_t);
int hipMemcpyWithStream(void *, const void *, size_t, int, hipStream_t);
int hipMemcpyHtoD(void *, void *, size_t);
int hipMemcpyDtoH(void *, void *, size_t);
int hipMemcpyDtoD(void *, void *, size_t);
int hipMemcpyHtoDAsync(void *, void *, size_t, hipStream_t);
int hipMemcpyDtoHAsync(void *, void *, size_t, hipStream_t);
int hipMemcpyDtoDAsync(void *, void *, size_t, hipStream_t);
int hipMemcpy2D(void *, size_t, const void *, size_t, size_t, size_t, int);
int hipMemcpy2DAsync(void *, size_t, const void *, size_t, size_t, size_t, int, hipStream_t);
int hipMemcpyPeer(void *, int, const void *, int, size_t);
int hipMemcpyPeerAsync(void *, int, const void *, int, size_t, hipStream_t);
int hipMemset(void *, int, size_t);
int hipMemsetAsync(void *, int, size_t, hipStream_t);
int hipMemsetD8(void *, unsigned char, size_t);
int hipMemsetD8Async(void *, unsigned char, size_t, hipStream_t);
int hipMemsetD16(void *, unsigned short, size_t);
int hipMemsetD16Async(void *, unsigned short, size_t, hipStream_t);
int hipMemsetD32(void *, int, size_t);
int hipMemsetD32Async(void *, int, size_t, hipStream_t);
int hipMemPrefetchAsync(const void *, size_t, int, hipStream_t);
int hipMemAdvise(const void *, size_t, int, int);
int hipStreamSynchronize(hipStream_t);
int hipDeviceSynchronize(void);

enum { HOST = 1, PINNED = 2, REGISTERED = 3, DEVICE = 4, MANAGED = 5 };
enum { H2H = 0, H2D = 1, D2H = 2, D2D = 3, DEFAULT = 4 };

static int dev;        /* the current device, as this program set it */
void *volatile leaked_host;
static int failures;   /* calls whose result was not the expected one */

static int expect(int r, int want)
{
	failures += r != want;
	return r;
}

#define ALLOC(api, kind, pp, size, stream, flags, w, h, call)                          \
	do {                                                                          \
		int r_ = expect(api call, 0);                                         \
		log_alloc("alloc", #api, *(pp), size, kind, stream, flags, w, h, dev, r_); \
	} while (0)
#define FREE(api, p, size, kind, stream, want, call) \
	log_free("free", #api, p, size, kind, stream, dev, expect(api call, want))
#define COPY(api, d, s, n, kind, stream, call) \
	log_copy(#api, d, s, n, kind, stream, -1, 0, 0, 0, 0, dev, expect(api call, 0))
#define SETV(api, d, v, bytes, stream, call) \
	log_set(#api, d, v, bytes, stream, dev, expect(api call, 0))

static void set_device(int d, int want)
{
	int prev = dev, r = expect(hipSetDevice(d), want);

	if (r == 0)
		dev = d;
	log_set_device("hipSetDevice", d, prev, r);
}

int memq_hip_workload(const char *log_path)
{
	void *d1, *d2, *d3, *d4, *d5, *m1, *h1, *h2, *h3, *h4, *bad = NULL;
	hipStream_t s1, s2;
	size_t pitch = 0, p;
	void *pool = (void *) 0x9001;
	char *hb = aligned_alloc(4096, 1 << 16);
	int r;

	worklog = fopen(log_path, "w");
	if (!worklog || !hb)
		return 2;
	memset(hb, 1, 1 << 16);
	hipStreamCreate(&s1);
	hipStreamCreate(&s2);
	set_device(0, 0);

	ALLOC(hipMalloc, DEVICE, &d1, 1 << 20, 0, 0, 0, 0, (&d1, 1 << 20));
	ALLOC(hipMallocManaged, MANAGED, &m1, 65536, 0, 1, 0, 0, (&m1, 65536, 1));
	ALLOC(hipHostMalloc, PINNED, &h1, 8192, 0, 2, 0, 0, (&h1, 8192, 2));
	ALLOC(hipExtHostAlloc, PINNED, &h2, 4096, 0, 0, 0, 0, (&h2, 4096, 0));
	ALLOC(hipHostAlloc, PINNED, &h3, 4096, 0, 1, 0, 0, (&h3, 4096, 1));
	ALLOC(hipMallocHost, PINNED, &h4, 2048, 0, 0, 0, 0, (&h4, 2048));
	ALLOC(hipMallocAsync, DEVICE, &d2, 4096, s1, 0, 0, 0, (&d2, 4096, s1));
	ALLOC(hipMallocFromPoolAsync, DEVICE, &d3, 8192, s1, 0, 0, 0, (&d3, 8192, pool, s1));
	r = expect(hipMallocPitch(&d4, &pitch, 100, 10), 0);
	log_alloc("alloc", "hipMallocPitch", d4, pitch * 10, DEVICE, 0, 0, 100, 10, dev, r);
	r = expect(hipHostRegister(hb, 1 << 16, 0), 0);
	log_alloc("register", "hipHostRegister", hb, 1 << 16, REGISTERED, 0, 0, 0, 0, dev, r);

	COPY(hipMemcpy, d1, hb, 4096, H2D, 0, (d1, hb, 4096, H2D));
	COPY(hipMemcpyAsync, hb, d1, 1024, D2H, s1, (hb, d1, 1024, D2H, s1));
	COPY(hipMemcpyWithStream, d2, d1, 512, D2D, s1, (d2, d1, 512, D2D, s1));
	COPY(hipMemcpy, hb + 4096, hb, 300, H2H, 0, (hb + 4096, hb, 300, H2H));
	COPY(hipMemcpy, d1 + 64, hb, 200, DEFAULT, 0, (d1 + 64, hb, 200, DEFAULT));
	COPY(hipMemcpyHtoD, d1, hb, 256, H2D, 0, (d1, hb, 256));
	COPY(hipMemcpyDtoH, hb, d1, 128, D2H, 0, (hb, d1, 128));
	COPY(hipMemcpyDtoD, d2, d1, 64, D2D, 0, (d2, d1, 64));
	COPY(hipMemcpyHtoDAsync, d1, hb, 96, H2D, s2, (d1, hb, 96, s2));
	COPY(hipMemcpyDtoHAsync, hb, d1, 80, D2H, s2, (hb, d1, 80, s2));
	COPY(hipMemcpyDtoDAsync, d3, d1, 48, D2D, s2, (d3, d1, 48, s2));
	r = expect(hipMemcpy2D(d4, pitch, hb, 100, 100, 10, H2D), 0);
	log_copy("hipMemcpy2D", d4, hb, 1000, H2D, 0, -1, 100, 10, pitch, 100, dev, r);
	r = expect(hipMemcpy2DAsync(hb, 100, d4, pitch, 100, 10, D2H, s2), 0);
	log_copy("hipMemcpy2DAsync", hb, d4, 1000, D2H, s2, -1, 100, 10, 100, pitch, dev, r);
	/* A failing call: an invalid direction is recorded with its error. */
	r = expect(hipMemcpy(d1, hb, 16, 99), 21);
	log_copy("hipMemcpy", d1, hb, 16, 99, 0, -1, 0, 0, 0, 0, dev, r);

	set_device(1, 0);
	ALLOC(hipMalloc, DEVICE, &d5, 4096, 0, 0, 0, 0, (&d5, 4096));
	r = expect(hipMemcpyPeer(d5, 1, d1, 0, 2048), 0);
	log_copy("hipMemcpyPeer", d5, d1, 2048, D2D, 0, 0, 0, 0, 0, 0, 1, r);
	r = expect(hipMemcpyPeerAsync(d1, 0, d5, 1, 1024, s2), 0);
	log_copy("hipMemcpyPeerAsync", d1, d5, 1024, D2D, s2, 1, 0, 0, 0, 0, 0, r);
	FREE(hipFree, d5, 4096, DEVICE, 0, 0, (d5));
	set_device(0, 0);
	set_device(7, 101);

	SETV(hipMemset, d1, 7, 100, 0, (d1, 7, 100));
	SETV(hipMemsetAsync, d1, 0, 200, s1, (d1, 0, 200, s1));
	SETV(hipMemsetD8, d1, 0xab, 10, 0, (d1, 0xab, 10));
	SETV(hipMemsetD8Async, d1, 0xcd, 12, s1, (d1, 0xcd, 12, s1));
	SETV(hipMemsetD16, d1, 0x1234, 20, 0, (d1, 0x1234, 10));
	SETV(hipMemsetD16Async, d1, 0x4321, 22, s2, (d1, 0x4321, 11, s2));
	SETV(hipMemsetD32, d1, (int) 0xdeadbeef, 40, 0, (d1, (int) 0xdeadbeef, 10));
	SETV(hipMemsetD32Async, d1, 5, 44, s2, (d1, 5, 11, s2));

	r = expect(hipMemPrefetchAsync(m1, 65536, 0, s1), 0);
	log_prefetch("hipMemPrefetchAsync", m1, 65536, 0, s1, dev, r);
	r = expect(hipMemPrefetchAsync(m1, 4096, -1, s2), 0);
	log_prefetch("hipMemPrefetchAsync", m1, 4096, -1, s2, dev, r);
	r = expect(hipMemAdvise(m1, 65536, 1, 0), 0);
	log_advise("hipMemAdvise", m1, 65536, 1, 0, dev, r);
	errno = 5;  /* the fake turns 5 into 6: the wrapper must not disturb either */
	r = expect(hipStreamSynchronize(s1), 0);
	failures += errno != 6;
	log_sync("hipStreamSynchronize", s1, dev, r);
	r = expect(hipDeviceSynchronize(), 0);
	log_sync("hipDeviceSynchronize", 0, dev, r);

	p = pitch * 10;
	FREE(hipFree, d1, 1 << 20, DEVICE, 0, 0, (d1));
	FREE(hipFreeAsync, d2, 4096, DEVICE, s1, 0, (d2, s1));
	FREE(hipFree, d3, 8192, DEVICE, 0, 0, (d3));
	FREE(hipFree, d4, p, DEVICE, 0, 0, (d4));
	FREE(hipFree, m1, 65536, MANAGED, 0, 0, (m1));
	FREE(hipHostFree, h1, 8192, PINNED, 0, 0, (h1));
	FREE(hipHostFree, h2, 4096, PINNED, 0, 0, (h2));
	FREE(hipFreeHost, h3, 4096, PINNED, 0, 0, (h3));
	FREE(hipFreeHost, h4, 2048, PINNED, 0, 0, (h4));
	r = expect(hipHostUnregister(hb), 0);
	log_free("unregister", "hipHostUnregister", hb, 1 << 16, REGISTERED, 0, dev, r);
	/* Failures: unknown pointer (size unknown), out of memory, NULL free. */
	FREE(hipFree, (void *) 0xdead0000, 0, 0, 0, 1, ((void *) 0xdead0000));
	r = expect(hipMalloc(&bad, 1ull << 50), 2);
	log_alloc("alloc", "hipMalloc", bad, 1ull << 50, DEVICE, 0, 0, 0, 0, dev, r);
	FREE(hipFree, NULL, 0, 0, 0, 0, (NULL));

	free(hb);
	/* A host block above the heap threshold never freed: the leaks report and its annotation have one. */
	leaked_host = malloc(12345);
	fclose(worklog);
	return failures + !leaked_host;
}
