/*
 * Instantiates the `memq` probes and tracepoint definitions. Linked FIRST in
 * libmemq_preload.so: its constructors (tracepoint and probe registration)
 * must run before memq_core.c's, which emits memq:clock "start".
 */
#define LTTNG_UST_TRACEPOINT_CREATE_PROBES
#define LTTNG_UST_TRACEPOINT_DEFINE
#define LTTNG_UST_TRACEPOINT_HIDDEN_DEFINITION
#define LTTNG_UST_TRACEPOINT_PROVIDER_HIDDEN_DEFINITION
#include "memq_tp.h"
