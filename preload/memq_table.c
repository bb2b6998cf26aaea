/*
 * Live allocation table: (pointer, key space) -> (size, memory kind), so that
 * a free or unregister event carries what it releases.
 *
 * Sharded open-addressing hash tables, one mutex per shard, so threads that
 * allocate concurrently rarely contend. Storage comes from mmap, never from
 * malloc: memq's own allocator wrappers would record our bookkeeping as the
 * application's heap traffic. Entries exist only for allocations made while
 * a session was enabled (inside capture windows or not: a window's snapshot
 * lists what was allocated before it), so without a session the table stays
 * empty and frees skip it after one atomic load (memq_table_live).
 *
 * Hashing: Fibonacci hashing, the slot taken from the HIGH bits of the
 * product. Allocations are aligned (device blocks to 2 MiB, large host blocks
 * to a page + 16): the low bits of the product are the key's low bits times
 * an odd constant, the same for every such key, and indexing with them piled
 * every entry of a shard onto one probe chain.
 *
 * Signal handlers: a wrapped call made by a signal handler that interrupted
 * this same thread inside the table would wait forever for a lock its own
 * thread holds. A thread marks itself (initial-exec TLS, no allocation)
 * before it takes a lock; a nested operation on a marked thread does not
 * lock: a put is dropped and a take finds nothing (the free then records
 * size 0, unknown), both counted in memq_table_dropped. Other threads' locks
 * are only ever held for a bounded time, so waiting for them is safe.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sys/mman.h>

#include "memq_core.h"

#define SHARD_BITS 6
#define SHARDS (1 << SHARD_BITS)
#define INITIAL_SLOTS 1024

enum { SLOT_EMPTY = 0, SLOT_FULL = 1, SLOT_TOMB = 2 };

struct slot {
	uint64_t ptr;
	uint64_t size;
	uint16_t api;            /* allocating function, for memq:live (0: not known) */
	int16_t device;
	uint8_t kind;
	uint8_t registered;      /* the key space: compared exactly */
	uint8_t state;
};

struct shard {
	pthread_mutex_t lock;
	struct slot *slots;
	size_t cap;              /* power of two, 0 before the first insert */
	unsigned shift;          /* 64 - log2(cap): the index is the hash's next bits */
	size_t full, tombs;
	uint32_t snap;           /* generation of the last window snapshot that listed this shard */
} __attribute__((aligned(64)));

static struct shard shards[SHARDS] = {
	[0 ... SHARDS - 1] = { .lock = PTHREAD_MUTEX_INITIALIZER },
};

/* Bit i set while shard i holds entries: one word frees can test, written
 * only when a shard empties or stops being empty (no cache line bouncing
 * between threads on every insert). */
unsigned long memq_table_live;
unsigned long memq_table_dropped;

/* Generation of the window whose snapshot is being written or is open; 0 when none. */
static uint32_t snap_gen;

/* Whether the snapshot of the window opening (or open) now has listed shard `s` already:
 * an untraced insert or take there is not in it, so its caller writes the event itself,
 * for that window (the generation returned; 0: no race). */
static inline int raced(const struct shard *s)
{
	return s->snap && s->snap == __atomic_load_n(&snap_gen, __ATOMIC_ACQUIRE) ? (int) s->snap : 0;
}

/* The shard this thread is inside (index + 1), -1 during fork, 0 outside. */
static __thread int inside __attribute__((tls_model("initial-exec")));
static int fork_inside;          /* `inside` of the forking thread (atfork handlers are serialised) */

static inline uint64_t hash_key(uint64_t ptr, uint8_t space)
{
	/* user-space pointers stay below 2^57: the space cannot alias a pointer bit */
	return (ptr ^ ((uint64_t) space << 56)) * 0x9E3779B97F4A7C15ull;
}

static struct shard *shard_of(uint64_t h)
{
	return &shards[h >> (64 - SHARD_BITS)];
}

/* Home slot: the bits right below the shard's. */
static inline size_t home(const struct shard *s, uint64_t h)
{
	return (size_t) ((h << SHARD_BITS) >> s->shift);
}

static struct slot *find(struct shard *s, uint64_t h, uint64_t ptr, uint8_t space)
{
	size_t mask = s->cap - 1;

	if (!s->cap)
		return NULL;
	for (size_t i = home(s, h);; i = (i + 1) & mask) {
		struct slot *sl = &s->slots[i];

		if (sl->state == SLOT_EMPTY)
			return NULL;
		if (sl->state == SLOT_FULL && sl->ptr == ptr && sl->registered == space)
			return sl;
	}
}

/* The first free slot (empty or tombstone) of h's probe chain. */
static struct slot *free_slot(struct shard *s, uint64_t h)
{
	size_t mask = s->cap - 1, i = home(s, h);

	while (s->slots[i].state == SLOT_FULL)
		i = (i + 1) & mask;
	return &s->slots[i];
}

/* Keep the load (full + tombstones) under 3/4; rehash drops tombstones. */
static int reserve(struct shard *s)
{
	struct shard grown = *s;

	if (s->cap && (s->full + s->tombs + 1) * 4 <= s->cap * 3)
		return 0;
	if (!grown.cap)
		grown.cap = INITIAL_SLOTS;
	else if ((s->full + 1) * 2 > s->cap)
		grown.cap *= 2;
	grown.shift = 64 - (unsigned) __builtin_ctzl(grown.cap);
	grown.slots = mmap(NULL, grown.cap * sizeof(struct slot), PROT_READ | PROT_WRITE,
		MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (grown.slots == MAP_FAILED)
		return -1;
	for (size_t i = 0; i < s->cap; i++)
		if (s->slots[i].state == SLOT_FULL)
			*free_slot(&grown, hash_key(s->slots[i].ptr, s->slots[i].registered)) = s->slots[i];
	if (s->slots)
		munmap(s->slots, s->cap * sizeof(struct slot));
	s->slots = grown.slots;
	s->cap = grown.cap;
	s->shift = grown.shift;
	s->tombs = 0;
	return 0;
}

/* Lock s for this thread; 0 when the thread is already inside the table. */
static int enter(struct shard *s)
{
	if (inside)
		return 0;
	inside = (int) (s - shards) + 1;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);   /* marked before locked */
	pthread_mutex_lock(&s->lock);
	return 1;
}

static void leave(struct shard *s)
{
	pthread_mutex_unlock(&s->lock);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);   /* unlocked before unmarked */
	inside = 0;
}

static void dropped(void)
{
	__atomic_add_fetch(&memq_table_dropped, 1, __ATOMIC_RELAXED);
}

int memq_table_insert(const struct memq_table_entry *e)
{
	uint8_t space = e->registered;
	uint64_t h = hash_key(e->ptr, space);
	struct shard *s = shard_of(h);
	struct slot *sl, entry = { .ptr = e->ptr, .size = e->size, .api = e->api, .device = e->device,
		.kind = e->kind, .registered = space, .state = SLOT_FULL };
	int late;

	if (!enter(s)) {
		dropped();
		return 0;
	}
	late = raced(s);
	sl = find(s, h, e->ptr, space);
	if (sl) {                        /* a free we never saw: replace */
		*sl = entry;
	} else if (reserve(s) == 0) {
		sl = free_slot(s, h);
		if (sl->state == SLOT_TOMB)
			s->tombs--;
		*sl = entry;
		if (s->full++ == 0)
			__atomic_or_fetch(&memq_table_live, 1ul << (s - shards), __ATOMIC_RELAXED);
	} else {
		dropped();                   /* out of memory */
	}
	leave(s);
	return late;
}

void memq_table_put(uint64_t ptr, int registered, uint64_t size, uint8_t kind)
{
	struct memq_table_entry e = { .ptr = ptr, .size = size, .device = -1, .kind = kind,
		.registered = (uint8_t) registered };

	memq_table_insert(&e);
}

int memq_table_take(uint64_t ptr, int registered, struct memq_alloc_info *out)
{
	uint8_t space = (uint8_t) registered;
	uint64_t h = hash_key(ptr, space);
	struct shard *s = shard_of(h);
	struct slot *sl;
	int found = 0;

	out->raced = 0;
	if (!enter(s)) {
		dropped();
		return 0;
	}
	sl = find(s, h, ptr, space);
	if (sl) {
		out->size = sl->size;
		out->kind = sl->kind;
		out->raced = raced(s);
		sl->state = SLOT_TOMB;
		s->tombs++;
		if (--s->full == 0)
			__atomic_and_fetch(&memq_table_live, ~(1ul << (s - shards)), __ATOMIC_RELAXED);
		found = 1;
	}
	leave(s);
	return found;
}

/*
 * A capture window opens (memq_window.c): every entry goes to `fn`, shard by
 * shard, under the shard's lock, so that an insert or take racing with the
 * snapshot is ordered against it: before (the snapshot sees its effect) or
 * after (raced() tells its untraced caller to write the event itself, which
 * then follows the snapshot's events in the trace). `fn` writes an event:
 * the thread is marked inside the table meanwhile, so a wrapper it reaches
 * (a heap block LTTng allocates) drops its put instead of waiting for the
 * lock this thread holds.
 */
void memq_table_snapshot(uint32_t gen, void (*fn)(const struct memq_table_entry *, void *), void *arg)
{
	__atomic_store_n(&snap_gen, gen, __ATOMIC_RELEASE);
	for (int i = 0; i < SHARDS; i++) {
		struct shard *s = &shards[i];

		if (!enter(s))             /* marked: a heap block LTTng allocates meanwhile is dropped, not a deadlock */
			continue;          /* (never: a snapshot is not taken from inside the table) */
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
		leave(s);
	}
}

/* The window closed: later inserts and takes race with no snapshot. */
void memq_table_snapshot_end(void)
{
	__atomic_store_n(&snap_gen, 0, __ATOMIC_RELEASE);
}

/*
 * fork() while another thread holds a shard lock would leave the child's
 * copy locked forever: hold every lock across fork (pthread_atfork). A fork
 * made by a signal handler that interrupted this thread inside shard k skips
 * k: this thread holds it, and finishes its operation in both processes once
 * the handler returns.
 */
void memq_table_fork_prepare(void)
{
	fork_inside = inside;
	inside = -1;
	for (int i = 0; i < SHARDS; i++)
		if (i + 1 != fork_inside)
			pthread_mutex_lock(&shards[i].lock);
}

void memq_table_fork_parent(void)
{
	for (int i = SHARDS - 1; i >= 0; i--)
		if (i + 1 != fork_inside)
			pthread_mutex_unlock(&shards[i].lock);
	inside = fork_inside;
}

void memq_table_fork_child(void)
{
	memq_table_fork_parent();
}
