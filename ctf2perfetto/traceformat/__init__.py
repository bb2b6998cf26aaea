"""The memq trace format: docs/TRACE_FORMAT.md in code.

Everything a memq trace is made of is named here once, and every writer and reader takes it from here:

* `names`: packet sequences, clocks, categories, track / counter / event names, argument keys with their
  units, flow-id tags, and the text forms of sizes, durations and copy kinds;
* `tracks`: the track uuid scheme and the descriptor of every kind of track;
* `packets`: the one TracePacket builder (protobuf wire format) that the converter's structural packets,
  the Kineto merge and `memq annotate` write through (bulk columns go through native/encode.c);
* `ui`: what the Perfetto UI side needs (pinned tracks, startup commands, macros, the plugin's names),
  generated from the above.

The SQL package (sql/memq) cannot import Python: tests/test_traceformat.py checks that every track name,
category and argument key it reads is one of these.
"""
