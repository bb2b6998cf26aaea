/*
 * Two copies of the CUDA runtime in one process (test only):
 *   two_runtimes DIR LOG
 * dlopens DIR/libmod12.so (linked with libcudart.so.12) and DIR/libmod13.so
 * (libcudart.so.13), both RTLD_LOCAL, and runs each (cuda_module.c): module 12
 * on device 1, module 13 on device 0. Then, from this program, calls
 * cudaMalloc/cudaFree of each copy through dlsym on the copy's own handle.
 * Before the first wrapped call a dlerror() is left pending: it must still
 * be there after it (the wrapper's symbol lookups must not clear it).
 * Logs every call (worklog.h); exit 0 when every call reached the copy it
 * was meant for.
 */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "worklog.h"

typedef int (*run_t)(const char *, int);
typedef int (*device_t)(void);
typedef int (*malloc_t)(void **, size_t);
typedef int (*free_t)(void *);
typedef int (*owns_t)(void *);

static int failures;

static void check(int ok, const char *what)
{
	if (!ok) {
		fprintf(stderr, "two_runtimes: %s\n", what);
		failures++;
	}
}

static void *open_in(const char *dir, const char *name)
{
	char path[4096];
	void *h;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		fprintf(stderr, "two_runtimes: %s\n", dlerror());
		exit(2);
	}
	return h;
}

/* cudaMalloc/cudaFree of one copy, by dlsym on its handle, called from here. */
static void through_handle(void *runtime, int device)
{
	malloc_t alloc = (malloc_t) dlsym(runtime, "cudaMalloc");
	free_t release = (free_t) dlsym(runtime, "cudaFree");
	owns_t owns = (owns_t) dlsym(runtime, "fake_owns");
	void *d = NULL;
	int r;

	r = alloc(&d, 256);
	log_alloc("alloc", "cudaMalloc", d, 256, 4, NULL, 0, 0, 0, device, r);
	check(r == 0 && owns(d), "cudaMalloc by dlsym went to another runtime");
	r = release(d);
	log_free("free", "cudaFree", d, 256, 4, NULL, device, r);
	check(r == 0 && !owns(d), "cudaFree by dlsym went to another runtime");
}

/*
 *   two_runtimes DIR LOG reload
 * runs module 12, unloads it (and its runtime with it), then runs module 13,
 * which the loader is free to map where module 12 and its runtime were.
 */
static int reload(const char *dir, const char *log)
{
	void *mod = open_in(dir, "libmod12.so");
	int failures12 = ((run_t) dlsym(mod, "module_run"))(log, 1);

	if (dlclose(mod))
		return 2;
	mod = open_in(dir, "libmod13.so");
	return failures12 + ((run_t) dlsym(mod, "module_run"))(log, 0) ? 1 : 0;
}

int main(int argc, char **argv)
{
	void *mod12, *mod13, *rt12, *rt13;
	run_t run12, run13;
	device_t device12;
	const char *pending;

	if (argc == 4 && !strcmp(argv[3], "reload"))
		return reload(argv[1], argv[2]);
	if (argc != 3) {
		fprintf(stderr, "usage: two_runtimes DIR LOG [reload]\n");
		return 2;
	}
	mod12 = open_in(argv[1], "libmod12.so");
	mod13 = open_in(argv[1], "libmod13.so");
	rt12 = open_in(argv[1], "libcudart.so.12");
	rt13 = open_in(argv[1], "libcudart.so.13");
	run12 = (run_t) dlsym(mod12, "module_run");
	run13 = (run_t) dlsym(mod13, "module_run");
	device12 = (device_t) dlsym(mod12, "module_device");
	check(dlsym(rt12, "no_such_function") == NULL, "a missing function was found");
	failures += run12(argv[2], 1);       /* the process's first wrapped call */
	pending = dlerror();
	check(pending && strstr(pending, "no_such_function"), "the pending dlerror() was cleared");
	failures += run13(argv[2], 0);
	check(device12() == 1, "module 13's cudaSetDevice changed module 12's runtime");
	worklog = fopen(argv[2], "a");
	if (!worklog)
		return 2;
	through_handle(rt12, 1);
	through_handle(rt13, 0);
	fclose(worklog);
	return failures ? 1 : 0;
}
