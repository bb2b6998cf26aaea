"""memq.heap instants: the bulk of most traces, on one sequence per thread.

A thread's sequence starts with TrackEventDefaults naming its track and its process's
`Host heap live bytes` counter, so an instant carries neither uuid, and the counter
sample it causes rides on it as an extra counter value.
"""
from __future__ import annotations

import numpy as np

from ctf2perfetto.convert.encode import ARG_INT, ARG_POINTER, ARG_UINT, Table, arg_values
from ctf2perfetto.events import HEAP_ROW_KINDS, EventBatch, EventKind
from ctf2perfetto.convert.model import CNT_HOST, ModelBatch, counter_key, kind_in
from ctf2perfetto.traceformat import names as N
from ctf2perfetto.traceformat import packets as P
from ctf2perfetto.traceformat import tracks as T
from ctf2perfetto.convert.write.registry import TrackRegistry
from ctf2perfetto.convert.write.stream import PacketStream

A = N.A
HEAP_EVENTS = HEAP_ROW_KINDS
HEAP_ARGS = (A.ptr, A.size, A.in_ptr, A.nmemb, A.alignment, A.result, A.alloc_id, A.freed_alloc_id, A.unmatched,
             A.replaced_alloc_id, A.ip, A.requested, A.alloc_count, A.alloc_bytes, A.free_count, A.free_bytes)
# Arguments with a formatted twin (`<key>_fmt`).
HEAP_TWINS = (A.size, A.alignment, A.requested, A.alloc_bytes, A.free_bytes)
_STRINGS = "debug_annotation_string_values"


class HeapWriter:
    def __init__(self, out: PacketStream, tracks: TrackRegistry) -> None:
        self.out = out
        self.tracks = tracks
        interner = out.interner
        self.category = interner.category(N.CAT_HEAP)
        self.names = {name: interner.name(name) for name in N.HEAP_NAMES}
        self.args = {key: interner.arg(key) for key in (*HEAP_ARGS, *map(N.fmt_key, HEAP_TWINS))}
        self.name_lut = np.zeros(256, np.uint32)
        for k, name in N.HEAP_EVENT_NAMES.items():
            self.name_lut[k] = self.names[name]
        self.sequences: dict[tuple[int, int], int] = {}
        self.sent = np.zeros((16, 1024), bool)  # [sequence - SEQ_HEAP_BASE, string iid]: interned there

    def sequence(self, pid: int, tid: int) -> int:
        """The sequence of a thread's heap instants, started (state cleared, defaults, names) on first use."""
        seq = self.sequences.get((pid, tid))
        if seq is not None:
            return seq
        seq = self.sequences[(pid, tid)] = N.SEQ_HEAP_BASE + len(self.sequences)
        self.tracks.heap_threads.add((pid, tid))
        host = int(self.tracks.counter_uuids(np.array([counter_key(CNT_HOST, pid)], np.int64))[0])
        entries = [("event_categories", self.category, N.CAT_HEAP)]
        entries += [("event_names", iid, name) for name, iid in self.names.items()]
        entries += [("debug_annotation_names", iid, key) for key, iid in self.args.items()]
        self.out.start_sequence(seq, track=T.heap_uuid(pid, tid), extra_counter_tracks=[host],
                                interned_entries=entries)
        return seq

    def _intern_texts(self, seq: np.ndarray, *columns: np.ndarray) -> None:
        """Intern, on each heap sequence, the string values its rows use that it has not seen yet
        (interned data is per sequence); `seq` is each row's sequence. O(rows) when nothing is new."""
        k = (seq - N.SEQ_HEAP_BASE).astype(np.int64)
        rows = np.concatenate([k] * len(columns))
        iids = np.concatenate(columns).astype(np.int64)
        used = iids != 0
        rows, iids = rows[used], iids[used]
        if len(iids) == 0:
            return
        need = (len(self.sequences), int(iids.max()) + 1)
        if need[0] > self.sent.shape[0] or need[1] > self.sent.shape[1]:
            grown = np.zeros((max(need[0], 2 * self.sent.shape[0]), max(need[1], 2 * self.sent.shape[1])), bool)
            grown[:self.sent.shape[0], :self.sent.shape[1]] = self.sent
            self.sent = grown
        fresh = ~self.sent[rows, iids]
        if not fresh.any():
            return
        entries: dict[int, list[tuple[str, int, str]]] = {}
        for key in np.unique((rows[fresh] << 32) | iids[fresh]).tolist():
            row, iid = key >> 32, key & 0xFFFFFFFF
            self.sent[row, iid] = True
            entries.setdefault(row, []).append((_STRINGS, iid, self.out.interner.text(_STRINGS, iid)))
        for row, interned in entries.items():
            self.out.write(P.record(P.packet(N.SEQ_HEAP_BASE + row, flags=P.SEQ_NEEDS_INCREMENTAL_STATE,
                                             interned=P.interned(interned))))

    def _name_iids(self, batch: EventBatch, kind: np.ndarray, rows) -> np.ndarray:
        """memq.heap instant name per row (traceformat.names.HEAP_EVENT_NAMES; memq's host blocks by `api`)."""
        names = self.name_lut[kind]
        host = kind_in(kind, (EventKind.HOST_ALLOC, EventKind.HOST_FREE))
        if host.any():
            api_names = batch.api_names
            by_api = np.array([self.names.get(n, 0) for n in api_names] + [0], np.uint32)
            named = by_api[np.minimum(batch["api"][rows][host], len(api_names))]
            names[host] = np.where(named != 0, named, names[host])
        return names

    def emit(self, batch: EventBatch, mb: ModelBatch, rows, pairs: list[tuple[int, int]], pair_of_row: np.ndarray,
             sample_done: np.ndarray) -> np.ndarray:
        """Heap instants of `rows` (row indices, or slice(None) for the whole batch); their packet offsets.

        `pairs` are the batch's (pid, tid) and `pair_of_row` each row's index in them; counter samples
        carried by an instant are marked in `sample_done`."""
        kind = batch["kind"][rows]
        g = len(kind)
        alloc_id = mb.alloc_id[rows]
        freed = mb.freed_alloc_id[rows]
        unmatched = mb.unmatched[rows]
        small = kind == EventKind.HOST_SMALL
        host_alloc = kind == EventKind.HOST_ALLOC
        aligned = kind_in(kind, (EventKind.MEMALIGN, EventKind.POSIX_MEMALIGN))
        ip = batch["ip"][rows]
        a = self.args
        replaced = mb.replaced_alloc_id[rows]
        size, aux, aux2 = batch["size"][rows], batch["aux"][rows], batch["aux2"][rows]
        freed_bytes = batch["flags"][rows]
        sized = ~small & (kind != EventKind.FREE)
        twin = self.out.interner.twin
        twins = [twin(A.size, size, sized), twin(A.alignment, aux, aligned), twin(A.requested, aux2, host_alloc),
                 twin(A.alloc_bytes, size, small), twin(A.free_bytes, freed_bytes, small)]
        args = [
            (a[A.ptr], ARG_POINTER, batch["ptr"][rows], ~small),
            (a[A.size], ARG_UINT, size, sized),
            (a[A.requested], ARG_UINT, aux2, host_alloc),
            (a[A.alloc_count], ARG_UINT, aux, small),
            (a[A.alloc_bytes], ARG_UINT, size, small),
            (a[A.free_count], ARG_UINT, aux2, small),
            (a[A.free_bytes], ARG_UINT, freed_bytes, small),
            (a[A.in_ptr], ARG_POINTER, batch["src"][rows], kind == EventKind.REALLOC),
            (a[A.nmemb], ARG_UINT, aux, kind == EventKind.CALLOC),
            (a[A.alignment], ARG_UINT, aux, aligned),
            (a[A.result], ARG_INT, arg_values(batch["result"][rows]), kind == EventKind.POSIX_MEMALIGN),
            (a[A.alloc_id], ARG_UINT, alloc_id, alloc_id > 0),
            (a[A.freed_alloc_id], ARG_UINT, freed, freed > 0),
            (a[A.unmatched], ARG_UINT, unmatched.astype(np.uint64), unmatched),
            (a[A.replaced_alloc_id], ARG_UINT, replaced, replaced > 0),
            (a[A.ip], ARG_POINTER, ip, ip != 0),
            *twins,
        ]
        # The heap counter sample of a row rides on its instant (same time): no packet of its own,
        # and no uuid when it is the process's heap counter (the sequence's default). Not where another
        # row's sample of that counter has the same time (a memq.live at a window's start): samples at
        # one time must reach trace_processor in row order, the last one being the counter's value
        # then, so those all go out together after the instants (sample_done stays False).
        pair = pair_of_row[rows]
        seq_of_pair = np.zeros(len(pairs), np.uint32)
        for i in (np.unique(pair).tolist() if len(pairs) > 1 else [0]):
            seq_of_pair[i] = self.sequence(*pairs[i])
        seq = seq_of_pair[pair]
        self._intern_texts(seq, *(texts for _, _, texts, _ in twins))
        xc_track = np.zeros(g, np.uint64)
        xc_value = np.zeros(g, np.int64)
        xc_has = np.zeros(g, bool)
        pos = np.full(len(batch), -1, np.int64)
        pos[rows] = np.arange(g)
        at = pos[mb.sample_row]
        rides = (at >= 0) & (mb.sample_ts == batch["ts"][mb.sample_row])
        ride = np.flatnonzero(rides)
        if len(ride) and not rides.all():
            ride = ride[~np.isin(_key_time(mb, ride), _key_time(mb, np.flatnonzero(~rides)))]
        if len(ride):
            keys = mb.sample_key[ride]
            own = keys == (counter_key(CNT_HOST, 0) | batch["pid"][mb.sample_row[ride]])
            xc_track[at[ride[~own]]] = self.tracks.counter_uuids(keys[~own])
            xc_value[at[ride]] = mb.sample_value[ride]
            xc_has[at[ride]] = True
            sample_done[ride] = True
        table = Table(
            ts=batch["ts"][rows], track=np.zeros(g, np.uint64),
            type=np.full(g, P.TYPE_INSTANT, np.uint8),
            name_iid=self._name_iids(batch, kind, rows), cat_iid=np.full(g, self.category, np.uint32),
            flow_out=N.flow_ids(N.FLOW_ALLOC, alloc_id), flow_in=N.flow_ids(N.FLOW_ALLOC, freed),
            xc_track=xc_track, xc_value=xc_value, xc_has=xc_has, seq=seq,
            args=args)
        return self.out.emit(table)


def _key_time(mb: ModelBatch, samples: np.ndarray) -> np.ndarray:
    """(counter key, time) of counter samples, as one structured column (for np.isin)."""
    out = np.zeros(len(samples), np.dtype([("key", np.int64), ("ts", np.int64)]))
    out["key"], out["ts"] = mb.sample_key[samples], mb.sample_ts[samples]
    return out
