/*
 * Reading a loaded object's dynamic symbol table and dependencies directly,
 * the way the dynamic linker does, without dlsym/dlopen: those replace the
 * thread's pending dlerror() (a wrapped call must not clear the
 * application's), take the loader's locks, and dlsym by name from this
 * library reaches memq's own interposed dlsym.
 */
#ifndef MEMQ_ELF_H
#define MEMQ_ELF_H

#include <link.h>
#include <stddef.h>
#include <stdint.h>

/* One loaded object, as dl_iterate_phdr describes it. */
struct memq_object {
	uintptr_t base;               /* load bias (dlpi_addr) */
	const char *name;             /* dlpi_name: "" for the main program */
	const ElfW(Phdr) *phdr;
	int phnum;
};

/* Its dynamic section, parsed. */
struct memq_elf {
	uintptr_t base;
	const ElfW(Dyn) *dyn;
	const ElfW(Sym) *symtab;
	const char *strtab;
	const ElfW(Half) *versym;     /* NULL without symbol versions */
	const uint32_t *gnu_hash, *hash;
	const char *soname;           /* NULL without DT_SONAME */
};

/* 0, or -1 when the object has no usable dynamic symbol table. */
int memq_elf_open(struct memq_elf *elf, const struct memq_object *obj);

/* The address of the function `name` the object defines (its default
 * version), or NULL. */
void *memq_elf_lookup(const struct memq_elf *elf, const char *name);

/* `name` in the loaded object that contains `addr` (memq_elf_lookup), NULL when none. */
void *memq_object_lookup(const void *addr, const char *name);

/* The i-th DT_NEEDED name (0, 1, ...), NULL past the last. */
const char *memq_elf_needed(const struct memq_elf *elf, int i);

/* Whether `addr` lies in one of the object's loaded segments. */
int memq_object_contains(const struct memq_object *obj, const void *addr);

/* The object's file name without its directory ("" for the main program). */
const char *memq_object_basename(const struct memq_object *obj);

/*
 * A snapshot of the loaded objects, in load order, in memory from mmap (no
 * malloc: this runs inside allocator wrappers too).
 */
struct memq_objects {
	struct memq_object *obj;
	int n;
	size_t bytes;
};

/* 0, or -1 when no memory was left. */
int memq_objects_take(struct memq_objects *snap);
void memq_objects_release(struct memq_objects *snap);

#endif /* MEMQ_ELF_H */
