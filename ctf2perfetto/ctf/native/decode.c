/*
 * libmemqdecode: LTTng CTF traces -> memq event columns (ctf2perfetto.events).
 *
 * A libbabeltrace2 graph: one src.ctf.fs per trace group (grouped like the
 * babeltrace2 CLI does, with the `babeltrace.support-info` query), a
 * flt.utils.muxer, and a simple sink that hands message arrays to
 * memq_next(), which writes one row per event / discarded-items message into
 * caller-owned column buffers (numpy arrays in ctf2perfetto/decode.py).
 *
 * Event classes are resolved once (name -> handler, payload member indexes,
 * enumeration label tables read from the metadata); the per-event path only
 * reads integers by index. Everything that is not a row (process names,
 * binaries, devices, clock readings, API names, skipped classes, stream files)
 * goes out as JSON lines in a side buffer that Python drains after each batch.
 */
#include <babeltrace2/babeltrace.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Row kinds: ctf2perfetto.events.EventKind. */
enum {
	K_MALLOC = 1, K_CALLOC = 2, K_REALLOC = 3, K_MEMALIGN = 4, K_POSIX_MEMALIGN = 5, K_FREE = 6,
	K_HOST_ALLOC = 7, K_HOST_FREE = 8, K_HOST_SMALL = 9,
	K_GPU_ALLOC = 10, K_GPU_FREE = 11, K_GPU_REGISTER = 12, K_GPU_UNREGISTER = 13, K_GPU_COPY = 14,
	K_GPU_SET = 15, K_GPU_PREFETCH = 16, K_GPU_ADVISE = 17, K_GPU_SYNC = 18, K_GPU_SET_DEVICE = 19,
	K_GPU_COPY_DONE = 20, K_LOST = 30,
	K_LIVE = 40, K_WINDOW = 41,  /* capture windows */
};

/* Column buffers, in ctf2perfetto.events.COLUMNS order (mirrored by a ctypes Structure). */
typedef struct {
	int64_t *ts, *begin, *pid, *tid;
	uint64_t *ip;
	uint8_t *kind;
	uint16_t *api;
	uint8_t *mem;
	int32_t *copy_kind, *device;
	int64_t *result;
	uint64_t *ptr, *src, *size, *stream, *flags, *aux, *aux2, *dpitch, *spitch;
	uint64_t *depth, *dslice, *sslice;  /* appended for 3D copies */
	/* appended for content fingerprints */
	uint64_t *seq;
	uint8_t *content, *content_mode;
	uint64_t *src_hash, *dst_hash_before, *dst_hash_after;
} memq_columns;

/* What a handler does with an event of its class. */
enum action {
	A_UNKNOWN, A_IGNORE, A_LIBC, A_ALLOC, A_FREE, A_COPY, A_SET, A_PREFETCH, A_ADVISE, A_SYNC,
	A_SET_DEVICE, A_CLOCK, A_DEVICE, A_PROCNAME, A_BIN_INFO, A_BUILD_ID, A_COPY_DONE,
	A_HOST, A_HOST_SMALL,  /* memq's heap wrappers */
	A_WINDOW,              /* capture windows */
	A_IDENTITY,            /* memq:identity: who the process is in its job */
	A_LIB,                 /* memq:lib_load: A_BIN_INFO and A_BUILD_ID in one event */
};

/* Payload roles: which member feeds what (index into handler.idx). */
enum role {
	R_API, R_PTR, R_SRC, R_SIZE, R_NMEMB, R_ALIGN, R_MEM, R_DEVICE, R_STREAM, R_FLAGS, R_WIDTH,
	R_HEIGHT, R_RESULT, R_BEGIN, R_KIND, R_SRC_DEVICE, R_DPITCH, R_SPITCH, R_VALUE, R_TARGET,
	R_WHERE, R_REALTIME, R_MONOTONIC, R_BOOTTIME, R_RUNTIME, R_NAME, R_INTEGRATED, R_UNIFIED,
	R_BADDR, R_MEMSZ, R_PATH, R_BUILD_ID, R_DEPTH, R_DSLICE, R_SSLICE,
	R_REQUESTED, R_ALLOC_COUNT, R_ALLOC_BYTES, R_FREE_COUNT, R_FREE_BYTES,
	R_SEQ, R_CONTENT, R_CONTENT_MODE, R_SRC_HASH, R_DST_HASH_BEFORE, R_DST_HASH_AFTER,
	R_OPEN, R_CAUSE, R_INDEX, R_UUID, R_BUS_ID, R_PPID, R_HOST, R_ENV, NROLES,
};

/* An enumeration's labels: value ranges -> code (API name index, MemKind, ...). */
struct enum_entry { int64_t lo, hi; int code; };
/* `last_*`: the previous lookup's answer. An event class's enum value rarely changes from one
 * event to the next (memq:host_alloc's api is malloc, new, ... in runs), and the api enum has
 * hundreds of ranges: the scan cost a quarter of the decoder's time on a heap-heavy trace. */
struct enum_map { struct enum_entry *e; size_t n; int64_t last_v; int last_code; int has_last; };

struct handler {
	const bt_event_class *ec;
	char *name;
	enum action action;
	int kind;              /* row kind for row-producing actions */
	int api;               /* fixed API index (libc), else from the api enum */
	int mem_fixed;         /* MemKind when the class implies it (libc heap) */
	int idx[NROLES];       /* payload member index per role, -1 if absent */
	uint8_t is_signed[NROLES];
	struct enum_map api_map, mem_map, runtime_map, cause_map;
	int cc_vpid, cc_vtid, cc_ip, cc_procname; /* common context member indexes */
	uint8_t cc_vpid_signed, cc_vtid_signed;
	int64_t env_vpid;      /* trace environment vpid (per-pid buffers), else 0 */
	int64_t delta_ns;      /* this trace's clock offset minus the reference offset */
	uint64_t freq;
	uint64_t skipped;
	struct handler *next;
};

struct thread_name { int64_t pid, tid; char name[32]; };

/* A stream (one CTF stream file per stream in LTTng traces) and its packets so far. */
struct stream_info {
	const bt_stream *stream;
	char *name;        /* stream file path */
	char *port;        /* src.ctf.fs output port name: "<trace uuid> | <class id> | <id>" */
	uint64_t packets_begun, packets_ended;
};

typedef struct memq_decoder {
	bt_graph *graph;
	const bt_plugin *ctf_plugin, *utils_plugin;
	bt_message_array_const pending;
	uint64_t npending, ipending;
	int ended;
	/* Handlers: hash of event class pointer -> handler. */
	struct handler **htab;
	size_t hcap, hcount;
	struct handler *last_h;
	/* API names (interned, index = EventBatch.api_names index). */
	char **apis;
	size_t napis, capis;
	/* Streams seen (LOST rows point at them through the `stream` column). */
	struct stream_info *streams;
	size_t nstreams, cstreams, last_stream;
	/* The stream whose iterator failed (salvage cuts its file back). */
	long failed_stream;
	/* Thread names from the procname context, (pid, tid) open addressing. */
	struct thread_name *threads;
	size_t tcap, tcount;
	/* Reference clock offset: the first clock class seen. */
	int have_ref;
	int64_t ref_offset_ns;
	/* Side records (JSON lines) drained by Python. */
	char *side;
	size_t side_len, side_cap;
	/* Error text (causes joined). */
	char *error;
	uint64_t events_seen;
	int64_t last_ts;
	/* Time range of all streams (ns from origin), for progress. */
	int have_range;
	int64_t range_begin, range_end;
} memq_decoder;

/* ------------------------------------------------------------------ side records */

static void side_reserve(memq_decoder *d, size_t more)
{
	if (d->side_len + more + 1 <= d->side_cap)
		return;
	size_t cap = d->side_cap ? d->side_cap : 4096;
	while (cap < d->side_len + more + 1)
		cap *= 2;
	char *p = realloc(d->side, cap);
	if (!p)
		abort();
	d->side = p;
	d->side_cap = cap;
}

static void side_printf(memq_decoder *d, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	side_reserve(d, (size_t)n);
	va_start(ap, fmt);
	vsnprintf(d->side + d->side_len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	d->side_len += (size_t)n;
}

/* Appends s as a JSON string literal. */
static void side_json_str(memq_decoder *d, const char *s)
{
	side_reserve(d, strlen(s) * 6 + 2);
	char *o = d->side + d->side_len;
	*o++ = '"';
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p == '"' || *p == '\\') {
			*o++ = '\\';
			*o++ = (char)*p;
		} else if (*p < 0x20) {
			o += sprintf(o, "\\u%04x", *p);
		} else {
			*o++ = (char)*p;
		}
	}
	*o++ = '"';
	d->side_len = (size_t)(o - d->side);
	d->side[d->side_len] = '\0';
}

/* ------------------------------------------------------------------ API names */

static int intern_api(memq_decoder *d, const char *name)
{
	for (size_t i = 0; i < d->napis; i++)
		if (strcmp(d->apis[i], name) == 0)
			return (int)i;
	if (d->napis == d->capis) {
		d->capis = d->capis ? d->capis * 2 : 16;
		d->apis = realloc(d->apis, d->capis * sizeof(*d->apis));
	}
	d->apis[d->napis] = strdup(name);
	side_printf(d, "{\"t\":\"api\",\"index\":%zu,\"name\":", d->napis);
	side_json_str(d, name);
	side_printf(d, "}\n");
	return (int)d->napis++;
}

/* ------------------------------------------------------------------ class resolution */

static int member_index(const bt_field_class *st, const char *name, uint8_t *is_signed)
{
	if (!st)
		return -1;
	uint64_t n = bt_field_class_structure_get_member_count(st);
	for (uint64_t i = 0; i < n; i++) {
		const bt_field_class_structure_member *m =
			bt_field_class_structure_borrow_member_by_index_const(st, i);
		if (strcmp(bt_field_class_structure_member_get_name(m), name) == 0) {
			if (is_signed) {
				bt_field_class_type t = bt_field_class_get_type(
					bt_field_class_structure_member_borrow_field_class_const(m));
				*is_signed = bt_field_class_type_is(t, BT_FIELD_CLASS_TYPE_SIGNED_INTEGER);
			}
			return (int)i;
		}
	}
	return -1;
}

static const bt_field_class *member_class(const bt_field_class *st, int idx)
{
	return bt_field_class_structure_member_borrow_field_class_const(
		bt_field_class_structure_borrow_member_by_index_const(st, (uint64_t)idx));
}

typedef int (*label_code_fn)(memq_decoder *d, const char *label);

/* Reads an enumeration field class's mappings into value ranges -> code. */
static void build_enum_map(memq_decoder *d, const bt_field_class *fc, label_code_fn code_of,
			   struct enum_map *map)
{
	map->e = NULL;
	map->n = 0;
	map->has_last = 0;
	if (!fc)
		return;
	bt_field_class_type t = bt_field_class_get_type(fc);
	int is_unsigned = t == BT_FIELD_CLASS_TYPE_UNSIGNED_ENUMERATION;
	if (!is_unsigned && t != BT_FIELD_CLASS_TYPE_SIGNED_ENUMERATION)
		return;
	uint64_t count = bt_field_class_enumeration_get_mapping_count(fc);
	size_t cap = 0;
	for (uint64_t i = 0; i < count; i++) {
		const char *label;
		const bt_integer_range_set *rs;
		if (is_unsigned) {
			const bt_field_class_enumeration_unsigned_mapping *m =
				bt_field_class_enumeration_unsigned_borrow_mapping_by_index_const(fc, i);
			label = bt_field_class_enumeration_mapping_get_label(
				bt_field_class_enumeration_unsigned_mapping_as_mapping_const(m));
			rs = bt_integer_range_set_unsigned_as_range_set_const(
				bt_field_class_enumeration_unsigned_mapping_borrow_ranges_const(m));
		} else {
			const bt_field_class_enumeration_signed_mapping *m =
				bt_field_class_enumeration_signed_borrow_mapping_by_index_const(fc, i);
			label = bt_field_class_enumeration_mapping_get_label(
				bt_field_class_enumeration_signed_mapping_as_mapping_const(m));
			rs = bt_integer_range_set_signed_as_range_set_const(
				bt_field_class_enumeration_signed_mapping_borrow_ranges_const(m));
		}
		int code = code_of(d, label);
		uint64_t nr = bt_integer_range_set_get_range_count(rs);
		for (uint64_t r = 0; r < nr; r++) {
			struct enum_entry e;
			e.code = code;
			if (is_unsigned) {
				const bt_integer_range_unsigned *ir =
					bt_integer_range_set_unsigned_borrow_range_by_index_const(
						(const bt_integer_range_set_unsigned *)rs, r);
				e.lo = (int64_t)bt_integer_range_unsigned_get_lower(ir);
				e.hi = (int64_t)bt_integer_range_unsigned_get_upper(ir);
			} else {
				const bt_integer_range_signed *ir =
					bt_integer_range_set_signed_borrow_range_by_index_const(
						(const bt_integer_range_set_signed *)rs, r);
				e.lo = bt_integer_range_signed_get_lower(ir);
				e.hi = bt_integer_range_signed_get_upper(ir);
			}
			if (map->n == cap) {
				cap = cap ? cap * 2 : 16;
				map->e = realloc(map->e, cap * sizeof(*map->e));
			}
			map->e[map->n++] = e;
		}
	}
}

static int enum_lookup(struct enum_map *map, int64_t v)
{
	if (map->has_last && map->last_v == v)
		return map->last_code;
	int code = -1;
	for (size_t i = 0; i < map->n; i++)
		if (v >= map->e[i].lo && v <= map->e[i].hi) {
			code = map->e[i].code;
			break;
		}
	map->last_v = v;
	map->last_code = code;
	map->has_last = 1;
	return code;
}

/* API index of an api enum value; a value without a label gets the name "api <value>". */
static int api_index(memq_decoder *d, struct enum_map *map, int64_t v)
{
	int code = enum_lookup(map, v);
	if (code >= 0)
		return code;
	char name[32];
	snprintf(name, sizeof(name), "api %" PRId64, v);
	return intern_api(d, name);
}

static int api_code(memq_decoder *d, const char *label) { return intern_api(d, label); }

/* memq:mem_kind labels -> ctf2perfetto.events.MemKind. */
static int mem_code(memq_decoder *d, const char *label)
{
	static const char *const names[] = {"unknown", "host", "pinned", "registered", "device", "managed"};
	(void)d;
	for (int i = 0; i < 6; i++)
		if (strcmp(label, names[i]) == 0)
			return i;
	return 0;
}

/* memq:runtime labels: kept as an index into this table for the device record. */
static const char *const runtime_names[] = {"unknown", "hip", "cuda"};
static int runtime_code(memq_decoder *d, const char *label)
{
	(void)d;
	for (int i = 1; i < 3; i++)
		if (strcmp(label, runtime_names[i]) == 0)
			return i;
	return 0;
}

/* memq:window_cause labels -> the cause code of a WINDOW row (ctf2perfetto.events.WindowCause). */
static int cause_code(memq_decoder *d, const char *label)
{
	static const char *const names[] = {"unknown", "delay", "duration", "profiler_api", "exit"};
	(void)d;
	for (int i = 1; i < 5; i++)
		if (strcmp(label, names[i]) == 0)
			return i;
	return 0;
}

struct class_spec {
	const char *name;
	enum action action;
	int kind;
	int mem;
	/* role=member pairs, terminated by -1; a role | OPTIONAL is a field appended to the event
	 * later, absent from older traces (read as 0 there) */
	struct { int role; const char *member; } members[32];
};

#define OPTIONAL 0x100
#define GPU_COMMON {R_API, "api"}, {R_DEVICE, "device"}, {R_RESULT, "result"}, {R_BEGIN, "begin_ns"}
static const struct class_spec specs[] = {
	{"lttng_ust_libc:malloc", A_LIBC, K_MALLOC, 1, {{R_SIZE, "size"}, {R_PTR, "ptr"}, {-1, 0}}},
	{"lttng_ust_libc:calloc", A_LIBC, K_CALLOC, 1,
	 {{R_NMEMB, "nmemb"}, {R_SIZE, "size"}, {R_PTR, "ptr"}, {-1, 0}}},
	{"lttng_ust_libc:realloc", A_LIBC, K_REALLOC, 1,
	 {{R_SRC, "in_ptr"}, {R_SIZE, "size"}, {R_PTR, "ptr"}, {-1, 0}}},
	{"lttng_ust_libc:memalign", A_LIBC, K_MEMALIGN, 1,
	 {{R_ALIGN, "alignment"}, {R_SIZE, "size"}, {R_PTR, "ptr"}, {-1, 0}}},
	{"lttng_ust_libc:posix_memalign", A_LIBC, K_POSIX_MEMALIGN, 1,
	 {{R_PTR, "out_ptr"}, {R_ALIGN, "alignment"}, {R_SIZE, "size"}, {R_RESULT, "result"}, {-1, 0}}},
	{"lttng_ust_libc:free", A_LIBC, K_FREE, 1, {{R_PTR, "ptr"}, {-1, 0}}},
	/* lttng-ust 2.3 named its libc provider ust_libc (same fields) */
	{"ust_libc:malloc", A_LIBC, K_MALLOC, 1, {{R_SIZE, "size"}, {R_PTR, "ptr"}, {-1, 0}}},
	{"ust_libc:calloc", A_LIBC, K_CALLOC, 1, {{R_NMEMB, "nmemb"}, {R_SIZE, "size"}, {R_PTR, "ptr"}, {-1, 0}}},
	{"ust_libc:realloc", A_LIBC, K_REALLOC, 1, {{R_SRC, "in_ptr"}, {R_SIZE, "size"}, {R_PTR, "ptr"}, {-1, 0}}},
	{"ust_libc:memalign", A_LIBC, K_MEMALIGN, 1,
	 {{R_ALIGN, "alignment"}, {R_SIZE, "size"}, {R_PTR, "ptr"}, {-1, 0}}},
	{"ust_libc:posix_memalign", A_LIBC, K_POSIX_MEMALIGN, 1,
	 {{R_PTR, "out_ptr"}, {R_ALIGN, "alignment"}, {R_SIZE, "size"}, {R_RESULT, "result"}, {-1, 0}}},
	{"ust_libc:free", A_LIBC, K_FREE, 1, {{R_PTR, "ptr"}, {-1, 0}}},
	{"memq:host_alloc", A_HOST, K_HOST_ALLOC, 1,
	 {{R_API, "api"}, {R_PTR, "ptr"}, {R_SIZE, "size"}, {R_REQUESTED, "requested"}, {-1, 0}}},
	{"memq:host_free", A_HOST, K_HOST_FREE, 1,
	 {{R_API, "api"}, {R_PTR, "ptr"}, {R_SIZE, "size"}, {R_REQUESTED, "requested"}, {-1, 0}}},
	{"memq:host_small", A_HOST_SMALL, K_HOST_SMALL, 1,
	 {{R_ALLOC_COUNT, "alloc_count"}, {R_ALLOC_BYTES, "alloc_bytes"}, {R_FREE_COUNT, "free_count"},
	  {R_FREE_BYTES, "free_bytes"}, {-1, 0}}},
	{"memq:alloc", A_ALLOC, K_GPU_ALLOC, 0,
	 {GPU_COMMON, {R_PTR, "ptr"}, {R_SIZE, "size"}, {R_MEM, "mem_kind"}, {R_STREAM, "stream"},
	  {R_FLAGS, "flags"}, {R_WIDTH, "width"}, {R_HEIGHT, "height"}, {-1, 0}}},
	{"memq:register", A_ALLOC, K_GPU_REGISTER, 0,
	 {GPU_COMMON, {R_PTR, "ptr"}, {R_SIZE, "size"}, {R_MEM, "mem_kind"}, {R_STREAM, "stream"},
	  {R_FLAGS, "flags"}, {R_WIDTH, "width"}, {R_HEIGHT, "height"}, {-1, 0}}},
	{"memq:free", A_FREE, K_GPU_FREE, 0,
	 {GPU_COMMON, {R_PTR, "ptr"}, {R_SIZE, "size"}, {R_MEM, "mem_kind"}, {R_STREAM, "stream"}, {-1, 0}}},
	{"memq:unregister", A_FREE, K_GPU_UNREGISTER, 0,
	 {GPU_COMMON, {R_PTR, "ptr"}, {R_SIZE, "size"}, {R_MEM, "mem_kind"}, {R_STREAM, "stream"}, {-1, 0}}},
	{"memq:copy", A_COPY, K_GPU_COPY, 0,
	 {GPU_COMMON, {R_PTR, "dst"}, {R_SRC, "src"}, {R_SIZE, "bytes"}, {R_KIND, "kind"},
	  {R_STREAM, "stream"}, {R_SRC_DEVICE, "src_device"}, {R_WIDTH, "width"}, {R_HEIGHT, "height"},
	  {R_DPITCH, "dpitch"}, {R_SPITCH, "spitch"},
	  {R_DEPTH | OPTIONAL, "depth"}, {R_DSLICE | OPTIONAL, "dslice"}, {R_SSLICE | OPTIONAL, "sslice"},
	  {R_SEQ | OPTIONAL, "seq"}, {R_CONTENT | OPTIONAL, "content"}, {R_CONTENT_MODE | OPTIONAL, "content_mode"},
	  {R_SRC_HASH | OPTIONAL, "src_hash"}, {R_DST_HASH_BEFORE | OPTIONAL, "dst_hash_before"},
	  {R_DST_HASH_AFTER | OPTIONAL, "dst_hash_after"}, {-1, 0}}},
	{"memq:copy_done", A_COPY_DONE, K_GPU_COPY_DONE, 0,
	 {{R_API, "api"}, {R_SEQ, "seq"}, {R_STREAM, "stream"}, {R_DEVICE, "device"},
	  {R_DST_HASH_AFTER, "dst_hash_after"}, {-1, 0}}},
	{"memq:set", A_SET, K_GPU_SET, 0,
	 {GPU_COMMON, {R_PTR, "dst"}, {R_VALUE, "value"}, {R_SIZE, "bytes"}, {R_STREAM, "stream"}, {-1, 0}}},
	{"memq:prefetch", A_PREFETCH, K_GPU_PREFETCH, 0,
	 {GPU_COMMON, {R_PTR, "ptr"}, {R_SIZE, "bytes"}, {R_TARGET, "dst_device"}, {R_STREAM, "stream"}, {-1, 0}}},
	{"memq:advise", A_ADVISE, K_GPU_ADVISE, 0,
	 {GPU_COMMON, {R_PTR, "ptr"}, {R_SIZE, "bytes"}, {R_VALUE, "advice"}, {R_TARGET, "target_device"}, {-1, 0}}},
	{"memq:sync", A_SYNC, K_GPU_SYNC, 0, {GPU_COMMON, {R_STREAM, "stream"}, {-1, 0}}},
	{"memq:set_device", A_SET_DEVICE, K_GPU_SET_DEVICE, 0, {GPU_COMMON, {R_TARGET, "new_device"}, {-1, 0}}},
	{"memq:live", A_ALLOC, K_LIVE, 0,
	 {GPU_COMMON, {R_PTR, "ptr"}, {R_SIZE, "size"}, {R_MEM, "mem_kind"}, {R_STREAM, "stream"},
	  {R_FLAGS, "flags"}, {R_WIDTH, "width"}, {R_HEIGHT, "height"}, {-1, 0}}},
	{"memq:window", A_WINDOW, K_WINDOW, 0,
	 {{R_API, "api"}, {R_OPEN, "open"}, {R_CAUSE, "cause"}, {R_INDEX, "index"}, {-1, 0}}},
	{"memq:clock", A_CLOCK, 0, 0,
	 {{R_WHERE, "where"}, {R_REALTIME, "realtime_ns"}, {R_MONOTONIC, "monotonic_ns"},
	  {R_BOOTTIME, "boottime_ns"}, {-1, 0}}},
	{"memq:device", A_DEVICE, 0, 0,
	 {{R_RUNTIME, "runtime"}, {R_DEVICE, "device"}, {R_NAME, "name"}, {R_INTEGRATED, "integrated"},
	  {R_UNIFIED, "unified_memory"}, {R_UUID | OPTIONAL, "uuid"}, {R_BUS_ID | OPTIONAL, "pci_bus_id"}, {-1, 0}}},
	{"memq:identity", A_IDENTITY, 0, 0,
	 {{R_PPID, "ppid"}, {R_HOST, "host"}, {R_ENV, "env"}, {-1, 0}}},
	/* The library map: memq's own (memq:lib_*), LTTng's in recordings made before it (and with
	 * --host-source lttng alone). Either gives "binary" + "build_id" side records. */
	{"memq:lib_load", A_LIB, 0, 0,
	 {{R_BADDR, "baddr"}, {R_MEMSZ, "memsz"}, {R_PATH, "path"}, {R_BUILD_ID, "build_id"}, {-1, 0}}},
	{"memq:lib_unload", A_IGNORE, 0, 0, {{-1, 0}}},
	{"lttng_ust_statedump:procname", A_PROCNAME, 0, 0, {{R_NAME, "procname"}, {-1, 0}}},
	{"lttng_ust_statedump:bin_info", A_BIN_INFO, 0, 0,
	 {{R_BADDR, "baddr"}, {R_MEMSZ, "memsz"}, {R_PATH, "path"}, {-1, 0}}},
	{"lttng_ust_lib:load", A_BIN_INFO, 0, 0,
	 {{R_BADDR, "baddr"}, {R_MEMSZ, "memsz"}, {R_PATH, "path"}, {-1, 0}}},
	{"lttng_ust_statedump:build_id", A_BUILD_ID, 0, 0, {{R_BADDR, "baddr"}, {R_BUILD_ID, "build_id"}, {-1, 0}}},
	{"lttng_ust_lib:build_id", A_BUILD_ID, 0, 0, {{R_BADDR, "baddr"}, {R_BUILD_ID, "build_id"}, {-1, 0}}},
	/* Known and deliberately unused: markers and debug links (no row, not "skipped"). */
	{"lttng_ust_statedump:start", A_IGNORE, 0, 0, {{-1, 0}}},
	{"lttng_ust_statedump:end", A_IGNORE, 0, 0, {{-1, 0}}},
	{"lttng_ust_statedump:debug_link", A_IGNORE, 0, 0, {{-1, 0}}},
	{"lttng_ust_lib:debug_link", A_IGNORE, 0, 0, {{-1, 0}}},
	{"lttng_ust_lib:unload", A_IGNORE, 0, 0, {{-1, 0}}},
};

static int64_t clock_offset_ns(const bt_clock_class *cc)
{
	int64_t s;
	uint64_t cycles;
	bt_clock_class_get_offset(cc, &s, &cycles);
	uint64_t freq = bt_clock_class_get_frequency(cc);
	return s * 1000000000LL + (int64_t)((unsigned __int128)cycles * 1000000000u / freq);
}

static struct handler *resolve(memq_decoder *d, const bt_event *ev, const bt_event_class *ec)
{
	struct handler *h = calloc(1, sizeof(*h));
	h->ec = ec;
	h->name = strdup(bt_event_class_get_name(ec) ? bt_event_class_get_name(ec) : "(unnamed)");
	for (int r = 0; r < NROLES; r++)
		h->idx[r] = -1;
	h->action = A_UNKNOWN;
	h->api = 0;

	const bt_stream_class *sc = bt_event_class_borrow_stream_class_const(ec);
	const bt_field_class *cc = bt_stream_class_borrow_event_common_context_field_class_const(sc);
	h->cc_vpid = member_index(cc, "vpid", &h->cc_vpid_signed);
	h->cc_vtid = member_index(cc, "vtid", &h->cc_vtid_signed);
	h->cc_ip = member_index(cc, "ip", NULL);
	h->cc_procname = member_index(cc, "procname", NULL);

	const bt_trace *trace = bt_stream_borrow_trace_const(bt_event_borrow_stream_const(ev));
	const bt_value *vpid = bt_trace_borrow_environment_entry_value_by_name_const(trace, "vpid");
	if (vpid && bt_value_is_signed_integer(vpid))
		h->env_vpid = bt_value_integer_signed_get(vpid);

	const bt_clock_class *clk = bt_stream_class_borrow_default_clock_class_const(sc);
	h->freq = clk ? bt_clock_class_get_frequency(clk) : 1000000000u;
	if (clk) {
		int64_t off = clock_offset_ns(clk);
		if (!d->have_ref) {
			d->have_ref = 1;
			d->ref_offset_ns = off;
		}
		h->delta_ns = off - d->ref_offset_ns;
	}

	const bt_field_class *pl = bt_event_class_borrow_payload_field_class_const(ec);
	for (size_t s = 0; s < sizeof(specs) / sizeof(specs[0]); s++) {
		if (strcmp(specs[s].name, h->name) != 0)
			continue;
		int complete = 1;
		for (int m = 0; specs[s].members[m].role >= 0; m++) {
			int role = specs[s].members[m].role & ~OPTIONAL;
			h->idx[role] = member_index(pl, specs[s].members[m].member, &h->is_signed[role]);
			if (h->idx[role] < 0 && !(specs[s].members[m].role & OPTIONAL))
				complete = 0;
		}
		if (!complete)
			break; /* an unexpected payload: counted as skipped */
		h->action = specs[s].action;
		h->kind = specs[s].kind;
		h->mem_fixed = specs[s].mem;
		if (h->action == A_LIBC)
			h->api = intern_api(d, strchr(h->name, ':') + 1);
		if (h->idx[R_API] >= 0)
			build_enum_map(d, member_class(pl, h->idx[R_API]), api_code, &h->api_map);
		if (h->idx[R_MEM] >= 0)
			build_enum_map(d, member_class(pl, h->idx[R_MEM]), mem_code, &h->mem_map);
		if (h->idx[R_RUNTIME] >= 0)
			build_enum_map(d, member_class(pl, h->idx[R_RUNTIME]), runtime_code, &h->runtime_map);
		if (h->idx[R_CAUSE] >= 0)
			build_enum_map(d, member_class(pl, h->idx[R_CAUSE]), cause_code, &h->cause_map);
		break;
	}

	if (d->hcount * 2 >= d->hcap) {
		size_t ncap = d->hcap ? d->hcap * 2 : 64;
		struct handler **nt = calloc(ncap, sizeof(*nt));
		for (size_t i = 0; i < d->hcap; i++) {
			struct handler *x = d->htab[i];
			while (x) {
				struct handler *next = x->next;
				size_t b = ((uintptr_t)x->ec >> 4) & (ncap - 1);
				x->next = nt[b];
				nt[b] = x;
				x = next;
			}
		}
		free(d->htab);
		d->htab = nt;
		d->hcap = ncap;
	}
	size_t b = ((uintptr_t)ec >> 4) & (d->hcap - 1);
	h->next = d->htab[b];
	d->htab[b] = h;
	d->hcount++;
	return h;
}

static inline struct handler *handler_for(memq_decoder *d, const bt_event *ev)
{
	const bt_event_class *ec = bt_event_borrow_class_const(ev);
	if (d->last_h && d->last_h->ec == ec)
		return d->last_h;
	struct handler *h = NULL;
	if (d->hcap)
		for (h = d->htab[((uintptr_t)ec >> 4) & (d->hcap - 1)]; h && h->ec != ec; h = h->next)
			;
	if (!h)
		h = resolve(d, ev, ec);
	d->last_h = h;
	return h;
}

/* ------------------------------------------------------------------ field reads */

static inline const bt_field *member(const bt_field *st, int idx)
{
	return bt_field_structure_borrow_member_field_by_index_const(st, (uint64_t)idx);
}

static inline uint64_t get_u(const bt_field *st, int idx)
{
	return idx < 0 ? 0 : bt_field_integer_unsigned_get_value(member(st, idx));
}

/* Signed-aware read; the result is the value as int64 (unsigned values kept bit-for-bit). */
static inline int64_t get_i(const struct handler *h, const bt_field *st, int role)
{
	int idx = h->idx[role];
	if (idx < 0)
		return 0;
	const bt_field *f = member(st, idx);
	return h->is_signed[role] ? bt_field_integer_signed_get_value(f)
				  : (int64_t)bt_field_integer_unsigned_get_value(f);
}

static inline uint64_t to_ns(uint64_t cycles, uint64_t freq)
{
	if (freq == 1000000000u)
		return cycles;
	return (uint64_t)((unsigned __int128)cycles * 1000000000u / freq);
}

static const char *get_str(const struct handler *h, const bt_field *st, int role)
{
	return h->idx[role] < 0 ? "" : bt_field_string_get_value(member(st, h->idx[role]));
}

/* ------------------------------------------------------------------ thread names */

static void note_thread_name(memq_decoder *d, int64_t pid, int64_t tid, const char *name)
{
	if (d->tcount * 2 >= d->tcap) {
		size_t ncap = d->tcap ? d->tcap * 2 : 256;
		struct thread_name *nt = calloc(ncap, sizeof(*nt));
		for (size_t i = 0; i < d->tcap; i++) {
			struct thread_name *t = &d->threads[i];
			if (!t->name[0])
				continue;
			size_t j = ((uint64_t)t->tid * 2654435761u) & (ncap - 1);
			while (nt[j].name[0])
				j = (j + 1) & (ncap - 1);
			nt[j] = *t;
		}
		free(d->threads);
		d->threads = nt;
		d->tcap = ncap;
	}
	size_t j = ((uint64_t)tid * 2654435761u) & (d->tcap - 1);
	while (d->threads[j].name[0] && (d->threads[j].pid != pid || d->threads[j].tid != tid))
		j = (j + 1) & (d->tcap - 1);
	struct thread_name *t = &d->threads[j];
	if (t->name[0] && strncmp(t->name, name, sizeof(t->name) - 1) == 0)
		return;
	if (!t->name[0])
		d->tcount++;
	t->pid = pid;
	t->tid = tid;
	snprintf(t->name, sizeof(t->name), "%s", name[0] ? name : "?");
	side_printf(d, "{\"t\":\"thread\",\"pid\":%" PRId64 ",\"tid\":%" PRId64 ",\"name\":", pid, tid);
	side_json_str(d, name);
	side_printf(d, "}\n");
}

/* ------------------------------------------------------------------ messages */

static size_t stream_index(memq_decoder *d, const bt_stream *s)
{
	if (d->last_stream < d->nstreams && d->streams[d->last_stream].stream == s)
		return d->last_stream;
	for (size_t i = d->nstreams; i-- > 0;)
		if (d->streams[i].stream == s)
			return d->last_stream = i;
	if (d->nstreams == d->cstreams) {
		d->cstreams = d->cstreams ? d->cstreams * 2 : 16;
		d->streams = realloc(d->streams, d->cstreams * sizeof(*d->streams));
	}
	struct stream_info *si = &d->streams[d->nstreams];
	memset(si, 0, sizeof(*si));
	si->stream = s;
	si->name = strdup(bt_stream_get_name(s) ? bt_stream_get_name(s) : "");
	const bt_trace *tr = bt_stream_borrow_trace_const(s);
	bt_uuid u = bt_trace_get_uuid(tr);
	char port[128];
	if (u)
		snprintf(port, sizeof(port),
			 "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x | %" PRIu64 " | %" PRIu64,
			 u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
			 u[14], u[15], bt_stream_class_get_id(bt_stream_borrow_class_const(s)), bt_stream_get_id(s));
	else
		snprintf(port, sizeof(port), "%s", si->name);
	si->port = strdup(port);
	const bt_trace *trace = bt_stream_borrow_trace_const(s);
	const bt_value *vpid = bt_trace_borrow_environment_entry_value_by_name_const(trace, "vpid");
	const bt_value *host = bt_trace_borrow_environment_entry_value_by_name_const(trace, "hostname");
	const bt_value *proc = bt_trace_borrow_environment_entry_value_by_name_const(trace, "procname");
	side_printf(d, "{\"t\":\"stream\",\"index\":%zu,\"name\":", d->nstreams);
	side_json_str(d, bt_stream_get_name(s) ? bt_stream_get_name(s) : "");
	side_printf(d, ",\"trace\":");
	side_json_str(d, bt_trace_get_name(trace) ? bt_trace_get_name(trace) : "");
	if (vpid && bt_value_is_signed_integer(vpid))
		side_printf(d, ",\"vpid\":%" PRId64, bt_value_integer_signed_get(vpid));
	if (host && bt_value_is_string(host)) {
		side_printf(d, ",\"hostname\":");
		side_json_str(d, bt_value_string_get(host));
	}
	if (proc && bt_value_is_string(proc)) {
		side_printf(d, ",\"procname\":");
		side_json_str(d, bt_value_string_get(proc));
	}
	const bt_stream_class *sc = bt_stream_borrow_class_const(s);
	const bt_clock_class *clk = bt_stream_class_borrow_default_clock_class_const(sc);
	if (clk)
		side_printf(d, ",\"clock_offset_ns\":%" PRId64, clock_offset_ns(clk));
	const bt_field_class *cc = bt_stream_class_borrow_event_common_context_field_class_const(sc);
	side_printf(d, ",\"has_vpid\":%s,\"has_vtid\":%s}\n",
		    member_index(cc, "vpid", NULL) >= 0 ? "true" : "false",
		    member_index(cc, "vtid", NULL) >= 0 ? "true" : "false");
	d->last_stream = d->nstreams;
	return d->nstreams++;
}

static int64_t stream_env_vpid(const bt_stream *s)
{
	const bt_value *vpid = bt_trace_borrow_environment_entry_value_by_name_const(
		bt_stream_borrow_trace_const(s), "vpid");
	return vpid && bt_value_is_signed_integer(vpid) ? bt_value_integer_signed_get(vpid) : 0;
}

static void zero_row(memq_columns *c, size_t i)
{
	c->ip[i] = 0;
	c->api[i] = 0;
	c->mem[i] = 0;
	c->copy_kind[i] = -1;
	c->device[i] = 0;
	c->result[i] = 0;
	c->ptr[i] = c->src[i] = c->size[i] = c->stream[i] = c->flags[i] = 0;
	c->aux[i] = c->aux2[i] = c->dpitch[i] = c->spitch[i] = 0;
	c->depth[i] = c->dslice[i] = c->sslice[i] = 0;
	c->seq[i] = c->src_hash[i] = c->dst_hash_before[i] = c->dst_hash_after[i] = 0;
	c->content[i] = c->content_mode[i] = 0;
}

/* A DiscardedEvents / DiscardedPackets message -> one LOST row (begin = ts = start of
 * the range, so rows stay in the muxer's order; size = length of the range in ns). */
static int lost_row(memq_decoder *d, const bt_message *msg, int packets, memq_columns *c, size_t i)
{
	const bt_stream *s;
	const bt_clock_snapshot *b = NULL, *e = NULL;
	uint64_t count = 0;
	bt_property_availability av;
	if (packets) {
		s = bt_message_discarded_packets_borrow_stream_const(msg);
		if (bt_stream_class_discarded_packets_have_default_clock_snapshots(bt_stream_borrow_class_const(s))) {
			b = bt_message_discarded_packets_borrow_beginning_default_clock_snapshot_const(msg);
			e = bt_message_discarded_packets_borrow_end_default_clock_snapshot_const(msg);
		}
		av = bt_message_discarded_packets_get_count(msg, &count);
	} else {
		s = bt_message_discarded_events_borrow_stream_const(msg);
		if (bt_stream_class_discarded_events_have_default_clock_snapshots(bt_stream_borrow_class_const(s))) {
			b = bt_message_discarded_events_borrow_beginning_default_clock_snapshot_const(msg);
			e = bt_message_discarded_events_borrow_end_default_clock_snapshot_const(msg);
		}
		av = bt_message_discarded_events_get_count(msg, &count);
	}
	if (av != BT_PROPERTY_AVAILABILITY_AVAILABLE)
		count = 0;
	const bt_clock_class *clk = bt_stream_class_borrow_default_clock_class_const(bt_stream_borrow_class_const(s));
	int64_t delta = 0;
	uint64_t freq = 1000000000u;
	if (clk) {
		freq = bt_clock_class_get_frequency(clk);
		int64_t off = clock_offset_ns(clk);
		if (!d->have_ref) {
			d->have_ref = 1;
			d->ref_offset_ns = off;
		}
		delta = off - d->ref_offset_ns;
	}
	int64_t tb = b ? (int64_t)to_ns(bt_clock_snapshot_get_value(b), freq) + delta : d->last_ts;
	int64_t te = e ? (int64_t)to_ns(bt_clock_snapshot_get_value(e), freq) + delta : tb;
	zero_row(c, i);
	int64_t pid = stream_env_vpid(s);
	c->ts[i] = c->begin[i] = tb;
	c->pid[i] = pid;
	c->tid[i] = pid;
	c->kind[i] = K_LOST;
	c->size[i] = (uint64_t)(te - tb);
	c->stream[i] = stream_index(d, s);
	c->aux[i] = count;
	c->aux2[i] = (uint64_t)packets;
	d->last_ts = tb;
	return 1;
}

static void hexify(char *out, const bt_field *arr)
{
	uint64_t n = bt_field_array_get_length(arr);
	if (n > 64)
		n = 64;
	for (uint64_t k = 0; k < n; k++)
		sprintf(out + 2 * k, "%02x",
			(unsigned)bt_field_integer_unsigned_get_value(bt_field_array_borrow_element_field_by_index_const(arr, k)));
	out[2 * n] = '\0';
}

/* MemKind of an event's mem_kind enum (0, unknown, for a value without a label). */
static uint8_t mem_kind(struct handler *h, const bt_field *pl)
{
	int code = enum_lookup(&h->mem_map, get_i(h, pl, R_MEM));
	return (uint8_t)(code < 0 ? 0 : code);
}

static int runtime_of(struct handler *h, const bt_field *pl)
{
	int code = enum_lookup(&h->runtime_map, get_i(h, pl, R_RUNTIME));
	return code < 0 ? 0 : code;
}

/* A loaded binary (statedump bin_info, lttng_ust_lib:load, memq:lib_load) as a "binary" side record. */
static void side_binary(memq_decoder *d, const struct handler *h, const bt_field *pl, int64_t pid, int64_t ts)
{
	side_printf(d, "{\"t\":\"binary\",\"pid\":%" PRId64 ",\"ts\":%" PRId64 ",\"baddr\":%" PRIu64
		    ",\"memsz\":%" PRIu64 ",\"path\":", pid, ts, get_u(pl, h->idx[R_BADDR]), get_u(pl, h->idx[R_MEMSZ]));
	side_json_str(d, get_str(h, pl, R_PATH));
	side_printf(d, "}\n");
}

/* Its build id (statedump/lttng_ust_lib build_id, memq:lib_load) as a "build_id" side record. */
static void side_build_id(memq_decoder *d, const struct handler *h, const bt_field *pl, int64_t pid)
{
	char hex[129];

	hexify(hex, member(pl, h->idx[R_BUILD_ID]));
	side_printf(d, "{\"t\":\"build_id\",\"pid\":%" PRId64 ",\"baddr\":%" PRIu64 ",\"build_id\":\"%s\"}\n",
		    pid, get_u(pl, h->idx[R_BADDR]), hex);
}

/* An event message -> 0 or 1 row. */
static int event_row(memq_decoder *d, const bt_message *msg, memq_columns *c, size_t i)
{
	const bt_event *ev = bt_message_event_borrow_event_const(msg);
	struct handler *h = handler_for(d, ev);
	d->events_seen++;
	if (h->action == A_IGNORE)
		return 0;
	if (h->action == A_UNKNOWN) {
		h->skipped++;
		return 0;
	}
	int64_t ts = (int64_t)to_ns(bt_clock_snapshot_get_value(
				    bt_message_event_borrow_default_clock_snapshot_const(msg)), h->freq) + h->delta_ns;
	d->last_ts = ts;

	const bt_field *cc = (h->cc_vpid >= 0 || h->cc_vtid >= 0 || h->cc_ip >= 0 || h->cc_procname >= 0)
		? bt_event_borrow_common_context_field_const(ev) : NULL;
	int64_t pid = h->env_vpid, tid;
	if (h->cc_vpid >= 0)
		pid = h->cc_vpid_signed ? bt_field_integer_signed_get_value(member(cc, h->cc_vpid))
					: (int64_t)bt_field_integer_unsigned_get_value(member(cc, h->cc_vpid));
	if (h->cc_vtid >= 0)
		tid = h->cc_vtid_signed ? bt_field_integer_signed_get_value(member(cc, h->cc_vtid))
					: (int64_t)bt_field_integer_unsigned_get_value(member(cc, h->cc_vtid));
	else
		tid = pid;
	if (h->cc_vpid < 0 && h->env_vpid == 0 && h->cc_vtid >= 0)
		pid = tid; /* no process id anywhere: each thread a process of its own (said by decode.py) */
	if (h->cc_procname >= 0)
		note_thread_name(d, pid, tid, bt_field_string_get_value(member(cc, h->cc_procname)));

	const bt_field *pl = bt_event_borrow_payload_field_const(ev);
	switch (h->action) {
	case A_PROCNAME:
		side_printf(d, "{\"t\":\"process\",\"pid\":%" PRId64 ",\"name\":", pid);
		side_json_str(d, get_str(h, pl, R_NAME));
		side_printf(d, "}\n");
		return 0;
	case A_BIN_INFO:
		side_binary(d, h, pl, pid, ts);
		return 0;
	case A_BUILD_ID:
		side_build_id(d, h, pl, pid);
		return 0;
	case A_LIB:
		side_binary(d, h, pl, pid, ts);
		side_build_id(d, h, pl, pid);
		return 0;
	case A_CLOCK:
		side_printf(d, "{\"t\":\"clock\",\"pid\":%" PRId64 ",\"where\":", pid);
		side_json_str(d, get_str(h, pl, R_WHERE));
		side_printf(d, ",\"realtime\":%" PRIu64 ",\"monotonic\":%" PRIu64 ",\"boottime\":%" PRIu64 "}\n",
			    get_u(pl, h->idx[R_REALTIME]), get_u(pl, h->idx[R_MONOTONIC]),
			    get_u(pl, h->idx[R_BOOTTIME]));
		return 0;
	case A_DEVICE:
		side_printf(d, "{\"t\":\"device\",\"pid\":%" PRId64 ",\"runtime\":\"%s\",\"device\":%" PRId64
			    ",\"integrated\":%s,\"unified_memory\":%s,\"name\":", pid,
			    runtime_names[runtime_of(h, pl)],
			    get_i(h, pl, R_DEVICE), get_i(h, pl, R_INTEGRATED) ? "true" : "false",
			    get_i(h, pl, R_UNIFIED) ? "true" : "false");
		side_json_str(d, get_str(h, pl, R_NAME));
		side_printf(d, ",\"uuid\":");
		side_json_str(d, get_str(h, pl, R_UUID));
		side_printf(d, ",\"pci_bus_id\":");
		side_json_str(d, get_str(h, pl, R_BUS_ID));
		side_printf(d, "}\n");
		return 0;
	case A_IDENTITY:
		side_printf(d, "{\"t\":\"identity\",\"pid\":%" PRId64 ",\"ppid\":%" PRId64 ",\"host\":", pid,
			    get_i(h, pl, R_PPID));
		side_json_str(d, get_str(h, pl, R_HOST));
		side_printf(d, ",\"env\":");
		side_json_str(d, get_str(h, pl, R_ENV));
		side_printf(d, "}\n");
		return 0;
	default:
		break;
	}

	/* Row-producing classes. */
	zero_row(c, i);
	c->ts[i] = ts;
	c->pid[i] = pid;
	c->tid[i] = tid;
	c->ip[i] = h->cc_ip >= 0 ? bt_field_integer_unsigned_get_value(member(cc, h->cc_ip)) : 0;
	c->kind[i] = (uint8_t)h->kind;
	if (h->action == A_LIBC) {
		c->begin[i] = ts;
		c->api[i] = (uint16_t)h->api;
		c->mem[i] = (uint8_t)h->mem_fixed;
		uint64_t ptr = get_u(pl, h->idx[R_PTR]);
		c->size[i] = get_u(pl, h->idx[R_SIZE]);
		switch (h->kind) {
		case K_CALLOC: {
			uint64_t nmemb = get_u(pl, h->idx[R_NMEMB]);
			c->aux[i] = nmemb;
			c->size[i] *= nmemb;
			break;
		}
		case K_REALLOC:
			c->src[i] = get_u(pl, h->idx[R_SRC]);
			break;
		case K_MEMALIGN:
			c->aux[i] = get_u(pl, h->idx[R_ALIGN]);
			break;
		case K_POSIX_MEMALIGN:
			c->aux[i] = get_u(pl, h->idx[R_ALIGN]);
			c->result[i] = get_i(h, pl, R_RESULT);
			if (c->result[i] != 0)
				ptr = 0; /* *memptr is untouched on error */
			break;
		default:
			break;
		}
		c->ptr[i] = ptr;
		return 1;
	}
	if (h->action == A_HOST) {
		/* size = usable size (on the free too); aux2 = what the caller asked for (0 on frees) */
		c->begin[i] = ts;
		c->api[i] = (uint16_t)api_index(d, &h->api_map, get_i(h, pl, R_API));
		c->mem[i] = (uint8_t)h->mem_fixed;
		c->ptr[i] = get_u(pl, h->idx[R_PTR]);
		c->size[i] = get_u(pl, h->idx[R_SIZE]);
		c->aux2[i] = get_u(pl, h->idx[R_REQUESTED]);
		return 1;
	}
	if (h->action == A_HOST_SMALL) {
		/* one thread's blocks below the threshold since its previous host_small */
		c->begin[i] = ts;
		c->mem[i] = (uint8_t)h->mem_fixed;
		c->aux[i] = get_u(pl, h->idx[R_ALLOC_COUNT]);
		c->size[i] = get_u(pl, h->idx[R_ALLOC_BYTES]);
		c->aux2[i] = get_u(pl, h->idx[R_FREE_COUNT]);
		c->flags[i] = get_u(pl, h->idx[R_FREE_BYTES]);
		return 1;
	}

	if (h->action == A_WINDOW) {
		/* aux = 1 opens / 0 closes, aux2 = cause, flags = index; api: the profiler
		 * call, "" for a timer or the process exit. */
		int64_t api = get_i(h, pl, R_API);
		int cause = enum_lookup(&h->cause_map, get_i(h, pl, R_CAUSE));
		c->begin[i] = ts;
		c->api[i] = (uint16_t)(api ? api_index(d, &h->api_map, api) : intern_api(d, ""));
		c->aux[i] = get_u(pl, h->idx[R_OPEN]);
		c->aux2[i] = (uint64_t)(cause < 0 ? 0 : cause);
		c->flags[i] = get_u(pl, h->idx[R_INDEX]);
		return 1;
	}

	/* memq GPU events: common members first. */
	c->api[i] = (uint16_t)api_index(d, &h->api_map, get_i(h, pl, R_API));
	c->device[i] = (int32_t)get_i(h, pl, R_DEVICE);
	c->result[i] = get_i(h, pl, R_RESULT);
	c->begin[i] = (int64_t)get_u(pl, h->idx[R_BEGIN]) + h->delta_ns;
	c->stream[i] = get_u(pl, h->idx[R_STREAM]);
	c->ptr[i] = get_u(pl, h->idx[R_PTR]);
	c->size[i] = get_u(pl, h->idx[R_SIZE]);
	switch (h->action) {
	case A_ALLOC:
		c->mem[i] = mem_kind(h, pl);
		c->flags[i] = get_u(pl, h->idx[R_FLAGS]);
		c->aux[i] = get_u(pl, h->idx[R_WIDTH]);
		c->aux2[i] = get_u(pl, h->idx[R_HEIGHT]);
		break;
	case A_FREE:
		c->mem[i] = mem_kind(h, pl);
		break;
	case A_COPY: {
		int64_t src_device = get_i(h, pl, R_SRC_DEVICE);
		c->src[i] = get_u(pl, h->idx[R_SRC]);
		c->copy_kind[i] = (int32_t)get_i(h, pl, R_KIND);
		c->aux[i] = src_device >= 0 ? (uint64_t)src_device : get_u(pl, h->idx[R_WIDTH]);
		c->aux2[i] = get_u(pl, h->idx[R_HEIGHT]);
		c->dpitch[i] = get_u(pl, h->idx[R_DPITCH]);
		c->spitch[i] = get_u(pl, h->idx[R_SPITCH]);
		c->depth[i] = get_u(pl, h->idx[R_DEPTH]);   /* 0 in traces before 3D copies */
		c->dslice[i] = get_u(pl, h->idx[R_DSLICE]);
		c->sslice[i] = get_u(pl, h->idx[R_SSLICE]);
		c->seq[i] = get_u(pl, h->idx[R_SEQ]);       /* content fingerprints: 0 in older traces */
		c->content[i] = (uint8_t)get_u(pl, h->idx[R_CONTENT]);
		c->content_mode[i] = (uint8_t)get_u(pl, h->idx[R_CONTENT_MODE]);
		c->src_hash[i] = get_u(pl, h->idx[R_SRC_HASH]);
		c->dst_hash_before[i] = get_u(pl, h->idx[R_DST_HASH_BEFORE]);
		c->dst_hash_after[i] = get_u(pl, h->idx[R_DST_HASH_AFTER]);
		break;
	}
	case A_COPY_DONE:   /* an instant: no call of its own */
		c->begin[i] = ts;
		c->seq[i] = get_u(pl, h->idx[R_SEQ]);
		c->dst_hash_after[i] = get_u(pl, h->idx[R_DST_HASH_AFTER]);
		break;
	case A_SET:
		c->aux[i] = (uint64_t)get_i(h, pl, R_VALUE);
		break;
	case A_PREFETCH:
	case A_SET_DEVICE:
		c->aux[i] = (uint64_t)get_i(h, pl, R_TARGET);
		break;
	case A_ADVISE:
		c->aux[i] = (uint64_t)get_i(h, pl, R_VALUE);
		c->aux2[i] = (uint64_t)get_i(h, pl, R_TARGET);
		break;
	default:
		break;
	}
	return 1;
}

static int handle(memq_decoder *d, const bt_message *msg, memq_columns *c, size_t i)
{
	switch (bt_message_get_type(msg)) {
	case BT_MESSAGE_TYPE_EVENT:
		return event_row(d, msg, c, i);
	case BT_MESSAGE_TYPE_DISCARDED_EVENTS:
		return lost_row(d, msg, 0, c, i);
	case BT_MESSAGE_TYPE_DISCARDED_PACKETS:
		return lost_row(d, msg, 1, c, i);
	case BT_MESSAGE_TYPE_STREAM_BEGINNING:
		stream_index(d, bt_message_stream_beginning_borrow_stream_const(msg));
		return 0;
	case BT_MESSAGE_TYPE_STREAM_END:
		/* The stream object may be freed now and its address reused by a later stream. */
		d->streams[stream_index(d, bt_message_stream_end_borrow_stream_const(msg))].stream = NULL;
		return 0;
	case BT_MESSAGE_TYPE_PACKET_BEGINNING:
		d->streams[stream_index(d, bt_packet_borrow_stream_const(
			bt_message_packet_beginning_borrow_packet_const(msg)))].packets_begun++;
		return 0;
	case BT_MESSAGE_TYPE_PACKET_END:
		d->streams[stream_index(d, bt_packet_borrow_stream_const(
			bt_message_packet_end_borrow_packet_const(msg)))].packets_ended++;
		return 0;
	default:
		return 0;
	}
}

/* ------------------------------------------------------------------ errors */

static void take_error(memq_decoder *d, const char *what)
{
	const bt_error *err = bt_current_thread_take_error();
	size_t cap = 1024, len = 0;
	char *out = malloc(cap);
	len = (size_t)snprintf(out, cap, "%s", what);
	if (err) {
		uint64_t n = bt_error_get_cause_count(err);
		for (uint64_t k = 0; k < n; k++) {
			const bt_error_cause *cause = bt_error_borrow_cause_by_index(err, k);
			if (bt_error_cause_get_actor_type(cause) == BT_ERROR_CAUSE_ACTOR_TYPE_MESSAGE_ITERATOR) {
				const char *port = bt_error_cause_message_iterator_actor_get_component_output_port_name(cause);
				for (size_t i = 0; i < d->nstreams; i++)
					if (strcmp(d->streams[i].port, port) == 0)
						d->failed_stream = (long)i;
			}
			const char *m = bt_error_cause_get_message(cause);
			size_t ml = strlen(m);
			if (len + ml + 8 > cap) {
				cap = (len + ml + 8) * 2;
				out = realloc(out, cap);
			}
			len += (size_t)snprintf(out + len, cap - len, "\n%s", m);
		}
		bt_error_release(err);
	}
	free(d->error);
	d->error = out;
}

/* ------------------------------------------------------------------ graph */

static bt_graph_simple_sink_component_consume_func_status consume(bt_message_iterator *it, void *data)
{
	memq_decoder *d = data;
	bt_message_array_const msgs;
	uint64_t count;
	switch (bt_message_iterator_next(it, &msgs, &count)) {
	case BT_MESSAGE_ITERATOR_NEXT_STATUS_OK:
		d->pending = msgs;
		d->npending = count;
		d->ipending = 0;
		return BT_GRAPH_SIMPLE_SINK_COMPONENT_CONSUME_FUNC_STATUS_OK;
	case BT_MESSAGE_ITERATOR_NEXT_STATUS_END:
		return BT_GRAPH_SIMPLE_SINK_COMPONENT_CONSUME_FUNC_STATUS_END;
	case BT_MESSAGE_ITERATOR_NEXT_STATUS_AGAIN:
		return BT_GRAPH_SIMPLE_SINK_COMPONENT_CONSUME_FUNC_STATUS_AGAIN;
	case BT_MESSAGE_ITERATOR_NEXT_STATUS_MEMORY_ERROR:
		return BT_GRAPH_SIMPLE_SINK_COMPONENT_CONSUME_FUNC_STATUS_MEMORY_ERROR;
	default:
		return BT_GRAPH_SIMPLE_SINK_COMPONENT_CONSUME_FUNC_STATUS_ERROR;
	}
}

/* The `group` the CTF source gives a directory (trace UUID), as the babeltrace2 CLI asks. */
static char *support_group(const bt_component_class *fs, const char *dir)
{
	bt_value *params = bt_value_map_create();
	bt_value_map_insert_string_entry(params, "input", dir);
	bt_value_map_insert_string_entry(params, "type", "directory");
	bt_query_executor *q = bt_query_executor_create(fs, "babeltrace.support-info", params);
	const bt_value *res = NULL;
	char *group = NULL;
	if (q && bt_query_executor_query(q, &res) == BT_QUERY_EXECUTOR_QUERY_STATUS_OK && res &&
	    bt_value_is_map(res)) {
		const bt_value *g = bt_value_map_borrow_entry_value_const(res, "group");
		if (g && bt_value_is_string(g))
			group = strdup(bt_value_string_get(g));
	}
	if (!group)
		bt_current_thread_clear_error();
	bt_value_put_ref(res);
	bt_query_executor_put_ref(q);
	bt_value_put_ref(params);
	return group;
}

void memq_close(memq_decoder *d);

/* Widens [d->range_begin, d->range_end] (ns from origin) with the streams of one source's inputs. */
static void add_time_range(memq_decoder *d, const bt_component_class *fs, const bt_value *params)
{
	bt_query_executor *q = bt_query_executor_create(fs, "babeltrace.trace-infos", params);
	const bt_value *res = NULL;
	if (q && bt_query_executor_query(q, &res) == BT_QUERY_EXECUTOR_QUERY_STATUS_OK && res &&
	    bt_value_is_array(res)) {
		for (uint64_t t = 0; t < bt_value_array_get_length(res); t++) {
			const bt_value *si = bt_value_map_borrow_entry_value_const(
				bt_value_array_borrow_element_by_index_const(res, t), "stream-infos");
			for (uint64_t k = 0; si && k < bt_value_array_get_length(si); k++) {
				const bt_value *r = bt_value_map_borrow_entry_value_const(
					bt_value_array_borrow_element_by_index_const(si, k), "range-ns");
				if (!r)
					continue;
				int64_t b = bt_value_integer_signed_get(bt_value_map_borrow_entry_value_const(r, "begin"));
				int64_t e = bt_value_integer_signed_get(bt_value_map_borrow_entry_value_const(r, "end"));
				if (!d->have_range || b < d->range_begin)
					d->range_begin = b;
				if (!d->have_range || e > d->range_end)
					d->range_end = e;
				d->have_range = 1;
			}
		}
	} else {
		bt_current_thread_clear_error();
	}
	bt_value_put_ref(res);
	bt_query_executor_put_ref(q);
}

/* Opens the trace directories `dirs` (each containing `metadata`) as one muxed graph.
 * With want_range, also asks the sources for their time range (progress).
 * Returns NULL only on out of memory; check memq_error() otherwise. */
memq_decoder *memq_open(const char *const *dirs, int ndirs, int want_range)
{
	memq_decoder *d = calloc(1, sizeof(*d));
	if (!d)
		return NULL;
	d->failed_stream = -1;
	const bt_component_class *fs, *muxer_cls;
	const bt_component_filter *muxer;
	const bt_component_sink *sink;
	if (bt_plugin_find("ctf", BT_TRUE, BT_TRUE, BT_TRUE, BT_TRUE, BT_TRUE, &d->ctf_plugin) !=
		    BT_PLUGIN_FIND_STATUS_OK ||
	    bt_plugin_find("utils", BT_TRUE, BT_TRUE, BT_TRUE, BT_TRUE, BT_TRUE, &d->utils_plugin) !=
		    BT_PLUGIN_FIND_STATUS_OK) {
		take_error(d, "babeltrace2 plugins `ctf` / `utils` not found");
		return d;
	}
	fs = bt_component_class_source_as_component_class_const(
		bt_plugin_borrow_source_component_class_by_name_const(d->ctf_plugin, "fs"));
	muxer_cls = bt_component_class_filter_as_component_class_const(
		bt_plugin_borrow_filter_component_class_by_name_const(d->utils_plugin, "muxer"));
	d->graph = bt_graph_create(0);
	if (bt_graph_add_filter_component(d->graph, (const bt_component_class_filter *)muxer_cls, "muxer",
					  NULL, BT_LOGGING_LEVEL_NONE, &muxer) != BT_GRAPH_ADD_COMPONENT_STATUS_OK) {
		take_error(d, "cannot create the muxer");
		return d;
	}

	/* Group directories of one trace (same UUID: e.g. rotation chunks) into one source. */
	char **groups = calloc((size_t)ndirs, sizeof(*groups));
	int *done = calloc((size_t)ndirs, sizeof(*done));
	for (int k = 0; k < ndirs; k++)
		groups[k] = support_group(fs, dirs[k]);
	int ok = 1, nsrc = 0;
	for (int k = 0; k < ndirs && ok; k++) {
		if (done[k])
			continue;
		bt_value *params = bt_value_map_create();
		bt_value *inputs = bt_value_array_create();
		for (int j = k; j < ndirs; j++) {
			if (done[j] || (j != k && (!groups[k] || !groups[j] || strcmp(groups[k], groups[j]) != 0)))
				continue;
			done[j] = 1;
			bt_value_array_append_string_element(inputs, dirs[j]);
		}
		bt_value_map_insert_entry(params, "inputs", inputs);
		if (want_range)
			add_time_range(d, fs, params);
		char name[32];
		snprintf(name, sizeof(name), "source-%d", nsrc++);
		const bt_component_source *src;
		if (bt_graph_add_source_component(d->graph, (const bt_component_class_source *)fs, name, params,
						  BT_LOGGING_LEVEL_NONE, &src) != BT_GRAPH_ADD_COMPONENT_STATUS_OK) {
			take_error(d, dirs[k]);
			ok = 0;
		} else {
			uint64_t nports = bt_component_source_get_output_port_count(src);
			for (uint64_t p = 0; p < nports && ok; p++) {
				uint64_t nin = bt_component_filter_get_input_port_count(muxer);
				const bt_port_input *in = bt_component_filter_borrow_input_port_by_index_const(muxer, nin - 1);
				if (bt_graph_connect_ports(d->graph,
							   bt_component_source_borrow_output_port_by_index_const(src, p),
							   in, NULL) != BT_GRAPH_CONNECT_PORTS_STATUS_OK) {
					take_error(d, dirs[k]);
					ok = 0;
				}
			}
		}
		bt_value_put_ref(inputs);
		bt_value_put_ref(params);
	}
	for (int k = 0; k < ndirs; k++)
		free(groups[k]);
	free(groups);
	free(done);
	if (!ok)
		return d;
	if (bt_graph_add_simple_sink_component(d->graph, "memq", NULL, consume, NULL, d, &sink) !=
		    BT_GRAPH_ADD_COMPONENT_STATUS_OK ||
	    bt_graph_connect_ports(d->graph, bt_component_filter_borrow_output_port_by_index_const(muxer, 0),
				   bt_component_sink_borrow_input_port_by_index_const(sink, 0),
				   NULL) != BT_GRAPH_CONNECT_PORTS_STATUS_OK) {
		take_error(d, "cannot connect the sink");
		return d;
	}
	return d;
}

const char *memq_error(memq_decoder *d) { return d->error; }

static void put_pending(memq_decoder *d)
{
	for (; d->ipending < d->npending; d->ipending++)
		bt_message_put_ref(d->pending[d->ipending]);
}

static void emit_skipped(memq_decoder *d)
{
	for (size_t b = 0; b < d->hcap; b++)
		for (struct handler *h = d->htab[b]; h; h = h->next)
			if (h->skipped) {
				side_printf(d, "{\"t\":\"skipped\",\"name\":");
				side_json_str(d, h->name);
				side_printf(d, ",\"count\":%" PRIu64 "}\n", h->skipped);
			}
}

/* Fills up to `capacity` rows; returns the row count, 0 at the end, -1 on error. */
int64_t memq_next(memq_decoder *d, memq_columns *c, int64_t capacity)
{
	size_t n = 0;
	if (d->error)
		return -1;
	while ((int64_t)n < capacity) {
		if (d->ipending < d->npending) {
			const bt_message *msg = d->pending[d->ipending++];
			n += (size_t)handle(d, msg, c, n);
			bt_message_put_ref(msg);
			continue;
		}
		if (d->ended)
			break;
		bt_graph_run_once_status st = bt_graph_run_once(d->graph);
		if (st == BT_GRAPH_RUN_ONCE_STATUS_END) {
			d->ended = 1;
			emit_skipped(d);
		} else if (st != BT_GRAPH_RUN_ONCE_STATUS_OK && st != BT_GRAPH_RUN_ONCE_STATUS_AGAIN) {
			take_error(d, "cannot read the trace");
			return -1;
		}
	}
	return (int64_t)n;
}

/* Side records produced so far (JSON lines); the buffer is emptied by the call. */
const char *memq_side(memq_decoder *d, size_t *len)
{
	static char empty[1] = "";
	*len = d->side_len;
	d->side_len = 0;
	return d->side ? d->side : empty;
}

/* The stream file whose reading failed (NULL if unknown), with its packets delivered so far. */
const char *memq_failed_stream(memq_decoder *d, uint64_t *packets_begun, uint64_t *packets_ended)
{
	if (d->failed_stream < 0)
		return NULL;
	*packets_begun = d->streams[d->failed_stream].packets_begun;
	*packets_ended = d->streams[d->failed_stream].packets_ended;
	return d->streams[d->failed_stream].name;
}

/* Stream i (in the order met) and its packets delivered so far, for every stream: a muxer error
 * names no stream, so salvage looks at where each one stood (NULL past the last stream). */
const char *memq_stream_progress(memq_decoder *d, uint64_t i, uint64_t *packets_begun, uint64_t *packets_ended)
{
	if (i >= d->nstreams)
		return NULL;
	*packets_begun = d->streams[i].packets_begun;
	*packets_ended = d->streams[i].packets_ended;
	return d->streams[i].name;
}

uint64_t memq_events_seen(memq_decoder *d) { return d->events_seen; }
/* Progress: nanoseconds read so far and in all (0, 0 when unknown). */
void memq_progress(memq_decoder *d, int64_t *done, int64_t *total)
{
	*done = *total = 0;
	if (!d->have_range || !d->have_ref)
		return;
	*total = d->range_end - d->range_begin;
	*done = d->last_ts + d->ref_offset_ns - d->range_begin;
	if (*done < 0)
		*done = 0;
	if (*done > *total)
		*done = *total;
}

int64_t memq_reference_offset_ns(memq_decoder *d) { return d->ref_offset_ns; }

void memq_close(memq_decoder *d)
{
	if (!d)
		return;
	put_pending(d);
	bt_graph_put_ref(d->graph);
	bt_plugin_put_ref(d->ctf_plugin);
	bt_plugin_put_ref(d->utils_plugin);
	for (size_t b = 0; b < d->hcap; b++) {
		struct handler *h = d->htab[b];
		while (h) {
			struct handler *next = h->next;
			free(h->api_map.e);
			free(h->mem_map.e);
			free(h->runtime_map.e);
			free(h->cause_map.e);
			free(h->name);
			free(h);
			h = next;
		}
	}
	free(d->htab);
	for (size_t i = 0; i < d->napis; i++)
		free(d->apis[i]);
	free(d->apis);
	for (size_t i = 0; i < d->nstreams; i++) {
		free(d->streams[i].name);
		free(d->streams[i].port);
	}
	free(d->streams);
	free(d->threads);
	free(d->side);
	free(d->error);
	free(d);
}
