/*
 * The library map (memq_libmap.h): the objects seen so far in a table keyed
 * by their program headers' address, in memory from mmap (this runs inside
 * the heap wrappers' event paths: no malloc of its own), and one look at
 * dl_iterate_phdr per update.
 *
 * What LTTng's statedump (liblttng-ust lttng-ust-statedump.c, elf.c) writes
 * for an object, and so what this writes too: baddr = load bias + the first
 * PT_LOAD's p_vaddr; memsz = highest PT_LOAD end - lowest PT_LOAD start; the
 * path realpath()'d, the first nameless object being the executable
 * (/proc/self/exe), a name that is no file (the vDSO) written "[name]".
 */
#define _GNU_SOURCE
#include <elf.h>
#include <errno.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "memq_elf.h"
#include "memq_libmap.h"
#include "memq_tp.h"

int memq_libmap_stale;

struct lib {
	const ElfW(Phdr) *phdr;      /* key (with addr); NULL: a free slot */
	uintptr_t addr;              /* dlpi_addr */
	unsigned mark;               /* the look that last saw it loaded; 0: unloaded */
	struct memq_lib_rec rec;
};

/* Open addressing over every object ever loaded in the process (torch with CUDA
 * loads ~1000); past 3/4 full an object is written without being remembered. */
#define LIB_SLOTS (1u << 14)
/* Paths, bump-allocated; MAP_NORESERVE: only the pages paths fill are used. */
#define ARENA_BYTES (16u << 20)

static struct lib *libs;
static unsigned nlibs;
static unsigned short used[LIB_SLOTS];          /* the slots taken, in the order taken */
static char *arena;
static size_t arena_used;
static unsigned look;                            /* this look's number, never 0 */
static unsigned long long seen_adds, seen_subs;  /* dl_iterate_phdr's load/unload counts at the last look */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static __thread int updating __attribute__((tls_model("initial-exec")));

static int setup(void)
{
	void *t = mmap(NULL, LIB_SLOTS * sizeof(struct lib), PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	void *a = mmap(NULL, ARENA_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	if (t == MAP_FAILED || a == MAP_FAILED) {
		if (t != MAP_FAILED)
			munmap(t, LIB_SLOTS * sizeof(struct lib));
		if (a != MAP_FAILED)
			munmap(a, ARENA_BYTES);
		return -1;
	}
	libs = t;
	arena = a;
	return 0;
}

/* The slot of an object: its own, else the free one it would take (NULL: table full). */
static struct lib *slot_of(const ElfW(Phdr) *phdr, uintptr_t addr)
{
	size_t h = ((uintptr_t) phdr >> 4 ^ addr >> 12) & (LIB_SLOTS - 1);

	for (unsigned probe = 0; probe < LIB_SLOTS; probe++, h = (h + 1) & (LIB_SLOTS - 1)) {
		struct lib *l = &libs[h];

		if (!l->phdr)
			return nlibs < LIB_SLOTS / 4 * 3 ? l : NULL;
		if (l->phdr == phdr && l->addr == addr)
			return l;
	}
	return NULL;
}

static const char *keep_path(const char *path)
{
	size_t n = strlen(path) + 1;

	if (n > ARENA_BYTES - arena_used)
		return "";
	memcpy(arena + arena_used, path, n);
	arena_used += n;
	return arena + arena_used - n;
}

#define ALIGN_UP(n, a) (((n) + (a) - 1) / (a) * (a))

/* The GNU build-id note from the object's loaded PT_NOTE segments (read only
 * where a PT_LOAD segment maps them). */
static void read_build_id(const struct memq_object *obj, struct memq_lib_rec *r)
{
	r->build_id_len = 0;
	for (int i = 0; i < obj->phnum; i++) {
		const ElfW(Phdr) *p = &obj->phdr[i];
		const char *at = (const char *) (obj->base + p->p_vaddr);
		size_t left = p->p_memsz, align = p->p_align == 8 ? 8 : 4;

		if (p->p_type != PT_NOTE || !left || !memq_object_contains(obj, at)
		    || !memq_object_contains(obj, at + left - 1))
			continue;
		while (left >= sizeof(ElfW(Nhdr))) {
			const ElfW(Nhdr) *n = (const ElfW(Nhdr) *) at;
			size_t name = ALIGN_UP((size_t) n->n_namesz, align), desc = ALIGN_UP((size_t) n->n_descsz, align);

			if (name > left - sizeof(*n) || desc > left - sizeof(*n) - name)
				break;   /* a note running past its segment: not one to trust */
			if (n->n_type == NT_GNU_BUILD_ID && n->n_namesz == 4 && memcmp(at + sizeof(*n), "GNU", 4) == 0) {
				r->build_id_len = n->n_descsz < MEMQ_BUILD_ID_MAX ? (uint8_t) n->n_descsz : MEMQ_BUILD_ID_MAX;
				memcpy(r->build_id, at + sizeof(*n) + name, r->build_id_len);
				return;
			}
			at += sizeof(*n) + name + desc;
			left -= sizeof(*n) + name + desc;
		}
	}
}

/* 0, or -1 for an object LTTng would not list either (no PT_LOAD; an executable whose path cannot be read). */
static int describe(const struct dl_phdr_info *info, int exe, struct memq_lib_rec *r)
{
	struct memq_object obj = { info->dlpi_addr, info->dlpi_name, info->dlpi_phdr, info->dlpi_phnum };
	const ElfW(Phdr) *first = NULL;
	uint64_t lo = UINT64_MAX, hi = 0;
	char path[PATH_MAX];

	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *p = &info->dlpi_phdr[i];

		if (p->p_type != PT_LOAD)
			continue;
		first = first ? first : p;
		lo = p->p_vaddr < lo ? p->p_vaddr : lo;
		hi = p->p_vaddr + p->p_memsz > hi ? p->p_vaddr + p->p_memsz : hi;
	}
	if (!first)
		return -1;
	if (!info->dlpi_name || !info->dlpi_name[0]) {
		ssize_t n = exe ? readlink("/proc/self/exe", path, sizeof(path) - 1) : 0;

		if (exe && n <= 0)
			return -1;
		if (exe)
			path[n] = '\0';
		else
			strcpy(path, "[vdso]");
	} else if (!realpath(info->dlpi_name, path)) {
		snprintf(path, sizeof(path), "[%s]", info->dlpi_name);
	}
	r->baddr = info->dlpi_addr + first->p_vaddr;
	r->memsz = hi - lo;
	r->path = keep_path(path);
	read_build_id(&obj, r);
	return 0;
}

struct walk {
	int all;            /* every loaded object gets its event, not only new ones */
	int first;          /* no object seen yet in this walk */
	int exe_found;      /* the first nameless object (the executable) was seen */
	int unchanged;      /* stopped at the first object: nothing loaded or unloaded since the last look */
	unsigned long long adds, subs;
};

static int walk_cb(struct dl_phdr_info *info, size_t size, void *data)
{
	struct walk *w = data;
	int nameless = !info->dlpi_name || !info->dlpi_name[0];
	int exe = nameless && !w->exe_found;
	struct lib *l;

	if (w->first && size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof(info->dlpi_subs)) {
		w->adds = info->dlpi_adds;
		w->subs = info->dlpi_subs;
		if (!w->all && w->adds == seen_adds && w->subs == seen_subs) {
			w->unchanged = 1;
			return 1;
		}
	}
	w->first = 0;
	w->exe_found |= nameless;
	l = slot_of(info->dlpi_phdr, info->dlpi_addr);
	if (!l) {
		struct memq_lib_rec r;   /* the table is full: written, not remembered */

		if (describe(info, exe, &r) == 0)
			lttng_ust_do_tracepoint(memq, lib_load, &r, NULL);
		return 0;
	}
	if (!l->phdr || !l->mark) {
		/* new, or loaded again where an unloaded object was */
		if (!l->phdr)
			used[nlibs++] = (unsigned short) (l - libs);
		l->phdr = info->dlpi_phdr;
		l->addr = info->dlpi_addr;
		l->mark = look;
		if (describe(info, exe, &l->rec) != 0)
			l->rec.path = NULL;   /* remembered, never written */
		if (l->rec.path)
			lttng_ust_do_tracepoint(memq, lib_load, &l->rec, NULL);
		return 0;
	}
	l->mark = look;
	if (w->all && l->rec.path)
		lttng_ust_do_tracepoint(memq, lib_load, &l->rec, NULL);
	return 0;
}

void memq_libmap_update(int all)
{
	struct walk w = { .all = all, .first = 1 };
	int saved_errno;

	if (updating || !lttng_ust_tracepoint_enabled(memq, lib_load))
		return;
	saved_errno = errno;
	updating = 1;
	__atomic_store_n(&memq_libmap_stale, 0, __ATOMIC_RELAXED);
	pthread_mutex_lock(&lock);
	if (libs || setup() == 0) {
		look = look + 1 ? look + 1 : 1;
		dl_iterate_phdr(walk_cb, &w);
		if (!w.unchanged) {
			seen_adds = w.adds;
			seen_subs = w.subs;
			for (unsigned i = 0; i < nlibs; i++) {
				struct lib *l = &libs[used[i]];

				if (l->mark && l->mark != look) {
					l->mark = 0;
					if (l->rec.path)
						lttng_ust_do_tracepoint(memq, lib_unload, &l->rec, NULL);
				}
			}
		}
	}
	pthread_mutex_unlock(&lock);
	/* Another thread's dlopen still mapping its objects: look again at the next chance. */
	if (_r_debug.r_state != RT_CONSISTENT)
		__atomic_store_n(&memq_libmap_stale, 1, __ATOMIC_RELAXED);
	updating = 0;
	errno = saved_errno;
}

void memq_libmap_fork_prepare(void)
{
	pthread_mutex_lock(&lock);
}

void memq_libmap_fork_parent(void)
{
	pthread_mutex_unlock(&lock);
}

void memq_libmap_fork_child(void)
{
	pthread_mutex_unlock(&lock);
}
