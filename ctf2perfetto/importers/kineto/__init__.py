"""PyTorch-profiler (Kineto) traces merged into the memq Perfetto trace.

`load(path)` reads a Kineto JSON (plain or .gz) into a `KinetoTrace` (load.py);
`KinetoMerge(trace)` places its events on the memq trace's tracks and `.packets()`
serializes them (merge.py), checked against the LTTng events an `LttngEvents`
collected as the batches streamed by (lttng.py): the profiler's clock corrected on
shared allocations, ops widened over the API calls they cross, flows bound to slices
(layout.py). ctf2perfetto.pipeline wires this into a conversion; docs/TIMELINE.md
says what a user sees. `standalone_trace(path)` converts a JSON trace alone (memq's
importer for JSON inputs, standalone.py).
"""
from ctf2perfetto.importers.kineto.load import KinetoTrace, load
from ctf2perfetto.importers.kineto.lttng import LttngEvents
from ctf2perfetto.importers.kineto.merge import KinetoMerge
from ctf2perfetto.importers.kineto.standalone import standalone_trace

__all__ = ["KinetoMerge", "KinetoTrace", "LttngEvents", "load", "standalone_trace"]
