/* Event columns -> Perfetto TracePacket bytes (libmemqencode.so, loaded by encode.py for write/stream.py).
 *
 * One call encodes a table of n TrackEvents sharing an argument schema into
 * consecutive `Trace.packet` records: timestamp, trusted_packet_sequence_id and a
 * TrackEvent with type,
 * track_uuid, interned category and name, debug annotations (interned names,
 * int / uint / pointer / interned-string values), an optional counter value, an
 * optional extra counter sample (its track uuid may come from the sequence's
 * TrackEventDefaults), and flow ids. Each row may name its own sequence.
 *
 * Timestamps are deltas on the sequence's incremental clock (its defaults name it):
 * clock_last[sequence] is the sequence's previous timestamp, updated here, so one
 * sequence's packets may span calls. No sequence_flags: the sequence's first packet
 * (written in Python) clears its state, and trace_processor parses a packet without
 * flags with the sequence's state as it is. Flow ids below flow_varint_limit are
 * varints (flow_ids_old = 36, terminating_flow_ids_old = 42), the rest fixed64
 * (47, 48). The TrackEvent is the packet's last field, so that the writer can later
 * append flow ids to it (copy -> allocation flows, encode.copy_patched).
 */
#include <stdint.h>
#include <string.h>

enum { ARG_INT = 0, ARG_UINT = 1, ARG_POINTER = 2, ARG_STRING_IID = 3 };

static inline uint8_t *put_varint(uint8_t *p, uint64_t v) {
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

static inline size_t varint_size(uint64_t v) {
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static inline uint8_t *put_fixed64(uint8_t *p, uint64_t v) {
    memcpy(p, &v, 8); /* little-endian hosts only (x86-64, aarch64) */
    return p + 8;
}

/* Upper bound of the bytes one row needs, for the caller's buffer. */
int64_t memq_encode_bound(int64_t nargs) { return 160 + nargs * 26; }

/* One flow id: below the limit a varint after the two tag bytes `small`, else fixed64 after `big`. */
static inline uint8_t *put_flow(uint8_t *e, uint64_t id, uint64_t limit, const uint8_t small[2],
                                const uint8_t big[2]) {
    const uint8_t *tag = id < limit ? small : big;
    *e++ = tag[0];
    *e++ = tag[1];
    return id < limit ? put_varint(e, id) : put_fixed64(e, id);
}

static const uint8_t FLOW_VARINT[2] = {0xA0, 0x02};       /* flow_ids_old = 36, varint */
static const uint8_t FLOW_FIXED[2] = {0xF9, 0x02};        /* flow_ids = 47, fixed64 */
static const uint8_t TERMINATING_VARINT[2] = {0xD0, 0x02}; /* terminating_flow_ids_old = 42, varint */
static const uint8_t TERMINATING_FIXED[2] = {0x81, 0x03};  /* terminating_flow_ids = 48, fixed64 */

/* Encode n rows; returns the bytes written into out. Argument a of row i is
 * arg_val[a][i], written when arg_present[a][i] (one column per argument).
 * offsets[i] (if not NULL) receives the offset of row i's packet within out. */
int64_t memq_encode(int64_t n, const int64_t *ts, const uint64_t *track, const uint8_t *type, const uint32_t *name_iid,
                    const uint32_t *cat_iid, const uint64_t *flow_out, const uint64_t *flow_in,
                    const int64_t *counter_value, const uint64_t *xc_track, const int64_t *xc_value,
                    const uint8_t *xc_has, uint64_t flow_varint_limit, int64_t nargs, const uint32_t *arg_name,
                    const uint8_t *arg_type, const uint64_t *const *arg_val, const uint8_t *const *arg_present,
                    const uint32_t *seqs, uint32_t seq, int64_t *clock_last, uint8_t *out, int64_t *offsets) {
    uint8_t ev[4096];
    uint8_t *o = out;
    for (int64_t i = 0; i < n; i++) {
        uint8_t *e = ev;
        if (cat_iid && cat_iid[i]) {
            *e++ = 0x18; /* category_iids = 3 */
            e = put_varint(e, cat_iid[i]);
        }
        for (int64_t a = 0; a < nargs; a++) {
            if (!arg_present[a][i]) continue;
            /* The annotation is at most 1 + 5 + 2 + 10 bytes, so its length is one byte,
             * written once the body is in place (no staging copy). */
            *e++ = 0x22; /* debug_annotations = 4 */
            uint8_t *len = e++;
            *e++ = 0x08; /* name_iid = 1 */
            e = put_varint(e, arg_name[a]);
            switch (arg_type[a]) {
            case ARG_INT: *e++ = 0x20; break;     /* int_value = 4 */
            case ARG_UINT: *e++ = 0x18; break;    /* uint_value = 3 */
            case ARG_POINTER: *e++ = 0x38; break; /* pointer_value = 7 */
            default: *e++ = 0x88; *e++ = 0x01; break; /* string_value_iid = 17 */
            }
            e = put_varint(e, arg_val[a][i]);
            *len = (uint8_t)(e - len - 1);
        }
        *e++ = 0x48; /* type = 9 */
        e = put_varint(e, type[i]);
        if (name_iid && name_iid[i]) {
            *e++ = 0x50; /* name_iid = 10 */
            e = put_varint(e, name_iid[i]);
        }
        if (track[i]) {
            *e++ = 0x58; /* track_uuid = 11 */
            e = put_varint(e, track[i]);
        }
        if (type[i] == 4) {
            *e++ = 0xF0; /* counter_value = 30 */
            *e++ = 0x01;
            e = put_varint(e, (uint64_t)counter_value[i]);
        }
        if (xc_has && xc_has[i]) {
            if (xc_track && xc_track[i]) { /* else the sequence's default extra counter track */
                *e++ = 0xF8; /* extra_counter_track_uuids = 31 */
                *e++ = 0x01;
                e = put_varint(e, xc_track[i]);
            }
            *e++ = 0x60; /* extra_counter_values = 12 */
            e = put_varint(e, (uint64_t)xc_value[i]);
        }
        if (flow_out && flow_out[i]) e = put_flow(e, flow_out[i], flow_varint_limit, FLOW_VARINT, FLOW_FIXED);
        if (flow_in && flow_in[i])
            e = put_flow(e, flow_in[i], flow_varint_limit, TERMINATING_VARINT, TERMINATING_FIXED);
        size_t elen = (size_t)(e - ev);
        uint32_t sq = seqs ? seqs[i] : seq;
        uint64_t delta = (uint64_t)(ts[i] - clock_last[sq]); /* negative: a 10-byte varint, still exact */
        clock_last[sq] = ts[i];
        size_t plen = 1 + varint_size(delta) + 1 + varint_size(sq) + 1 + varint_size(elen) + elen;
        if (offsets) offsets[i] = o - out;
        *o++ = 0x0A; /* Trace.packet = 1 */
        o = put_varint(o, plen);
        *o++ = 0x40; /* timestamp = 8 */
        o = put_varint(o, delta);
        *o++ = 0x50; /* trusted_packet_sequence_id = 10 */
        o = put_varint(o, sq);
        *o++ = 0x5A; /* track_event = 11, last */
        o = put_varint(o, elen);
        memcpy(o, ev, elen);
        o += elen;
    }
    return o - out;
}
