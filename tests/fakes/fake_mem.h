/*
 * Test-only "device memory" for the fake HIP and CUDA runtimes: every
 * allocation is an anonymous mmap in host RAM (not the libc heap, so the
 * libc wrapper does not see the runtime's memory as application heap), and a
 * small registry validates frees the way a real runtime does.
 */
#ifndef FAKE_MEM_H
#define FAKE_MEM_H

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define FAKE_MAX_ALLOCS 65536
#define FAKE_HUGE (1ull << 44)   /* larger requests fail: out of memory */

struct fake_alloc { void *ptr; size_t len; int kind; };
static struct fake_alloc fake_allocs[FAKE_MAX_ALLOCS];
static pthread_mutex_t fake_lock = PTHREAD_MUTEX_INITIALIZER;

enum { FAKE_DEVICE = 1, FAKE_PINNED = 2, FAKE_MANAGED = 3 };

static void *fake_mem_alloc(size_t n, int kind)
{
	size_t len = n ? n : 1;
	void *p;

	if (n >= FAKE_HUGE)
		return NULL;
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	pthread_mutex_lock(&fake_lock);
	for (int i = 0; i < FAKE_MAX_ALLOCS; i++) {
		if (!fake_allocs[i].ptr) {
			fake_allocs[i] = (struct fake_alloc) { p, len, kind };
			pthread_mutex_unlock(&fake_lock);
			return p;
		}
	}
	pthread_mutex_unlock(&fake_lock);
	munmap(p, len);
	return NULL;
}

/* 0 on success, -1 when `p` is not a live allocation of one of `kinds`. */
static int fake_mem_free(void *p, unsigned kinds)
{
	pthread_mutex_lock(&fake_lock);
	for (int i = 0; i < FAKE_MAX_ALLOCS; i++) {
		if (fake_allocs[i].ptr == p && (kinds & (1u << fake_allocs[i].kind))) {
			munmap(p, fake_allocs[i].len);
			fake_allocs[i].ptr = NULL;
			pthread_mutex_unlock(&fake_lock);
			return 0;
		}
	}
	pthread_mutex_unlock(&fake_lock);
	return -1;
}

static int fake_device_count(void)
{
	const char *s = getenv("FAKE_GPU_COUNT");

	return s ? atoi(s) : 2;
}

static int fake_unified(void)
{
	const char *s = getenv("FAKE_GPU_UNIFIED");

	return s && strcmp(s, "1") == 0;
}

static int fake_copy_kind_ok(int kind)
{
	return (kind >= 0 && kind <= 4) || kind == 1024;
}

/* Pitched rows are padded to 256 bytes, as on real GPUs. */
static size_t fake_pitch(size_t width)
{
	return (width + 255) & ~(size_t) 255;
}

static __thread int fake_current_device;

#endif
