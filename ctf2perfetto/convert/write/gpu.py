"""memq.api slices (HIP/CUDA calls on their thread) and memq.copy / memq.set slices (on stream tracks)."""
from __future__ import annotations

import numpy as np

from typing import Callable

from ctf2perfetto.convert.encode import ARG_INT, ARG_POINTER, ARG_STRING, ARG_UINT, Patches, arg_values
from ctf2perfetto.events import EventBatch, EventKind, MemKind
from ctf2perfetto.convert.model import ModelBatch
from ctf2perfetto.traceformat import names as N
from ctf2perfetto.convert.write.registry import TrackRegistry
from ctf2perfetto.convert.write.stream import PacketStream, each_distinct, instant_table, slice_table

A = N.A


def runtime_of(api_name: str) -> str:
    return "cuda" if api_name.startswith("cu") else "hip" if api_name.startswith("hip") else "unknown"


def direction(copy_kind: int, src_mem: int, dst_mem: int) -> str:
    """Copy direction from the API's kind, or from the endpoints' memory for Default (and unknown) kinds."""
    if copy_kind in N.COPY_DIRECTIONS:
        return N.COPY_DIRECTIONS[copy_kind]
    side = lambda m: "D" if m in (MemKind.DEVICE, MemKind.MANAGED) else "H"  # noqa: E731
    return f"{side(src_mem)}to{side(dst_mem)}"


def api_is(batch: EventBatch, api: np.ndarray, test: Callable[[str], object], dtype=bool) -> np.ndarray:
    """test(function name) per row of `api` (a column of batch["api"]), evaluated once per distinct function."""
    names = batch.api_names
    return each_distinct(api, lambda i: test(names[i]), dtype)


def mem_names(out: PacketStream, mem: np.ndarray) -> np.ndarray:
    """Interned memory-kind names (`device`, `host`, ...) of a `mem` column, as an ARG_STRING column."""
    return each_distinct(mem, lambda m: out.interner.string(N.MEM_NAMES.get(MemKind(m), N.MEM_NAMES[MemKind.UNKNOWN])),
                         np.uint64)


class GpuWriter:
    def __init__(self, out: PacketStream, tracks: TrackRegistry, spill_dir=None) -> None:
        self.out = out
        self.tracks = tracks
        # (body offset of an allocation packet, copy flow id): spilled to `spill_dir` on copy-heavy traces
        self.patches = Patches(spill_dir)
        self.next_copy_flow = 1

    def _api_strings(self, batch: EventBatch, api: np.ndarray) -> np.ndarray:
        """The function names of an `api` column as interned string values."""
        return api_is(batch, api, self.out.interner.string, np.uint64)

    def _readable(self, args: list, batch: EventBatch, api: np.ndarray, copy_kind: np.ndarray,
                  copy: np.ndarray) -> list:
        """Formatted twins of the size arguments among `args`, and copy kinds by name."""
        interner = self.out.interner
        twins = [interner.twin(key, values, present) for key in (A.size, A.bytes, A.width, A.dpitch, A.spitch,
                                                                 A.dslice, A.sslice)
                 for iid, _, values, present in args if iid == interner.arg(key) and present.any()]
        names = batch.api_names
        kinds = each_distinct(np.stack([api.astype(np.int64), copy_kind.astype(np.int64)], axis=1),
                              lambda k: interner.string(N.copy_kind_name(runtime_of(names[k[0]]), k[1])), np.uint64)
        return twins + [(interner.arg(A.copy_kind_name), ARG_STRING, kinds, copy)]

    def _content_args(self, batch: EventBatch, rows: np.ndarray, copy: np.ndarray) -> list:
        """A copy's content fingerprints (docs/TRACE_FORMAT.md): each hash only where its `content` bit says so."""
        a = self.out.interner.arg
        content = batch["content"][rows]
        mode = batch["content_mode"][rows]
        recorded = copy & (mode > 0)
        return [
            (a(A.seq), ARG_UINT, batch["seq"][rows], copy & (batch["seq"][rows] > 0)),
            (a(A.content), ARG_UINT, content.astype(np.uint64), recorded),
            (a(A.content_mode), ARG_STRING, each_distinct(mode, lambda m: self.out.interner.string(N.CONTENT_MODES.get(m, str(m))),
                                                     np.uint64),
             recorded),
            (a(A.src_hash), ARG_POINTER, batch["src_hash"][rows], copy & ((content & N.CONTENT_SRC) != 0)),
            (a(A.dst_hash_before), ARG_POINTER, batch["dst_hash_before"][rows],
             copy & ((content & N.CONTENT_DST_BEFORE) != 0)),
            (a(A.dst_hash_after), ARG_POINTER, batch["dst_hash_after"][rows],
             copy & ((content & N.CONTENT_DST_AFTER) != 0)),
        ]

    def emit_copy_done(self, batch: EventBatch, rows: np.ndarray, thread_uuid: np.ndarray) -> None:
        """memq.copy_done instants on the completing thread: a copy's destination fingerprint after completion."""
        g = len(rows)
        interner = self.out.interner
        ones = np.ones(g, bool)
        a = interner.arg
        args = [
            (a(A.seq), ARG_UINT, batch["seq"][rows], ones),
            (a(A.dst_hash_after), ARG_POINTER, batch["dst_hash_after"][rows], ones),
            (a(A.api), ARG_STRING, self._api_strings(batch, batch["api"][rows]), ones),
            (a(A.stream), ARG_UINT, batch["stream"][rows], ones),
            (a(A.device), ARG_INT, arg_values(batch["device"][rows]), ones),
        ]
        self.out.emit(instant_table(batch["ts"][rows], thread_uuid[rows], np.full(g, interner.name(N.EVENT_COPY_DONE)),
                                    np.full(g, interner.category(N.CAT_COPY_DONE)), args))

    def emit_api(self, batch: EventBatch, mb: ModelBatch, rows: np.ndarray, thread_uuid: np.ndarray,
                 call_id: np.ndarray) -> np.ndarray:
        """memq.api slices: BEGIN (args, free flows) at the call's start, END (alloc flows) at its end;
        the END packets' offsets back (allocation -> copy flows are patched into them).

        A copy's or memset's endpoints (dst, src, bytes, kind, shape, value) are written once: on its
        memq.copy / memq.set slice (emit_copies, same call_id) when it has one, else (a failed call) here."""
        g = len(rows)
        col = {c: batch[c][rows] for c in ("kind", "api", "ptr", "src", "size", "stream", "flags", "aux", "aux2",
                                          "dpitch", "spitch", "ip", "mem", "copy_kind", "depth", "dslice",
                                          "sslice")}
        kind = col["kind"]
        interner = self.out.interner
        api = col["api"]
        name_iid = api_is(batch, api, interner.name, np.uint32)
        is_ = {k: kind == k for k in N.GPU_OPS}
        allocish = is_[EventKind.GPU_ALLOC] | is_[EventKind.GPU_REGISTER]
        freeish = is_[EventKind.GPU_FREE] | is_[EventKind.GPU_UNREGISTER]
        # copies and memsets whose endpoints are on their own memq.copy / memq.set slice
        sliced = np.isin(rows, mb.endpoints["row"])
        copy, gset = is_[EventKind.GPU_COPY] & ~sliced, is_[EventKind.GPU_SET] & ~sliced
        prefetch, advise = is_[EventKind.GPU_PREFETCH], is_[EventKind.GPU_ADVISE]
        two_d = copy & ((col["dpitch"] != 0) | (col["spitch"] != 0))
        pitched = is_[EventKind.GPU_ALLOC] & (col["aux"] != 0)
        peer = copy & api_is(batch, api, lambda nm: "Peer" in nm)
        has_stream = is_[EventKind.GPU_COPY] | is_[EventKind.GPU_SET] | prefetch | \
            api_is(batch, api, lambda nm: "Async" in nm or "Stream" in nm)
        alloc_id, freed, unmatched = mb.alloc_id[rows], mb.freed_alloc_id[rows], mb.unmatched[rows]
        ones = np.ones(g, bool)
        a = interner.arg
        args = [
            (a(A.runtime), ARG_STRING, api_is(batch, api, lambda nm: interner.string(runtime_of(nm)), np.uint64),
             ones),
            (a(A.op), ARG_STRING, each_distinct(kind, lambda k: interner.string(N.GPU_OPS[EventKind(k)]), np.uint64),
             ones),
            (a(A.result), ARG_INT, arg_values(batch["result"][rows]), ones),
            (a(A.device), ARG_INT, arg_values(batch["device"][rows]), ones),
            (a(A.stream), ARG_UINT, col["stream"], has_stream),
            (a(A.call_id), ARG_UINT, call_id[rows], ones),
            (a(A.ip), ARG_POINTER, col["ip"], col["ip"] != 0),
            (a(A.ptr), ARG_POINTER, col["ptr"], allocish | freeish | prefetch | advise),
            (a(A.size), ARG_UINT, col["size"], allocish | freeish),
            (a(A.mem_kind), ARG_STRING, mem_names(self.out, col["mem"]), allocish | freeish),
            (a(A.flags), ARG_UINT, col["flags"], allocish),
            (a(A.alloc_id), ARG_UINT, alloc_id, alloc_id > 0),
            (a(A.replaced_alloc_id), ARG_UINT, mb.replaced_alloc_id[rows], mb.replaced_alloc_id[rows] > 0),
            (a(A.width), ARG_UINT, col["aux"], pitched | two_d),
            (a(A.height), ARG_UINT, col["aux2"], pitched | two_d),
            (a(A.freed_alloc_id), ARG_UINT, freed, freed > 0),
            (a(A.unmatched), ARG_UINT, unmatched.astype(np.uint64), unmatched),
            (a(A.dst), ARG_POINTER, col["ptr"], copy | gset),
            (a(A.src), ARG_POINTER, col["src"], copy),
            (a(A.bytes), ARG_UINT, col["size"], copy | gset | prefetch | advise),
            (a(A.copy_kind), ARG_INT, arg_values(col["copy_kind"]), copy),
            (a(A.dpitch), ARG_UINT, col["dpitch"], two_d),
            (a(A.spitch), ARG_UINT, col["spitch"], two_d),
            (a(A.depth), ARG_UINT, col["depth"], copy & (col["depth"] != 0)),
            (a(A.dslice), ARG_UINT, col["dslice"], copy & (col["depth"] != 0)),
            (a(A.sslice), ARG_UINT, col["sslice"], copy & (col["depth"] != 0)),
            (a(A.src_device), ARG_INT, arg_values(col["aux"]), peer),
            (a(A.value), ARG_UINT, col["aux"], gset),
            (a(A.dst_device), ARG_INT, arg_values(col["aux"]), prefetch),
            (a(A.advice), ARG_UINT, col["aux"], advise),
            (a(A.new_device), ARG_INT, arg_values(col["aux"]), is_[EventKind.GPU_SET_DEVICE]),
        ]
        args += self._readable(args, batch, api, col["copy_kind"], copy)
        track = thread_uuid[rows]
        offsets = self.out.emit(slice_table(
            batch["begin"][rows], batch["ts"][rows], track, name_iid,
            np.full(g, interner.category(N.CAT_API), np.uint32), args,
            begin_flow_in=N.flow_ids(N.FLOW_ALLOC, freed), end_flow_out=N.flow_ids(N.FLOW_ALLOC, alloc_id)),
            slices=True)
        return offsets[g:]  # the END packet carries the allocation (its flows start there)

    def emit_copies(self, batch: EventBatch, mb: ModelBatch, call_id: np.ndarray, row_offsets: np.ndarray) -> None:
        """memq.copy / memq.set slices on per-stream lane tracks, with allocation -> copy flows."""
        ep = mb.endpoints
        rows = ep["row"]
        if len(rows) == 0:
            return
        c = len(rows)
        kind = batch["kind"][rows]
        copy = kind == EventKind.GPU_COPY
        api = batch["api"][rows]
        begin, end = batch["begin"][rows], batch["ts"][rows]
        device, stream = batch["device"][rows], batch["stream"][rows]
        copy_kind = batch["copy_kind"][rows]
        track = self.tracks.stream_uuids(device, api_is(batch, api, runtime_of, object), stream, begin, end)
        # HtoD, DtoH, ... (memsets: `memset`), once per distinct (kind, memories)
        directions = each_distinct(
            np.stack([copy_kind.astype(np.int64), ep["src_mem"].astype(np.int64), ep["dst_mem"].astype(np.int64),
                      copy.astype(np.int64)], axis=1),
            lambda k: direction(*k[:3]) if k[3] else N.EVENT_MEMSET, object)
        interner = self.out.interner
        name_iid = each_distinct(directions, interner.name, np.uint32)
        cat = np.where(copy, interner.category(N.CAT_COPY), interner.category(N.CAT_SET)).astype(np.uint32)
        flows = {}
        for side in ("src", "dst"):
            has = np.flatnonzero(ep[f"{side}_alloc_id"] > 0)
            flow = np.zeros(c, np.uint64)
            flow[has] = N.flow_ids(N.FLOW_COPY, np.arange(self.next_copy_flow, self.next_copy_flow + len(has)))
            self.next_copy_flow += len(has)
            arow = ep[f"{side}_alloc_row"][has]
            at = np.where(arow >= 0, row_offsets[np.maximum(arow, 0)], ep[f"{side}_alloc_tag"][has])
            self.patches.add(at, flow[has])
            flows[side] = flow
        two_d = copy & ((batch["dpitch"][rows] != 0) | (batch["spitch"][rows] != 0))
        peer = copy & api_is(batch, api, lambda nm: "Peer" in nm)
        aux = batch["aux"][rows]
        ones = np.ones(c, bool)
        a = interner.arg
        args = [
            (a(A.api), ARG_STRING, self._api_strings(batch, api), ones),
            (a(A.call_id), ARG_UINT, call_id[rows], ones),
            (a(A.pid), ARG_INT, arg_values(batch["pid"][rows]), ones),
            (a(A.tid), ARG_INT, arg_values(batch["tid"][rows]), ones),
            (a(A.dst), ARG_POINTER, batch["ptr"][rows], ones),
            (a(A.src), ARG_POINTER, batch["src"][rows], copy),
            (a(A.bytes), ARG_UINT, batch["size"][rows], ones),
            (a(A.copy_kind), ARG_INT, arg_values(copy_kind), copy),
            (a(A.stream), ARG_UINT, stream, ones),
            (a(A.device), ARG_INT, arg_values(device), ones),
            (a(A.result), ARG_INT, arg_values(batch["result"][rows]), ones),
            (a(A.width), ARG_UINT, aux, two_d),
            (a(A.height), ARG_UINT, batch["aux2"][rows], two_d),
            (a(A.dpitch), ARG_UINT, batch["dpitch"][rows], two_d),
            (a(A.spitch), ARG_UINT, batch["spitch"][rows], two_d),
            (a(A.depth), ARG_UINT, batch["depth"][rows], batch["depth"][rows] != 0),
            (a(A.dslice), ARG_UINT, batch["dslice"][rows], batch["depth"][rows] != 0),
            (a(A.sslice), ARG_UINT, batch["sslice"][rows], batch["depth"][rows] != 0),
            (a(A.src_device), ARG_INT, arg_values(aux), peer),
            (a(A.value), ARG_UINT, aux, ~copy),
            (a(A.dst_alloc_id), ARG_UINT, ep["dst_alloc_id"], ep["dst_alloc_id"] > 0),
            (a(A.src_alloc_id), ARG_UINT, ep["src_alloc_id"], ep["src_alloc_id"] > 0),
            (a(A.dst_mem), ARG_STRING, mem_names(self.out, ep["dst_mem"]), ones),
            (a(A.src_mem), ARG_STRING, mem_names(self.out, ep["src_mem"]), copy),
            (a(A.direction), ARG_STRING, each_distinct(directions, interner.string, np.uint64), copy),
            *self._content_args(batch, rows, copy),
        ]
        args += self._readable(args, batch, api, copy_kind, copy)
        # src flow terminates on the BEGIN, dst flow on the END: one terminating id per packet. A copy's
        # BEGIN also starts the flow to the verdict `memq annotate` may add (a flow never ended is no error).
        verdict = np.where(copy, call_id[rows] | np.uint64(N.FLOW_VERDICT), 0)
        self.out.emit(slice_table(begin, end, track, name_iid, cat, args, begin_flow_in=flows["src"],
                                  begin_flow_out=verdict, end_flow_in=flows["dst"]), slices=True)
