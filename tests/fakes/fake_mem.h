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
#include <sys/syscall.h>
#include <unistd.h>

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

/* cudaMemcpy3DParms == hipMemcpy3DParms (pitched pointers only; arrays are not faked). */
struct fake_pos { size_t x, y, z; };
struct fake_pitched { void *ptr; size_t pitch, xsize, ysize; };
struct fake_copy3d_parms {
	void *src_array; struct fake_pos src_pos; struct fake_pitched src_ptr;
	void *dst_array; struct fake_pos dst_pos; struct fake_pitched dst_ptr;
	struct { size_t width, height, depth; } extent;
	int kind;
};

static inline char *fake_pitched_at(const struct fake_pitched *p, const struct fake_pos *pos, size_t y, size_t z)
{
	return (char *) p->ptr + ((pos->z + z) * p->ysize + pos->y + y) * p->pitch + pos->x;
}

/* 0, or -1 for what a runtime refuses (arrays, rows wider than the pitch, a bad kind). */
static inline int fake_copy3d(const struct fake_copy3d_parms *p)
{
	if (p->src_array || p->dst_array || !fake_copy_kind_ok(p->kind)
	    || p->extent.width > p->src_ptr.pitch || p->extent.width > p->dst_ptr.pitch)
		return -1;
	for (size_t z = 0; z < p->extent.depth; z++)
		for (size_t y = 0; y < p->extent.height; y++)
			memmove(fake_pitched_at(&p->dst_ptr, &p->dst_pos, y, z),
				fake_pitched_at(&p->src_ptr, &p->src_pos, y, z), p->extent.width);
	return 0;
}

/*
 * Virtual memory management as on a GPU: a reservation is PROT_NONE address
 * space, a physical handle a memfd (so two mappings of one handle share their
 * bytes), a mapping a MAP_FIXED shared mapping of it. Handles are memfd
 * numbers offset so that they never look like small integers. 0 or -1.
 */
#define FAKE_VMM_HANDLE_BASE 0xa110c0000ull

static inline void *fake_vmm_reserve(size_t n, uintptr_t hint)
{
	void *m = mmap((void *) hint, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	return m == MAP_FAILED ? NULL : m;
}

static inline int fake_vmm_free(uintptr_t p, size_t n) { return munmap((void *) p, n) ? -1 : 0; }

static inline int fake_vmm_create(unsigned long long *handle, size_t n)
{
	int fd = (int) syscall(SYS_memfd_create, "fake-vmm", 0);

	if (fd < 0 || n % 4096 || ftruncate(fd, (off_t) n))
		return -1;
	*handle = FAKE_VMM_HANDLE_BASE + (unsigned) fd;
	return 0;
}

/* The mappings keep the memory: closing the memfd is what release means. */
static inline int fake_vmm_release(unsigned long long handle) { return close((int) (handle - FAKE_VMM_HANDLE_BASE)); }

static inline int fake_vmm_map(uintptr_t p, size_t n, size_t offset, unsigned long long handle)
{
	return mmap((void *) p, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
		(int) (handle - FAKE_VMM_HANDLE_BASE), (off_t) offset) == MAP_FAILED ? -1 : 0;
}

/* Back to reserved address space. */
static inline int fake_vmm_unmap(uintptr_t p, size_t n)
{
	return mmap((void *) p, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0)
		== MAP_FAILED ? -1 : 0;
}

#endif
