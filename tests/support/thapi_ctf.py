"""A THAPI-shaped CTF trace, written here: the event names and fields THAPI's generated LTTng-UST tracepoints use
(`lttng_ust_hip:<func>_entry` with every parameter by its C name, pointers as hex integers;
`lttng_ust_hip:<func>_exit` with `hipResult` and out-parameters as `<name>_val`; the same for `lttng_ust_cuda`
with `cuResult`), vpid/vtid contexts. Public repositories hold no THAPI trace, only text renderings of THAPI's
own test output, so the tests build one (every integer 64-bit, no padding; babeltrace2 reads it)."""
from __future__ import annotations

import struct
from pathlib import Path

MAGIC = 0xC1FC1FC1
RESULT = {"lttng_ust_hip": "hipResult", "lttng_ust_cuda": "cuResult", "lttng_ust_cudart": "cudaResult"}


def write_trace(directory: Path, calls: list[dict]) -> Path:
    """`calls`: dicts with provider, func, pid, tid, begin, end (ns), entry {field: int}, exit {field: int}
    (the result field is added, 0 unless given). Writes `metadata` and `stream_0` into `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    classes: dict[tuple[str, tuple[str, ...]], int] = {}
    events = []  # (ts, class id, pid, tid, values)
    for call in calls:
        for phase, fields in (("entry", dict(call.get("entry", {}))),
                              ("exit", {RESULT[call["provider"]]: 0, **call.get("exit", {})})):
            name = f'{call["provider"]}:{call["func"]}_{phase}'
            key = (name, tuple(fields))
            cid = classes.setdefault(key, len(classes))
            events.append((call["begin"] if phase == "entry" else call["end"], cid, call["pid"], call["tid"],
                           list(fields.values())))
    events.sort(key=lambda e: e[0])
    decls = []
    for (name, fields), cid in classes.items():
        body = " ".join(f"{'int64_t' if f.endswith('Result') else 'hex64_t'} _{f};" for f in fields)
        decls.append(f'event {{\n\tname = "{name}";\n\tid = {cid};\n\tstream_id = 0;\n\tfields := struct {{ {body} }};\n}};\n')
    metadata = f"""/* CTF 1.8 */

typealias integer {{ size = 32; align = 8; signed = false; }} := uint32_t;
typealias integer {{ size = 64; align = 8; signed = false; }} := uint64_t;
typealias integer {{ size = 64; align = 8; signed = true; }} := int64_t;
typealias integer {{ size = 64; align = 8; signed = false; base = 16; }} := hex64_t;

trace {{
\tmajor = 1;
\tminor = 8;
\tbyte_order = le;
\tpacket.header := struct {{ uint32_t magic; uint32_t stream_id; }};
}};

env {{
\thostname = "thapi-node";
\tdomain = "ust";
\ttracer_name = "lttng-ust";
\ttracer_major = 2;
\ttracer_minor = 13;
}};

clock {{
\tname = "monotonic";
\tfreq = 1000000000;
\toffset_s = 1700000000;
}};

typealias integer {{ size = 64; align = 8; signed = false; map = clock.monotonic.value; }} := uint64_clock_monotonic_t;

stream {{
\tid = 0;
\tpacket.context := struct {{ uint64_t content_size; uint64_t packet_size; }};
\tevent.header := struct {{ uint64_t id; uint64_clock_monotonic_t timestamp; }};
\tevent.context := struct {{ int64_t _vpid; int64_t _vtid; }};
}};

""" + "\n".join(decls)
    (directory / "metadata").write_text(metadata)
    body = b"".join(struct.pack(f"<QQqq{len(v)}Q", cid, ts, pid, tid, *[x & (2**64 - 1) for x in v])
                    for ts, cid, pid, tid, v in events)
    content = 8 + 16 + len(body)
    size = (content + 4095) // 4096 * 4096
    packet = struct.pack("<IIQQ", MAGIC, 0, content * 8, size * 8) + body
    (directory / "stream_0").write_bytes(packet.ljust(size, b"\0"))
    return directory
