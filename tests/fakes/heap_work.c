/*
 * Host heap workload (test only) for memq's heap wrappers (preload/memq_heap.c):
 *   heap_work edges MIN LOG          one thread: every allocator around the threshold MIN, realloc
 *                                    crossing it both ways and in place, free(NULL), failures, errno
 *   heap_work threads N ITERS LOG    N threads x ITERS allocations of sizes on both sides of 4096
 *   heap_work idle LOG               a thread counts small blocks, then waits while the process exits
 *   heap_work fork LOG               the child frees what the parent allocated, allocates its own
 *
 * What happened goes to LOG as JSON lines, written by the main thread at the end (the
 * worker threads touch nothing but the allocator, so a worker's recorded totals must be
 * exactly its own): {"tid", "op": "alloc"|"free", "api", "ptr", "usable", "requested"} per
 * block in call order, {"tid", "check", "ok"} per errno/behaviour check.
 */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* The log names blocks realloc has released (by address), and keeps using blocks a failed
 * realloc left to the caller: both legitimate, both what this warning flags. */
#pragma GCC diagnostic ignored "-Wuse-after-free"

#define MAX_ROWS 200000

struct row {
	int tid;
	const char *op, *api, *check;
	uint64_t ptr, usable, requested;
	int ok;
};

static struct row rows[MAX_ROWS];
static int nrows;
static pthread_mutex_t rows_lock = PTHREAD_MUTEX_INITIALIZER;

static void note(const char *op, const char *api, void *p, uint64_t usable, uint64_t requested)
{
	pthread_mutex_lock(&rows_lock);
	if (nrows < MAX_ROWS)
		rows[nrows++] = (struct row) { gettid(), op, api, NULL, (uint64_t) (uintptr_t) p, usable, requested, 0 };
	pthread_mutex_unlock(&rows_lock);
}

static void check(const char *what, int ok)
{
	pthread_mutex_lock(&rows_lock);
	if (nrows < MAX_ROWS)
		rows[nrows++] = (struct row) { gettid(), NULL, NULL, what, 0, 0, 0, ok };
	pthread_mutex_unlock(&rows_lock);
}

static int write_log(const char *path)
{
	FILE *f = fopen(path, "w");

	if (!f)
		return 2;
	for (int i = 0; i < nrows; i++) {
		struct row *r = &rows[i];

		if (r->check)
			fprintf(f, "{\"tid\": %d, \"check\": \"%s\", \"ok\": %d}\n", r->tid, r->check, r->ok);
		else
			fprintf(f, "{\"tid\": %d, \"op\": \"%s\", \"api\": \"%s\", \"ptr\": %llu, \"usable\": %llu, "
				"\"requested\": %llu}\n", r->tid, r->op, r->api, (unsigned long long) r->ptr,
				(unsigned long long) r->usable, (unsigned long long) r->requested);
	}
	return fclose(f) ? 2 : 0;
}

/* Each allocation is noted with the size malloc_usable_size gives (what memq decides by). */
static void *got(const char *api, void *p, uint64_t requested)
{
	if (p)
		note("alloc", api, p, malloc_usable_size(p), requested);
	return p;
}

static void release(void *p)
{
	if (p)
		note("free", "free", p, malloc_usable_size(p), 0);
	free(p);
}

/* realloc as memq records it: the old block freed, the new one allocated (in place too). */
static void *moved(void *old, size_t n, void *(*fn)(void *, size_t, size_t))
{
	uint64_t old_usable = old ? malloc_usable_size(old) : 0;
	uintptr_t old_ptr = (uintptr_t) old;
	void *q = fn(old, n, 1);

	if (!q && old_ptr && n)
		return NULL;                            /* failed: nothing changed */
	if (old_ptr)
		note("free", "realloc", (void *) old_ptr, old_usable, 0);
	return got("realloc", q, n);
}

/* Sizes no allocator can serve, hidden from the compiler's own checks. */
static volatile size_t huge = SIZE_MAX - 4096, half = SIZE_MAX / 2;
/* realloc(NULL, n) the compiler would turn into malloc(n) */
static void *volatile none;

static void *plain_realloc(void *p, size_t n, size_t one) { (void) one; return realloc(p, n); }
static void *array_realloc(void *p, size_t n, size_t one) { return reallocarray(p, n, one); }

/* A request size whose block has this usable size, searched upwards (glibc: 16k+8). */
static size_t request_for(size_t usable)
{
	for (size_t n = usable > 64 ? usable - 64 : 1; n < usable + 64; n++) {
		void *p = malloc(n);
		size_t u = malloc_usable_size(p);

		free(p);
		if (u == usable)
			return n;
	}
	return 0;
}

static size_t threshold, at_req;             /* at_req: found by main, whose heap is not compared */

static void *edges(void *arg)
{
	size_t sizes[4];
	void *keep[64];
	int nkeep = 0, rc;

	(void) arg;
	check("a block has exactly the threshold's usable size", at_req != 0);
	sizes[0] = threshold - 16;                  /* just below (usable threshold - 16 or - 8) */
	sizes[1] = at_req;                          /* usable == threshold */
	sizes[2] = threshold + 1;                   /* just above */
	sizes[3] = 100;                             /* far below (aligned allocators add to the request) */
	for (int i = 0; i < 4; i++) {
		size_t n = sizes[i];
		void *p = NULL;

		keep[nkeep++] = got("malloc", malloc(n), n);
		keep[nkeep++] = got("calloc", calloc(1, n), n);
		keep[nkeep++] = got("memalign", memalign(64, n), n);
		rc = posix_memalign(&p, 256, n);
		keep[nkeep++] = rc == 0 ? got("posix_memalign", p, n) : NULL;
		keep[nkeep++] = got("aligned_alloc", aligned_alloc(128, (n + 127) / 128 * 128), (n + 127) / 128 * 128);
		keep[nkeep++] = got("valloc", valloc(n), n);
		keep[nkeep++] = got("pvalloc", pvalloc(n), n);
		keep[nkeep++] = got("realloc", realloc(none, n), n);
		keep[nkeep++] = got("realloc", reallocarray(none, n, 1), n);
	}
	for (int i = 0; i < nkeep; i++)
		release(keep[i]);

	/* realloc across the threshold, both ways, and in place */
	{
		void *p = got("malloc", malloc(100), 100);

		p = moved(p, threshold * 2, plain_realloc);        /* small -> big */
		p = moved(p, threshold * 2 - 64, plain_realloc);   /* big -> big, shrinks in place */
		check("realloc shrinking in place keeps the address",
			rows[nrows - 1].ptr == rows[nrows - 2].ptr);
		p = moved(p, 200, array_realloc);                  /* big -> small (reallocarray) */
		p = moved(p, 150, plain_realloc);                  /* small -> small */
		{
			void *big = got("malloc", malloc(threshold * 4), threshold * 4);
			void *grown;

			/* growing: in place when free space follows it (the test sees which) */
			grown = moved(big, threshold * 4 + 4096, plain_realloc);
			release(grown);
		}
		moved(p, 0, plain_realloc);                        /* realloc(p, 0) frees */
	}

	/* failures change nothing */
	{
		void *p = got("malloc", malloc(threshold * 3), threshold * 3);
		uint64_t usable = malloc_usable_size(p);

		errno = 0;
		check("malloc(huge) fails with ENOMEM", malloc(huge) == NULL && errno == ENOMEM);
		errno = 0;
		check("calloc overflow fails with ENOMEM", calloc(half, 3) == NULL && errno == ENOMEM);
		errno = 0;
		check("reallocarray overflow fails with ENOMEM", reallocarray(p, half, 3) == NULL && errno == ENOMEM);
		errno = 0;
		check("realloc(p, huge) fails and keeps p", realloc(p, huge) == NULL && errno == ENOMEM
			&& malloc_usable_size(p) == usable);
		/* memq records the failed realloc as p freed and allocated again (its free goes out first) */
		note("free", "realloc", p, usable, 0);
		note("alloc", "realloc", p, usable, usable);
		release(p);
	}

	/* free(NULL) does nothing; errno is left alone */
	{
		void *p;

		free(NULL);
		errno = 777;
		p = malloc(threshold * 2);
		check("malloc keeps errno", errno == 777);
		note("alloc", "malloc", p, malloc_usable_size(p), threshold * 2);
		errno = 777;
		note("free", "free", p, malloc_usable_size(p), 0);
		free(p);
		check("free keeps errno (block above the threshold)", errno == 777);
		p = malloc(8);
		note("alloc", "malloc", p, malloc_usable_size(p), 8);
		errno = 778;
		note("free", "free", p, malloc_usable_size(p), 0);
		free(p);
		check("free keeps errno (block below the threshold)", errno == 778);
		errno = 779;
		rc = posix_memalign(&p, 64, threshold * 2);
		check("posix_memalign keeps errno", rc == 0 && errno == 779);
		got("posix_memalign", p, threshold * 2);
		release(p);
		errno = 780;
		rc = posix_memalign(&p, 3, 100);
		check("posix_memalign(alignment 3) returns EINVAL, keeps errno", rc == EINVAL && errno == 780);
	}
	return NULL;
}

/* Sizes on both sides of 4096, some blocks kept to the thread's end (freed by main). */
static long iters;
static void *kept[256];

/* What a worker did, by memq's threshold (4096, the default). */
struct tally { uint64_t small_n, small_b, small_fn, small_fb, big, big_free; };

static void tally_free(struct tally *c, void *p)
{
	uint64_t u = malloc_usable_size(p);

	if (u >= 4096)
		c->big_free++;
	else
		c->small_fn++, c->small_fb += u;
	free(p);
}

static void *threads_worker(void *arg)
{
	long t = (long) arg;
	void *live[16] = { 0 };
	struct tally c = { 0 };

	for (long i = 0; i < iters; i++) {
		size_t n = (i % 10 == 0) ? 4096 + (size_t) ((t * 977 + i) % 60000) : 16 + (size_t) ((t * 131 + i) % 3000);
		int slot = (int) (i % 16);
		void *p;

		if (live[slot])
			tally_free(&c, live[slot]);
		p = malloc(n);
		if (!p)
			return (void *) 1;
		memset(p, (int) i, n < 64 ? n : 64);
		if (malloc_usable_size(p) >= 4096)
			c.big++;
		else
			c.small_n++, c.small_b += malloc_usable_size(p);
		live[slot] = p;
	}
	for (int s = 1; s < 16; s++)               /* slot 0 outlives the thread */
		tally_free(&c, live[s]);
	kept[t] = live[0];
	pthread_mutex_lock(&rows_lock);
	rows[nrows++] = (struct row) { gettid(), "totals", "small", NULL, c.small_n, c.small_b, c.small_fn, 0 };
	rows[nrows++] = (struct row) { gettid(), "totals", "small_freed_bytes", NULL, c.small_fb, 0, 0, 0 };
	rows[nrows++] = (struct row) { gettid(), "totals", "big", NULL, c.big, c.big_free, 0, 0 };
	pthread_mutex_unlock(&rows_lock);
	return NULL;
}

static int run_threads(int n)
{
	pthread_t tid[256];

	if (n > 256)
		return 2;
	for (long t = 0; t < n; t++)
		pthread_create(&tid[t], NULL, threads_worker, (void *) t);
	for (int t = 0; t < n; t++) {
		void *ret;

		pthread_join(tid[t], &ret);
		if (ret)
			return 1;
	}
	for (int t = 0; t < n; t++)
		free(kept[t]);
	return 0;
}

/* A thread counts small blocks, then sleeps: only the process exit writes its counts. */
static pthread_mutex_t idle_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t idle_cond = PTHREAD_COND_INITIALIZER;
static int idle_ready;

static void *idle_worker(void *arg)
{
	void *p[10];

	(void) arg;
	for (int i = 0; i < 10; i++)
		p[i] = got("malloc", malloc(100 + i), 100 + i);
	for (int i = 0; i < 5; i++)
		release(p[i]);
	pthread_mutex_lock(&idle_lock);
	idle_ready = 1;
	pthread_cond_signal(&idle_cond);
	pthread_mutex_unlock(&idle_lock);
	for (;;)
		pause();
	return NULL;
}

static int run_idle(const char *path)
{
	pthread_t t;

	pthread_create(&t, NULL, idle_worker, NULL);
	pthread_mutex_lock(&idle_lock);
	while (!idle_ready)
		pthread_cond_wait(&idle_cond, &idle_lock);
	pthread_mutex_unlock(&idle_lock);
	exit(write_log(path));                      /* the worker still sleeps */
}

/* The child frees what the parent allocated before fork, and allocates its own. */
static int run_fork(const char *path)
{
	void *small[100], *big = malloc(100000);
	int status, fd[2];
	pid_t child;

	for (int i = 0; i < 100; i++)
		small[i] = malloc(200);
	if (pipe(fd))
		return 2;
	child = fork();
	if (child == 0) {
		char line[128];
		int len;

		for (int i = 0; i < 100; i++)
			free(small[i]);
		free(big);
		for (int i = 0; i < 50; i++)
			small[i] = malloc(300);
		big = malloc(200000);
		len = snprintf(line, sizeof(line), "{\"child\": %d, \"big\": %llu}\n", (int) getpid(),
			(unsigned long long) (uintptr_t) big);
		if (write(fd[1], line, (size_t) len) != len)
			_exit(3);
		exit(0);
	}
	close(fd[1]);
	waitpid(child, &status, 0);
	{
		char buf[256] = "";
		ssize_t n = read(fd[0], buf, sizeof(buf) - 1);
		FILE *f = fopen(path, "w");

		if (!f || n <= 0)
			return 2;
		fprintf(f, "{\"parent\": %d, \"big\": %llu}\n%s", (int) getpid(),
			(unsigned long long) (uintptr_t) big, buf);
		fclose(f);
	}
	return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

int main(int argc, char **argv)
{
	if (argc == 4 && !strcmp(argv[1], "edges")) {
		pthread_t t;

		threshold = (size_t) strtoull(argv[2], NULL, 10);
		at_req = request_for(threshold);
		pthread_create(&t, NULL, edges, NULL);
		pthread_join(t, NULL);
		return write_log(argv[3]);
	}
	if (argc == 5 && !strcmp(argv[1], "threads")) {
		int r;

		iters = atol(argv[3]);
		r = run_threads(atoi(argv[2]));
		return r ? r : write_log(argv[4]);
	}
	if (argc == 3 && !strcmp(argv[1], "idle"))
		return run_idle(argv[2]);
	if (argc == 3 && !strcmp(argv[1], "fork"))
		return run_fork(argv[2]);
	fprintf(stderr, "usage: heap_work edges MIN LOG | threads N ITERS LOG | idle LOG | fork LOG\n");
	return 2;
}
