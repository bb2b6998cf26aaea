"""The event plan: the channel, events, filters and contexts a session enables for the options.

LTTng semantics worth knowing: a session records every instrumented process of the
user that registers while it is active, not only the command's tree (processes are
told apart by the vpid context).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ctf2perfetto.capture.api_ranges import RUNTIMES, lttng_filter
from ctf2perfetto.capture.preload import memq_preloaded

if TYPE_CHECKING:
    from ctf2perfetto.capture.lttng import Lttng
    from ctf2perfetto.capture.options import RecordOptions

CHANNEL = "memq"
# Finite, so a stuck consumer daemon delays the program (at most this long per
# event) instead of hanging it forever; events then count as discarded.
BLOCKING_TIMEOUT_US = 200_000
# Per-CPU ring buffer: 8 x 2 MiB absorbs bursts of ~600k events between
# consumer reads, what a heap recorded call by call needs (--host-min-size 0,
# --host-source lttng); with the heap at a threshold (~100x fewer events)
# 8 x 512 KiB does, and the session starts faster (the buffers are allocated
# at `lttng start`: 0.15-0.3 s for 2 x 16 MiB here).
SUBBUF_SIZE = "2M"
SUBBUF_SIZE_THRESHOLD = "512k"
CONTEXTS = ("vpid", "vtid", "ip")

# memq events that carry the `api` enum (its ranges per family: api_ranges.py,
# see docs/EVENTS.md), and the per-process ones (`runtime`: api_ranges.RUNTIMES). With one GPU runtime, its
# gate event (never emitted) switches the other runtime's wrappers off in the
# preload library itself, so they forward calls untraced instead of building
# events; the filters still keep this session to its runtime when another
# session of the same user (sessions see all of a user's processes) turns
# the other gate on.
MEMQ_CALL_EVENTS = ("alloc", "register", "free", "unregister", "copy", "set", "prefetch", "advise", "sync",
                    "set_device", "copy_done")
# memq's host heap events (docs/EVENTS.md, "Capture layout"); they carry no runtime.
MEMQ_HOST_EVENTS = ("host_alloc", "host_free", "host_small")
# The library map memq's library writes (LTTng's lttng_ust_lib:* and statedump bin_info without it).
MEMQ_LIBRARY_EVENTS = "memq:lib_load,memq:lib_unload"
# memq:live lists a window's live allocations: the GPU runtime's (its `api`) and the heap's (malloc ... free).
HOST_API_FILTER = lttng_filter("libc")
API_FILTER = {"hip": lttng_filter("hip"), "cuda": lttng_filter("cuda")}
RUNTIME_FILTER = {name: f"runtime == {RUNTIMES[name]}" for name in ("hip", "cuda")}
GATE_EVENT = {"hip": "memq:gate_hip", "cuda": "memq:gate_cuda"}


def subbuf_size(options: RecordOptions) -> str:
    """The sub-buffer size asked for, else the default for how the heap is recorded (see SUBBUF_SIZE)."""
    if options.subbuf_size:
        return options.subbuf_size
    every_call = "libc" in options.apis and (options.host_source == "lttng" or options.host_min_size == 0)
    return SUBBUF_SIZE if every_call else SUBBUF_SIZE_THRESHOLD


def host_settings(options: RecordOptions) -> dict | None:
    """What memq-record.json says about the host heap: None without the libc API."""
    if "libc" not in options.apis:
        return None
    if options.host_source == "lttng":
        return {"source": "lttng"}
    return {"source": "memq", "min_size": options.host_min_size}


def event_rules(apis: tuple[str, ...], host_source: str = "memq") -> list[tuple[str, str | None]]:
    """(event names, filter) pairs for `lttng enable-event -u`.

    memq's host events are emitted only when the preload library is given a threshold
    (preload.HOST_MIN_SIZE_ENV), so `memq:*` enables them harmlessly without the libc API.
    The statedump stays on for the process names (its bin_info is off with memq's library).
    """
    rules: list[tuple[str, str | None]] = [("lttng_ust_statedump:*", None)]
    rules.append((MEMQ_LIBRARY_EVENTS, None) if memq_preloaded(apis, host_source) else ("lttng_ust_lib:*", None))
    memq_heap = "libc" in apis and host_source == "memq"
    if "libc" in apis and not memq_heap:
        rules.append(("lttng_ust_libc:*", None))
    gpu = [a for a in apis if a in ("hip", "cuda")]
    if len(gpu) == 2:
        rules.append(("memq:*", None))
        return rules
    if gpu:
        calls = ",".join(f"memq:{e}" for e in MEMQ_CALL_EVENTS)
        rules += [(calls, API_FILTER[gpu[0]]), ("memq:device", RUNTIME_FILTER[gpu[0]]),
                  (GATE_EVENT[gpu[0]], None)]
    if memq_heap:
        rules.append((",".join(f"memq:{e}" for e in MEMQ_HOST_EVENTS), None))
    if gpu or memq_heap:
        live = [f"({API_FILTER[g]})" for g in gpu] + ([f"({HOST_API_FILTER})"] if memq_heap else [])
        rules += [("memq:clock", None), ("memq:identity", None), ("memq:window", None),
                  ("memq:live", " || ".join(live))]
    return rules


def enabled_settings(options: RecordOptions, rules: list[tuple[str, str | None]]) -> dict:
    """What memq-record.json's `enabled` says the session was set up with (`capture` is added at the start)."""
    return {"apis": list(options.apis), "mode": options.mode, "host": host_settings(options),
            "content": options.content,
            "channel": {"name": CHANNEL, "buffers": "per-uid", "subbuf_size": subbuf_size(options),
                        "num_subbuf": options.num_subbuf,
                        "blocking_timeout_us": BLOCKING_TIMEOUT_US if options.mode == "blocking" else 0},
            "events": [{"events": e, "filter": f} for e, f in rules], "contexts": list(CONTEXTS)}


def configure_session(lttng: Lttng, session: str, options: RecordOptions,
                      rules: list[tuple[str, str | None]]) -> None:
    """Channel, events and contexts of a freshly created session (unfiltered rules in one call:
    each `lttng` run costs ~15 ms)."""
    channel = ["enable-channel", "-u", "-s", session, f"--subbuf-size={subbuf_size(options)}",
               f"--num-subbuf={options.num_subbuf}", "--discard"]
    if options.mode == "blocking":
        channel.append(f"--blocking-timeout={BLOCKING_TIMEOUT_US}")
    lttng.run(*channel, CHANNEL)
    unfiltered = ",".join(events for events, filt in rules if not filt)
    for events, filt in [(unfiltered, None)] * bool(unfiltered) + [(e, f) for e, f in rules if f]:
        lttng.run("enable-event", "-u", "-s", session, "-c", CHANNEL, events, *(["--filter", filt] if filt else []))
    lttng.run("add-context", "-u", "-s", session, "-c", CHANNEL, *[a for c in CONTEXTS for a in ("-t", c)])
