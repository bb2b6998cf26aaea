/*
 * Every CUDA runtime memory call memq wraps, once each, with known sizes, on
 * device 0 only (the lent machines have one GPU): run by scripts/gpu-check.sh
 * on the real runtime (nvcc -cudart shared) and by tests/test_gpu_check.py on
 * the fake one (g++ with tests/gpu/shim/cuda_runtime.h, fake libcudart.so.13).
 * No kernels, so the same source is plain C++ for the fake build.
 *
 *   cuda_all LOG.jsonl            every call, one JSON line each (tests/fakes/worklog.h:
 *                                 the fields of the memq event it must produce)
 *   cuda_all --bench N OUT.json   N cudaMemcpyAsync calls (64 B, pinned -> device):
 *                                 wall ns per call, for memq's per-call cost
 *
 * Exit status: the number of calls whose result was not the expected one.
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "worklog.h"

/* The per-thread-default-stream exports, called directly (code built with
 * --default-stream per-thread reaches them through the headers' macros). */
extern "C" {
cudaError_t cudaMallocAsync_ptsz(void **, size_t, cudaStream_t);
cudaError_t cudaMallocFromPoolAsync_ptsz(void **, size_t, cudaMemPool_t, cudaStream_t);
cudaError_t cudaFreeAsync_ptsz(void *, cudaStream_t);
cudaError_t cudaMemcpy_ptds(void *, const void *, size_t, enum cudaMemcpyKind);
cudaError_t cudaMemcpyAsync_ptsz(void *, const void *, size_t, enum cudaMemcpyKind, cudaStream_t);
cudaError_t cudaMemcpy2D_ptds(void *, size_t, const void *, size_t, size_t, size_t, enum cudaMemcpyKind);
cudaError_t cudaMemcpy2DAsync_ptsz(void *, size_t, const void *, size_t, size_t, size_t, enum cudaMemcpyKind,
				   cudaStream_t);
cudaError_t cudaMemset_ptds(void *, int, size_t);
cudaError_t cudaMemsetAsync_ptsz(void *, int, size_t, cudaStream_t);
cudaError_t cudaMemPrefetchAsync_ptsz(const void *, size_t, struct cudaMemLocation, unsigned int, cudaStream_t);
cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t);
}

enum { HOST = 1, PINNED = 2, REGISTERED = 3, DEVICE = 4, MANAGED = 5 };  /* memq mem_kind */
#define PER_THREAD ((void *) 0x2)  /* cudaStreamPerThread, as memq records it */

static int failures;

static int expect(const char *what, cudaError_t r, int want)
{
	if ((int) r != want) {
		failures++;
		fprintf(stderr, "cuda_all: %s returned %d, expected %d\n", what, (int) r, want);
	}
	/* CUDA_ALL_SYNC_EACH=1 (diagnosis): a device synchronisation after every call shows which call
	 * leaves the device in an error state. */
	if (getenv("CUDA_ALL_SYNC_EACH"))
		fprintf(stderr, "cuda_all: after %s: cudaDeviceSynchronize -> %d\n", what, (int) cudaDeviceSynchronize());
	return (int) r;
}

#define CALL(call, want) expect(#call, call, want)

static int workload(const char *log_path)
{
	void *d1, *d2, *d3, *d4, *d6, *d7, *m1, *h1, *h2, *bad = NULL;
	void *hb = aligned_alloc(4096, 1 << 16);
	cudaStream_t s1;
	cudaMemPool_t pool;
	size_t pitch = 0;
	struct cudaMemLocation on_dev0 = { cudaMemLocationTypeDevice, 0 }, on_host = { cudaMemLocationTypeHost, 0 };
	int r;

	worklog = fopen(log_path, "w");
	if (!worklog || !hb)
		return 100;
	memset(hb, 1, 1 << 16);
	r = CALL(cudaSetDevice(0), 0);
	log_set_device("cudaSetDevice", 0, 0, r);
	CALL(cudaStreamCreate(&s1), 0);
	CALL(cudaDeviceGetDefaultMemPool(&pool, 0), 0);

	r = CALL(cudaMalloc(&d1, 1 << 20), 0);
	log_alloc("alloc", "cudaMalloc", d1, 1 << 20, DEVICE, 0, 0, 0, 0, 0, r);
	r = CALL(cudaMallocManaged(&m1, 65536, cudaMemAttachGlobal), 0);
	log_alloc("alloc", "cudaMallocManaged", m1, 65536, MANAGED, 0, cudaMemAttachGlobal, 0, 0, 0, r);
	r = CALL(cudaMallocHost(&h1, 8192), 0);
	log_alloc("alloc", "cudaMallocHost", h1, 8192, PINNED, 0, 0, 0, 0, 0, r);
	r = CALL(cudaHostAlloc(&h2, 4096, cudaHostAllocPortable), 0);
	log_alloc("alloc", "cudaHostAlloc", h2, 4096, PINNED, 0, cudaHostAllocPortable, 0, 0, 0, r);
	r = CALL(cudaMallocAsync(&d2, 4096, s1), 0);
	log_alloc("alloc", "cudaMallocAsync", d2, 4096, DEVICE, s1, 0, 0, 0, 0, r);
	r = CALL(cudaMallocAsync_ptsz(&d6, 2048, s1), 0);
	log_alloc("alloc", "cudaMallocAsync_ptsz", d6, 2048, DEVICE, s1, 0, 0, 0, 0, r);
	r = CALL(cudaMallocFromPoolAsync(&d3, 8192, pool, s1), 0);
	log_alloc("alloc", "cudaMallocFromPoolAsync", d3, 8192, DEVICE, s1, 0, 0, 0, 0, r);
	r = CALL(cudaMallocFromPoolAsync_ptsz(&d7, 1024, pool, cudaStreamPerThread), 0);
	log_alloc("alloc", "cudaMallocFromPoolAsync_ptsz", d7, 1024, DEVICE, PER_THREAD, 0, 0, 0, 0, r);
	r = CALL(cudaMallocPitch(&d4, &pitch, 300, 4), 0);
	log_alloc("alloc", "cudaMallocPitch", d4, pitch * 4, DEVICE, 0, 0, 300, 4, 0, r);
	r = CALL(cudaHostRegister(hb, 1 << 16, cudaHostRegisterDefault), 0);
	log_alloc("register", "cudaHostRegister", hb, 1 << 16, REGISTERED, 0, cudaHostRegisterDefault, 0, 0, 0, r);

	r = CALL(cudaMemcpy(d1, hb, 4096, cudaMemcpyHostToDevice), 0);
	log_copy("cudaMemcpy", d1, hb, 4096, 1, 0, -1, 0, 0, 0, 0, 0, r);
	r = CALL(cudaMemcpy_ptds(hb, d1, 2048, cudaMemcpyDeviceToHost), 0);
	log_copy("cudaMemcpy_ptds", hb, d1, 2048, 2, PER_THREAD, -1, 0, 0, 0, 0, 0, r);
	r = CALL(cudaMemcpyAsync(d2, d1, 512, cudaMemcpyDeviceToDevice, s1), 0);
	log_copy("cudaMemcpyAsync", d2, d1, 512, 3, s1, -1, 0, 0, 0, 0, 0, r);
	r = CALL(cudaMemcpyAsync_ptsz(d1, h1, 256, cudaMemcpyDefault, s1), 0);
	log_copy("cudaMemcpyAsync_ptsz", d1, h1, 256, 4, s1, -1, 0, 0, 0, 0, 0, r);
	r = CALL(cudaMemcpy2D(d4, pitch, hb, 300, 300, 4, cudaMemcpyHostToDevice), 0);
	log_copy("cudaMemcpy2D", d4, hb, 1200, 1, 0, -1, 300, 4, pitch, 300, 0, r);
	r = CALL(cudaMemcpy2D_ptds(hb, 300, d4, pitch, 300, 4, cudaMemcpyDeviceToHost), 0);
	log_copy("cudaMemcpy2D_ptds", hb, d4, 1200, 2, PER_THREAD, -1, 300, 4, 300, pitch, 0, r);
	r = CALL(cudaMemcpy2DAsync(d4, pitch, h1, 300, 200, 3, cudaMemcpyHostToDevice, s1), 0);
	log_copy("cudaMemcpy2DAsync", d4, h1, 600, 1, s1, -1, 200, 3, pitch, 300, 0, r);
	r = CALL(cudaMemcpy2DAsync_ptsz(h1, 300, d4, pitch, 100, 2, cudaMemcpyDeviceToHost, s1), 0);
	log_copy("cudaMemcpy2DAsync_ptsz", h1, d4, 200, 2, s1, -1, 100, 2, 300, pitch, 0, r);
	r = CALL(cudaMemcpyPeer(d3, 0, d1, 0, 2048), 0);
	log_copy("cudaMemcpyPeer", d3, d1, 2048, 3, 0, 0, 0, 0, 0, 0, 0, r);
	r = CALL(cudaMemcpyPeerAsync(d1, 0, d3, 0, 1024, s1), 0);
	log_copy("cudaMemcpyPeerAsync", d1, d3, 1024, 3, s1, 0, 0, 0, 0, 0, 0, r);
	/* An invalid direction: the call fails and memq records it with the runtime's error. */
	r = CALL(cudaMemcpy(d1, hb, 16, (enum cudaMemcpyKind) 1024), cudaErrorInvalidMemcpyDirection);
	log_copy("cudaMemcpy", d1, hb, 16, 1024, 0, -1, 0, 0, 0, 0, 0, r);

	r = CALL(cudaMemset(d1, 7, 100), 0);
	log_set("cudaMemset", d1, 7, 100, 0, 0, r);
	r = CALL(cudaMemset_ptds(d1, 8, 101), 0);
	log_set("cudaMemset_ptds", d1, 8, 101, PER_THREAD, 0, r);
	r = CALL(cudaMemsetAsync(d1, 0, 200, s1), 0);
	log_set("cudaMemsetAsync", d1, 0, 200, s1, 0, r);
	r = CALL(cudaMemsetAsync_ptsz(d1, 255, 300, s1), 0);
	log_set("cudaMemsetAsync_ptsz", d1, 255, 300, s1, 0, r);

	r = CALL(cudaMemPrefetchAsync(m1, 65536, on_dev0, 0, s1), 0);
	log_prefetch("cudaMemPrefetchAsync", m1, 65536, 0, s1, 0, r);
	r = CALL(cudaMemPrefetchAsync_ptsz(m1, 4096, on_host, 0, s1), 0);
	log_prefetch("cudaMemPrefetchAsync_ptsz", m1, 4096, -1, s1, 0, r);
	r = CALL(cudaMemAdvise(m1, 65536, cudaMemAdviseSetPreferredLocation, on_dev0), 0);
	log_advise("cudaMemAdvise", m1, 65536, cudaMemAdviseSetPreferredLocation, 0, 0, r);

	r = CALL(cudaStreamSynchronize(s1), 0);
	log_sync("cudaStreamSynchronize", s1, 0, r);
	r = CALL(cudaStreamSynchronize_ptsz(cudaStreamPerThread), 0);
	log_sync("cudaStreamSynchronize_ptsz", PER_THREAD, 0, r);
	r = CALL(cudaDeviceSynchronize(), 0);
	log_sync("cudaDeviceSynchronize", 0, 0, r);

	r = CALL(cudaFree(d1), 0);
	log_free("free", "cudaFree", d1, 1 << 20, DEVICE, 0, 0, r);
	r = CALL(cudaFreeAsync(d2, s1), 0);
	log_free("free", "cudaFreeAsync", d2, 4096, DEVICE, s1, 0, r);
	r = CALL(cudaFreeAsync_ptsz(d6, s1), 0);
	log_free("free", "cudaFreeAsync_ptsz", d6, 2048, DEVICE, s1, 0, r);
	r = CALL(cudaStreamSynchronize(s1), 0);  /* async frees done before their pool's blocks go */
	log_sync("cudaStreamSynchronize", s1, 0, r);
	r = CALL(cudaFree(d3), 0);
	log_free("free", "cudaFree", d3, 8192, DEVICE, 0, 0, r);
	r = CALL(cudaFree(d7), 0);
	log_free("free", "cudaFree", d7, 1024, DEVICE, 0, 0, r);
	r = CALL(cudaFree(d4), 0);
	log_free("free", "cudaFree", d4, pitch * 4, DEVICE, 0, 0, r);
	r = CALL(cudaFree(m1), 0);
	log_free("free", "cudaFree", m1, 65536, MANAGED, 0, 0, r);
	r = CALL(cudaFreeHost(h1), 0);
	log_free("free", "cudaFreeHost", h1, 8192, PINNED, 0, 0, r);
	r = CALL(cudaFreeHost(h2), 0);
	log_free("free", "cudaFreeHost", h2, 4096, PINNED, 0, 0, r);
	r = CALL(cudaHostUnregister(hb), 0);
	log_free("unregister", "cudaHostUnregister", hb, 1 << 16, REGISTERED, 0, 0, r);
	/* Out of memory: recorded with the runtime's error and a null pointer. */
	r = CALL(cudaMalloc(&bad, 1ull << 50), cudaErrorMemoryAllocation);
	log_alloc("alloc", "cudaMalloc", bad, 1ull << 50, DEVICE, 0, 0, 0, 0, 0, r);

	CALL(cudaStreamDestroy(s1), 0);
	free(hb);
	fclose(worklog);
	return failures;
}

static long long now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000000000ll + t.tv_nsec;
}

/* Enqueue cost of a small async copy: syncing every 256 calls keeps the
 * stream's queue from filling, so the figure is the host-side call cost. */
static int bench(long n, const char *out_path)
{
	void *d, *h;
	cudaStream_t s;
	FILE *out = fopen(out_path, "w");
	long long t0, spent = 0;

	if (!out || n <= 0)
		return 100;
	CALL(cudaSetDevice(0), 0);
	CALL(cudaStreamCreate(&s), 0);
	CALL(cudaMalloc(&d, 4096), 0);
	CALL(cudaMallocHost(&h, 4096), 0);
	for (int i = 0; i < 1000; i++)  /* warm-up: lazy module loading, first-call paths */
		CALL(cudaMemcpyAsync(d, h, 64, cudaMemcpyHostToDevice, s), 0);
	CALL(cudaStreamSynchronize(s), 0);
	for (long i = 0; i < n; i += 256) {
		long batch = n - i < 256 ? n - i : 256;

		t0 = now_ns();
		for (long j = 0; j < batch; j++)
			if (cudaMemcpyAsync(d, h, 64, cudaMemcpyHostToDevice, s) != cudaSuccess)
				failures++;
		spent += now_ns() - t0;
		CALL(cudaStreamSynchronize(s), 0);
	}
	fprintf(out, "{\"calls\": %ld, \"ns_per_call\": %.2f, \"failures\": %d}\n", n, (double) spent / n, failures);
	fclose(out);
	CALL(cudaFree(d), 0);
	CALL(cudaFreeHost(h), 0);
	CALL(cudaStreamDestroy(s), 0);
	return failures;
}

int main(int argc, char **argv)
{
	if (argc == 4 && strcmp(argv[1], "--bench") == 0)
		return bench(atol(argv[2]), argv[3]);
	if (argc == 2)
		return workload(argv[1]);
	fprintf(stderr, "usage: cuda_all LOG.jsonl | cuda_all --bench N OUT.json\n");
	return 100;
}
