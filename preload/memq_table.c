/*
 * Live allocation table: pointer -> (size, memory kind), so that a free or
 * unregister event carries what it releases.
 *
 * Sharded open-addressing hash tables, one mutex per shard, so threads that
 * allocate concurrently rarely contend. Storage comes from mmap, never from
 * malloc: the libc wrapper would record our bookkeeping as the
 * application's heap traffic. Entries exist only for allocations made while
 * a session recorded them, so without a session the table stays empty and
 * frees skip it after one atomic load (memq_table_live).
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
	uint8_t kind;
	uint8_t registered;
	uint8_t state;
};

struct shard {
	pthread_mutex_t lock;
	struct slot *slots;
	size_t cap;              /* power of two, 0 before the first insert */
	size_t full, tombs;
} __attribute__((aligned(64)));

static struct shard shards[SHARDS] = {
	[0 ... SHARDS - 1] = { .lock = PTHREAD_MUTEX_INITIALIZER },
};

unsigned long memq_table_live;

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

void memq_table_put(uint64_t ptr, int registered, uint64_t size, uint8_t kind)
{
	uint64_t h = hash_ptr(ptr, registered);
	struct shard *s = shard_of(h);
	struct slot *sl, entry = { .ptr = ptr, .size = size, .kind = kind, .registered = !!registered };

	pthread_mutex_lock(&s->lock);
	sl = find(s, h, ptr, !!registered);
	if (sl) {                        /* a free we never saw: replace */
		sl->size = size;
		sl->kind = kind;
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
}

int memq_table_take(uint64_t ptr, int registered, struct memq_alloc_info *out)
{
	uint64_t h = hash_ptr(ptr, !!registered);
	struct shard *s = shard_of(h);
	struct slot *sl;
	int found = 0;

	pthread_mutex_lock(&s->lock);
	sl = find(s, h, ptr, !!registered);
	if (sl) {
		out->size = sl->size;
		out->kind = sl->kind;
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
