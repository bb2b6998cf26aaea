/*
 * LTTng-UST 2.13 tracepoint provider `memq` (the contract: docs/EVENTS.md).
 *
 * Every event takes a record pointer and the caller's address `ip`:
 * LTTNG_UST_TP_IP_PARAM makes the `ip` context (when `memq record` adds it)
 * the application's call site, not an address inside this wrapper, as in
 * LTTng's own libc wrapper.
 */
#undef LTTNG_UST_TRACEPOINT_PROVIDER
#define LTTNG_UST_TRACEPOINT_PROVIDER memq

#undef LTTNG_UST_TRACEPOINT_INCLUDE
#define LTTNG_UST_TRACEPOINT_INCLUDE "./memq_tp.h"

#undef LTTNG_UST_TP_IP_PARAM
#define LTTNG_UST_TP_IP_PARAM ip

#if !defined(MEMQ_TP_H) || defined(LTTNG_UST_TRACEPOINT_HEADER_MULTI_READ)
#define MEMQ_TP_H

#include <lttng/tracepoint.h>
#include "memq_api.h"

#define MEMQ_ENUM_VALUE(name, value) lttng_ust_field_enum_value(#name, value)
LTTNG_UST_TRACEPOINT_ENUM(memq, api,
	LTTNG_UST_TP_ENUM_VALUES(MEMQ_APIS(MEMQ_ENUM_VALUE)))

LTTNG_UST_TRACEPOINT_ENUM(memq, mem_kind,
	LTTNG_UST_TP_ENUM_VALUES(
		lttng_ust_field_enum_value("host", 1)
		lttng_ust_field_enum_value("pinned", 2)
		lttng_ust_field_enum_value("registered", 3)
		lttng_ust_field_enum_value("device", 4)
		lttng_ust_field_enum_value("managed", 5)))

LTTNG_UST_TRACEPOINT_ENUM(memq, memcpy_kind,
	LTTNG_UST_TP_ENUM_VALUES(
		lttng_ust_field_enum_value("HostToHost", 0)
		lttng_ust_field_enum_value("HostToDevice", 1)
		lttng_ust_field_enum_value("DeviceToHost", 2)
		lttng_ust_field_enum_value("DeviceToDevice", 3)
		lttng_ust_field_enum_value("Default", 4)
		lttng_ust_field_enum_value("DeviceToDeviceNoCU", 1024)))

LTTNG_UST_TRACEPOINT_ENUM(memq, runtime,
	LTTNG_UST_TP_ENUM_VALUES(
		lttng_ust_field_enum_value("hip", 1)
		lttng_ust_field_enum_value("cuda", 2)))

LTTNG_UST_TRACEPOINT_EVENT_CLASS(memq, alloc_class,
	LTTNG_UST_TP_ARGS(const struct memq_alloc_rec *, r, void *, ip),
	LTTNG_UST_TP_FIELDS(
		lttng_ust_field_unused(ip)
		lttng_ust_field_enum(memq, api, uint16_t, api, r->api)
		lttng_ust_field_integer_hex(uint64_t, ptr, r->ptr)
		lttng_ust_field_integer(uint64_t, size, r->size)
		lttng_ust_field_enum(memq, mem_kind, uint8_t, mem_kind, r->mem_kind)
		lttng_ust_field_integer(int32_t, device, r->device)
		lttng_ust_field_integer_hex(uint64_t, stream, r->stream)
		lttng_ust_field_integer(uint64_t, flags, r->flags)
		lttng_ust_field_integer(uint64_t, width, r->width)
		lttng_ust_field_integer(uint64_t, height, r->height)
		lttng_ust_field_integer(int32_t, result, r->result)
		lttng_ust_field_integer(uint64_t, begin_ns, r->begin_ns)))
LTTNG_UST_TRACEPOINT_EVENT_INSTANCE(memq, alloc_class, memq, alloc,
	LTTNG_UST_TP_ARGS(const struct memq_alloc_rec *, r, void *, ip))
LTTNG_UST_TRACEPOINT_EVENT_INSTANCE(memq, alloc_class, memq, register,
	LTTNG_UST_TP_ARGS(const struct memq_alloc_rec *, r, void *, ip))

LTTNG_UST_TRACEPOINT_EVENT_CLASS(memq, free_class,
	LTTNG_UST_TP_ARGS(const struct memq_free_rec *, r, void *, ip),
	LTTNG_UST_TP_FIELDS(
		lttng_ust_field_unused(ip)
		lttng_ust_field_enum(memq, api, uint16_t, api, r->api)
		lttng_ust_field_integer_hex(uint64_t, ptr, r->ptr)
		lttng_ust_field_integer(uint64_t, size, r->size)
		lttng_ust_field_enum(memq, mem_kind, uint8_t, mem_kind, r->mem_kind)
		lttng_ust_field_integer(int32_t, device, r->device)
		lttng_ust_field_integer_hex(uint64_t, stream, r->stream)
		lttng_ust_field_integer(int32_t, result, r->result)
		lttng_ust_field_integer(uint64_t, begin_ns, r->begin_ns)))
LTTNG_UST_TRACEPOINT_EVENT_INSTANCE(memq, free_class, memq, free,
	LTTNG_UST_TP_ARGS(const struct memq_free_rec *, r, void *, ip))
LTTNG_UST_TRACEPOINT_EVENT_INSTANCE(memq, free_class, memq, unregister,
	LTTNG_UST_TP_ARGS(const struct memq_free_rec *, r, void *, ip))

LTTNG_UST_TRACEPOINT_EVENT(memq, copy,
	LTTNG_UST_TP_ARGS(const struct memq_copy_rec *, r, void *, ip),
	LTTNG_UST_TP_FIELDS(
		lttng_ust_field_unused(ip)
		lttng_ust_field_enum(memq, api, uint16_t, api, r->api)
		lttng_ust_field_integer_hex(uint64_t, dst, r->dst)
		lttng_ust_field_integer_hex(uint64_t, src, r->src)
		lttng_ust_field_integer(uint64_t, bytes, r->bytes)
		lttng_ust_field_enum(memq, memcpy_kind, int32_t, kind, r->kind)
		lttng_ust_field_integer_hex(uint64_t, stream, r->stream)
		lttng_ust_field_integer(int32_t, device, r->device)
		lttng_ust_field_integer(int32_t, src_device, r->src_device)
		lttng_ust_field_integer(uint64_t, width, r->width)
		lttng_ust_field_integer(uint64_t, height, r->height)
		lttng_ust_field_integer(uint64_t, dpitch, r->dpitch)
		lttng_ust_field_integer(uint64_t, spitch, r->spitch)
		lttng_ust_field_integer(int32_t, result, r->result)
		lttng_ust_field_integer(uint64_t, begin_ns, r->begin_ns)
		lttng_ust_field_integer(uint64_t, seq, r->seq)
		lttng_ust_field_integer(uint8_t, content, r->content)
		lttng_ust_field_integer(uint8_t, content_mode, r->content_mode)
		lttng_ust_field_integer_hex(uint64_t, src_hash, r->src_hash)
		lttng_ust_field_integer_hex(uint64_t, dst_hash_before, r->dst_hash_before)
		lttng_ust_field_integer_hex(uint64_t, dst_hash_after, r->dst_hash_after)
		lttng_ust_field_integer(uint64_t, depth, r->depth)
		lttng_ust_field_integer(uint64_t, dslice, r->dslice)
		lttng_ust_field_integer(uint64_t, sslice, r->sslice)))

LTTNG_UST_TRACEPOINT_EVENT(memq, set,
	LTTNG_UST_TP_ARGS(const struct memq_set_rec *, r, void *, ip),
	LTTNG_UST_TP_FIELDS(
		lttng_ust_field_unused(ip)
		lttng_ust_field_enum(memq, api, uint16_t, api, r->api)
		lttng_ust_field_integer_hex(uint64_t, dst, r->dst)
		lttng_ust_field_integer(int32_t, value, r->value)
		lttng_ust_field_integer(uint64_t, bytes, r->bytes)
		lttng_ust_field_integer_hex(uint64_t, stream, r->stream)
		lttng_ust_field_integer(int32_t, device, r->device)
		lttng_ust_field_integer(int32_t, result, r->result)
		lttng_ust_field_integer(uint64_t, begin_ns, r->begin_ns)))

LTTNG_UST_TRACEPOINT_EVENT(memq, prefetch,
	LTTNG_UST_TP_ARGS(const struct memq_prefetch_rec *, r, void *, ip),
	LTTNG_UST_TP_FIELDS(
		lttng_ust_field_unused(ip)
		lttng_ust_field_enum(memq, api, uint16_t, api, r->api)
		lttng_ust_field_integer_hex(uint64_t, ptr, r->ptr)
		lttng_ust_field_integer(uint64_t, bytes, r->bytes)
		lttng_ust_field_integer(int32_t, dst_device, r->dst_device)
		lttng_ust_field_integer_hex(uint64_t, stream, r->stream)
		lttng_ust_field_integer(int32_t, device, r->device)
		lttng_ust_field_integer(int32_t, result, r->result)
		lttng_ust_field_integer(uint64_t, begin_ns, r->begin_ns)))

LTTNG_UST_TRACEPOINT_EVENT(memq, advise,
	LTTNG_UST_TP_ARGS(const struct memq_advise_rec *, r, void *, ip),
	LTTNG_UST_TP_FIELDS(
		lttng_ust_field_unused(ip)
		lttng_ust_field_enum(memq, api, uint16_t, api, r->api)
		lttng_ust_field_integer_hex(uint64_t, ptr, r->ptr)
		lttng_ust_field_integer(uint64_t, bytes, r->bytes)
		lttng_ust_field_integer(int32_t, advice, r->advice)
		lttng_ust_field_integer(int32_t, target_device, r->target_device)
		lttng_ust_field_integer(int32_t, device, r->device)
		lttng_ust_field_integer(int32_t, result, r->result)
		lttng_ust_field_integer(uint64_t, begin_ns, r->begin_ns)))

LTTNG_UST_TRACEPOINT_EVENT(memq, sync,
	LTTNG_UST_TP_ARGS(const struct memq_sync_rec *, r, void *, ip),
	LTTNG_UST_TP_FIELDS(
		lttng_ust_field_unused(ip)
		lttng_ust_field_enum(memq, api, uint16_t, api, r->api)
		lttng_ust_field_integer_hex(uint64_t, stream, r->stream)
		lttng_ust_field_integer(int32_t, device, r->device)
		lttng_ust_field_integer(int32_t, result, r->result)
		lttng_ust_field_integer(uint64_t, begin_ns, r->begin_ns)))

LTTNG_UST_TRACEPOINT_EVENT(memq, set_device,
	LTTNG_UST_TP_ARGS(const struct memq_set_device_rec *, r, void *, ip),
	LTTNG_UST_TP_FIELDS(
		lttng_ust_field_unused(ip)
		lttng_ust_field_enum(memq, api, uint16_t, api, r->api)
		lttng_ust_field_integer(int32_t, new_device, r->new_device)
		lttng_ust_field_integer(int32_t, device, r->device)
		lttng_ust_field_integer(int32_t, result, r->result)
		lttng_ust_field_integer(uint64_t, begin_ns, r->begin_ns)))

/* ---- capture layout (docs/EVENTS.md, "Capture layout") ---- */

/* A live allocation written at the start of a capture window: memq:alloc's fields. */
LTTNG_UST_TRACEPOINT_EVENT_INSTANCE(memq, alloc_class, memq, live,
	LTTNG_UST_TP_ARGS(const struct memq_alloc_rec *, r, void *, ip))

LTTNG_UST_TRACEPOINT_EVENT(memq, copy_done,
	LTTNG_UST_TP_ARGS(const struct memq_copy_done_rec *, r, void *, ip),
	LTTNG_UST_TP_FIELDS(
		lttng_ust_field_unused(ip)
		lttng_ust_field_enum(memq, api, uint16_t, api, r->api)
		lttng_ust_field_integer(uint64_t, seq, r->seq)
		lttng_ust_field_integer_hex(uint64_t, stream, r->stream)
		lttng_ust_field_integer(int32_t, device, r->device)
		lttng_ust_field_integer_hex(uint64_t, dst_hash_after, r->dst_hash_after)))

LTTNG_UST_TRACEPOINT_EVENT_CLASS(memq, host_class,
	LTTNG_UST_TP_ARGS(const struct memq_host_rec *, r, void *, ip),
	LTTNG_UST_TP_FIELDS(
		lttng_ust_field_unused(ip)
		lttng_ust_field_enum(memq, api, uint16_t, api, r->api)
		lttng_ust_field_integer_hex(uint64_t, ptr, r->ptr)
		lttng_ust_field_integer(uint64_t, size, r->size)
		lttng_ust_field_integer(uint64_t, requested, r->requested)))
LTTNG_UST_TRACEPOINT_EVENT_INSTANCE(memq, host_class, memq, host_alloc,
	LTTNG_UST_TP_ARGS(const struct memq_host_rec *, r, void *, ip))
LTTNG_UST_TRACEPOINT_EVENT_INSTANCE(memq, host_class, memq, host_free,
	LTTNG_UST_TP_ARGS(const struct memq_host_rec *, r, void *, ip))

LTTNG_UST_TRACEPOINT_EVENT(memq, host_small,
	LTTNG_UST_TP_ARGS(const struct memq_host_small_rec *, r, void *, ip),
	LTTNG_UST_TP_FIELDS(
		lttng_ust_field_unused(ip)
		lttng_ust_field_integer(uint64_t, alloc_count, r->alloc_count)
		lttng_ust_field_integer(uint64_t, alloc_bytes, r->alloc_bytes)
		lttng_ust_field_integer(uint64_t, free_count, r->free_count)
		lttng_ust_field_integer(uint64_t, free_bytes, r->free_bytes)))

LTTNG_UST_TRACEPOINT_ENUM(memq, window_cause,
	LTTNG_UST_TP_ENUM_VALUES(
		lttng_ust_field_enum_value("delay", 1)
		lttng_ust_field_enum_value("duration", 2)
		lttng_ust_field_enum_value("profiler_api", 3)
		lttng_ust_field_enum_value("exit", 4)))

LTTNG_UST_TRACEPOINT_EVENT(memq, window,
	LTTNG_UST_TP_ARGS(const struct memq_window_rec *, r, void *, ip),
	LTTNG_UST_TP_FIELDS(
		lttng_ust_field_unused(ip)
		lttng_ust_field_enum(memq, api, uint16_t, api, r->api)
		lttng_ust_field_integer(uint8_t, open, r->open)
		lttng_ust_field_enum(memq, window_cause, uint8_t, cause, r->cause)
		lttng_ust_field_integer(uint32_t, index, r->index)))

LTTNG_UST_TRACEPOINT_EVENT(memq, clock,
	LTTNG_UST_TP_ARGS(const char *, where, uint64_t, realtime_ns,
		uint64_t, monotonic_ns, uint64_t, boottime_ns, void *, ip),
	LTTNG_UST_TP_FIELDS(
		lttng_ust_field_unused(ip)
		lttng_ust_field_string(where, where)
		lttng_ust_field_integer(uint64_t, realtime_ns, realtime_ns)
		lttng_ust_field_integer(uint64_t, monotonic_ns, monotonic_ns)
		lttng_ust_field_integer(uint64_t, boottime_ns, boottime_ns)))

/* uuid and pci_bus_id appended later: the device's identity across processes
 * (ordinals differ per process under CUDA_VISIBLE_DEVICES); "" when the runtime
 * cannot say. */
LTTNG_UST_TRACEPOINT_EVENT(memq, device,
	LTTNG_UST_TP_ARGS(int, runtime, int, device, const char *, name,
		int, integrated, int, unified_memory, const char *, uuid,
		const char *, pci_bus_id, void *, ip),
	LTTNG_UST_TP_FIELDS(
		lttng_ust_field_unused(ip)
		lttng_ust_field_enum(memq, runtime, uint8_t, runtime, runtime)
		lttng_ust_field_integer(int32_t, device, device)
		lttng_ust_field_string(name, name)
		lttng_ust_field_integer(int32_t, integrated, integrated)
		lttng_ust_field_integer(int32_t, unified_memory, unified_memory)
		lttng_ust_field_string(uuid, uuid)
		lttng_ust_field_string(pci_bus_id, pci_bus_id)))

/*
 * Who the process is in its job, once per process (with memq:clock "start";
 * a forked child writes its own): its parent's pid, the host name, and the
 * launcher's variables that are set ("NAME=value\n" each, in the order of
 * MEMQ_IDENTITY_VARS in memq_core.c: rank, local rank, sizes, job id).
 */
LTTNG_UST_TRACEPOINT_EVENT(memq, identity,
	LTTNG_UST_TP_ARGS(int, ppid, const char *, host, const char *, env, void *, ip),
	LTTNG_UST_TP_FIELDS(
		lttng_ust_field_unused(ip)
		lttng_ust_field_integer(int32_t, ppid, ppid)
		lttng_ust_field_string(host, host)
		lttng_ust_field_string(env, env)))

/* The library map (memq_libmap.h): an object loaded, or unloaded (same fields). */
LTTNG_UST_TRACEPOINT_EVENT_CLASS(memq, lib_class,
	LTTNG_UST_TP_ARGS(const struct memq_lib_rec *, r, void *, ip),
	LTTNG_UST_TP_FIELDS(
		lttng_ust_field_unused(ip)
		lttng_ust_field_integer_hex(uint64_t, baddr, r->baddr)
		lttng_ust_field_integer(uint64_t, memsz, r->memsz)
		lttng_ust_field_string(path, r->path)
		lttng_ust_field_sequence_hex(uint8_t, build_id, r->build_id, uint8_t, r->build_id_len)))
LTTNG_UST_TRACEPOINT_EVENT_INSTANCE(memq, lib_class, memq, lib_load,
	LTTNG_UST_TP_ARGS(const struct memq_lib_rec *, r, void *, ip))
LTTNG_UST_TRACEPOINT_EVENT_INSTANCE(memq, lib_class, memq, lib_unload,
	LTTNG_UST_TP_ARGS(const struct memq_lib_rec *, r, void *, ip))

/*
 * Runtime gates, never emitted: while exactly one of them is enabled, only
 * that runtime's wrappers trace (memq record --api hip / --api cuda); with
 * neither or both enabled (a plain `memq:*`), every runtime is traced. A
 * wrapper of a runtime switched off this way forwards the call after two
 * more loads, instead of running its whole traced path for an event that an
 * LTTng filter would drop. The CUDA driver is under the cuda gate.
 */
LTTNG_UST_TRACEPOINT_EVENT(memq, gate_hip,
	LTTNG_UST_TP_ARGS(void *, ip),
	LTTNG_UST_TP_FIELDS(lttng_ust_field_unused(ip)))
LTTNG_UST_TRACEPOINT_EVENT(memq, gate_cuda,
	LTTNG_UST_TP_ARGS(void *, ip),
	LTTNG_UST_TP_FIELDS(lttng_ust_field_unused(ip)))

#endif /* MEMQ_TP_H */

#include <lttng/tracepoint-event.h>
