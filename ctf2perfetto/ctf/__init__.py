"""Reading LTTng CTF: checks before libbabeltrace2 opens a trace, the guarded decode, loss, salvage.

decode.py turns a trace directory into EventBatch columns (ctf2perfetto.events) with the native
decoder (native/decode.c over libbabeltrace2); check.py and preflight.py look at the files first,
guard.py runs library code that may hang or abort where it can be stopped, salvage.py cuts a
damaged trace back to what is readable.
"""
