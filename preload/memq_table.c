/*
 * Live allocation table: pointer -> (size, memory kind), so that a free or
 * unregister event carries what it releases.
 *
 * Sharded open-addressing hash tables, one mutex per shard, so threads that
 * allocate concurrently rarely contend. Storage comes from mmap, never from
 * malloc: the libc wrapper would record our bookkeeping as the
 * application's heap traffic. Entries exist only for allocations made while
 * a session was enabled (inside capture windows or not: a window's snapshot
 * lists what was allocated before it), so without a session the table stays
 * empty and frees skip it after one atomic load (memq_table_live).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sys/mman.h>

#include "memq_core.h"

#define SHARDS 64
#define INITIAL_SLOTS 1024

enum { SLOT_EMPTY = 0, SLOT_FULL = 1, SLOT_TOMB = 2 };

struct slot {
	uint64_t ptr;
	uint64_t size;
	uint16_t api;            /* allocating function, for memq:live (0: not known) */
	int16_t device;
	uint8_t kind;
	uint8_t registered;
	uint8_t state;
};

struct shard {
	pthread_mutex_t lock;
	struct slot *slots;
	size_t cap;              /* power of two, 0 before the first insert */
	size_t full, tombs;
	uint32_t snap;           /* generation of the last window snapshot that listed this shard */
} __attribute__((aligned(64)));

static struct shard shards[SHARDS] = {
	[0 ... SHARDS - 1] = { .lock = PTHREAD_MUTEX_INITIALIZER },
};

unsigned long memq_table_live;

/* Generation of the window whose snapshot is being written or is open; 0 when none. */
static uint32_t snap_gen;

/* Whether the snapshot of the window opening (or open) now has listed shard `s` already:
 * an untraced insert or take there is not in it, so its caller writes the event itself. */
static inline int raced(const struct shard *s)
{
	return s->snap && s->snap == __atomic_load_n(&snap_gen, __ATOMIC_ACQUIRE);
}

static inline uint64_t hash_ptr(uint64_t ptr, int registered)
{
	/* Allocations are aligned: drop the low bits before mixing. */
	return ((ptr >> 4) ^ (uint64_t) registered) * 0x9E3779B97F4A7C15ull;
}

static struct shard *shard_of(uint64_t h)
{
	return &shards[h >> 58];     /* top 6 bits: 64 shards */
}

static struct slot *find(struct shard *s, uint64_t h, uint64_t ptr, int registered)
{
	size_t mask = s->cap - 1;

	if (!s->cap)
		return NULL;
	for (size_t i = h & mask;; i = (i + 1) & mask) {
		struct slot *sl = &s->slots[i];

		if (sl->state == SLOT_EMPTY)
			return NULL;
		if (sl->state == SLOT_FULL && sl->ptr == ptr && sl->registered == registered)
			return sl;
	}
}

static void place(struct slot *slots, size_t cap, const struct slot *src)
{
	size_t mask = cap - 1;

	for (size_t i = hash_ptr(src->ptr, src->registered) & mask;; i = (i + 1) & mask) {
		if (slots[i].state != SLOT_FULL) {
			slots[i] = *src;
			slots[i].state = SLOT_FULL;
			return;
		}
	}
}

/* Keep the load (full + tombstones) under 3/4; rehash drops tombstones. */
static int reserve(struct shard *s)
{
	size_t cap = s->cap;
	struct slot *slots;

	if (cap && (s->full + s->tombs + 1) * 4 <= cap * 3)
		return 0;
	if (!cap)
		cap = INITIAL_SLOTS;
	else if ((s->full + 1) * 2 > cap)
		cap *= 2;
	slots = mmap(NULL, cap * sizeof(*slots), PROT_READ | PROT_WRITE,
		MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (slots == MAP_FAILED)
		return -1;
	for (size_t i = 0; i < s->cap; i++)
		if (s->slots[i].state == SLOT_FULL)
			place(slots, cap, &s->slots[i]);
	if (s->slots)
		munmap(s->slots, s->cap * sizeof(*slots));
	s->slots = slots;
	s->cap = cap;
	s->tombs = 0;
	return 0;
}

int memq_table_insert(const struct memq_table_entry *e)
{
	int registered = !!e->registered;
	uint64_t h = hash_ptr(e->ptr, registered);
	struct shard *s = shard_of(h);
	struct slot *sl, entry = { .ptr = e->ptr, .size = e->size, .api = e->api, .device = e->device,
		.kind = e->kind, .registered = registered };
	int late;

	pthread_mutex_lock(&s->lock);
	late = raced(s);
	sl = find(s, h, e->ptr, registered);
	if (sl) {                        /* a free we never saw: replace */
		entry.state = SLOT_FULL;
		*sl = entry;
	} else if (reserve(s) == 0) {
		size_t mask = s->cap - 1;

		for (size_t i = h & mask;; i = (i + 1) & mask) {
			if (s->slots[i].state != SLOT_FULL) {
				if (s->slots[i].state == SLOT_TOMB)
					s->tombs--;
				s->slots[i] = entry;
				s->slots[i].state = SLOT_FULL;
				break;
			}
		}
		s->full++;
		__atomic_add_fetch(&memq_table_live, 1, __ATOMIC_RELAXED);
	}
	pthread_mutex_unlock(&s->lock);
	return late;
}

void memq_table_put(uint64_t ptr, int registered, uint64_t size, uint8_t kind)
{
	struct memq_table_entry e = { .ptr = ptr, .size = size, .device = -1, .kind = kind,
		.registered = (uint8_t) !!registered };

	memq_table_insert(&e);
}

int memq_table_take(uint64_t ptr, int registered, struct memq_alloc_info *out)
{
	uint64_t h = hash_ptr(ptr, !!registered);
	struct shard *s = shard_of(h);
	struct slot *sl;
	int found = 0;

	pthread_mutex_lock(&s->lock);
	sl = find(s, h, ptr, !!registered);
	out->raced = 0;
	if (sl) {
		out->size = sl->size;
		out->kind = sl->kind;
		out->raced = (uint8_t) raced(s);
		sl->state = SLOT_TOMB;
		s->full--;
		s->tombs++;
		__atomic_sub_fetch(&memq_table_live, 1, __ATOMIC_RELAXED);
		found = 1;
	}
	pthread_mutex_unlock(&s->lock);
	return found;
}

/*
 * A capture window opens (memq_window.c): every entry goes to `fn`, shard by
 * shard, under the shard's lock, so that an insert or take racing with the
 * snapshot is ordered against it: before (the snapshot sees its effect) or
 * after (raced() tells its untraced caller to write the event itself, which
 * then follows the snapshot's events in the trace). `fn` writes an event:
 * it must not allocate through a path that takes a shard lock (the caller
 * holds the nesting guard, which keeps memq's own wrappers out).
 */
void memq_table_snapshot(uint32_t gen, void (*fn)(const struct memq_table_entry *, void *), void *arg)
{
	__atomic_store_n(&snap_gen, gen, __ATOMIC_RELEASE);
	for (int i = 0; i < SHARDS; i++) {
		struct shard *s = &shards[i];

		pthread_mutex_lock(&s->lock);
		s->snap = gen;
		for (size_t k = 0; k < s->cap; k++) {
			const struct slot *sl = &s->slots[k];
			struct memq_table_entry e;

			if (sl->state != SLOT_FULL)
				continue;
			e = (struct memq_table_entry) { .ptr = sl->ptr, .size = sl->size, .api = sl->api,
				.device = sl->device, .kind = sl->kind, .registered = sl->registered };
			fn(&e, arg);
		}
		pthread_mutex_unlock(&s->lock);
	}
}

/* The window closed: later inserts and takes race with no snapshot. */
void memq_table_snapshot_end(void)
{
	__atomic_store_n(&snap_gen, 0, __ATOMIC_RELEASE);
}

/*
 * fork() while another thread holds a shard lock would leave the child's
 * copy locked forever: hold every lock across fork (pthread_atfork).
 */
void memq_table_fork_prepare(void)
{
	for (int i = 0; i < SHARDS; i++)
		pthread_mutex_lock(&shards[i].lock);
}

void memq_table_fork_parent(void)
{
	for (int i = SHARDS - 1; i >= 0; i--)
		pthread_mutex_unlock(&shards[i].lock);
}

void memq_table_fork_child(void)
{
	memq_table_fork_parent();
}
