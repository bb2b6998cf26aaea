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
 *    found in libc's dynamic symbol table by reading it directly
 *    (memq_elf.c).
 *  - dlsym(RTLD_NEXT, ...) is relative to its caller's object, which glibc
 *    takes from the return address: those lookups (and RTLD_DEFAULT, whose
 *    answer memq never changes) are tail calls, so the real dlsym sees the
 *    application's return address, not ours.
 *  - A lookup hands out a stand-in bound to the function it found (memq_wrap.h):
 *    each copy of a runtime in the process gets its own, traced; memq's
 *    exported wrapper, which routes by its caller (memq_route.c), is what a
 *    call by name reaches.
 *  - dlclose: after one that unloaded something, routes to objects that are
 *    gone are forgotten (memq_routes_unloaded).
 *  - dlopen/dlmopen, for the library map (memq_libmap.h): glibc takes the
 *    caller's object from the return address too, and searches a bare name
 *    in that object's RUNPATH/RPATH and expands $ORIGIN from it. A path
 *    without '$' (or NULL) opens the same whoever asks: that call is made
 *    from here and the new objects are written as it returns. Any other is
 *    a tail call. Both mark the map stale first: the next event path
 *    (the new objects' constructors' included), lookup, dlopen, dlclose or
 *    the exit writes what was loaded.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <string.h>

#include "memq_elf.h"
#include "memq_libmap.h"
#include "memq_wrap.h"

typedef void *(*dlsym_fn)(void *, const char *);
typedef void *(*dlvsym_fn)(void *, const char *, const char *);
typedef int (*dlclose_fn)(void *);
typedef void *(*dlopen_fn)(const char *, int);
typedef void *(*dlmopen_fn)(Lmid_t, const char *, int);

/* libc's functions (atomic), looked up on first use (libc_fn) */
static void *real_dlsym, *real_dlvsym, *real_dlclose, *real_dlopen, *real_dlmopen;

/* ---- libc's own dlsym, dlvsym, dlclose, dlopen and dlmopen, from its dynamic symbol table ---- */

static int libc_cb(struct dl_phdr_info *info, size_t size, void *data)
{
	struct memq_object obj = { info->dlpi_addr, info->dlpi_name, info->dlpi_phdr, info->dlpi_phnum };
	struct memq_elf elf;

	(void) size;
	if (strncmp(memq_object_basename(&obj), "libc.so", 7) != 0)
		return 0;
	if (memq_elf_open(&elf, &obj) == 0) {
		__atomic_store_n(&real_dlvsym, memq_elf_lookup(&elf, "dlvsym"), __ATOMIC_RELEASE);
		__atomic_store_n(&real_dlclose, memq_elf_lookup(&elf, "dlclose"), __ATOMIC_RELEASE);
		__atomic_store_n(&real_dlopen, memq_elf_lookup(&elf, "dlopen"), __ATOMIC_RELEASE);
		__atomic_store_n(&real_dlmopen, memq_elf_lookup(&elf, "dlmopen"), __ATOMIC_RELEASE);
		__atomic_store_n(&real_dlsym, memq_elf_lookup(&elf, "dlsym"), __ATOMIC_RELEASE);
	}
	(void) data;
	return 1;
}

/* libc's function in `slot`, found on first use; NULL when libc lacks it. */
static void *libc_fn(void **slot)
{
	void *fn = __atomic_load_n(slot, __ATOMIC_ACQUIRE);

	if (__builtin_expect(!fn, 0)) {
		dl_iterate_phdr(libc_cb, NULL);
		fn = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
	}
	return fn;
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

void memq_syms_forget(int route)
{
	for (struct memq_sym *const *s = __start_memq_syms; s < __stop_memq_syms; s++)
		__atomic_store_n(&(*s)->fn[route], NULL, __ATOMIC_RELEASE);
}

int memq_is_ours(const void *fn)
{
	Dl_info self, other;

	return fn && dladdr((void *) memq_is_ours, &self) && dladdr(fn, &other)
		&& self.dli_fbase == other.dli_fbase;
}

/* The stand-in of `sym` bound to `fn` (binding a free one), NULL when all are taken. */
static void *stand_in(struct memq_sym *sym, void *fn)
{
	for (int k = 0; k < MEMQ_BOUND; k++) {
		void *held = NULL;

		if (__atomic_compare_exchange_n(&sym->bound[k], &held, fn, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)
		    || held == fn)
			return sym->stand_ins[k];
	}
	return NULL;
}

void *memq_wrapper_for(const char *name, void *fn)
{
	struct memq_sym *sym;
	void *wrapper = NULL;
	int saved_errno = errno;

	/* cheap test first: dlsym serves every library, memq wraps only hip*, cuda*, cu* */
	if (fn && name && (name[0] == 'h' || name[0] == 'c') && (sym = memq_sym_find(name)) && !memq_is_ours(fn))
		wrapper = sym->stand_ins ? stand_in(sym, fn) : sym->exported;
	errno = saved_errno;
	return wrapper ? wrapper : fn;  /* no stand-in left: the function itself, untraced but right */
}

/* libc's dlsym for this library's own lookups (memq_heap.c's RTLD_NEXT): a call by
 * name from here would reach the interposed one below. RTLD_NEXT is relative to
 * the caller's object, and the caller here is this library. */
void *memq_real_dlsym(void *handle, const char *name)
{
	dlsym_fn real = (dlsym_fn) libc_fn(&real_dlsym);

	if (!real)
		return NULL;
	return real(handle, name);
}

/* ---- the interposed lookups ---- */

MEMQ_EXPORT void *dlsym(void *handle, const char *name)
{
	dlsym_fn real = (dlsym_fn) libc_fn(&real_dlsym);

	if (!real)
		return NULL;
	memq_libmap_due();           /* what a bare-name dlopen loaded: its handle is looked up next */
	if (handle == RTLD_NEXT || handle == RTLD_DEFAULT)
		return real(handle, name);   /* tail call: RTLD_NEXT is relative to our caller */
	return memq_wrapper_for(name, real(handle, name));
}

MEMQ_EXPORT void *dlvsym(void *handle, const char *name, const char *version)
{
	dlvsym_fn real = (dlvsym_fn) libc_fn(&real_dlvsym);

	if (!real)
		return NULL;
	if (handle == RTLD_NEXT || handle == RTLD_DEFAULT)
		return real(handle, name, version);
	return memq_wrapper_for(name, real(handle, name, version));
}

/* Not a lookup: after the real one, forget routes to whatever it unloaded. */
MEMQ_EXPORT int dlclose(void *handle)
{
	dlclose_fn real = (dlclose_fn) libc_fn(&real_dlclose);
	int r, saved_errno;

	if (!real)
		return -1;
	r = real(handle);
	saved_errno = errno;
	memq_routes_unloaded();
	memq_libmap_update(0);
	errno = saved_errno;
	return r;
}

/* Whether glibc opens `file` the same whoever calls (see the top). */
static int caller_free(const char *file)
{
	return !file || (strchr(file, '/') && !strchr(file, '$'));
}

/* After an open made from here: its objects into the map, errno as it left it. */
static void *opened(void *handle)
{
	int saved_errno = errno;

	memq_libmap_update(0);
	errno = saved_errno;
	return handle;
}

MEMQ_EXPORT void *dlopen(const char *file, int mode)
{
	dlopen_fn real = (dlopen_fn) libc_fn(&real_dlopen);

	if (!real)
		return NULL;
	/* stale from here: the new objects' constructors may already write events */
	__atomic_store_n(&memq_libmap_stale, 1, __ATOMIC_RELAXED);
	if (caller_free(file))
		return opened(real(file, mode));
	return real(file, mode);     /* tail call: the search is relative to our caller */
}

MEMQ_EXPORT void *dlmopen(Lmid_t lmid, const char *file, int mode)
{
	dlmopen_fn real = (dlmopen_fn) libc_fn(&real_dlmopen);

	if (!real)
		return NULL;
	/* stale from here: the new objects' constructors may already write events */
	__atomic_store_n(&memq_libmap_stale, 1, __ATOMIC_RELAXED);
	if (caller_free(file))
		return opened(real(lmid, file, mode));
	return real(lmid, file, mode);
}
