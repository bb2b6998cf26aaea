/*
 * Per-thread default stream entry points and stream ids (test only), linked
 * with the fake HIP, CUDA and driver libraries:
 *   stream_work hip LOG    the HIP _spt exports (code built with
 *                          -fgpu-default-stream=per-thread) and ROCm 7.1's
 *                          hipMemPrefetchAsync_v2 / hipMemAdvise_v2
 *   stream_work cuda LOG   _ptsz/_ptds runtime and driver calls on streams 0, 1, 2
 * Each call is logged (worklog.h) with the stream memq must record: one id
 * per stream, whatever handle named it. 0 and 0x1 (the legacy handle) are
 * the legacy default stream, recorded 0; 0x2 (the per-thread handle) and
 * stream 0 given to a per-thread entry point are the thread's per-thread
 * default stream, recorded 0x2.
 */
#include <stdlib.h>
#include <string.h>

#include "fake_mem.h"
#include "worklog.h"

#define LEGACY ((void *) 1)
#define PER_THREAD ((void *) 2)
enum { H2D = 1, D2H = 2 };

typedef void *stream_t;
struct location { int type, id; };

int hipMalloc(void **, size_t);
int hipMallocManaged(void **, size_t, unsigned);
int hipFree(void *);
int hipStreamCreate(stream_t *);
int hipStreamSynchronize(stream_t);
int hipMemcpy_spt(void *, const void *, size_t, int);
int hipMemcpyAsync_spt(void *, const void *, size_t, int, stream_t);
int hipMemset_spt(void *, int, size_t);
int hipMemsetAsync_spt(void *, int, size_t, stream_t);
int hipMemcpy2D_spt(void *, size_t, const void *, size_t, size_t, size_t, int);
int hipMemcpy2DAsync_spt(void *, size_t, const void *, size_t, size_t, size_t, int, stream_t);
int hipMemcpy3D_spt(const struct fake_copy3d_parms *);
int hipMemcpy3DAsync_spt(const struct fake_copy3d_parms *, stream_t);
int hipStreamSynchronize_spt(stream_t);
int hipMemPrefetchAsync_v2(const void *, size_t, struct location, unsigned, stream_t);
int hipMemAdvise_v2(const void *, size_t, int, struct location);

int cudaMalloc(void **, size_t);
int cudaMallocManaged(void **, size_t, unsigned);
int cudaFree(void *);
int cudaMemcpyAsync(void *, const void *, size_t, int, stream_t);
int cudaMemcpyAsync_ptsz(void *, const void *, size_t, int, stream_t);
int cudaMemcpy_ptds(void *, const void *, size_t, int);
int cudaMemsetAsync_ptsz(void *, int, size_t, stream_t);
int cudaStreamSynchronize(stream_t);
int cudaStreamSynchronize_ptsz(stream_t);
int cudaMallocAsync_ptsz(void **, size_t, stream_t);
int cudaFreeAsync_ptsz(void *, stream_t);
int cudaMemPrefetchAsync_v2_ptsz(const void *, size_t, struct location, unsigned, stream_t);
int cuMemcpyHtoDAsync_v2_ptsz(unsigned long long, const void *, size_t, stream_t);
int cuStreamSynchronize(stream_t);

static int failures;

static int ok(int r)
{
	failures += r != 0;
	return r;
}

/* A linear copy on device 0, logged with the stream memq must record. */
#define COPY(api, d, s, n, kind, recorded_stream, call) \
	log_copy(api, d, s, n, kind, recorded_stream, -1, 0, 0, 0, 0, 0, ok(call))

static void hip(void)
{
	char *host = calloc(1, 1 << 14);
	void *d = NULL, *m = NULL;
	stream_t s = NULL;
	struct fake_copy3d_parms p3 = { 0 };
	int r;

	ok(hipStreamCreate(&s));
	r = ok(hipMalloc(&d, 8192));        /* (the call first: argument order is unspecified) */
	log_alloc("alloc", "hipMalloc", d, 8192, 4, NULL, 0, 0, 0, 0, r);
	COPY("hipMemcpy_spt", d, host, 256, H2D, PER_THREAD, hipMemcpy_spt(d, host, 256, H2D));
	COPY("hipMemcpyAsync_spt", d, host, 256, H2D, PER_THREAD, hipMemcpyAsync_spt(d, host, 256, H2D, NULL));
	COPY("hipMemcpyAsync_spt", host, d, 128, D2H, s, hipMemcpyAsync_spt(host, d, 128, D2H, s));
	COPY("hipMemcpyAsync_spt", host, d, 64, D2H, NULL, hipMemcpyAsync_spt(host, d, 64, D2H, LEGACY));
	log_set("hipMemset_spt", d, 7, 100, PER_THREAD, 0, ok(hipMemset_spt(d, 7, 100)));
	log_set("hipMemsetAsync_spt", d, 9, 50, PER_THREAD, 0, ok(hipMemsetAsync_spt(d, 9, 50, NULL)));
	log_copy("hipMemcpy2D_spt", d, host, 300, H2D, PER_THREAD, -1, 100, 3, 128, 256, 0,
		ok(hipMemcpy2D_spt(d, 128, host, 256, 100, 3, H2D)));
	log_copy("hipMemcpy2DAsync_spt", host, d, 200, D2H, s, -1, 100, 2, 256, 128, 0,
		ok(hipMemcpy2DAsync_spt(host, 256, d, 128, 100, 2, D2H, s)));
	p3.src_ptr = (struct fake_pitched) { host, 64, 64, 4 };
	p3.dst_ptr = (struct fake_pitched) { d, 128, 64, 4 };
	p3.extent.width = 32;
	p3.extent.height = 2;
	p3.extent.depth = 2;
	p3.kind = H2D;
	log_copy3d("hipMemcpy3D_spt", P(d), P(host), 32, 2, 2, H2D, PER_THREAD, 128, 64, 512, 256, 0,
		ok(hipMemcpy3D_spt(&p3)));
	log_copy3d("hipMemcpy3DAsync_spt", P(d), P(host), 32, 2, 2, H2D, s, 128, 64, 512, 256, 0,
		ok(hipMemcpy3DAsync_spt(&p3, s)));
	log_sync("hipStreamSynchronize_spt", PER_THREAD, 0, ok(hipStreamSynchronize_spt(NULL)));
	log_sync("hipStreamSynchronize", NULL, 0, ok(hipStreamSynchronize(LEGACY)));
	log_sync("hipStreamSynchronize", PER_THREAD, 0, ok(hipStreamSynchronize(PER_THREAD)));
	r = ok(hipMallocManaged(&m, 4096, 1));
	log_alloc("alloc", "hipMallocManaged", m, 4096, 5, NULL, 1, 0, 0, 0, r);
	log_prefetch("hipMemPrefetchAsync_v2", m, 4096, 1, s, 0,
		ok(hipMemPrefetchAsync_v2(m, 4096, (struct location) { 1, 1 }, 0, s)));
	log_prefetch("hipMemPrefetchAsync_v2", m, 4096, -1, NULL, 0,
		ok(hipMemPrefetchAsync_v2(m, 4096, (struct location) { 2, 0 }, 0, NULL)));
	log_advise("hipMemAdvise_v2", m, 4096, 3, 0, 0, ok(hipMemAdvise_v2(m, 4096, 3, (struct location) { 1, 0 })));
	log_advise("hipMemAdvise_v2", m, 4096, 1, -1, 0, ok(hipMemAdvise_v2(m, 4096, 1, (struct location) { 2, 0 })));
	log_free("free", "hipFree", m, 4096, 5, NULL, 0, ok(hipFree(m)));
	log_free("free", "hipFree", d, 8192, 4, NULL, 0, ok(hipFree(d)));
	free(host);
}

static void cuda(void)
{
	char host[256] = "per-thread";
	void *d = NULL, *a = NULL, *m = NULL;
	int r;

	r = ok(cudaMalloc(&d, 4096));       /* (the call first: argument order is unspecified) */
	log_alloc("alloc", "cudaMalloc", d, 4096, 4, NULL, 0, 0, 0, 0, r);
	COPY("cudaMemcpyAsync_ptsz", d, host, 64, H2D, PER_THREAD, cudaMemcpyAsync_ptsz(d, host, 64, H2D, NULL));
	COPY("cudaMemcpyAsync_ptsz", d, host, 64, H2D, NULL, cudaMemcpyAsync_ptsz(d, host, 64, H2D, LEGACY));
	COPY("cudaMemcpyAsync", d, host, 64, H2D, NULL, cudaMemcpyAsync(d, host, 64, H2D, LEGACY));
	COPY("cudaMemcpyAsync", d, host, 64, H2D, PER_THREAD, cudaMemcpyAsync(d, host, 64, H2D, PER_THREAD));
	COPY("cudaMemcpy_ptds", host, d, 64, D2H, PER_THREAD, cudaMemcpy_ptds(host, d, 64, D2H));
	log_set("cudaMemsetAsync_ptsz", d, 1, 64, PER_THREAD, 0, ok(cudaMemsetAsync_ptsz(d, 1, 64, NULL)));
	log_sync("cudaStreamSynchronize_ptsz", PER_THREAD, 0, ok(cudaStreamSynchronize_ptsz(NULL)));
	log_sync("cudaStreamSynchronize", NULL, 0, ok(cudaStreamSynchronize(LEGACY)));
	r = ok(cudaMallocAsync_ptsz(&a, 512, NULL));
	log_alloc("alloc", "cudaMallocAsync_ptsz", a, 512, 4, PER_THREAD, 0, 0, 0, 0, r);
	log_free("free", "cudaFreeAsync_ptsz", a, 512, 4, PER_THREAD, 0, ok(cudaFreeAsync_ptsz(a, NULL)));
	r = ok(cudaMallocManaged(&m, 4096, 1));
	log_alloc("alloc", "cudaMallocManaged", m, 4096, 5, NULL, 1, 0, 0, 0, r);
	log_prefetch("cudaMemPrefetchAsync_v2_ptsz", m, 4096, 1, PER_THREAD, 0,
		ok(cudaMemPrefetchAsync_v2_ptsz(m, 4096, (struct location) { 1, 1 }, 0, NULL)));
	log_free("free", "cudaFree", m, 4096, 5, NULL, 0, ok(cudaFree(m)));
	COPY("cuMemcpyHtoDAsync_v2_ptsz", d, host, 32, H2D, PER_THREAD, cuMemcpyHtoDAsync_v2_ptsz(P(d), host, 32, NULL));
	log_sync("cuStreamSynchronize", NULL, 0, ok(cuStreamSynchronize(LEGACY)));
	log_free("free", "cudaFree", d, 4096, 4, NULL, 0, ok(cudaFree(d)));
}

int main(int argc, char **argv)
{
	if (argc != 3 || (strcmp(argv[1], "hip") && strcmp(argv[1], "cuda"))) {
		fprintf(stderr, "usage: stream_work hip|cuda LOG\n");
		return 2;
	}
	worklog = fopen(argv[2], "w");
	if (!worklog)
		return 2;
	if (!strcmp(argv[1], "hip"))
		hip();
	else
		cuda();
	fclose(worklog);
	return failures ? 1 : 0;
}
