/*
 * memq preload library: symbol resolution, call bracket, process events.
 * See memq_core.h for the contract and docs/EVENTS.md for the events.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "memq_core.h"
#include "memq_reach.h"

__thread int memq_nesting __attribute__((tls_model("initial-exec")));

/* ---------------------------------------------------------------------- */
/* Symbol resolution                                                       */
/* ---------------------------------------------------------------------- */

/* Library name fragments searched when dlsym(RTLD_NEXT) finds nothing. */
static const char *const runtime_library[] = {
	[MEMQ_RT_HIP] = "libamdhip64",
	[MEMQ_RT_CUDA] = "libcudart",
	[MEMQ_RT_CUDRV] = "libcuda.so",
};
static void *runtime_handle[4];      /* atomic; dlopen(RTLD_NOLOAD) handles */

struct find_library {
	const char *fragment;
	char path[4096];
};

static int find_library_cb(struct dl_phdr_info *info, size_t size, void *data)
{
	struct find_library *f = data;
	const char *name = info->dlpi_name, *base;

	(void) size;
	if (!name || !*name)
		return 0;
	base = strrchr(name, '/');
	base = base ? base + 1 : name;
	if (strncmp(base, f->fragment, strlen(f->fragment)) != 0)
		return 0;
	strncpy(f->path, name, sizeof(f->path) - 1);
	return 1;
}

/*
 * The runtime's own handle, for runtimes loaded with RTLD_LOCAL (a Python
 * extension dlopen'ed by the interpreter pulls libamdhip64 in as a local
 * dependency): RTLD_NEXT searches only the global scope, so it finds
 * nothing. dl_iterate_phdr finds the object already in memory and
 * RTLD_NOLOAD returns its handle without ever loading a second copy.
 */
static void *runtime_library_handle(int runtime)
{
	struct find_library f = { .fragment = runtime_library[runtime] };
	void *h = __atomic_load_n(&runtime_handle[runtime], __ATOMIC_ACQUIRE);

	if (h)
		return h;
	if (!dl_iterate_phdr(find_library_cb, &f))
		return NULL;           /* not loaded (yet): retry next call */
	h = dlopen(f.path, RTLD_LAZY | RTLD_NOLOAD);
	if (h)
		__atomic_store_n(&runtime_handle[runtime], h, __ATOMIC_RELEASE);
	return h;
}

void *memq_resolve(struct memq_sym *sym)
{
	int saved_errno = errno;  /* dlsym/dlopen may set it: not the caller's business */
	void *fn = memq_real_dlsym(RTLD_NEXT, sym->name);

	if (!fn) {
		void *h = runtime_library_handle(sym->runtime);

		fn = h ? memq_real_dlsym(h, sym->name) : NULL;
	}
	if (fn && memq_is_ours(fn))
		fn = NULL;             /* never call ourselves */
	if (fn)
		__atomic_store_n(&sym->fn, fn, __ATOMIC_RELEASE);
	errno = saved_errno;
	return fn;
}

/* ---------------------------------------------------------------------- */
/* Runtime queries made by the wrapper itself (always the real functions)  */
/* ---------------------------------------------------------------------- */

MEMQ_REAL_FN(MEMQ_RT_HIP, int, hipGetDevice, (int *));
MEMQ_REAL_FN(MEMQ_RT_HIP, int, hipGetDeviceCount, (int *));
MEMQ_REAL_FN(MEMQ_RT_HIP, int, hipDeviceGetName, (char *, int, int));
MEMQ_REAL_FN(MEMQ_RT_HIP, int, hipDeviceGetAttribute, (int *, int, int));
MEMQ_REAL_FN(MEMQ_RT_CUDA, int, cudaGetDevice, (int *));
MEMQ_REAL_FN(MEMQ_RT_CUDA, int, cudaGetDeviceCount, (int *));
MEMQ_REAL_FN(MEMQ_RT_CUDA, int, cudaGetDeviceProperties_v2, (void *, int));
MEMQ_REAL_FN(MEMQ_RT_CUDA, int, cudaGetDeviceProperties, (void *, int));
MEMQ_REAL_FN(MEMQ_RT_CUDA, int, cudaDeviceGetAttribute, (int *, int, int));
MEMQ_REAL_FN(MEMQ_RT_CUDA, int, cudaRuntimeGetVersion, (int *));

/* hipDeviceAttribute_t / cudaDeviceAttr values (ROCm 5+ / CUDA 11+ headers). */
#define HIP_ATTR_INTEGRATED 16
#define HIP_ATTR_PAGEABLE_MEMORY_ACCESS 65
#define CUDA_ATTR_INTEGRATED 18
#define CUDA_ATTR_PAGEABLE_MEMORY_ACCESS 88

int memq_current_device(int runtime)
{
	int dev = -1;

	if (runtime == MEMQ_RT_HIP) {
		hipGetDevice_fn get = MEMQ_REAL(hipGetDevice);

		if (!get || get(&dev) != 0)
			dev = -1;
	} else if (runtime == MEMQ_RT_CUDRV) {
		dev = memq_driver_current_device();
	} else {
		cudaGetDevice_fn get = MEMQ_REAL(cudaGetDevice);

		if (!get || get(&dev) != 0)
			dev = -1;
	}
	return dev;
}

int memq_cuda_major(void)
{
	static int major;                /* atomic; 0 = not known yet */
	int m = __atomic_load_n(&major, __ATOMIC_RELAXED), version = 0;
	cudaRuntimeGetVersion_fn get;

	if (m)
		return m;
	get = MEMQ_REAL(cudaRuntimeGetVersion);
	if (get && get(&version) == 0 && version > 0) {
		m = version / 1000;
	} else {
		/* No version call: trust the soname (libcudart.so.13). */
		void *h = runtime_library_handle(MEMQ_RT_CUDA);
		struct find_library f = { .fragment = "libcudart.so.13" };

		m = (h && dl_iterate_phdr(find_library_cb, &f)) ? 13 : 12;
	}
	__atomic_store_n(&major, m, __ATOMIC_RELAXED);
	return m;
}

/* ---------------------------------------------------------------------- */
/* Once-per-process events: memq:clock and memq:device                     */
/* ---------------------------------------------------------------------- */

/* Set again in a forked child, so the child describes itself under its pid. */
static int clock_start_pending = 1;
/* The driver (MEMQ_RT_CUDRV) describes the CUDA devices: it shares CUDA's flag. */
static int devices_pending[3] = { 0, 1, 1 };
#define DEVICES_SLOT(runtime) ((runtime) == MEMQ_RT_CUDRV ? MEMQ_RT_CUDA : (runtime))

static uint64_t clock_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (uint64_t) ts.tv_sec * 1000000000ull + (uint64_t) ts.tv_nsec;
}

uint64_t memq_now_ns(void)
{
	return clock_ns(CLOCK_MONOTONIC);
}

static void emit_clock(const char *where)
{
	uint64_t realtime, monotonic, boottime;

	if (!lttng_ust_tracepoint_enabled(memq, clock))
		return;
	/* Back to back, so that consumers can map between the three clocks. */
	realtime = clock_ns(CLOCK_REALTIME);
	monotonic = clock_ns(CLOCK_MONOTONIC);
	boottime = clock_ns(CLOCK_BOOTTIME);
	lttng_ust_do_tracepoint(memq, clock, where, realtime, monotonic, boottime, NULL);
}

static void emit_clock_start_once(void)
{
	if (lttng_ust_tracepoint_enabled(memq, clock)
	    && __atomic_exchange_n(&clock_start_pending, 0, __ATOMIC_ACQ_REL))
		emit_clock("start");
}

static void describe_hip_devices(void)
{
	hipGetDeviceCount_fn count = MEMQ_REAL(hipGetDeviceCount);
	hipDeviceGetName_fn get_name = MEMQ_REAL(hipDeviceGetName);
	hipDeviceGetAttribute_fn attr = MEMQ_REAL(hipDeviceGetAttribute);
	int n = 0;

	if (!count || count(&n) != 0)
		return;
	for (int dev = 0; dev < n; dev++) {
		char name[256] = "";
		int integrated = 0, pageable = 0;

		if (get_name && get_name(name, sizeof(name), dev) != 0)
			name[0] = '\0';
		name[sizeof(name) - 1] = '\0';
		if (attr && attr(&integrated, HIP_ATTR_INTEGRATED, dev) != 0)
			integrated = 0;
		if (attr && attr(&pageable, HIP_ATTR_PAGEABLE_MEMORY_ACCESS, dev) != 0)
			pageable = 0;
		lttng_ust_do_tracepoint(memq, device, MEMQ_RT_HIP, dev, name,
			!!integrated, !!(integrated || pageable), NULL);
	}
}

static void describe_cuda_devices(void)
{
	cudaGetDeviceCount_fn count = MEMQ_REAL(cudaGetDeviceCount);
	cudaGetDeviceProperties_fn props = (cudaGetDeviceProperties_fn) MEMQ_REAL(cudaGetDeviceProperties_v2);
	cudaDeviceGetAttribute_fn attr = MEMQ_REAL(cudaDeviceGetAttribute);
	int n = 0;

	if (!props)
		props = MEMQ_REAL(cudaGetDeviceProperties);
	if (!count || count(&n) != 0)
		return;
	for (int dev = 0; dev < n; dev++) {
		/* cudaDeviceProp starts with char name[256] in every CUDA
		 * version; its size changes, so leave generous room. */
		union { char name[256]; char room[16384]; } prop;
		int integrated = 0, pageable = 0;

		memset(&prop, 0, sizeof(prop));
		if (props && props(&prop, dev) != 0)
			prop.name[0] = '\0';
		prop.name[sizeof(prop.name) - 1] = '\0';
		if (attr && attr(&integrated, CUDA_ATTR_INTEGRATED, dev) != 0)
			integrated = 0;
		if (attr && attr(&pageable, CUDA_ATTR_PAGEABLE_MEMORY_ACCESS, dev) != 0)
			pageable = 0;
		lttng_ust_do_tracepoint(memq, device, MEMQ_RT_CUDA, dev, prop.name,
			!!integrated, !!(integrated || pageable), NULL);
	}
}

static void describe_devices_once(int runtime)
{
	if (!lttng_ust_tracepoint_enabled(memq, device)
	    || !__atomic_exchange_n(&devices_pending[DEVICES_SLOT(runtime)], 0, __ATOMIC_ACQ_REL))
		return;
	if (runtime == MEMQ_RT_CUDRV)
		memq_driver_describe_devices();
	else if (runtime == MEMQ_RT_HIP)
		describe_hip_devices();
	else
		describe_cuda_devices();
}

/* ---------------------------------------------------------------------- */
/* The call bracket                                                        */
/* ---------------------------------------------------------------------- */

void memq_begin_slow(struct memq_call *c, int runtime, void *ip)
{
	memq_nesting++;
	c->saved_errno = errno;
	c->ip = ip;
	c->raced = 0;
	c->inflight = 0;
	/* A session started after the library initialised, or a forked
	 * child: the process events go first, once (inside or outside
	 * capture windows: they describe the process). */
	if (__atomic_load_n(&clock_start_pending, __ATOMIC_RELAXED))
		emit_clock_start_once();
	__atomic_add_fetch(&memq_traced_calls[runtime], 1, __ATOMIC_RELAXED);
	if (__atomic_load_n(&devices_pending[DEVICES_SLOT(runtime)], __ATOMIC_RELAXED))
		describe_devices_once(runtime);
	/* Outside every window no event is written, but an allocation's device
	 * goes into the table for the next window's snapshot. */
	if (__atomic_load_n(&memq_window_counting, __ATOMIC_RELAXED)) {
		/* Every call is counted, traced or not (an untraced one may still
		 * write an event: a free racing with a window's snapshot), and
		 * before the gate is read (a closing window stores the gate, then
		 * reads the count): it sees this call, or this call sees it closed. */
		__atomic_add_fetch(&memq_window_inflight, 1, __ATOMIC_SEQ_CST);
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		c->inflight = 1;
	}
	c->traced = memq_recording();
	c->device = memq_current_device(runtime);
	errno = c->saved_errno;  /* the real call sees the caller's errno */
	c->begin_ns = c->traced ? memq_now_ns() : 0;
}

void memq_emit_alloc(struct memq_call *c, struct memq_alloc_rec *r, int registered)
{
	int late = 0;

	r->device = c->device;
	r->begin_ns = c->begin_ns;
	if (r->result == 0 && r->ptr) {
		struct memq_table_entry e = { .ptr = r->ptr, .size = r->size, .api = r->api,
			.device = (int16_t) c->device, .kind = r->mem_kind, .registered = (uint8_t) !!registered };

		late = memq_table_insert(&e);
	}
	if (c->traced) {
		if (registered)
			lttng_ust_do_tracepoint(memq, register, r, c->ip);
		else
			lttng_ust_do_tracepoint(memq, alloc, r, c->ip);
	} else if (late) {
		/* Made before the window opened, inserted after its snapshot
		 * passed: it is live at the window's start, say so. */
		r->begin_ns = memq_now_ns();
		lttng_ust_do_tracepoint(memq, live, r, c->ip);
	}
	memq_end(c);
}

void memq_emit_free(struct memq_call *c, struct memq_free_rec *r, int registered)
{
	if (!c->traced && c->raced) {
		/* Listed live by the opening window's snapshot, freed by a call
		 * that began before it: the window must see the free. */
		c->traced = 1;
		c->begin_ns = memq_now_ns();
	}
	r->device = c->device;
	r->begin_ns = c->begin_ns;
	if (c->traced) {
		if (registered)
			lttng_ust_do_tracepoint(memq, unregister, r, c->ip);
		else
			lttng_ust_do_tracepoint(memq, free, r, c->ip);
	}
	memq_end(c);
}

void memq_emit_copy(struct memq_call *c, struct memq_copy_rec *r)
{
	if (r->src_device < 0)  /* peer copies name their devices */
		r->device = c->device;
	r->begin_ns = c->begin_ns;
	if (c->traced)
		lttng_ust_do_tracepoint(memq, copy, r, c->ip);
	memq_end(c);
}

void memq_emit_set(struct memq_call *c, struct memq_set_rec *r)
{
	r->device = c->device;
	r->begin_ns = c->begin_ns;
	if (c->traced)
		lttng_ust_do_tracepoint(memq, set, r, c->ip);
	memq_end(c);
}

void memq_emit_prefetch(struct memq_call *c, struct memq_prefetch_rec *r)
{
	r->device = c->device;
	r->begin_ns = c->begin_ns;
	if (c->traced)
		lttng_ust_do_tracepoint(memq, prefetch, r, c->ip);
	memq_end(c);
}

void memq_emit_advise(struct memq_call *c, struct memq_advise_rec *r)
{
	r->device = c->device;
	r->begin_ns = c->begin_ns;
	if (c->traced)
		lttng_ust_do_tracepoint(memq, advise, r, c->ip);
	memq_end(c);
}

void memq_emit_sync(struct memq_call *c, struct memq_sync_rec *r)
{
	r->device = c->device;
	r->begin_ns = c->begin_ns;
	if (c->traced)
		lttng_ust_do_tracepoint(memq, sync, r, c->ip);
	memq_end(c);
}

void memq_emit_set_device(struct memq_call *c, struct memq_set_device_rec *r)
{
	r->device = c->device;   /* the device before the call */
	r->begin_ns = c->begin_ns;
	if (c->traced)
		lttng_ust_do_tracepoint(memq, set_device, r, c->ip);
	memq_end(c);
}

/* ---------------------------------------------------------------------- */
/* Process life: constructor, fork, exit                                   */
/* ---------------------------------------------------------------------- */

static void fork_child(void)
{
	memq_table_fork_child();
	/* New process: it gets its own clock reading and device list. The
	 * events cannot be emitted here (liblttng-ust-fork re-registers the
	 * child after this handler), so they go out with its first traced
	 * call, or at its exit. The allocation table is inherited on purpose:
	 * the child's address space holds the same allocations. */
	__atomic_store_n(&clock_start_pending, 1, __ATOMIC_RELAXED);
	__atomic_store_n(&devices_pending[MEMQ_RT_HIP], 1, __ATOMIC_RELAXED);
	__atomic_store_n(&devices_pending[MEMQ_RT_CUDA], 1, __ATOMIC_RELAXED);
}

/*
 * Runs after liblttng-ust's constructor (a DT_NEEDED dependency, so it has
 * registered with the session daemon, waiting up to
 * LTTNG_UST_REGISTER_TIMEOUT) and after memq_tp.c's probe registration
 * (linked first): the "start" reading is recorded, not lost.
 */
static void __attribute__((constructor)) memq_init(void)
{
	pthread_atfork(memq_table_fork_prepare, memq_table_fork_parent, fork_child);
	emit_clock_start_once();
	memq_window_init();      /* after the table's fork handlers: see memq_window.c */
}

static void __attribute__((destructor)) memq_fini(void)
{
	emit_clock_start_once();  /* a process that made no traced call */
	memq_window_exit();
	emit_clock("end");
	memq_reach_report();
}
