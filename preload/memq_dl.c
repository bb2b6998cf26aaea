/*
 * dlsym/dlvsym interposed, so that a program looking a wrapped function up by
 * name in a runtime's or the driver's handle (Python ctypes on a library
 * loaded RTLD_LOCAL, a loader that dlopens libcudart/libamdhip64 itself)
 * gets memq's wrapper and not the runtime's own function, which no event
 * would ever see.
 *
 * The hard parts:
 *  - Every call by name from this library binds to its own exports, dlsym
 *    and dlvsym included (LD_PRELOAD puts it first), so the real ones are
 *    found in libc's dynamic symbol table by reading it directly.
 *  - dlsym(RTLD_NEXT, ...) is relative to its caller's object, which glibc
 *    takes from the return address: those lookups (and RTLD_DEFAULT, whose
 *    answer memq never changes) are tail calls, so the real dlsym sees the
 *    application's return address, not ours.
 *  - A wrapper calls the real function in its one slot (struct memq_sym). It
 *    stands for what the lookup found only when the slot is empty or holds
 *    that same function; a second copy of a runtime keeps its own functions,
 *    untraced, rather than having its calls answered by the first copy.
 *    (The CUDA driver is one per process: its lookups always update the
 *    slot, see memq_wrapper_for.)
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <string.h>

#include "memq_wrap.h"

typedef void *(*dlsym_fn)(void *, const char *);
typedef void *(*dlvsym_fn)(void *, const char *, const char *);

static dlsym_fn real_dlsym;     /* atomic; libc's */
static dlvsym_fn real_dlvsym;   /* atomic; libc's */

/* ---- libc's own dlsym and dlvsym, from its dynamic symbol table ---- */

struct wanted { const char *name; void *found; };

/* Number of dynamic symbols, from DT_GNU_HASH (the highest index any chain reaches + 1). */
static size_t gnu_hash_symbols(const uint32_t *gh)
{
	uint32_t nbuckets = gh[0], symoffset = gh[1], bloom_words = gh[2], top = 0;
	const uint32_t *buckets = (const uint32_t *) ((const ElfW(Addr) *) (gh + 4) + bloom_words);
	const uint32_t *chain = buckets + nbuckets;

	for (uint32_t b = 0; b < nbuckets; b++)
		if (buckets[b] > top)
			top = buckets[b];
	if (top < symoffset)
		return symoffset;
	while (!(chain[top - symoffset] & 1))
		top++;
	return (size_t) top + 1;
}

static int libc_symbols_cb(struct dl_phdr_info *info, size_t size, void *data)
{
	struct wanted *want = data;
	const char *name = info->dlpi_name, *base;
	const ElfW(Dyn) *dyn = NULL;
	const ElfW(Sym) *symtab = NULL;
	const char *strtab = NULL;
	const uint32_t *hash = NULL, *gnu_hash = NULL;
	size_t n;

	(void) size;
	base = name ? strrchr(name, '/') : NULL;
	base = base ? base + 1 : name;
	if (!base || strncmp(base, "libc.so", 7) != 0)
		return 0;
	for (int i = 0; i < info->dlpi_phnum; i++)
		if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
			dyn = (const ElfW(Dyn) *) (info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
	for (; dyn && dyn->d_tag != DT_NULL; dyn++) {
		/* ld.so relocates these entries in place on most targets; not on all. */
		ElfW(Addr) a = dyn->d_un.d_ptr < info->dlpi_addr ? dyn->d_un.d_ptr + info->dlpi_addr : dyn->d_un.d_ptr;

		switch (dyn->d_tag) {
		case DT_SYMTAB: symtab = (const ElfW(Sym) *) a; break;
		case DT_STRTAB: strtab = (const char *) a; break;
		case DT_HASH: hash = (const uint32_t *) a; break;
		case DT_GNU_HASH: gnu_hash = (const uint32_t *) a; break;
		}
	}
	if (!symtab || !strtab || (!hash && !gnu_hash))
		return 1;
	n = hash ? hash[1] : gnu_hash_symbols(gnu_hash);
	for (size_t i = 0; i < n; i++) {
		const ElfW(Sym) *s = &symtab[i];

		if (s->st_shndx == SHN_UNDEF || ELF64_ST_TYPE(s->st_info) != STT_FUNC)
			continue;
		for (struct wanted *w = want; w->name; w++)
			if (!w->found && strcmp(strtab + s->st_name, w->name) == 0)
				w->found = (void *) (info->dlpi_addr + s->st_value);
	}
	return 1;
}

static void find_real_dl(void)
{
	struct wanted want[] = { { "dlsym", NULL }, { "dlvsym", NULL }, { NULL, NULL } };

	dl_iterate_phdr(libc_symbols_cb, want);
	__atomic_store_n(&real_dlvsym, (dlvsym_fn) want[1].found, __ATOMIC_RELEASE);
	__atomic_store_n(&real_dlsym, (dlsym_fn) want[0].found, __ATOMIC_RELEASE);
}

void *memq_real_dlsym(void *handle, const char *name)
{
	dlsym_fn real = __atomic_load_n(&real_dlsym, __ATOMIC_ACQUIRE);

	if (!real) {
		find_real_dl();
		real = __atomic_load_n(&real_dlsym, __ATOMIC_ACQUIRE);
	}
	return real ? real(handle, name) : NULL;
}

/* ---- which wrapper stands for a function a lookup found ---- */

/* Every MEMQ_REAL_FN slot (memq_core.h puts a pointer to it in this section). */
extern struct memq_sym *const __start_memq_syms[] __attribute__((visibility("hidden")));
extern struct memq_sym *const __stop_memq_syms[] __attribute__((visibility("hidden")));

struct memq_sym *memq_sym_find(const char *name)
{
	for (struct memq_sym *const *s = __start_memq_syms; name && s < __stop_memq_syms; s++)
		if (strcmp((*s)->name, name) == 0)
			return *s;
	return NULL;
}

int memq_is_ours(const void *fn)
{
	Dl_info self, other;

	return fn && dladdr((void *) memq_is_ours, &self) && dladdr(fn, &other)
		&& self.dli_fbase == other.dli_fbase;
}

/* This library's exported definition of `name` (its wrapper), or NULL. */
static void *exported_wrapper(const char *name)
{
	static void *self;          /* atomic; dlopen(RTLD_NOLOAD) handle of this library */
	void *h = __atomic_load_n(&self, __ATOMIC_ACQUIRE), *fn;
	Dl_info info;

	if (!h && dladdr((void *) exported_wrapper, &info)) {
		h = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
		__atomic_store_n(&self, h, __ATOMIC_RELEASE);
	}
	fn = h ? memq_real_dlsym(h, name) : NULL;
	return memq_is_ours(fn) ? fn : NULL;
}

void *memq_wrapper_for(const char *name, void *fn)
{
	struct memq_sym *sym;
	void *wrapper, *held = NULL;
	int saved_errno = errno;

	/* cheap test first: dlsym serves every library, memq wraps only hip*, cuda*, cu* */
	if (!fn || !name || (name[0] != 'h' && name[0] != 'c') || !(sym = memq_sym_find(name))
	    || memq_is_ours(fn) || !(wrapper = exported_wrapper(name))) {
		errno = saved_errno;
		return fn;
	}
	errno = saved_errno;
	if (sym->runtime == MEMQ_RT_CUDRV) {
		__atomic_store_n(&sym->fn, fn, __ATOMIC_RELEASE);
		return wrapper;
	}
	if (__atomic_compare_exchange_n(&sym->fn, &held, fn, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) || held == fn)
		return wrapper;
	return fn;
}

/* ---- the interposed lookups ---- */

MEMQ_EXPORT void *dlsym(void *handle, const char *name)
{
	dlsym_fn real = __atomic_load_n(&real_dlsym, __ATOMIC_ACQUIRE);

	if (__builtin_expect(!real, 0)) {
		find_real_dl();
		if (!(real = __atomic_load_n(&real_dlsym, __ATOMIC_ACQUIRE)))
			return NULL;
	}
	if (handle == RTLD_NEXT || handle == RTLD_DEFAULT)
		return real(handle, name);   /* tail call: RTLD_NEXT is relative to our caller */
	return memq_wrapper_for(name, real(handle, name));
}

MEMQ_EXPORT void *dlvsym(void *handle, const char *name, const char *version)
{
	dlvsym_fn real = __atomic_load_n(&real_dlvsym, __ATOMIC_ACQUIRE);

	if (__builtin_expect(!real, 0)) {
		find_real_dl();
		if (!(real = __atomic_load_n(&real_dlvsym, __ATOMIC_ACQUIRE)))
			return NULL;
	}
	if (handle == RTLD_NEXT || handle == RTLD_DEFAULT)
		return real(handle, name, version);
	return memq_wrapper_for(name, real(handle, name, version));
}
