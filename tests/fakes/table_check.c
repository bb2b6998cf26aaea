/*
 * The preload library's allocation table (preload/memq_table.c), compiled
 * into this test program so its internals can be inspected:
 *   table_check spaces             key spaces are exact; replace, take, emptiness
 *   table_check spread N STRIDE    N keys STRIDE bytes apart: prints the mean and
 *                                  worst distance of an entry from its home slot
 *   table_check signal             a signal handler interrupting this thread inside
 *                                  the table uses it too: no deadlock, nothing corrupted
 *   table_check threads T N        T threads x N put/take pairs, checked
 * Exit 0 when every check holds; failures are printed.
 */
#undef _GNU_SOURCE               /* memq_table.c defines it (the fakes' flags do too) */
#include "memq_table.c"

#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int failures;

#define CHECK(cond, ...)                                                     \
	do {                                                                 \
		if (!(cond)) {                                               \
			fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
			fprintf(stderr, __VA_ARGS__);                        \
			fputc('\n', stderr);                                 \
			failures++;                                          \
		}                                                            \
	} while (0)

static uint64_t taken_size(uint64_t ptr, int space)
{
	struct memq_alloc_info info = { 0 };

	return memq_table_take(ptr, space, &info) ? info.size : 0;
}

static void spaces(void)
{
	uint64_t p = 0x7f0000200000ull;

	memq_table_put(p, 0, 100, MEMQ_MEM_DEVICE);
	memq_table_put(p, 1, 200, MEMQ_MEM_REGISTERED);
	memq_table_put(p, 2, 300, MEMQ_MEM_HOST);
	memq_table_put(p, 255, 400, MEMQ_MEM_HOST);
	memq_table_put(p, 2, 301, MEMQ_MEM_HOST);      /* replaces: a free never seen */
	CHECK(memq_table_live != 0, "table empty after puts");
	CHECK(taken_size(p, 2) == 301, "space 2");
	CHECK(taken_size(p, 2) == 0, "space 2 taken twice");
	CHECK(taken_size(p, 255) == 400, "space 255");
	CHECK(taken_size(p, 1) == 200, "space 1");
	CHECK(taken_size(p, 0) == 100, "space 0");
	CHECK(memq_table_live == 0, "table not empty after takes: %#lx", memq_table_live);
	CHECK(memq_table_dropped == 0, "dropped %lu", memq_table_dropped);
}

/* Mean and worst distance of the entries from their home slot. */
static void spread(long n, uint64_t stride)
{
	uint64_t base = 0x7f0000000000ull, total = 0, worst = 0, count = 0;

	for (long i = 0; i < n; i++)
		memq_table_put(base + (uint64_t) i * stride, 0, 64, MEMQ_MEM_DEVICE);
	for (int k = 0; k < SHARDS; k++) {
		struct shard *s = &shards[k];

		for (size_t i = 0; i < s->cap; i++) {
			const struct slot *sl = &s->slots[i];
			size_t d;

			if (sl->state != SLOT_FULL)
				continue;
			d = (i - home(s, hash_key(sl->ptr, sl->registered))) & (s->cap - 1);
			total += d;
			worst = d > worst ? d : worst;
			count++;
		}
	}
	CHECK(count == (uint64_t) n, "%llu entries of %ld", (unsigned long long) count, n);
	printf("mean %.3f worst %llu\n", (double) total / (double) count, (unsigned long long) worst);
}

/* ---- a signal arriving while this thread holds a shard lock ---- */

static int (*real_lock)(pthread_mutex_t *);
static volatile int arm, handled, handler_found;
static const uint64_t existing = 0x5000, fresh = 0x6000;

/* The table's own lock calls land here (this program defines the symbol). */
int pthread_mutex_lock(pthread_mutex_t *m)
{
	int r;

	if (!real_lock)
		real_lock = (int (*)(pthread_mutex_t *)) dlsym(RTLD_NEXT, "pthread_mutex_lock");
	r = real_lock(m);
	if (arm && (void *) m >= (void *) shards && (void *) m < (void *) (shards + SHARDS)) {
		arm = 0;
		raise(SIGUSR1);          /* delivered now, inside the critical section */
	}
	return r;
}

static void on_signal(int sig)
{
	struct memq_alloc_info info = { 0 };

	(void) sig;
	handler_found = memq_table_take(existing, 0, &info);
	memq_table_put(fresh, 0, 7, MEMQ_MEM_HOST);
	handled = 1;
}

static void interrupted(void)
{
	signal(SIGUSR1, on_signal);
	alarm(20);                   /* a deadlock ends the program with SIGALRM */
	memq_table_put(existing, 0, 1234, MEMQ_MEM_DEVICE);
	arm = 1;
	memq_table_put(0x7000, 0, 99, MEMQ_MEM_DEVICE);
	alarm(0);
	CHECK(handled, "the signal handler did not run");
	CHECK(!handler_found, "the nested take found an entry");
	CHECK(memq_table_dropped == 2, "dropped %lu, expected 2", memq_table_dropped);
	CHECK(taken_size(existing, 0) == 1234, "entry lost");
	CHECK(taken_size(0x7000, 0) == 99, "interrupted put lost");
	CHECK(taken_size(fresh, 0) == 0, "the nested put was recorded");
}

/* ---- threads ---- */

static long per_thread;

static void *worker(void *arg)
{
	uint64_t base = 0x100000000ull * (uint64_t) (1 + (long) arg);
	long bad = 0;

	for (long i = 0; i < per_thread; i++) {
		uint64_t p = base + (uint64_t) (i % 5000) * 4096;

		memq_table_put(p, 0, (uint64_t) i, MEMQ_MEM_HOST);
		if (i % 3 == 0)
			bad += taken_size(p, 0) != (uint64_t) i;
	}
	for (long i = 0; i < 5000; i++)
		taken_size(base + (uint64_t) i * 4096, 0);
	return (void *) bad;
}

static void threads(int n)
{
	pthread_t tid[64];

	for (long t = 0; t < n && t < 64; t++)
		pthread_create(&tid[t], NULL, worker, (void *) t);
	for (int t = 0; t < n && t < 64; t++) {
		void *bad;

		pthread_join(tid[t], &bad);
		CHECK(bad == NULL, "thread %d: %ld wrong sizes", t, (long) bad);
	}
	CHECK(memq_table_live == 0, "table not empty: %#lx", memq_table_live);
}

int main(int argc, char **argv)
{
	if (argc == 2 && !strcmp(argv[1], "spaces"))
		spaces();
	else if (argc == 4 && !strcmp(argv[1], "spread"))
		spread(atol(argv[2]), strtoull(argv[3], NULL, 0));
	else if (argc == 2 && !strcmp(argv[1], "signal"))
		interrupted();
	else if (argc == 4 && !strcmp(argv[1], "threads")) {
		per_thread = atol(argv[3]);
		threads(atoi(argv[2]));
	} else {
		fprintf(stderr, "usage: table_check spaces | spread N STRIDE | signal | threads T N\n");
		return 2;
	}
	return failures ? 1 : 0;
}
