"""Which format a trace is, from its content (never from its name).

* a file starting with the SQLite header: its table names tell RPD (rocpd_api, rocpd_op, rocpd_copyapi,
  rocpd_api_ops), rocpd (rocpd_info_process*, rocpd_memory_copy* / rocpd_region*) or an Nsight Systems export
  (StringIds, TARGET_INFO_SESSION_START_TIME / EXPORT_META_DATA); any other database is refused in one line;
* a directory of CTF traces: the event names in its `metadata` files (plain TSDL or packetized) tell a THAPI
  (`iprof`) trace (lttng_ust_hip:*, lttng_ust_cuda:*, lttng_ust_cudart:* entry/exit events, no memq:*) from
  a memq / LTTng recording;
* anything else is memq's own business (a Perfetto trace, JSON, an LTTng directory): None.
"""
from __future__ import annotations

import os
import re
import struct
from pathlib import Path

from ctf2perfetto.errors import MemqError
from ctf2perfetto.importers.sqlite import SQLITE_MAGIC, open_sqlite, tables

FORMATS = ("rpd", "rocpd", "nsys", "thapi")
THAPI_PROVIDERS = ("lttng_ust_hip", "lttng_ust_cuda", "lttng_ust_cudart")
_EVENT_NAME = re.compile(rb'name\s*=\s*"?([A-Za-z0-9_:.]+)"?\s*;')
CTF_PACKET_MAGIC = 0x75D11D57


def is_sqlite(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(16) == SQLITE_MAGIC
    except OSError:
        return False


def sqlite_format(path: Path) -> str:
    """'rpd', 'rocpd' or 'nsys' for an SQLite file; MemqError naming its tables for any other database."""
    from ctf2perfetto.importers import nsys, rocpd, rpd  # numpy and the importers only once a database is at hand

    db = open_sqlite(path, "an RPD, rocpd or Nsight Systems database")
    try:
        names = set(tables(db))
    finally:
        db.close()
    if rpd.is_rpd(names):
        return "rpd"
    if rocpd.is_rocpd(names):
        return "rocpd"
    if nsys.is_nsys(names):
        return "nsys"
    shown = ", ".join(sorted(names)[:6]) + (", ..." if len(names) > 6 else "")
    raise MemqError(f"{path}: an SQLite database memq does not know (tables: {shown or 'none'}): expected an RPD "
                    "(rocmProfileData), rocpd (rocprofv3) or Nsight Systems export")


def metadata_text(path: Path, limit: int = 16 << 20) -> bytes:
    """A CTF metadata file's TSDL: plain text, or the payload of its metadata packets (packetized metadata)."""
    with open(path, "rb") as f:
        data = f.read(limit)
    if len(data) >= 4 and struct.unpack("<I", data[:4])[0] == CTF_PACKET_MAGIC:
        order = "<"
    elif len(data) >= 4 and struct.unpack(">I", data[:4])[0] == CTF_PACKET_MAGIC:
        order = ">"
    else:
        return data
    out, at = [], 0
    while at + 37 <= len(data):  # magic, uuid[16], checksum, content_size, packet_size, 4 bytes, header_size 37
        magic, = struct.unpack(order + "I", data[at:at + 4])
        if magic != CTF_PACKET_MAGIC:
            break
        content_bits, packet_bits = struct.unpack(order + "II", data[at + 24:at + 32])
        if packet_bits < 8 * 37 or content_bits > packet_bits:
            break
        out.append(data[at + 37:at + content_bits // 8])
        at += packet_bits // 8
    return b"".join(out)


def metadata_files(directory: Path, limit: int = 64) -> list[Path]:
    found = []
    for root, dirs, files in os.walk(directory):
        dirs.sort()
        if "metadata" in files:
            found.append(Path(root) / "metadata")
            if len(found) >= limit:
                break
    return found


def ctf_event_names(directory: Path) -> set[str]:
    names: set[str] = set()
    for meta in metadata_files(directory):
        try:
            text = metadata_text(meta)
        except OSError:
            continue
        for block in re.split(rb"\bevent\s*\{", text)[1:]:
            match = _EVENT_NAME.search(block)
            if match:
                names.add(match.group(1).decode("ascii", "replace"))
    return names


def is_thapi(names: set[str]) -> bool:
    ours = any(n.startswith(("memq:", "lttng_ust_libc:", "ust_libc:")) for n in names)
    return not ours and any(n.split(":", 1)[0] in THAPI_PROVIDERS and n.endswith(("_entry", "_exit"))
                            for n in names)


def sniff(path: str | os.PathLike[str]) -> str | None:
    """'rpd', 'rocpd', 'nsys' or 'thapi' when `path` is one of the formats the importers read, else None."""
    path = Path(path)
    if path.is_file():
        return sqlite_format(path) if is_sqlite(path) else None
    if path.is_dir():
        return "thapi" if is_thapi(ctf_event_names(path)) else None
    return None
