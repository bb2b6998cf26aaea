"""Events -> a memq Perfetto trace: the memory model, capture windows, ranges, clocks, the writer.

model.py follows allocations, frees and copy endpoints over the batches; windows.py and ranges.py
cut what a capture window or `--from/--to` keeps; clocks.py puts every timestamp on one clock;
write/ lays the trace out as docs/TRACE_FORMAT.md says, with encode.py (native/encode.c) for the
bulk of the packets.
"""
