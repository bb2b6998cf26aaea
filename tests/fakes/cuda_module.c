/*
 * A module linked with one copy of the fake CUDA runtime (test only), built
 * twice: libmod12.so against libcudart.so.12 (-DMODULE_MAJOR=12) and
 * libmod13.so against libcudart.so.13 (-DMODULE_MAJOR=13). two_runtimes.c
 * dlopens both RTLD_LOCAL: every call a module makes must reach its own copy
 * (checked through that copy's own, unwrapped functions: cudaGetDevice,
 * fake_owns) and be recorded with that copy's device and argument forms.
 */
#include <stddef.h>

#include "worklog.h"

int cudaSetDevice(int);
int cudaGetDevice(int *);
int cudaMalloc(void **, size_t);
int cudaMemcpy(void *, const void *, size_t, int);
int cudaFree(void *);
int fake_owns(void *);

#if MODULE_MAJOR >= 13
struct location { int type, id; };
int cudaMemPrefetchAsync(const void *, size_t, struct location, unsigned int, void *);
#define PREFETCH(p, n, dev, s) cudaMemPrefetchAsync(p, n, (struct location) { 1, dev }, 0, s)
#else
int cudaMemPrefetchAsync(const void *, size_t, int, void *);
#define PREFETCH(p, n, dev, s) cudaMemPrefetchAsync(p, n, dev, s)
#endif

static int failures;

static void check(int ok, const char *what)
{
	if (!ok) {
		fprintf(stderr, "libmod%d: %s\n", MODULE_MAJOR, what);
		failures++;
	}
}

/* This copy's current device, asked of the copy itself. */
int module_device(void)
{
	int dev = -1;

	cudaGetDevice(&dev);
	return dev;
}

/* Set `device` in this module's runtime, then allocate, copy, prefetch, free there. */
int module_run(const char *log_path, int device)
{
	char host[64] = "module";
	void *d = NULL;
	int before = module_device(), r;

	worklog = fopen(log_path, "a");
	if (!worklog)
		return 1;
	r = cudaSetDevice(device);
	log_set_device("cudaSetDevice", device, before, r);
	check(module_device() == device, "cudaSetDevice went to another runtime");
	r = cudaMalloc(&d, 4096);
	log_alloc("alloc", "cudaMalloc", d, 4096, 4, NULL, 0, 0, 0, device, r);
	check(r == 0 && fake_owns(d), "cudaMalloc went to another runtime");
	r = cudaMemcpy(d, host, sizeof(host), 1);
	log_copy("cudaMemcpy", d, host, sizeof(host), 1, NULL, -1, 0, 0, 0, 0, device, r);
	r = PREFETCH(d, 4096, device, NULL);
	log_prefetch("cudaMemPrefetchAsync", d, 4096, device, NULL, device, r);
	check(r == 0, "cudaMemPrefetchAsync failed (its arguments reached another runtime's form?)");
	r = cudaFree(d);
	log_free("free", "cudaFree", d, 4096, 4, NULL, device, r);
	check(r == 0 && !fake_owns(d), "cudaFree went to another runtime");
	fclose(worklog);
	return failures;
}
