/*
 * memq preload library: call bracket, process events (symbol resolution:
 * memq_route.c). See memq_core.h for the contract and docs/EVENTS.md for
 * the events.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>
#include <time.h>

#include "memq_content.h"
#include "memq_core.h"
#include "memq_libmap.h"
#include "memq_reach.h"

__thread int memq_nesting __attribute__((tls_model("initial-exec")));

/* ---------------------------------------------------------------------- */
/* Runtime queries made by the wrapper itself (always the real functions   */
/* of the runtime object answering the call: its route)                    */
/* ---------------------------------------------------------------------- */

MEMQ_REAL_FN(MEMQ_RT_HIP, int, hipGetDevice, (int *));
MEMQ_REAL_FN(MEMQ_RT_HIP, int, hipGetDeviceCount, (int *));
MEMQ_REAL_FN(MEMQ_RT_HIP, int, hipDeviceGetName, (char *, int, int));
MEMQ_REAL_FN(MEMQ_RT_HIP, int, hipDeviceGetAttribute, (int *, int, int));
MEMQ_REAL_FN(MEMQ_RT_HIP, int, hipDeviceGetUuid, (void *, int));
MEMQ_REAL_FN(MEMQ_RT_HIP, int, hipDeviceGetPCIBusId, (char *, int, int));
MEMQ_REAL_FN(MEMQ_RT_CUDA, int, cudaDeviceGetPCIBusId, (char *, int, int));
MEMQ_REAL_FN(MEMQ_RT_CUDA, int, cudaGetDevice, (int *));
MEMQ_REAL_FN(MEMQ_RT_CUDA, int, cudaGetDeviceCount, (int *));
MEMQ_REAL_FN(MEMQ_RT_CUDA, int, cudaGetDeviceProperties_v2, (void *, int));
MEMQ_REAL_FN(MEMQ_RT_CUDA, int, cudaGetDeviceProperties, (void *, int));
MEMQ_REAL_FN(MEMQ_RT_CUDA, int, cudaDeviceGetAttribute, (int *, int, int));

/* hipDeviceAttribute_t / cudaDeviceAttr values (ROCm 5+ / CUDA 11+ headers). */
#define HIP_ATTR_INTEGRATED 16
#define HIP_ATTR_PAGEABLE_MEMORY_ACCESS 65
#define CUDA_ATTR_INTEGRATED 18
#define CUDA_ATTR_PAGEABLE_MEMORY_ACCESS 88

int memq_current_device(int runtime, int route)
{
	int dev = -1;

	if (runtime == MEMQ_RT_HIP) {
		hipGetDevice_fn get = MEMQ_REAL_AT(hipGetDevice, route);

		if (!get || get(&dev) != 0)
			dev = -1;
	} else if (runtime == MEMQ_RT_CUDRV) {
		dev = memq_driver_current_device(route);
	} else {
		cudaGetDevice_fn get = MEMQ_REAL_AT(cudaGetDevice, route);

		if (!get || get(&dev) != 0)
			dev = -1;
	}
	return dev;
}

/* ---------------------------------------------------------------------- */
/* Once-per-process events: memq:clock and memq:device                     */
/* ---------------------------------------------------------------------- */

/* Set again in a forked child, so the child describes itself under its pid. */
static int clock_start_pending = 1;
/* memq:identity's own flag: a session enables a wildcard's events one by one,
 * so at the constructor memq:clock may be on and memq:identity not yet; and on a
 * loaded machine the constructor's wait for the session can end before the
 * process's buffers exist, so an event "written" then is lost without a count.
 * The constructor writes it without clearing the flag; the first traced call,
 * heap event (memq_process_events_due) or the exit writes it again and clears
 * it: at most two per process, the reader keeps one. */
static int identity_pending = 1;
/* The whole library map, on the same terms as memq:identity: written by the
 * constructor (maybe lost), and once more by the first event path or the exit. */
static int libmap_pending = 1;
static int in_constructor;
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

/*
 * The launcher variables that say who a process is in its job (torchrun,
 * Slurm, Open MPI, MPICH/PMI, PMIx), written when set, in this order.
 */
static const char *const identity_vars[] = {
	"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "TORCHELASTIC_RUN_ID",
	"SLURM_JOB_ID", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_NTASKS",
	"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE",
	"PMI_RANK", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALRANKID",
};

/* Whether a once-per-process event whose flag is `pending` is to be written now
 * (`enabled`: its tracepoint is): by the constructor, which leaves the flag
 * set, or by the first caller after it. */
static int process_event_due(int enabled, int *pending)
{
	return enabled && (in_constructor || __atomic_exchange_n(pending, 0, __ATOMIC_ACQ_REL));
}

/* Read once per process, outside any call (no allocation: fixed buffers). */
static void emit_identity_once(void)
{
	char host[256] = "", env[2048];
	size_t len = 0;

	if (!process_event_due(lttng_ust_tracepoint_enabled(memq, identity), &identity_pending))
		return;
	if (gethostname(host, sizeof(host) - 1) != 0)
		host[0] = '\0';
	host[sizeof(host) - 1] = '\0';
	env[0] = '\0';
	for (size_t i = 0; i < sizeof(identity_vars) / sizeof(identity_vars[0]); i++) {
		const char *v = getenv(identity_vars[i]);
		size_t vlen;
		int n;

		if (!v)
			continue;
		vlen = strcspn(v, "\n");          /* one line per variable */
		if (vlen > 256)
			vlen = 256;
		n = snprintf(env + len, sizeof(env) - len, "%s=%.*s\n", identity_vars[i], (int) vlen, v);
		if (n < 0 || (size_t) n >= sizeof(env) - len) {
			env[len] = '\0';   /* never a cut line */
			break;
		}
		len += (size_t) n;
	}
	lttng_ust_do_tracepoint(memq, identity, (int) getppid(), host, env, NULL);
}

static void emit_clock_start_once(void)
{
	if (__atomic_load_n(&identity_pending, __ATOMIC_RELAXED))
		emit_identity_once();
	if (__atomic_load_n(&libmap_pending, __ATOMIC_RELAXED)
	    && process_event_due(lttng_ust_tracepoint_enabled(memq, lib_load), &libmap_pending))
		memq_libmap_update(1);
	if (lttng_ust_tracepoint_enabled(memq, clock)
	    && __atomic_exchange_n(&clock_start_pending, 0, __ATOMIC_ACQ_REL))
		emit_clock("start");
}

/* One of the once-per-process events still to write. */
static int process_events_pending(void)
{
	return __atomic_load_n(&clock_start_pending, __ATOMIC_RELAXED)
		|| __atomic_load_n(&identity_pending, __ATOMIC_RELAXED)
		|| __atomic_load_n(&libmap_pending, __ATOMIC_RELAXED);
}

void memq_process_events_due(void)
{
	if (process_events_pending())
		emit_clock_start_once();
	memq_libmap_due();
}

void memq_uuid_text(char out[MEMQ_UUID_TEXT], const unsigned char b[16])
{
	int any = 0;

	for (int i = 0; i < 16; i++)
		any |= b[i];
	if (!any) {
		out[0] = '\0';
		return;
	}
	snprintf(out, MEMQ_UUID_TEXT,
		"GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
		b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
		b[14], b[15]);
}

/* A PCI bus id from a runtime's call, or "" (the buffer is 64 bytes). */
static void bus_id_of(char out[64], int (*get)(char *, int, int), int dev)
{
	out[0] = '\0';
	if (get && get(out, 64, dev) != 0)
		out[0] = '\0';
	out[63] = '\0';
}

static void describe_hip_devices(int route)
{
	hipGetDeviceCount_fn count = MEMQ_REAL_AT(hipGetDeviceCount, route);
	hipDeviceGetName_fn get_name = MEMQ_REAL_AT(hipDeviceGetName, route);
	hipDeviceGetAttribute_fn attr = MEMQ_REAL_AT(hipDeviceGetAttribute, route);
	hipDeviceGetUuid_fn get_uuid = MEMQ_REAL_AT(hipDeviceGetUuid, route);
	hipDeviceGetPCIBusId_fn get_bus = MEMQ_REAL_AT(hipDeviceGetPCIBusId, route);
	int n = 0;

	if (!count || count(&n) != 0)
		return;
	for (int dev = 0; dev < n; dev++) {
		char name[256] = "", uuid[MEMQ_UUID_TEXT], bus[64];
		unsigned char raw[16] = { 0 };   /* hipUUID: char bytes[16] */
		int integrated = 0, pageable = 0;

		if (get_uuid && get_uuid(raw, dev) != 0)
			memset(raw, 0, sizeof(raw));
		memq_uuid_text(uuid, raw);
		bus_id_of(bus, get_bus, dev);

		if (get_name && get_name(name, sizeof(name), dev) != 0)
			name[0] = '\0';
		name[sizeof(name) - 1] = '\0';
		if (attr && attr(&integrated, HIP_ATTR_INTEGRATED, dev) != 0)
			integrated = 0;
		if (attr && attr(&pageable, HIP_ATTR_PAGEABLE_MEMORY_ACCESS, dev) != 0)
			pageable = 0;
		memq_content_device(MEMQ_RT_HIP, dev, integrated || pageable);
		lttng_ust_do_tracepoint(memq, device, MEMQ_RT_HIP, dev, name,
			!!integrated, !!(integrated || pageable), uuid, bus, NULL);
	}
}

static void describe_cuda_devices(int route)
{
	cudaGetDeviceCount_fn count = MEMQ_REAL_AT(cudaGetDeviceCount, route);
	cudaGetDeviceProperties_fn props = (cudaGetDeviceProperties_fn) MEMQ_REAL_AT(cudaGetDeviceProperties_v2, route);
	cudaDeviceGetAttribute_fn attr = MEMQ_REAL_AT(cudaDeviceGetAttribute, route);
	cudaDeviceGetPCIBusId_fn get_bus = MEMQ_REAL_AT(cudaDeviceGetPCIBusId, route);
	int n = 0;

	if (!props)
		props = MEMQ_REAL_AT(cudaGetDeviceProperties, route);
	if (!count || count(&n) != 0)
		return;
	for (int dev = 0; dev < n; dev++) {
		/* cudaDeviceProp starts with char name[256] then cudaUUID_t
		 * uuid (16 bytes) in every CUDA version since 10; its size
		 * changes, so leave generous room. */
		union { struct { char name[256]; unsigned char uuid[16]; } head; char room[16384]; } prop;
		char uuid[MEMQ_UUID_TEXT], bus[64];
		int integrated = 0, pageable = 0;

		memset(&prop, 0, sizeof(prop));
		if (props && props(&prop, dev) != 0)
			memset(&prop.head, 0, sizeof(prop.head));
		prop.head.name[sizeof(prop.head.name) - 1] = '\0';
		memq_uuid_text(uuid, prop.head.uuid);
		bus_id_of(bus, get_bus, dev);
		if (attr && attr(&integrated, CUDA_ATTR_INTEGRATED, dev) != 0)
			integrated = 0;
		if (attr && attr(&pageable, CUDA_ATTR_PAGEABLE_MEMORY_ACCESS, dev) != 0)
			pageable = 0;
		memq_content_device(MEMQ_RT_CUDA, dev, integrated || pageable);
		lttng_ust_do_tracepoint(memq, device, MEMQ_RT_CUDA, dev, prop.head.name,
			!!integrated, !!(integrated || pageable), uuid, bus, NULL);
	}
}

/* Once per runtime kind, from the first runtime object that answers a traced call. */
static void describe_devices_once(int runtime, int route)
{
	if (!lttng_ust_tracepoint_enabled(memq, device)
	    || !__atomic_exchange_n(&devices_pending[DEVICES_SLOT(runtime)], 0, __ATOMIC_ACQ_REL))
		return;
	if (runtime == MEMQ_RT_CUDRV)
		memq_driver_describe_devices(route);
	else if (runtime == MEMQ_RT_HIP)
		describe_hip_devices(route);
	else
		describe_cuda_devices(route);
}

/* ---------------------------------------------------------------------- */
/* The call bracket                                                        */
/* ---------------------------------------------------------------------- */

void memq_begin_slow(struct memq_call *c, int runtime, int route, void *ip)
{
	memq_nesting++;
	c->saved_errno = errno;
	c->ip = ip;
	c->route = route < 0 ? memq_route_of(ip, runtime) : route;
	c->raced = 0;
	c->inflight = 0;
	/* A session started after the library initialised, or a forked
	 * child: the process events go first, once (inside or outside
	 * capture windows: they describe the process). */
	memq_process_events_due();
	memq_count_traced(runtime);
	if (__atomic_load_n(&devices_pending[DEVICES_SLOT(runtime)], __ATOMIC_RELAXED))
		describe_devices_once(runtime, c->route);
	/* Outside every window no event is written, but an allocation's device
	 * goes into the table for the next window's snapshot. */
	/* The window the call's events belong to, read once (memq_window.h):
	 * a traced call is counted from before it reads the gate (a closing
	 * window stores the gate, then reads the count: it sees this call, or
	 * this call sees it closed); an untraced one writes an event only when
	 * it raced with a snapshot, for that snapshot's window. */
	c->window = memq_window_enter(&c->inflight);
	c->traced = c->window > 0;
	c->device = memq_current_device(runtime, c->route);
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
		memq_content_alloc(r, registered);
	}
	if (c->traced) {
		int how = memq_window_commit(c->window);

		if (how && registered)
			lttng_ust_do_tracepoint(memq, register, r, c->ip);
		else if (how)
			lttng_ust_do_tracepoint(memq, alloc, r, c->ip);
		memq_window_done(how);
	} else if (late) {
		/* Made before the window opened, inserted after its snapshot
		 * passed: it is live at the window's start, say so. */
		int how = memq_window_commit(late);

		r->begin_ns = memq_now_ns();
		if (how)
			lttng_ust_do_tracepoint(memq, live, r, c->ip);
		memq_window_done(how);
	}
	memq_end(c);
}

void memq_emit_free(struct memq_call *c, struct memq_free_rec *r, int registered)
{
	int how;

	if (!c->traced && c->raced) {
		/* Listed live by the opening window's snapshot, freed by a call
		 * that began before it: the window must see the free. */
		c->traced = 1;
		c->window = c->raced;
		c->begin_ns = memq_now_ns();
	}
	r->device = c->device;
	r->begin_ns = c->begin_ns;
	how = c->traced ? memq_window_commit(c->window) : 0;
	if (how && registered)
		lttng_ust_do_tracepoint(memq, unregister, r, c->ip);
	else if (how)
		lttng_ust_do_tracepoint(memq, free, r, c->ip);
	memq_window_done(how);
	memq_end(c);
}

/* A traced call's events: written in a commit bracket of its window (memq_window.h). */
static int commit(const struct memq_call *c)
{
	return c->traced ? memq_window_commit(c->window) : 0;
}

void memq_emit_copy(struct memq_call *c, struct memq_copy_rec *r)
{
	int hash_after, how;

	if (r->src_device < 0)  /* peer copies name their devices */
		r->device = c->device;
	r->begin_ns = c->begin_ns;
	if ((how = commit(c))) {
		hash_after = memq_content_recorded(r);
		lttng_ust_do_tracepoint(memq, copy, r, c->ip);
		if (hash_after)         /* outside the call's [begin, end] */
			memq_content_emitted(c, r);
		memq_window_done(how);
	}
	memq_end(c);
}

void memq_emit_set(struct memq_call *c, struct memq_set_rec *r)
{
	memq_content_written(r->dst, r->bytes);   /* what a pending copy wrote there is gone */
	r->device = c->device;
	r->begin_ns = c->begin_ns;
	int how = commit(c);

	if (how)
		lttng_ust_do_tracepoint(memq, set, r, c->ip);
	memq_window_done(how);
	memq_end(c);
}

void memq_emit_prefetch(struct memq_call *c, struct memq_prefetch_rec *r)
{
	r->device = c->device;
	r->begin_ns = c->begin_ns;
	int how = commit(c);

	if (how)
		lttng_ust_do_tracepoint(memq, prefetch, r, c->ip);
	memq_window_done(how);
	memq_end(c);
}

void memq_emit_advise(struct memq_call *c, struct memq_advise_rec *r)
{
	r->device = c->device;
	r->begin_ns = c->begin_ns;
	int how = commit(c);

	if (how)
		lttng_ust_do_tracepoint(memq, advise, r, c->ip);
	memq_window_done(how);
	memq_end(c);
}

void memq_emit_sync(struct memq_call *c, struct memq_sync_rec *r, uint64_t scope)
{
	r->device = c->device;
	r->begin_ns = c->begin_ns;
	int how = commit(c);

	if (how) {
		lttng_ust_do_tracepoint(memq, sync, r, c->ip);
		memq_content_synced(c, r, scope);   /* completed copies: after the event */
		memq_window_done(how);
	}
	memq_end(c);
}

void memq_emit_set_device(struct memq_call *c, struct memq_set_device_rec *r)
{
	r->device = c->device;   /* the device before the call */
	r->begin_ns = c->begin_ns;
	int how = commit(c);

	if (how)
		lttng_ust_do_tracepoint(memq, set_device, r, c->ip);
	memq_window_done(how);
	memq_end(c);
}

/* ---------------------------------------------------------------------- */
/* Process life: constructor, fork, exit                                   */
/* ---------------------------------------------------------------------- */

static void fork_prepare(void)
{
	memq_libmap_fork_prepare();
	memq_table_fork_prepare();
}

static void fork_parent(void)
{
	memq_table_fork_parent();
	memq_libmap_fork_parent();
}

static void fork_child(void)
{
	memq_table_fork_child();
	memq_libmap_fork_child();
	/* New process: it gets its own clock reading and device list. The
	 * events cannot be emitted here (liblttng-ust-fork re-registers the
	 * child after this handler), so they go out with its first traced
	 * call, or at its exit. The allocation table is kept: host blocks and
	 * host-registered ranges are in the child's copy of the address space.
	 * CUDA/HIP device, pinned and managed mappings are not (the runtimes
	 * mark them not to be inherited, and a context cannot be used after
	 * fork): their entries go stale, harmlessly, since a free of one in the
	 * child fails (the entry goes back, the event carries the error) and a
	 * new allocation at the same address replaces it. */
	__atomic_store_n(&clock_start_pending, 1, __ATOMIC_RELAXED);
	__atomic_store_n(&identity_pending, 1, __ATOMIC_RELAXED);
	__atomic_store_n(&libmap_pending, 1, __ATOMIC_RELAXED);
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
	pthread_atfork(fork_prepare, fork_parent, fork_child);
	in_constructor = 1;
	emit_clock_start_once();
	in_constructor = 0;
	memq_window_init();      /* after the table's fork handlers: see memq_window.c */
}

static void __attribute__((destructor)) memq_fini(void)
{
	emit_clock_start_once();  /* a process that made no traced call */
	memq_libmap_update(0);    /* what a bare-name dlopen loaded since the last event */
	memq_window_exit();
	emit_clock("end");
	memq_reach_report();
}
