/*
 * Completion points: the calls after which the host knows that
 * asynchronous copies have finished, so that their destinations can be
 * fingerprinted (memq_content.c). Stream and device synchronisations are
 * wrapped with the other calls (memq_hip.c, memq_cuda.c, memq_driver.c);
 * here are the others, each a memq:sync event:
 *   stream queries   hipStreamQuery, cudaStreamQuery, cuStreamQuery
 *                    (success = every copy issued on the stream is done);
 *   event waits      hipEventSynchronize, cudaEventSynchronize, cuEventSynchronize,
 *   event queries    hipEventQuery, cudaEventQuery, cuEventQuery
 *                    (success = what the event's stream held at its record is
 *                    done); `stream` is the stream the event was recorded on,
 *                    0 when memq did not see the record.
 * and, without an event of their own, the event records that tell which
 * stream and which copies an event covers (cudaEventRecord and friends).
 */
#include "memq_wrap.h"

#define HIP MEMQ_RT_HIP
#define CUDA MEMQ_RT_CUDA
#define DRV MEMQ_RT_CUDRV

SYNC_STREAM(HIP, hipStreamQuery)
SYNC_STREAM(CUDA, cudaStreamQuery)
SYNC_STREAM(DRV, cuStreamQuery)

/* Event waits and queries (hipEvent_t / cudaEvent_t / CUevent are pointers). */
#define SYNC_EVENT(rt, name)                                                 \
	WRAPPER(rt, name, sync, (void *event), (event),                      \
		EMIT_SYNC(name, memq_content_event_stream(U64(event)), U64(event)))

SYNC_EVENT(HIP, hipEventSynchronize)
SYNC_EVENT(HIP, hipEventQuery)
SYNC_EVENT(CUDA, cudaEventSynchronize)
SYNC_EVENT(CUDA, cudaEventQuery)
SYNC_EVENT(DRV, cuEventSynchronize)
SYNC_EVENT(DRV, cuEventQuery)

/*
 * Event records: bookkeeping only, while content fingerprints are recorded
 * (the fronts' slow path when memq:copy_done is; per-caller routing as for
 * the other wrappers). The issue count is read before the real call: a copy
 * issued by another thread meanwhile is not taken as covered (it may be
 * behind the event). The stream is kept as recorded (MEMQ_STREAM).
 */
#define EVENT_RECORD(rt, name, params, args)                                 \
	MEMQ_WRAPPED_FN(rt, name, params);                                   \
	static MEMQ_NOINLINE int traced_##name MEMQ_TRACED_PARAMS(name, params) \
	{                                                                    \
		uint64_t issued;                                             \
		int r, saved_errno;                                          \
		(void) route;                                                \
		(void) ip;                                                   \
		if (!MEMQ_RECORDS(copy_done, rt) || memq_content_mode == MEMQ_CONTENT_OFF) \
			return real args;                                    \
		issued = memq_content_issued();                              \
		r = real args;                                               \
		if (r == 0) {                                                \
			saved_errno = errno;                                 \
			memq_content_event_recorded(rt, U64(event), MEMQ_STREAM(name, stream), issued); \
			errno = saved_errno;                                 \
		}                                                            \
		return r;                                                    \
	}                                                                    \
	MEMQ_FRONTS(rt, name, MEMQ_RECORDS(copy_done, rt) && memq_content_mode != MEMQ_CONTENT_OFF, \
		params, args)

#define RECORD(rt, name) EVENT_RECORD(rt, name, (void *event, void *stream), (event, stream))
#define RECORD_FLAGS(rt, name)                                               \
	EVENT_RECORD(rt, name, (void *event, void *stream, unsigned int flags), (event, stream, flags))

RECORD(HIP, hipEventRecord)
RECORD(HIP, hipEventRecord_spt)
RECORD(CUDA, cudaEventRecord)
RECORD(CUDA, cudaEventRecord_ptsz)
RECORD_FLAGS(CUDA, cudaEventRecordWithFlags)
RECORD_FLAGS(CUDA, cudaEventRecordWithFlags_ptsz)
RECORD(DRV, cuEventRecord)
RECORD(DRV, cuEventRecord_ptsz)
RECORD_FLAGS(DRV, cuEventRecordWithFlags)
RECORD_FLAGS(DRV, cuEventRecordWithFlags_ptsz)
