/*
 * The end-of-process reach report: `memq record` sets
 * MEMQ_REACH_DIR; at exit each traced process writes DIR/reach.<pid>.json
 * naming the GPU runtime and driver libraries it had loaded and how many of
 * their calls memq traced. A runtime loaded with no traced call means the
 * program reached it some way memq could not interpose (a static runtime
 * whose driver lookups went around memq, a lookup memq does not wrap), and
 * `memq record` says so instead of leaving a silent empty picture.
 * It also says how many allocation-table updates were dropped (memq_table.c:
 * a signal handler inside the table, no memory): frees that then record size 0.
 * A file, not an event: memq record reads it without a pass over the trace.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "memq_reach.h"

struct memq_call_counts memq_traced_calls[MEMQ_CALL_STRIPES];
__thread unsigned memq_call_stripe __attribute__((tls_model("initial-exec")));   /* 1-based; 0: none yet */

unsigned memq_call_stripe_assign(void)
{
	static unsigned next;

	memq_call_stripe = 1 + __atomic_fetch_add(&next, 1, __ATOMIC_RELAXED) % MEMQ_CALL_STRIPES;
	return memq_call_stripe;
}

static unsigned long traced_total(int runtime)
{
	unsigned long n = 0;

	for (int i = 0; i < MEMQ_CALL_STRIPES; i++)
		n += __atomic_load_n(&memq_traced_calls[i].n[runtime], __ATOMIC_RELAXED);
	return n;
}

/* Library name prefixes and the runtime each belongs to. */
static const struct { const char *prefix; const char *runtime; } gpu_libraries[] = {
	{ "libamdhip64", "hip" }, { "libcudart", "cuda" }, { "libcuda.so", "driver" },
};

struct report {
	char buf[8192];
	size_t len;
	int n;
};

static void append(struct report *rep, const char *text)
{
	size_t n = strlen(text);

	if (rep->len + n < sizeof(rep->buf)) {
		memcpy(rep->buf + rep->len, text, n);
		rep->len += n;
	}
}

static int library_cb(struct dl_phdr_info *info, size_t size, void *data)
{
	struct report *rep = data;
	const char *name = info->dlpi_name, *base;
	char line[4200];

	(void) size;
	if (!name || !*name || strpbrk(name, "\"\\"))
		return 0;           /* (a path JSON would need escaped: not a GPU library of note) */
	base = strrchr(name, '/');
	base = base ? base + 1 : name;
	for (size_t i = 0; i < sizeof(gpu_libraries) / sizeof(gpu_libraries[0]); i++) {
		if (strncmp(base, gpu_libraries[i].prefix, strlen(gpu_libraries[i].prefix)) != 0)
			continue;
		snprintf(line, sizeof(line), "%s{\"runtime\": \"%s\", \"path\": \"%s\"}",
			rep->n++ ? ", " : "", gpu_libraries[i].runtime, name);
		append(rep, line);
	}
	return 0;
}

void memq_reach_report(void)
{
	const char *dir = getenv("MEMQ_REACH_DIR");
	struct report rep = { .len = 0 };
	char path[4200], line[512];
	int fd;

	if (!dir || !*dir)
		return;
	snprintf(line, sizeof(line), "{\"pid\": %d, \"calls\": {\"hip\": %lu, \"cuda\": %lu, \"driver\": %lu}, "
		"\"table_dropped\": %lu, \"content_dropped\": %lu, \"libraries\": [", (int) getpid(),
		traced_total(MEMQ_RT_HIP), traced_total(MEMQ_RT_CUDA), traced_total(MEMQ_RT_CUDRV),
		__atomic_load_n(&memq_table_dropped, __ATOMIC_RELAXED),
		__atomic_load_n(&memq_content_dropped, __ATOMIC_RELAXED));
	append(&rep, line);
	dl_iterate_phdr(library_cb, &rep);
	append(&rep, "]}\n");
	snprintf(path, sizeof(path), "%s/reach.%d.json", dir, (int) getpid());
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	if (write(fd, rep.buf, rep.len) < 0) {
		/* nothing to do: memq record reports what it finds */
	}
	close(fd);
}
