"""memq: where a GPU job wastes memory and copies.

Pipeline (one module per stage, see docs/ARCHITECTURE.md):
    record   -> ctf2perfetto.capture     LTTng session around a command (+ preload/)
    decode   -> ctf2perfetto.ctf.decode     CTF -> EventBatch columns (native, libbabeltrace2)
    model    -> ctf2perfetto.convert.model      allocations, live bytes, copy endpoints
    write    -> ctf2perfetto.convert.write      Perfetto protobuf (TrackEvent)
    engine   -> ctf2perfetto.engine     trace_processor (embedded wasm or native)
    analyses -> ctf2perfetto.analyses   sql/memq modules as pandas DataFrames
"""

__version__ = "0.1.0"
