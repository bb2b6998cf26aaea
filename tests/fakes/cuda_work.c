/*
 * CUDA workload (test only): calls every CUDA runtime function memq wraps,
 * including the per-thread-stream exports and both the CUDA 12 and CUDA 13
 * prefetch/advise signatures (chosen like a program compiled against that
 * version: FAKE_CUDA_VERSION >= 13000 means CUDA 13), and logs each call.
 * Built as libcudawork.so against the fake libcudart.so.12.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "worklog.h"

typedef void *cudaStream_t;
struct cudaMemLocation { int type; int id; };
int cudaStreamCreate(cudaStream_t *);
int cudaSetDevice(int);
int cudaMalloc(void **, size_t);
int cudaMallocManaged(void **, size_t, unsigned);
int cudaMallocHost(void **, size_t);
int cudaHostAlloc(void **, size_t, unsigned);
int cudaMallocAsync(void **, size_t, cudaStream_t);
int cudaMallocAsync_ptsz(void **, size_t, cudaStream_t);
int cudaMallocFromPoolAsync(void **, size_t, void *, cudaStream_t);
int cudaMallocFromPoolAsync_ptsz(void **, size_t, void *, cudaStream_t);
int cudaMallocPitch(void **, size_t *, size_t, size_t);
int cudaFree(void *);
int cudaFreeAsync(void *, cudaStream_t);
int cudaFreeAsync_ptsz(void *, cudaStream_t);
int cudaFreeHost(void *);
int cudaHostRegister(void *, size_t, unsigned);
int cudaHostUnregister(void *);
int cudaMemcpy(void *, const void *, size_t, int);
int cudaMemcpy_ptds(void *, const void *, size_t, int);
int cudaMemcpyAsync(void *, const void *, size_t, int, cudaStream_t);
int cudaMemcpyAsync_ptsz(void *, const void *, size_t, int, cudaStream_t);
int cudaMemcpy2D(void *, size_t, const void *, size_t, size_t, size_t, int);
int cudaMemcpy2D_ptds(void *, size_t, const void *, size_t, size_t, size_t, int);
int cudaMemcpy2DAsync(void *, size_t, const void *, size_t, size_t, size_t, int, cudaStream_t);
int cudaMemcpy2DAsync_ptsz(void *, size_t, const void *, size_t, size_t, size_t, int, cudaStream_t);
int cudaMemcpyPeer(void *, int, const void *, int, size_t);
int cudaMemcpyPeerAsync(void *, int, const void *, int, size_t, cudaStream_t);
int cudaMemset(void *, int, size_t);
int cudaMemset_ptds(void *, int, size_t);
int cudaMemsetAsync(void *, int, size_t, cudaStream_t);
int cudaMemsetAsync_ptsz(void *, int, size_t, cudaStream_t);
int cudaMemPrefetchAsync_v2(const void *, size_t, struct cudaMemLocation, unsigned, cudaStream_t);
int cudaMemAdvise_v2(const void *, size_t, int, struct cudaMemLocation);
int cudaStreamSynchronize(cudaStream_t);
int cudaStreamSynchronize_ptsz(cudaStream_t);
int cudaDeviceSynchronize(void);

/* The un-suffixed prefetch/advise in their two historical forms. */
int cudaMemPrefetchAsync();
int cudaMemPrefetchAsync_ptsz();
int cudaMemAdvise();
typedef int (*prefetch12_t)(const void *, size_t, int, cudaStream_t);
typedef int (*prefetch13_t)(const void *, size_t, struct cudaMemLocation, unsigned, cudaStream_t);
typedef int (*advise12_t)(const void *, size_t, int, int);
typedef int (*advise13_t)(const void *, size_t, int, struct cudaMemLocation);

enum { HOST = 1, PINNED = 2, REGISTERED = 3, DEVICE = 4, MANAGED = 5 };
enum { H2H = 0, H2D = 1, D2H = 2, D2D = 3, DEFAULT = 4 };
#define PER_THREAD ((cudaStream_t) 0x2)

static int dev, failures;

static int expect(int r, int want)
{
	failures += r != want;
	return r;
}

#define ALLOC(api, kind, pp, size, stream, flags, call)                               \
	do {                                                                          \
		int r_ = expect(api call, 0);                                         \
		log_alloc("alloc", #api, *(pp), size, kind, stream, flags, 0, 0, dev, r_); \
	} while (0)
#define FREE(api, p, size, kind, stream, want, call) \
	log_free("free", #api, p, size, kind, stream, dev, expect(api call, want))
#define COPY(api, d, s, n, kind, stream, call) \
	log_copy(#api, d, s, n, kind, stream, -1, 0, 0, 0, 0, dev, expect(api call, 0))
#define SETV(api, d, v, n, stream, call) \
	log_set(#api, d, v, n, stream, dev, expect(api call, 0))

static void set_device(int d, int want)
{
	int prev = dev, r = expect(cudaSetDevice(d), want);

	if (r == 0)
		dev = d;
	log_set_device("cudaSetDevice", d, prev, r);
}

static void prefetch_advise(void *m1, cudaStream_t s1, int cuda13)
{
	struct cudaMemLocation on_dev1 = { 1, 1 }, on_host = { 2, 0 };
	int r;

	if (cuda13) {
		r = expect(((prefetch13_t) cudaMemPrefetchAsync)(m1, 65536, on_dev1, 0, s1), 0);
		log_prefetch("cudaMemPrefetchAsync", m1, 65536, 1, s1, dev, r);
		r = expect(((prefetch13_t) cudaMemPrefetchAsync_ptsz)(m1, 4096, on_host, 0, s1), 0);
		log_prefetch("cudaMemPrefetchAsync_ptsz", m1, 4096, -1, s1, dev, r);
		r = expect(((advise13_t) cudaMemAdvise)(m1, 65536, 3, on_dev1), 0);
		log_advise("cudaMemAdvise", m1, 65536, 3, 1, dev, r);
	} else {
		r = expect(((prefetch12_t) cudaMemPrefetchAsync)(m1, 65536, 1, s1), 0);
		log_prefetch("cudaMemPrefetchAsync", m1, 65536, 1, s1, dev, r);
		r = expect(((prefetch12_t) cudaMemPrefetchAsync_ptsz)(m1, 4096, -1, s1), 0);
		log_prefetch("cudaMemPrefetchAsync_ptsz", m1, 4096, -1, s1, dev, r);
		r = expect(((advise12_t) cudaMemAdvise)(m1, 65536, 3, 1), 0);
		log_advise("cudaMemAdvise", m1, 65536, 3, 1, dev, r);
	}
	r = expect(cudaMemPrefetchAsync_v2(m1, 8192, on_host, 0, s1), 0);
	log_prefetch("cudaMemPrefetchAsync_v2", m1, 8192, -1, s1, dev, r);
	r = expect(cudaMemAdvise_v2(m1, 8192, 1, on_host), 0);
	log_advise("cudaMemAdvise_v2", m1, 8192, 1, -1, dev, r);
}

int memq_cuda_workload(const char *log_path)
{
	void *d1, *d2, *d3, *d4, *d5, *d6, *d7, *m1, *h1, *h2, *bad = NULL;
	cudaStream_t s1, s2;
	size_t pitch = 0;
	void *pool = (void *) 0x9002;
	char *hb = aligned_alloc(4096, 1 << 16);
	const char *version = getenv("FAKE_CUDA_VERSION");
	int r;

	worklog = fopen(log_path, "w");
	if (!worklog || !hb)
		return 2;
	memset(hb, 1, 1 << 16);
	cudaStreamCreate(&s1);
	cudaStreamCreate(&s2);
	set_device(0, 0);

	ALLOC(cudaMalloc, DEVICE, &d1, 1 << 20, 0, 0, (&d1, 1 << 20));
	ALLOC(cudaMallocManaged, MANAGED, &m1, 65536, 0, 1, (&m1, 65536, 1));
	ALLOC(cudaMallocHost, PINNED, &h1, 8192, 0, 0, (&h1, 8192));
	ALLOC(cudaHostAlloc, PINNED, &h2, 4096, 0, 4, (&h2, 4096, 4));
	ALLOC(cudaMallocAsync, DEVICE, &d2, 4096, s1, 0, (&d2, 4096, s1));
	ALLOC(cudaMallocAsync_ptsz, DEVICE, &d6, 2048, s2, 0, (&d6, 2048, s2));
	ALLOC(cudaMallocFromPoolAsync, DEVICE, &d3, 8192, s1, 0, (&d3, 8192, pool, s1));
	ALLOC(cudaMallocFromPoolAsync_ptsz, DEVICE, &d7, 1024, PER_THREAD, 0, (&d7, 1024, pool, PER_THREAD));
	r = expect(cudaMallocPitch(&d4, &pitch, 300, 4), 0);
	log_alloc("alloc", "cudaMallocPitch", d4, pitch * 4, DEVICE, 0, 0, 300, 4, dev, r);
	r = expect(cudaHostRegister(hb, 1 << 16, 1), 0);
	log_alloc("register", "cudaHostRegister", hb, 1 << 16, REGISTERED, 0, 1, 0, 0, dev, r);

	COPY(cudaMemcpy, d1, hb, 4096, H2D, 0, (d1, hb, 4096, H2D));
	COPY(cudaMemcpy_ptds, hb, d1, 2048, D2H, PER_THREAD, (hb, d1, 2048, D2H));
	COPY(cudaMemcpyAsync, d2, d1, 512, D2D, s1, (d2, d1, 512, D2D, s1));
	COPY(cudaMemcpyAsync_ptsz, d1, hb, 256, DEFAULT, s2, (d1, hb, 256, DEFAULT, s2));
	r = expect(cudaMemcpy2D(d4, pitch, hb, 300, 300, 4, H2D), 0);
	log_copy("cudaMemcpy2D", d4, hb, 1200, H2D, 0, -1, 300, 4, pitch, 300, dev, r);
	r = expect(cudaMemcpy2D_ptds(hb, 300, d4, pitch, 300, 4, D2H), 0);
	log_copy("cudaMemcpy2D_ptds", hb, d4, 1200, D2H, PER_THREAD, -1, 300, 4, 300, pitch, dev, r);
	r = expect(cudaMemcpy2DAsync(d4, pitch, hb, 300, 200, 3, H2D, s1), 0);
	log_copy("cudaMemcpy2DAsync", d4, hb, 600, H2D, s1, -1, 200, 3, pitch, 300, dev, r);
	r = expect(cudaMemcpy2DAsync_ptsz(hb, 300, d4, pitch, 100, 2, D2H, s2), 0);
	log_copy("cudaMemcpy2DAsync_ptsz", hb, d4, 200, D2H, s2, -1, 100, 2, 300, pitch, dev, r);
	r = expect(cudaMemcpy(d1, hb, 16, 1024), 21);
	log_copy("cudaMemcpy", d1, hb, 16, 1024, 0, -1, 0, 0, 0, 0, dev, r);

	set_device(1, 0);
	ALLOC(cudaMalloc, DEVICE, &d5, 4096, 0, 0, (&d5, 4096));
	r = expect(cudaMemcpyPeer(d5, 1, d1, 0, 2048), 0);
	log_copy("cudaMemcpyPeer", d5, d1, 2048, D2D, 0, 0, 0, 0, 0, 0, 1, r);
	r = expect(cudaMemcpyPeerAsync(d1, 0, d5, 1, 1024, s2), 0);
	log_copy("cudaMemcpyPeerAsync", d1, d5, 1024, D2D, s2, 1, 0, 0, 0, 0, 0, r);
	FREE(cudaFree, d5, 4096, DEVICE, 0, 0, (d5));
	set_device(0, 0);

	SETV(cudaMemset, d1, 7, 100, 0, (d1, 7, 100));
	SETV(cudaMemset_ptds, d1, 8, 101, PER_THREAD, (d1, 8, 101));
	SETV(cudaMemsetAsync, d1, 0, 200, s1, (d1, 0, 200, s1));
	SETV(cudaMemsetAsync_ptsz, d1, 255, 300, s2, (d1, 255, 300, s2));

	prefetch_advise(m1, s1, version && atoi(version) >= 13000);
	errno = 5;  /* the fake turns 5 into 6: the wrapper must not disturb either */
	r = expect(cudaStreamSynchronize(s1), 0);
	failures += errno != 6;
	log_sync("cudaStreamSynchronize", s1, dev, r);
	r = expect(cudaStreamSynchronize_ptsz(PER_THREAD), 0);
	log_sync("cudaStreamSynchronize_ptsz", PER_THREAD, dev, r);
	r = expect(cudaDeviceSynchronize(), 0);
	log_sync("cudaDeviceSynchronize", 0, dev, r);

	FREE(cudaFree, d1, 1 << 20, DEVICE, 0, 0, (d1));
	FREE(cudaFreeAsync, d2, 4096, DEVICE, s1, 0, (d2, s1));
	FREE(cudaFreeAsync_ptsz, d6, 2048, DEVICE, s2, 0, (d6, s2));
	FREE(cudaFree, d3, 8192, DEVICE, 0, 0, (d3));
	FREE(cudaFree, d7, 1024, DEVICE, 0, 0, (d7));
	FREE(cudaFree, d4, pitch * 4, DEVICE, 0, 0, (d4));
	FREE(cudaFree, m1, 65536, MANAGED, 0, 0, (m1));
	FREE(cudaFreeHost, h1, 8192, PINNED, 0, 0, (h1));
	FREE(cudaFreeHost, h2, 4096, PINNED, 0, 0, (h2));
	r = expect(cudaHostUnregister(hb), 0);
	log_free("unregister", "cudaHostUnregister", hb, 1 << 16, REGISTERED, 0, dev, r);
	FREE(cudaFreeHost, (void *) 0xbeef0000, 0, 0, 0, 1, ((void *) 0xbeef0000));
	r = expect(cudaMalloc(&bad, 1ull << 50), 2);
	log_alloc("alloc", "cudaMalloc", bad, 1ull << 50, DEVICE, 0, 0, 0, 0, dev, r);

	free(hb);
	fclose(worklog);
	return failures;
}
