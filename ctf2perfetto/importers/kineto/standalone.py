"""A Kineto (or Chrome) JSON trace alone as a Perfetto protobuf trace: what memq loads whenever its input is JSON."""
from __future__ import annotations

from pathlib import Path

from ctf2perfetto.convert import clocks
from ctf2perfetto.traceformat import names as N
from ctf2perfetto.traceformat import packets as P
from ctf2perfetto.convert.write.meta import info_packet
from ctf2perfetto.convert.write.registry import process_thread_descriptors
from ctf2perfetto.importers.kineto.load import load
from ctf2perfetto.importers.kineto.merge import KinetoMerge


def standalone_trace(path: str | Path) -> bytes:
    """The trace at `path` through the same placement as `--kineto` (copies and memsets are never dropped,
    unlike trace_processor's JSON importer, which drops an X event that partly overlaps another on its
    track)."""
    merge = KinetoMerge(load(path))
    packets = merge.packets()
    # MONOTONIC = REALTIME: the descriptors' times (MONOTONIC, as in a conversion) are REALTIME ns here.
    out = [clocks.snapshot_record(clocks.ClockCorrespondence(0, 0, None, N.SOURCE_KINETO))]
    out += process_thread_descriptors(merge.processes, merge.threads, merge.first_ns)
    out += [P.record(p) for p in packets]
    out.append(info_packet(N.SOURCE_KINETO, merge.first_ns, {N.A.skipped_events: merge.unplaced,
                                                             N.A.events: merge.events}))
    return b"".join(out)
