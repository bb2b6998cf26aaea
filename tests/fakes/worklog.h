/*
 * What a workload did, one JSON object per runtime call, with the field names
 * of the memq event it must produce (docs/EVENTS.md). The tests compare these
 * lines with the recorded trace, event by event. Integers only: enums
 * (mem_kind, kind) as their values, pointers as unsigned integers.
 */
#ifndef WORKLOG_H
#define WORKLOG_H


#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#define P(x) ((unsigned long long) (uintptr_t) (x))

static FILE *worklog;

static inline void log_head(const char *event, const char *api)
{
	fprintf(worklog, "{\"pid\": %d, \"tid\": %d, \"event\": \"%s\", \"api\": \"%s\"",
		(int) getpid(), (int) gettid(), event, api);
}

static inline void log_tail(int device, int result)
{
	fprintf(worklog, ", \"device\": %d, \"result\": %d}\n", device, result);
	fflush(worklog);
}

static inline void log_alloc(const char *event, const char *api, void *ptr, unsigned long long size,
	int kind, void *stream, unsigned long long flags, size_t w, size_t h, int device, int result)
{
	log_head(event, api);
	fprintf(worklog, ", \"ptr\": %llu, \"size\": %llu, \"mem_kind\": %d, \"stream\": %llu, "
		"\"flags\": %llu, \"width\": %zu, \"height\": %zu",
		result ? 0ull : P(ptr), size, kind, P(stream), flags, w, h);
	log_tail(device, result);
}

static inline void log_free(const char *event, const char *api, void *ptr, unsigned long long size,
	int kind, void *stream, int device, int result)
{
	log_head(event, api);
	fprintf(worklog, ", \"ptr\": %llu, \"size\": %llu, \"mem_kind\": %d, \"stream\": %llu",
		P(ptr), size, kind, P(stream));
	log_tail(device, result);
}

static inline void log_copy(const char *api, void *dst, const void *src, unsigned long long bytes, int kind,
	void *stream, int src_device, size_t w, size_t h, size_t dp, size_t sp, int device, int result)
{
	log_head("copy", api);
	fprintf(worklog, ", \"dst\": %llu, \"src\": %llu, \"bytes\": %llu, \"kind\": %d, \"stream\": %llu, "
		"\"src_device\": %d, \"width\": %zu, \"height\": %zu, \"dpitch\": %zu, \"spitch\": %zu",
		P(dst), P(src), bytes, kind, P(stream), src_device, w, h, dp, sp);
	log_tail(device, result);
}

/* 3D copies: depth slices of height rows of width bytes. */
static inline void log_copy3d(const char *api, uint64_t dst, uint64_t src, size_t w, size_t h, size_t d, int kind,
	void *stream, size_t dp, size_t sp, size_t dslice, size_t sslice, int device, int r)
{
	log_head("copy", api);
	fprintf(worklog, ", \"dst\": %llu, \"src\": %llu, \"bytes\": %llu, \"kind\": %d, \"stream\": %llu, "
		"\"width\": %zu, \"height\": %zu, \"depth\": %zu, \"dpitch\": %zu, \"spitch\": %zu, "
		"\"dslice\": %zu, \"sslice\": %zu", (unsigned long long) dst, (unsigned long long) src,
		(unsigned long long) w * h * d, kind, P(stream), w, h, d, dp, sp, dslice, sslice);
	log_tail(device, r);
}

static inline void log_set(const char *api, void *dst, int value, unsigned long long bytes, void *stream,
	int device, int result)
{
	log_head("set", api);
	fprintf(worklog, ", \"dst\": %llu, \"value\": %d, \"bytes\": %llu, \"stream\": %llu",
		P(dst), value, bytes, P(stream));
	log_tail(device, result);
}

static inline void log_prefetch(const char *api, void *ptr, unsigned long long bytes, int dst_device,
	void *stream, int device, int result)
{
	log_head("prefetch", api);
	fprintf(worklog, ", \"ptr\": %llu, \"bytes\": %llu, \"dst_device\": %d, \"stream\": %llu",
		P(ptr), bytes, dst_device, P(stream));
	log_tail(device, result);
}

static inline void log_advise(const char *api, void *ptr, unsigned long long bytes, int advice, int target,
	int device, int result)
{
	log_head("advise", api);
	fprintf(worklog, ", \"ptr\": %llu, \"bytes\": %llu, \"advice\": %d, \"target_device\": %d",
		P(ptr), bytes, advice, target);
	log_tail(device, result);
}

static inline void log_sync(const char *api, void *stream, int device, int result)
{
	log_head("sync", api);
	fprintf(worklog, ", \"stream\": %llu", P(stream));
	log_tail(device, result);
}

static inline void log_set_device(const char *api, int new_device, int device, int result)
{
	log_head("set_device", api);
	fprintf(worklog, ", \"new_device\": %d", new_device);
	log_tail(device, result);
}

#endif
