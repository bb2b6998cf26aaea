/*
 * Which loaded runtime answers a call: per caller, as the dynamic linker
 * would have bound the caller's own reference without memq in front.
 *
 * A process can hold two copies of a runtime (module A linked with
 * libcudart.so.12, module B with libcudart.so.13, both dlopen'ed
 * RTLD_LOCAL): each module's calls belong to its own copy. memq's exported
 * wrapper is one function for all callers, so it routes each call by its
 * return address:
 *
 *   caller address -> the object containing it -> the first object in that
 *   object's dependency tree (breadth first, the object itself first, the
 *   linker's local scope) that defines the runtime's probe function; failing
 *   that, the first loaded object named like the runtime that defines it;
 *   failing that, the first loaded object (not memq) that defines it.
 *
 * That object is a *route* (a small number, 1..MEMQ_ROUTES-1); each wrapped
 * name caches its function per route (struct memq_sym.fn), and call sites
 * cache their route in memq_route_cache, keyed by (return address, runtime):
 * the exported wrapper's fast path is one load from this cache, one from
 * the name's slot. Everything here reads ELF tables directly (memq_elf.c):
 * no dlsym/dlopen, so the application's pending dlerror() survives, and no
 * lock but the loader's own inside dl_iterate_phdr.
 *
 * Unloading: routes and cached call sites refer to objects by address. After
 * a dlclose that unloaded anything (memq_dl.c calls memq_routes_unloaded),
 * the call-site cache is cleared and routes whose object is gone are
 * retired, their functions forgotten and their slots reused, so a new object
 * mapped at the same address is never served the old one's functions. (More
 * than MEMQ_ROUTES - 1 runtime objects loaded at once: the extra ones' calls
 * return MEMQ_ERR_NO_RUNTIME.)
 */
#define _GNU_SOURCE
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>

#include "memq_core.h"
#include "memq_elf.h"

uint64_t memq_route_cache[1u << MEMQ_ROUTE_CACHE_BITS];

#define CACHE_PROBES 8          /* slots a call site may sit away from its home slot */

/* What makes an object a runtime: a function every version exports, and
 * the library name it usually has. */
static const struct { const char *probe, *prefix; } kinds[] = {
	[MEMQ_RT_HIP] = { "hipMalloc", "libamdhip64" },
	[MEMQ_RT_CUDA] = { "cudaMalloc", "libcudart" },
	[MEMQ_RT_CUDRV] = { "cuMemAlloc_v2", "libcuda.so" },
};

enum { ROUTE_FREE = 0, ROUTE_FILLING, ROUTE_READY, ROUTE_RETIRED };

struct route {
	int state;                    /* atomic */
	int runtime;
	uintptr_t base;
	const char *name;             /* the loader's string: lives as long as the object */
	char path[256];               /* a copy of it (truncated), compared when a route is reused */
	struct memq_elf elf;
	int cuda_major;               /* atomic; 0 until asked */
};

static struct route routes[MEMQ_ROUTES];   /* [0] unused: route 0 = none */

/* ---- the route of a call site ---- */

/* Breadth-first over DT_NEEDED from `start`: the first object defining `probe`. */
static int search_tree(const struct memq_objects *snap, struct memq_elf *elfs, int start, int self,
	const char *probe)
{
	int *queue = (int *) (elfs + snap->n), head = 0, tail = 0;
	char *seen = (char *) (queue + snap->n);

	queue[tail++] = start;
	seen[start] = 1;
	while (head < tail) {
		int o = queue[head++];
		const char *need;

		if (o != self && elfs[o].symtab && memq_elf_lookup(&elfs[o], probe))
			return o;
		for (int i = 0; elfs[o].symtab && (need = memq_elf_needed(&elfs[o], i)); i++) {
			for (int k = 0; k < snap->n; k++) {
				const char *soname = elfs[k].soname ? elfs[k].soname : memq_object_basename(&snap->obj[k]);

				if (!seen[k] && strcmp(soname, need) == 0) {
					seen[k] = 1;
					queue[tail++] = k;
					break;
				}
			}
		}
	}
	return -1;
}

/* The first loaded object (named like the runtime when `named`) defining `probe`. */
static int first_defining(const struct memq_objects *snap, struct memq_elf *elfs, int self, const char *probe,
	const char *named)
{
	for (int k = 0; k < snap->n; k++) {
		if (k == self || !elfs[k].symtab)
			continue;
		if (named && strncmp(memq_object_basename(&snap->obj[k]), named, strlen(named)) != 0)
			continue;
		if (memq_elf_lookup(&elfs[k], probe))
			return k;
	}
	return -1;
}

/* The route for `obj`: an existing one, or a new slot (0 when all are taken). */
static int route_of_object(const struct memq_object *obj, const struct memq_elf *elf, int runtime)
{
	for (int r = 1; r < MEMQ_ROUTES; r++) {
		struct route *rt = &routes[r];

		/* (the path too: a route made by a resolution that raced with a dlclose may outlive its object) */
		if (__atomic_load_n(&rt->state, __ATOMIC_ACQUIRE) == ROUTE_READY && rt->base == obj->base
		    && rt->runtime == runtime && obj->name && strncmp(rt->path, obj->name, sizeof(rt->path) - 1) == 0)
			return r;
	}
	for (int r = 1; r < MEMQ_ROUTES; r++) {
		int expected = ROUTE_FREE;

		if (__atomic_compare_exchange_n(&routes[r].state, &expected, ROUTE_FILLING, 0, __ATOMIC_ACQ_REL,
						__ATOMIC_RELAXED)) {
			/* (two threads racing for one object may fill two routes: harmless) */
			routes[r].runtime = runtime;
			routes[r].base = obj->base;
			routes[r].name = obj->name;
			strncpy(routes[r].path, obj->name ? obj->name : "", sizeof(routes[r].path) - 1);
			routes[r].elf = *elf;
			__atomic_store_n(&routes[r].state, ROUTE_READY, __ATOMIC_RELEASE);
			return r;
		}
	}
	return 0;
}

static int resolve(const void *code, int runtime)
{
	const char *probe = kinds[runtime].probe;
	struct memq_objects snap;
	struct memq_elf *elfs;
	int caller = -1, self = -1, found = -1, route = 0;
	size_t room;
	void *mem;

	if (memq_objects_take(&snap))
		return 0;
	/* per object: its parsed ELF, a queue slot and a seen flag (search_tree) */
	room = (size_t) snap.n * (sizeof(struct memq_elf) + sizeof(int) + 1);
	mem = mmap(NULL, room, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (mem == MAP_FAILED) {
		memq_objects_release(&snap);
		return 0;
	}
	elfs = mem;
	for (int k = 0; k < snap.n; k++) {
		if (memq_elf_open(&elfs[k], &snap.obj[k]))
			elfs[k].symtab = NULL;
		if (memq_object_contains(&snap.obj[k], (const void *) resolve))
			self = k;
		if (code && caller < 0 && memq_object_contains(&snap.obj[k], code))
			caller = k;
	}
	if (caller >= 0)
		found = search_tree(&snap, elfs, caller, self, probe);
	if (found < 0)
		found = first_defining(&snap, elfs, self, probe, kinds[runtime].prefix);
	if (found < 0)
		found = first_defining(&snap, elfs, self, probe, NULL);
	if (found >= 0)
		route = route_of_object(&snap.obj[found], &elfs[found], runtime);
	munmap(mem, room);
	memq_objects_release(&snap);
	return route;
}

int memq_route(const void *code, int runtime)
{
	uint64_t key = memq_route_key(code, runtime), entry;
	size_t home = memq_route_slot(code, runtime), mask = (1u << MEMQ_ROUTE_CACHE_BITS) - 1;
	int route;

	if (runtime < MEMQ_RT_HIP || runtime > MEMQ_RT_CUDRV)
		return 0;
	for (size_t i = 0; i < CACHE_PROBES; i++) {
		entry = __atomic_load_n(&memq_route_cache[(home + i) & mask], __ATOMIC_ACQUIRE);
		if (entry >> MEMQ_ROUTE_BITS == key)
			return (int) (entry & (MEMQ_ROUTES - 1));
		if (!entry)
			break;
	}
	route = resolve(code, runtime);
	if (!route || key >> (64 - MEMQ_ROUTE_BITS))
		return route;            /* nothing loaded yet (ask again next time), or an address too high to key */
	entry = key << MEMQ_ROUTE_BITS | (uint64_t) route;
	for (size_t i = 0; i < CACHE_PROBES; i++) {
		uint64_t old = 0;
		uint64_t *slot = &memq_route_cache[(home + i) & mask];

		if (__atomic_compare_exchange_n(slot, &old, entry, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)
		    || old >> MEMQ_ROUTE_BITS == key)
			break;
	}
	return route;
}

/* ---- functions per route ---- */

void *memq_sym_at(struct memq_sym *sym, int route)
{
	struct route *rt;
	void *fn;

	if (route <= 0 || route >= MEMQ_ROUTES)
		return NULL;
	fn = __atomic_load_n(&sym->fn[route], __ATOMIC_ACQUIRE);
	rt = &routes[route];
	if (fn || __atomic_load_n(&rt->state, __ATOMIC_ACQUIRE) != ROUTE_READY)
		return fn;
	fn = memq_elf_lookup(&rt->elf, sym->name);
	if (fn)
		__atomic_store_n(&sym->fn[route], fn, __ATOMIC_RELEASE);
	return fn;
}

MEMQ_REAL_FN(MEMQ_RT_CUDA, int, cudaRuntimeGetVersion, (int *));

int memq_route_cuda_major(int route)
{
	struct route *rt = route > 0 && route < MEMQ_ROUTES ? &routes[route] : NULL;
	cudaRuntimeGetVersion_fn get = MEMQ_REAL_AT(cudaRuntimeGetVersion, route);
	int m = rt ? __atomic_load_n(&rt->cuda_major, __ATOMIC_RELAXED) : 0, version = 0;

	if (m)
		return m;
	if (get && get(&version) == 0 && version > 0)
		m = version / 1000;
	else         /* no version call: trust the name (libcudart.so.13) */
		m = rt && rt->elf.soname && strstr(rt->elf.soname, ".so.13") ? 13 : 12;
	if (rt)
		__atomic_store_n(&rt->cuda_major, m, __ATOMIC_RELAXED);
	return m;
}

/* ---- unloading ---- */

static int subs_cb(struct dl_phdr_info *info, size_t size, void *data)
{
	if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof(info->dlpi_subs))
		*(unsigned long long *) data = info->dlpi_subs;
	return 1;                    /* the counter is the same in every entry */
}

void memq_routes_unloaded(void)
{
	static unsigned long long seen;   /* atomic */
	unsigned long long subs = 0;
	struct memq_objects snap;

	dl_iterate_phdr(subs_cb, &subs);
	if (subs == __atomic_exchange_n(&seen, subs, __ATOMIC_ACQ_REL))
		return;
	memset(memq_route_cache, 0, sizeof(memq_route_cache));
	if (memq_objects_take(&snap))
		return;
	for (int r = 1; r < MEMQ_ROUTES; r++) {
		int alive = 0;

		if (__atomic_load_n(&routes[r].state, __ATOMIC_ACQUIRE) != ROUTE_READY)
			continue;
		for (int k = 0; k < snap.n && !alive; k++)
			alive = snap.obj[k].base == routes[r].base && snap.obj[k].name == routes[r].name;
		if (alive)
			continue;
		/* Retired, then free for another object once no name holds its functions. */
		__atomic_store_n(&routes[r].state, ROUTE_RETIRED, __ATOMIC_RELEASE);
		memq_syms_forget(r);
		memset(&routes[r].elf, 0, sizeof(routes[r].elf));
		routes[r].cuda_major = 0;
		__atomic_store_n(&routes[r].state, ROUTE_FREE, __ATOMIC_RELEASE);
	}
	memq_objects_release(&snap);
}
