/*
 * Workload driver (test only), linked against the fake runtimes:
 *   workload hip LOG | cuda LOG        every wrapped call, logged (hip_work.c, cuda_work.c)
 *   workload stress THREADS ITERS      THREADS threads x ITERS x 4 HIP calls; prints a checksum
 *                                      (and its pid on stderr)
 *   workload fork LOG                  a child (fork, no exec) makes calls under its own pid
 *   workload crash LOG                 some calls, then abort()
 *   workload wait LOG                  one call, "ready" on stdout, then waits for SIGINT/SIGTERM;
 *                                      on it: one more call, exit 42
 */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "worklog.h"

int memq_hip_workload(const char *log_path);
int memq_cuda_workload(const char *log_path);
int hipMalloc(void **, size_t);
int hipFree(void *);
int hipMemset(void *, int, size_t);
int hipMemcpy(void *, const void *, size_t, int);

static long iters;

static void *stress_thread(void *arg)
{
	unsigned char host[256];
	unsigned long sum = 0;
	long t = (long) arg;

	for (long i = 0; i < iters; i++) {
		void *d = NULL;
		size_t n = 64 + (size_t) ((t * 131 + i) % 192);

		if (hipMalloc(&d, n) || hipMemset(d, (int) ((t + i) & 0xff), n)
		    || hipMemcpy(host, d, n, 2) || hipFree(d))
			return (void *) -1L;
		for (size_t k = 0; k < n; k++)
			sum += host[k];
	}
	return (void *) sum;
}

static int stress(int threads)
{
	pthread_t tid[256];
	unsigned long total = 0;

	if (threads > 256)
		return 2;
	fprintf(stderr, "pid %d\n", (int) getpid());
	for (long t = 0; t < threads; t++)
		pthread_create(&tid[t], NULL, stress_thread, (void *) t);
	for (int t = 0; t < threads; t++) {
		void *ret;

		pthread_join(tid[t], &ret);
		if (ret == (void *) -1L)
			return 1;
		total += (unsigned long) ret;
	}
	printf("calls %ld\nchecksum %lu\n", (long) threads * iters * 4, total);
	return 0;
}

static int with_log(const char *path)
{
	worklog = fopen(path, "a");
	return worklog ? 0 : 2;
}

/* Each process logs its own calls; the child frees what the parent allocated. */
static int forking(const char *path)
{
	void *shared = NULL, *own = NULL;
	char host[100];
	int status, r;
	pid_t child;

	if (with_log(path))
		return 2;
	r = hipMalloc(&shared, 12345);
	log_alloc("alloc", "hipMalloc", shared, 12345, 4, 0, 0, 0, 0, 0, r);
	fflush(worklog);
	child = fork();
	if (child == 0) {
		r = hipMemcpy(host, shared, sizeof(host), 2);
		log_copy("hipMemcpy", host, shared, sizeof(host), 2, 0, -1, 0, 0, 0, 0, 0, r);
		r = hipMalloc(&own, 777);
		log_alloc("alloc", "hipMalloc", own, 777, 4, 0, 0, 0, 0, 0, r);
		r = hipFree(own);
		log_free("free", "hipFree", own, 777, 4, 0, 0, r);
		r = hipFree(shared);
		log_free("free", "hipFree", shared, 12345, 4, 0, 0, r);
		exit(0);
	}
	waitpid(child, &status, 0);
	r = hipFree(shared);
	log_free("free", "hipFree", shared, 12345, 4, 0, 0, r);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

static int crash(const char *path)
{
	void *d = NULL;
	int r;

	if (with_log(path))
		return 2;
	r = hipMalloc(&d, 4096);
	log_alloc("alloc", "hipMalloc", d, 4096, 4, 0, 0, 0, 0, 0, r);
	r = hipMemset(d, 1, 4096);
	log_set("hipMemset", d, 1, 4096, 0, 0, r);
	abort();
}

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
	stop_signal = sig;
}

static int wait_for_signal(const char *path)
{
	void *d = NULL;
	int r;

	if (with_log(path))
		return 2;
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	r = hipMalloc(&d, 2048);
	log_alloc("alloc", "hipMalloc", d, 2048, 4, 0, 0, 0, 0, 0, r);
	printf("ready\n");
	fflush(stdout);
	while (!stop_signal)
		pause();
	r = hipFree(d);
	log_free("free", "hipFree", d, 2048, 4, 0, 0, r);
	fprintf(worklog, "{\"signal\": %d}\n", (int) stop_signal);
	fclose(worklog);
	return 42;
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "hip"))
		return memq_hip_workload(argv[2]);
	if (argc == 3 && !strcmp(argv[1], "cuda"))
		return memq_cuda_workload(argv[2]);
	if (argc == 4 && !strcmp(argv[1], "stress")) {
		iters = atol(argv[3]);
		return stress(atoi(argv[2]));
	}
	if (argc == 3 && !strcmp(argv[1], "fork"))
		return forking(argv[2]);
	if (argc == 3 && !strcmp(argv[1], "crash"))
		return crash(argv[2]);
	if (argc == 3 && !strcmp(argv[1], "wait"))
		return wait_for_signal(argv[2]);
	fprintf(stderr, "usage: workload hip|cuda|fork|crash|wait LOG | stress THREADS ITERS\n");
	return 2;
}
