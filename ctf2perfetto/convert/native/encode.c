/* Event columns -> Perfetto TracePacket bytes (libmemqencode.so, loaded by encode.py for write/stream.py).
 *
 * One call encodes a table of n TrackEvents sharing an argument schema into
 * consecutive `Trace.packet` records: timestamp, trusted_packet_sequence_id,
 * sequence_flags = SEQ_NEEDS_INCREMENTAL_STATE, and a TrackEvent with type,
 * track_uuid, interned category and name, debug annotations (interned names,
 * int / uint / pointer / interned-string values), an optional counter value, an
 * optional extra counter sample (its track uuid may come from the sequence's
 * TrackEventDefaults), and flow ids. Each row may name its own sequence.
 *
 * Rows with pad[i] set get their packet and TrackEvent lengths written as 4-byte
 * varints and the TrackEvent as the packet's last field, so that the writer can
 * later append flow ids to that event in place (copy -> allocation flows).
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

static inline uint8_t *put_varint4(uint8_t *p, uint32_t v) { /* fixed 4-byte (redundant) varint, v < 2^28 */
    p[0] = (uint8_t)(v | 0x80);
    p[1] = (uint8_t)((v >> 7) | 0x80);
    p[2] = (uint8_t)((v >> 14) | 0x80);
    p[3] = (uint8_t)((v >> 21) & 0x7f);
    return p + 4;
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

/* Encode n rows; returns the bytes written into out. Argument a of row i is
 * arg_val[a][i], written when arg_present[a][i] (one column per argument).
 * offsets[i] (if not NULL) receives the offset of row i's packet within out. */
int64_t memq_encode(int64_t n, const int64_t *ts, const uint64_t *track, const uint8_t *type, const uint32_t *name_iid,
                    const uint32_t *cat_iid, const uint64_t *flow_out, const uint64_t *flow_in,
                    const int64_t *counter_value, const uint64_t *xc_track, const int64_t *xc_value,
                    const uint8_t *xc_has, const uint8_t *pad, int64_t nargs, const uint32_t *arg_name,
                    const uint8_t *arg_type, const uint64_t *const *arg_val, const uint8_t *const *arg_present,
                    const uint32_t *seqs, uint32_t seq, uint8_t *out, int64_t *offsets) {
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
        if (flow_out && flow_out[i]) {
            *e++ = 0xF9; /* flow_ids = 47, fixed64 */
            *e++ = 0x02;
            e = put_fixed64(e, flow_out[i]);
        }
        if (flow_in && flow_in[i]) {
            *e++ = 0x81; /* terminating_flow_ids = 48, fixed64 */
            *e++ = 0x03;
            e = put_fixed64(e, flow_in[i]);
        }
        size_t elen = (size_t)(e - ev);
        int padded = pad && pad[i];
        uint32_t sq = seqs ? seqs[i] : seq;
        size_t plen = 1 + varint_size((uint64_t)ts[i]) + 1 + varint_size(sq) + 2 + 1 +
                      (padded ? 4 : varint_size(elen)) + elen;
        if (offsets) offsets[i] = o - out;
        *o++ = 0x0A; /* Trace.packet = 1 */
        o = padded ? put_varint4(o, (uint32_t)plen) : put_varint(o, plen);
        *o++ = 0x40; /* timestamp = 8 */
        o = put_varint(o, (uint64_t)ts[i]);
        *o++ = 0x50; /* trusted_packet_sequence_id = 10 */
        o = put_varint(o, sq);
        *o++ = 0x68; /* sequence_flags = 13: SEQ_NEEDS_INCREMENTAL_STATE */
        *o++ = 0x02;
        *o++ = 0x5A; /* track_event = 11, last */
        o = padded ? put_varint4(o, (uint32_t)elen) : put_varint(o, elen);
        memcpy(o, ev, elen);
        o += elen;
    }
    return o - out;
}
