/*
 * Content workloads (test only): the copy patterns of a training job, on the
 * fake CUDA runtime (whose copies really move bytes), for content
 * fingerprints. "Kernels" write the fake device memory directly:
 * writes no trace sees.
 *
 * content_work WHAT STEPS BYTES [OFFSET], WHAT one of:
 *   staging    STEPS times: the CPU writes a new batch into one pinned buffer, uploads it
 *   reupload   the same batch uploaded STEPS times
 *   readback   STEPS times: a kernel writes new results, read back into one pinned buffer
 *   unchanged  results written once, read back STEPS times
 *   page       upload, change the 4 KiB page at OFFSET, upload again
 *   deferred   (FAKE_GPU_DEFER=1) async read-backs of new results completed by two stream
 *              queries (not ready, then done), by an event, by a device synchronisation
 *   capture    an async upload issued while its stream is captured, then executed
 *   hip        HIP: an async read-back of new results completed by an event
 *
 * Read-backs and uploads are cudaMemcpyAsync + cudaStreamSynchronize, as
 * PyTorch does. Exit 0, or 1 when a call failed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void *stream_t;
int cudaMallocHost(void **, size_t);
int cudaMalloc(void **, size_t);
int cudaFree(void *);
int cudaFreeHost(void *);
int cudaStreamCreate(stream_t *);
int cudaMemcpyAsync(void *, const void *, size_t, int, stream_t);
int cudaStreamSynchronize(stream_t);
int cudaStreamQuery(stream_t);
int cudaDeviceSynchronize(void);
int cudaEventCreate(void **);
int cudaEventRecord(void *, stream_t);
int cudaEventSynchronize(void *);
int cudaEventQuery(void *);
int cudaStreamBeginCapture(stream_t, int);
int cudaStreamEndCapture(stream_t, void **);
int hipHostMalloc(void **, size_t, unsigned);
int hipMalloc(void **, size_t);
int hipStreamCreate(stream_t *);
int hipMemcpyAsync(void *, const void *, size_t, int, stream_t);
int hipEventCreate(void **);
int hipEventRecord(void *, stream_t);
int hipEventSynchronize(void *);

enum { H2D = 1, D2H = 2, NOT_READY = 600 };

static int failed;

static int check(int r, int want)
{
	failed |= r != want;
	return r;
}

/* Data no earlier step wrote: every byte depends on the step. */
static void fill(void *p, size_t n, int step)
{
	unsigned char *b = p;

	for (size_t i = 0; i < n; i++)
		b[i] = (unsigned char) (i * 31 + step * 17 + 1);
}

static void upload(void *d, const void *h, size_t n, stream_t s)
{
	check(cudaMemcpyAsync(d, h, n, H2D, s), 0);
	check(cudaStreamSynchronize(s), 0);
}

static void readback(void *h, const void *d, size_t n, stream_t s)
{
	check(cudaMemcpyAsync(h, d, n, D2H, s), 0);
	check(cudaStreamSynchronize(s), 0);
}

int main(int argc, char **argv)
{
	const char *what = argc > 3 ? argv[1] : "";
	int steps = argc > 3 ? atoi(argv[2]) : 0;
	size_t n = argc > 3 ? (size_t) strtoull(argv[3], NULL, 0) : 0;
	void *h = NULL, *d = NULL, *ev = NULL;
	stream_t s = NULL, s2 = NULL;

	if (!n || steps < 1)
		return 2;
	if (strcmp(what, "hip") == 0) {
		check(hipHostMalloc(&h, n, 0), 0);
		check(hipMalloc(&d, n), 0);
		check(hipStreamCreate(&s), 0);
		check(hipEventCreate(&ev), 0);
		fill(d, n, 1);                                  /* a kernel's results */
		check(hipMemcpyAsync(h, d, n, D2H, s), 0);
		check(hipEventRecord(ev, s), 0);
		check(hipEventSynchronize(ev), 0);
		return failed;
	}
	check(cudaMallocHost(&h, n), 0);
	check(cudaMalloc(&d, n), 0);
	check(cudaStreamCreate(&s), 0);
	if (strcmp(what, "staging") == 0) {
		for (int i = 0; i < steps; i++) {
			fill(h, n, i);                          /* the CPU writes the next batch */
			upload(d, h, n, s);
		}
	} else if (strcmp(what, "reupload") == 0) {
		fill(h, n, 0);
		for (int i = 0; i < steps; i++)
			upload(d, h, n, s);
	} else if (strcmp(what, "readback") == 0) {
		for (int i = 0; i < steps; i++) {
			fill(d, n, i + 100);                    /* a kernel writes new results */
			readback(h, d, n, s);
		}
	} else if (strcmp(what, "unchanged") == 0) {
		fill(d, n, 100);
		for (int i = 0; i < steps; i++)
			readback(h, d, n, s);
	} else if (strcmp(what, "page") == 0) {
		size_t at = argc > 4 ? (size_t) strtoull(argv[4], NULL, 0) : n;

		if (at + 4096 > n)
			return 2;
		fill(h, n, 0);
		upload(d, h, n, s);
		memset((char *) h + at, 0xee, 4096);            /* one page changes */
		upload(d, h, n, s);
	} else if (strcmp(what, "deferred") == 0) {
		check(cudaEventCreate(&ev), 0);
		fill(d, n, 7);
		check(cudaMemcpyAsync(h, d, n, D2H, s), 0);
		check(cudaStreamQuery(s), NOT_READY);           /* the fake device finishes it now */
		check(cudaStreamQuery(s), 0);
		fill(d, n, 8);
		check(cudaMemcpyAsync(h, d, n, D2H, s), 0);
		check(cudaEventRecord(ev, s), 0);
		check(cudaEventQuery(ev), NOT_READY);
		check(cudaEventSynchronize(ev), 0);
		fill(d, n, 9);
		check(cudaMemcpyAsync(h, d, n, D2H, s), 0);
		check(cudaDeviceSynchronize(), 0);
	} else if (strcmp(what, "capture") == 0) {
		check(cudaStreamCreate(&s2), 0);
		fill(h, n, 3);
		check(cudaStreamBeginCapture(s2, 0), 0);
		check(cudaMemcpyAsync(d, h, n, H2D, s2), 0);
		check(cudaStreamEndCapture(s2, &ev), 0);
		upload(d, h, n, s);                             /* the same copy, executed: fingerprinted */
	} else {
		return 2;
	}
	check(cudaFree(d), 0);
	check(cudaFreeHost(h), 0);
	return failed;
}
