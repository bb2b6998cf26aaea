/*
 * memq's library map (memq:lib_load / memq:lib_unload, docs/EVENTS.md): which
 * object is loaded where in the process, read from memory with
 * dl_iterate_phdr, so that call sites (`ip`) can be resolved to a binary.
 *
 * It replaces LTTng-UST's base-address statedump and liblttng-ust-dl (which
 * `memq record` switches off): those read every object's ELF headers, build
 * id and debug link from its file on each dlopen, ~850k read/lseek calls per
 * `import torch` with or without a session. Here the build id comes from the
 * object's loaded PT_NOTE segment and nothing is read from a file; the path is
 * realpath()'d once per object, as LTTng does.
 */
#ifndef MEMQ_LIBMAP_H
#define MEMQ_LIBMAP_H

/* Set (atomic) by a dlopen whose new objects are written later: by the next
 * memq event path (memq_libmap_due), dlopen, dlsym, dlclose or the exit. */
extern int memq_libmap_stale;

/* Objects loaded or unloaded since the last look get their event; with
 * `all`, every loaded object gets one (the once-per-process map, see
 * memq_core.c). Cheap when nothing changed (one dl_iterate_phdr step);
 * nothing at all while memq:lib_load is not enabled. Never re-entered by
 * its own thread (a malloc from realpath reaching the heap wrappers). */
void memq_libmap_update(int all);

/* From event paths: new objects when a dlopen was seen since the last look. */
static inline void memq_libmap_due(void)
{
	if (__builtin_expect(__atomic_load_n(&memq_libmap_stale, __ATOMIC_RELAXED), 0))
		memq_libmap_update(0);
}

/* Fork handlers for the map's lock (memq_core.c's, which knows the order). */
void memq_libmap_fork_prepare(void);
void memq_libmap_fork_parent(void);
void memq_libmap_fork_child(void);

#endif /* MEMQ_LIBMAP_H */
