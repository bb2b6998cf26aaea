/*
 * Capture-window workloads (test only), on the fake HIP or CUDA runtime:
 *
 *   window_work profiler hip|cuda LOG
 *       Two profiler windows. Before the first: A and B allocated, a copy to A.
 *       Window 0 (hip/cudaProfilerStart .. Stop): a copy from A, a copy to B, A freed,
 *       C allocated. Between: a copy to C, C freed, D allocated. Window 1 (hip: the
 *       same calls; cuda: cuProfilerStart/Stop, the driver's): a copy to D, a copy
 *       from B. After: B and D freed.
 *   window_work steps hip|cuda N STEP_MS LOG
 *       L allocated first; then N steps of (X allocated, L -> X, X -> host, X freed,
 *       sleep STEP_MS); L freed at the end. For --delay/--duration windows.
 *   window_work race hip|cuda THREADS ITERS WINDOWS LOG
 *       THREADS threads loop (register a range of its own buffer, copy into it, unregister it), at
 *       least ITERS times and until the main thread has opened and closed WINDOWS profiler windows: table
 *       inserts and takes race with the windows' snapshots. (Registered ranges, not allocations: a
 *       runtime hands a freed address to another thread at once, which would race with the free's
 *       event, a different matter.) Logs one line per thread with its call count.
 *   window_work heap hip|cuda LOG
 *       The host heap around a profiler window, in a worker thread that touches nothing but the
 *       allocator (the main thread opens and closes the window; both log only at the end). Before
 *       the window: H (64 KiB, a tracked block) and 40 small blocks allocated, 10 of them freed.
 *       In it: H freed, 10 more of the small ones freed, 5 small ones and K (32 KiB) allocated.
 *       After it: 10 more small ones freed; the rest, the 5 and K stay live to the exit. Each block
 *       is logged as {"tid", "op", "phase": "before"|"in"|"after", "ptr", "usable"}.
 *   window_work straggler hip|cuda LOG
 *       A allocated, window 0 opened; a thread copies STRAGGLER_BYTES into A (run with
 *       FAKE_GPU_SLOW_COPY=12345: the copy takes 1.5 s) while the main thread closes window 0
 *       after 100 ms and opens window 1, copies 64 bytes into A, waits for the thread, closes
 *       window 1 and frees A. The thread logs {"straggler_end": ns} (CLOCK_MONOTONIC).
 *   window_work fork hip|cuda LOG
 *       A allocated, a window opened (profiler start), then fork(): the child copies from
 *       A, frees it and exits inside the window it inherited; the parent waits, copies to
 *       a host buffer from nothing tracked, and closes the window.
 *
 * Every runtime call is logged (worklog.h, the fields of its memq event); profiler
 * calls as {"profiler": NAME}; each step as {"step": i, "t0": ns, "t1": ns}, the
 * CLOCK_MONOTONIC span of its calls, so a test knows which steps a window holds.
 */
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include "worklog.h"

int hipMalloc(void **, size_t);
int hipFree(void *);
int hipMemcpy(void *, const void *, size_t, int);
int hipProfilerStart(void);
int hipProfilerStop(void);
int cudaMalloc(void **, size_t);
int cudaFree(void *);
int cudaMemcpy(void *, const void *, size_t, int);
int cudaProfilerStart(void);
int hipHostRegister(void *, size_t, unsigned);
int hipHostUnregister(void *);
int cudaHostRegister(void *, size_t, unsigned);
int cudaHostUnregister(void *);
int cudaProfilerStop(void);
int cuProfilerStart(void);
int cuProfilerStop(void);

/* One runtime's calls, and the names its events carry. */
struct runtime {
	int (*alloc)(void **, size_t);
	int (*release)(void *);
	int (*copy)(void *, const void *, size_t, int);
	int (*reg)(void *, size_t, unsigned), (*unreg)(void *);
	int (*start)(void), (*stop)(void);         /* window 0 */
	int (*start2)(void), (*stop2)(void);       /* window 1 */
	const char *alloc_name, *free_name, *copy_name, *start_name, *stop_name, *start2_name, *stop2_name;
};

static const struct runtime hip = {
	hipMalloc, hipFree, hipMemcpy, hipHostRegister, hipHostUnregister, hipProfilerStart, hipProfilerStop, hipProfilerStart, hipProfilerStop,
	"hipMalloc", "hipFree", "hipMemcpy", "hipProfilerStart", "hipProfilerStop", "hipProfilerStart",
	"hipProfilerStop",
};
static const struct runtime cuda = {
	cudaMalloc, cudaFree, cudaMemcpy, cudaHostRegister, cudaHostUnregister, cudaProfilerStart, cudaProfilerStop, cuProfilerStart, cuProfilerStop,
	"cudaMalloc", "cudaFree", "cudaMemcpy", "cudaProfilerStart", "cudaProfilerStop", "cuProfilerStart",
	"cuProfilerStop",
};

static const struct runtime *rt;
static unsigned char host[1 << 16];

static void *alloc(size_t n)
{
	void *p = NULL;
	int r = rt->alloc(&p, n);

	log_alloc("alloc", rt->alloc_name, p, n, 4, 0, 0, 0, 0, 0, r);
	return p;
}

static void release(void *p, size_t n)
{
	int r = rt->release(p);

	log_free("free", rt->free_name, p, n, 4, 0, 0, r);
}

static void copy(void *dst, const void *src, size_t n, int kind)
{
	int r = rt->copy(dst, src, n, kind);

	log_copy(rt->copy_name, dst, src, n, kind, 0, -1, 0, 0, 0, 0, 0, r);
}

static void profiler(int (*fn)(void), const char *name)
{
	int r = fn();

	fprintf(worklog, "{\"pid\": %d, \"profiler\": \"%s\", \"result\": %d}\n", (int) getpid(), name, r);
	fflush(worklog);
}

static int profiler_windows(void)
{
	void *a = alloc(4096), *b = alloc(8192), *c, *d;

	copy(a, host, 4096, 1);
	profiler(rt->start, rt->start_name);
	copy(host, a, 4096, 2);
	copy(b, host, 4096, 1);
	release(a, 4096);
	c = alloc(1024);
	profiler(rt->stop, rt->stop_name);
	copy(c, host, 1024, 1);
	release(c, 1024);
	d = alloc(2048);
	profiler(rt->start2, rt->start2_name);
	copy(d, host, 2048, 1);
	copy(host, b, 8192, 2);
	profiler(rt->stop2, rt->stop2_name);
	release(b, 8192);
	release(d, 2048);
	return 0;
}

static int forked_window(void)
{
	void *a = alloc(4096);
	int status;
	pid_t child;

	profiler(rt->start, rt->start_name);
	fflush(worklog);
	child = fork();
	if (child == 0) {
		copy(host, a, 4096, 2);
		release(a, 4096);
		exit(0);
	}
	waitpid(child, &status, 0);
	copy(host + 8192, host, 64, 0);
	profiler(rt->stop, rt->stop_name);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

/* heap: the worker's blocks, logged by the main thread once the worker is done */
#define HEAP_SMALL 40
static struct heap_row {
	const char *op, *phase;
	void *ptr;
	size_t usable;
} heap_rows[2 * HEAP_SMALL + 16];
static int heap_nrows, heap_tid;
static pthread_barrier_t heap_step;

static void heap_note(const char *op, const char *phase, void *p)
{
	heap_rows[heap_nrows++] = (struct heap_row) { op, phase, p, malloc_usable_size(p) };
}

static void heap_free(const char *phase, void *p)
{
	heap_note("free", phase, p);
	free(p);
}

static void *heap_thread(void *arg)
{
	void *small[HEAP_SMALL], *fresh[5], *h = malloc(65536), *k;

	(void) arg;
	heap_tid = gettid();
	heap_note("alloc", "before", h);
	for (int i = 0; i < HEAP_SMALL; i++)
		heap_note("alloc", "before", small[i] = malloc(24 + 97 * (size_t) i));  /* usable < 4 KiB */
	for (int i = 0; i < 10; i++)
		heap_free("before", small[i]);
	pthread_barrier_wait(&heap_step);           /* main: window open */
	pthread_barrier_wait(&heap_step);
	heap_free("in", h);
	for (int i = 10; i < 20; i++)
		heap_free("in", small[i]);
	for (int i = 0; i < 5; i++)
		heap_note("alloc", "in", fresh[i] = malloc(100));
	heap_note("alloc", "in", k = malloc(32768));
	pthread_barrier_wait(&heap_step);           /* main: window closed */
	pthread_barrier_wait(&heap_step);
	for (int i = 20; i < 30; i++)
		heap_free("after", small[i]);
	return k;                                   /* the rest stays live */
}

static int heap_window(void)
{
	pthread_t worker;

	pthread_barrier_init(&heap_step, NULL, 2);
	if (pthread_create(&worker, NULL, heap_thread, NULL))
		return 1;
	pthread_barrier_wait(&heap_step);
	rt->start();
	pthread_barrier_wait(&heap_step);
	pthread_barrier_wait(&heap_step);
	rt->stop();
	pthread_barrier_wait(&heap_step);
	pthread_join(worker, NULL);
	for (int i = 0; i < heap_nrows; i++)
		fprintf(worklog, "{\"pid\": %d, \"tid\": %d, \"op\": \"%s\", \"phase\": \"%s\", \"ptr\": %llu, "
			"\"usable\": %zu}\n", (int) getpid(), heap_tid, heap_rows[i].op, heap_rows[i].phase,
			P(heap_rows[i].ptr), heap_rows[i].usable);
	fflush(worklog);
	return 0;
}

#define STRAGGLER_BYTES 12345

static uint64_t now_ns(void);

static void *straggler_thread(void *a)
{
	copy(a, host, STRAGGLER_BYTES, 1);
	fprintf(worklog, "{\"pid\": %d, \"straggler_end\": %llu}\n", (int) getpid(), (unsigned long long) now_ns());
	return NULL;
}

static int straggler(void)
{
	struct timespec pause = { .tv_sec = 0, .tv_nsec = 100000000 };
	void *a = alloc(1 << 16);
	pthread_t slow;

	profiler(rt->start, rt->start_name);
	if (pthread_create(&slow, NULL, straggler_thread, a))
		return 1;
	nanosleep(&pause, NULL);
	profiler(rt->stop, rt->stop_name);
	profiler(rt->start, rt->start_name);
	copy(a, host, 64, 1);
	pthread_join(slow, NULL);
	profiler(rt->stop, rt->stop_name);
	release(a, 1 << 16);
	return 0;
}

static long race_iters;
static int race_done;        /* atomic: the windows are over */

static void *race_thread(void *arg)
{
	static unsigned char arena[64][16][256];
	unsigned char (*mine)[256] = arena[(long) arg];
	unsigned char buf[64] = { 0 };
	long calls = 0;

	for (long i = 0; i < race_iters || !__atomic_load_n(&race_done, __ATOMIC_ACQUIRE); i++) {
		void *p = mine[i % 16];

		if (rt->reg(p, 256, 0) || rt->copy(p, buf, sizeof(buf), 0) || rt->unreg(p))
			return (void *) -1L;
		calls += 3;
	}
	return (void *) calls;
}

static int race(int threads, long iters, int windows)
{
	struct timespec pause = { .tv_sec = 0, .tv_nsec = 2000000 };
	pthread_t tid[64];
	int failed = 0;

	if (threads > 64)
		return 2;
	race_iters = iters;
	for (long t = 0; t < threads; t++)
		pthread_create(&tid[t], NULL, race_thread, (void *) t);
	for (int w = 0; w < windows; w++) {
		nanosleep(&pause, NULL);
		rt->start();
		nanosleep(&pause, NULL);
		rt->stop();
	}
	__atomic_store_n(&race_done, 1, __ATOMIC_RELEASE);
	for (int t = 0; t < threads; t++) {
		void *ret;

		pthread_join(tid[t], &ret);
		failed |= ret == (void *) -1L;
		fprintf(worklog, "{\"pid\": %d, \"thread\": %d, \"calls\": %ld}\n", (int) getpid(), t, (long) ret);
	}
	fflush(worklog);
	return failed;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec;
}

static int steps(long n, long step_ms)
{
	void *l = alloc(32768);
	struct timespec pause = { .tv_sec = step_ms / 1000, .tv_nsec = (step_ms % 1000) * 1000000L };

	copy(l, host, 32768, 1);
	for (long i = 0; i < n; i++) {
		uint64_t t0 = now_ns(), t1;
		void *x = alloc(4096);

		copy(x, l, 4096, 3);
		copy(host, x, 4096, 2);
		release(x, 4096);
		t1 = now_ns();
		fprintf(worklog, "{\"pid\": %d, \"step\": %ld, \"t0\": %llu, \"t1\": %llu}\n", (int) getpid(), i,
			(unsigned long long) t0, (unsigned long long) t1);
		fflush(worklog);
		nanosleep(&pause, NULL);
	}
	release(l, 32768);
	return 0;
}

int main(int argc, char **argv)
{
	const char *log = argv[argc - 1];

	if (argc >= 4)
		rt = !strcmp(argv[2], "hip") ? &hip : !strcmp(argv[2], "cuda") ? &cuda : NULL;
	if (!rt || !(worklog = fopen(log, "a"))) {
		fprintf(stderr, "usage: window_work profiler|fork|heap|straggler hip|cuda LOG | steps hip|cuda N STEP_MS LOG | race hip|cuda T N W LOG\n");
		return 2;
	}
	if (argc == 4 && !strcmp(argv[1], "profiler"))
		return profiler_windows();
	if (argc == 4 && !strcmp(argv[1], "fork"))
		return forked_window();
	if (argc == 4 && !strcmp(argv[1], "heap"))
		return heap_window();
	if (argc == 4 && !strcmp(argv[1], "straggler"))
		return straggler();
	if (argc == 7 && !strcmp(argv[1], "race"))
		return race(atoi(argv[3]), atol(argv[4]), atoi(argv[5]));
	if (argc == 6 && !strcmp(argv[1], "steps"))
		return steps(atol(argv[3]), atol(argv[4]));
	fprintf(stderr, "usage: window_work profiler|fork|heap|straggler hip|cuda LOG | steps hip|cuda N STEP_MS LOG | race hip|cuda T N W LOG\n");
	return 2;
}
