/*
 * Dynamic symbol lookup in loaded objects, done by hand (see memq_elf.h for
 * why): the GNU hash table (or the SysV one), the default version of a
 * versioned name, defined functions only.
 */
#define _GNU_SOURCE
#include <elf.h>
#include <string.h>
#include <sys/mman.h>

#include "memq_elf.h"

/* ld.so relocates the dynamic section's addresses in place on most targets,
 * not on all (MIPS, RISC-V keep them as link-time values). */
static uintptr_t dyn_address(const struct memq_elf *elf, ElfW(Addr) value)
{
	return value < elf->base ? value + elf->base : value;
}

int memq_elf_open(struct memq_elf *elf, const struct memq_object *obj)
{
	ElfW(Addr) soname = 0;
	int has_soname = 0;

	memset(elf, 0, sizeof(*elf));
	elf->base = obj->base;
	for (int i = 0; i < obj->phnum; i++)
		if (obj->phdr[i].p_type == PT_DYNAMIC)
			elf->dyn = (const ElfW(Dyn) *) (obj->base + obj->phdr[i].p_vaddr);
	for (const ElfW(Dyn) *d = elf->dyn; d && d->d_tag != DT_NULL; d++) {
		switch (d->d_tag) {
		case DT_SYMTAB: elf->symtab = (const ElfW(Sym) *) dyn_address(elf, d->d_un.d_ptr); break;
		case DT_STRTAB: elf->strtab = (const char *) dyn_address(elf, d->d_un.d_ptr); break;
		case DT_VERSYM: elf->versym = (const ElfW(Half) *) dyn_address(elf, d->d_un.d_ptr); break;
		case DT_GNU_HASH: elf->gnu_hash = (const uint32_t *) dyn_address(elf, d->d_un.d_ptr); break;
		case DT_HASH: elf->hash = (const uint32_t *) dyn_address(elf, d->d_un.d_ptr); break;
		case DT_SONAME: soname = d->d_un.d_val; has_soname = 1; break;
		}
	}
	if (!elf->symtab || !elf->strtab || (!elf->gnu_hash && !elf->hash))
		return -1;
	elf->soname = has_soname ? elf->strtab + soname : NULL;
	return 0;
}

/* A definition dlsym would return: a defined global function, not a hidden
 * (non-default) version. */
static void *accept(const struct memq_elf *elf, uint32_t i, const char *name)
{
	const ElfW(Sym) *s = &elf->symtab[i];
	int type = ELF64_ST_TYPE(s->st_info), bind = ELF64_ST_BIND(s->st_info);

	if (s->st_shndx == SHN_UNDEF || !s->st_value || type != STT_FUNC
	    || (bind != STB_GLOBAL && bind != STB_WEAK)
	    || (elf->versym && (elf->versym[i] & 0x8000))
	    || strcmp(elf->strtab + s->st_name, name) != 0)
		return NULL;
	return (void *) (elf->base + s->st_value);
}

static void *gnu_lookup(const struct memq_elf *elf, const char *name)
{
	const uint32_t *gh = elf->gnu_hash;
	uint32_t nbuckets = gh[0], symoffset = gh[1], bloom_words = gh[2], shift = gh[3], h = 5381;
	const ElfW(Addr) *bloom = (const ElfW(Addr) *) (gh + 4);
	const uint32_t *buckets = (const uint32_t *) (bloom + bloom_words), *chain = buckets + nbuckets;
	const unsigned bits = sizeof(ElfW(Addr)) * 8;
	ElfW(Addr) word, mask;

	for (const unsigned char *c = (const unsigned char *) name; *c; c++)
		h = h * 33 + *c;
	if (!nbuckets || !bloom_words)
		return NULL;
	word = bloom[(h / bits) % bloom_words];
	mask = ((ElfW(Addr)) 1 << (h % bits)) | ((ElfW(Addr)) 1 << ((h >> shift) % bits));
	if ((word & mask) != mask)
		return NULL;
	for (uint32_t i = buckets[h % nbuckets]; i >= symoffset; i++) {
		uint32_t link = chain[i - symoffset];
		void *fn = (link | 1) == (h | 1) ? accept(elf, i, name) : NULL;

		if (fn)
			return fn;
		if (link & 1)
			break;
	}
	return NULL;
}

static void *sysv_lookup(const struct memq_elf *elf, const char *name)
{
	const uint32_t *hash = elf->hash, nbucket = hash[0], *bucket = hash + 2, *chain = bucket + nbucket;
	uint32_t h = 0;

	for (const unsigned char *c = (const unsigned char *) name; *c; c++) {
		h = (h << 4) + *c;
		h ^= (h >> 24) & 0xf0;
	}
	h &= 0x0fffffff;
	for (uint32_t i = nbucket ? bucket[h % nbucket] : 0; i; i = chain[i]) {
		void *fn = accept(elf, i, name);

		if (fn)
			return fn;
	}
	return NULL;
}

void *memq_elf_lookup(const struct memq_elf *elf, const char *name)
{
	return elf->gnu_hash ? gnu_lookup(elf, name) : sysv_lookup(elf, name);
}

const char *memq_elf_needed(const struct memq_elf *elf, int i)
{
	for (const ElfW(Dyn) *d = elf->dyn; d && d->d_tag != DT_NULL; d++)
		if (d->d_tag == DT_NEEDED && i-- == 0)
			return elf->strtab + d->d_un.d_val;
	return NULL;
}

int memq_object_contains(const struct memq_object *obj, const void *addr)
{
	uintptr_t a = (uintptr_t) addr;

	for (int i = 0; i < obj->phnum; i++) {
		const ElfW(Phdr) *p = &obj->phdr[i];

		if (p->p_type == PT_LOAD && a >= obj->base + p->p_vaddr && a < obj->base + p->p_vaddr + p->p_memsz)
			return 1;
	}
	return 0;
}

const char *memq_object_basename(const struct memq_object *obj)
{
	const char *slash = obj->name ? strrchr(obj->name, '/') : NULL;

	return slash ? slash + 1 : obj->name ? obj->name : "";
}

struct object_lookup {
	const void *addr;
	const char *name;
	void *found;
};

static int object_lookup_cb(struct dl_phdr_info *info, size_t size, void *data)
{
	struct object_lookup *want = data;
	struct memq_object obj = { info->dlpi_addr, info->dlpi_name, info->dlpi_phdr, info->dlpi_phnum };
	struct memq_elf elf;

	(void) size;
	if (!memq_object_contains(&obj, want->addr))
		return 0;
	if (memq_elf_open(&elf, &obj) == 0)
		want->found = memq_elf_lookup(&elf, want->name);
	return 1;
}

void *memq_object_lookup(const void *addr, const char *name)
{
	struct object_lookup want = { addr, name, NULL };

	dl_iterate_phdr(object_lookup_cb, &want);
	return want.found;
}

/* ---- snapshot ---- */

static int count_cb(struct dl_phdr_info *info, size_t size, void *data)
{
	(void) info;
	(void) size;
	++*(int *) data;
	return 0;
}

static int fill_cb(struct dl_phdr_info *info, size_t size, void *data)
{
	struct memq_objects *snap = data;

	(void) size;
	if ((size_t) (snap->n + 1) * sizeof(*snap->obj) > snap->bytes)
		return 1;        /* loaded since we counted: not needed to be exact */
	snap->obj[snap->n++] = (struct memq_object) { info->dlpi_addr, info->dlpi_name, info->dlpi_phdr,
		info->dlpi_phnum };
	return 0;
}

int memq_objects_take(struct memq_objects *snap)
{
	int count = 16;          /* room for objects loaded between the two passes */
	void *mem;

	dl_iterate_phdr(count_cb, &count);
	snap->n = 0;
	snap->bytes = (size_t) count * sizeof(*snap->obj);
	mem = mmap(NULL, snap->bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (mem == MAP_FAILED)
		return -1;
	snap->obj = mem;
	dl_iterate_phdr(fill_cb, snap);
	return 0;
}

void memq_objects_release(struct memq_objects *snap)
{
	munmap(snap->obj, snap->bytes);
	snap->obj = NULL;
	snap->n = 0;
}
