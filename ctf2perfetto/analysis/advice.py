"""Advice rules: the waste a user can fix, one SQL module each (sql/memq/advice/*.sql).

Each rule is a table of the `memq.advice.*` modules with one row per place to fix (a call
site, a buffer, an allocation size), its figures and `gain_dur` (what fixing it would save,
NULL when unknown). This module runs them and fills what SQL cannot compute: the content
fingerprints of all-zero data (xxh3, as preload/memq_hash.c takes them), which the zero-copy
rule compares copies' source fingerprints with.
"""
from __future__ import annotations

import ctypes
import ctypes.util
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ctf2perfetto.analysis.base import Analysis, note_for, source_info, with_attrs
from ctf2perfetto.engine.rows import Rows, is_null

SAMPLE_BLOCKS, SAMPLE_BLOCK = 16, 64  # preload/memq_hash.h MEMQ_SAMPLE_BLOCKS, MEMQ_SAMPLE_BLOCK
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Rule:
    """One advice rule: its module, table, and what it is about in words."""

    name: str
    module: str
    table: str
    title: str
    fix: str


RULES = (
    Rule("zero_content", "advice.zero_content", "memq_advice_zero_content", "copies of all-zero data",
         "write zeros on the device (hipMemset / cudaMemset; torch.zeros(..., device=...)) instead of copying them"),
    Rule("pinning", "advice.pinning", "memq_advice_pinning", "pageable buffers uploaded again and again",
         "pin the buffer once (pin_memory=True; hipHostMalloc / cudaMallocHost, or hipHostRegister / "
         "cudaHostRegister of the existing buffer)"),
    Rule("sync_loop", "advice.sync_loop", "memq_advice_sync_loop", "synchronous copies in a loop",
         "make it asynchronous: non_blocking=True with a pinned buffer and one synchronisation after the loop; "
         "drop a read-back or .item() inside the loop"),
    Rule("pinned_oversize", "advice.pinned_oversize", "memq_advice_pinned_oversize",
         "pinned buffers much larger than their copies",
         "size the pinned buffer to its largest copy, or take staging buffers from one pool"),
    Rule("pinned_churn", "advice.pinned_churn", "memq_advice_pinned_churn", "pinned alloc/free churn",
         "allocate the pinned buffer once and reuse it (or a caching host allocator: pin_memory=True)"),
    Rule("zero_bytes", "advice.zero_bytes", "memq_advice_zero_bytes", "zero-byte copies",
         "skip the call when the size is 0"),
)
RULE = {r.name: r for r in RULES}


class _XXH3:
    """libxxhash's XXH3 through ctypes (the library the preload's fingerprints are built with)."""

    def __init__(self) -> None:
        name = ctypes.util.find_library("xxhash") or "libxxhash.so.0"
        lib = ctypes.CDLL(name)
        lib.XXH3_64bits_withSeed.restype = ctypes.c_uint64
        lib.XXH3_64bits_withSeed.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint64]
        lib.XXH3_createState.restype = ctypes.c_void_p
        lib.XXH3_freeState.argtypes = [ctypes.c_void_p]
        lib.XXH3_64bits_reset_withSeed.argtypes = [ctypes.c_void_p, ctypes.c_uint64]
        lib.XXH3_64bits_update.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
        lib.XXH3_64bits_digest.restype = ctypes.c_uint64
        lib.XXH3_64bits_digest.argtypes = [ctypes.c_void_p]
        self.lib = lib
        self.zeros = ctypes.create_string_buffer(_CHUNK)

    def zeros_hash(self, length: int, seed: int) -> int:
        """XXH3-64 of `length` zero bytes with `seed`."""
        if length <= _CHUNK:
            return int(self.lib.XXH3_64bits_withSeed(self.zeros, length, seed))
        state = self.lib.XXH3_createState()
        try:
            self.lib.XXH3_64bits_reset_withSeed(state, seed)
            left = length
            while left:
                n = min(left, _CHUNK)
                self.lib.XXH3_64bits_update(state, self.zeros, n)
                left -= n
            return int(self.lib.XXH3_64bits_digest(state))
        finally:
            self.lib.XXH3_freeState(state)


@lru_cache(maxsize=1)
def _xxh3() -> _XXH3 | None:
    try:
        return _XXH3()
    except (OSError, AttributeError):
        return None


def zero_fingerprint(mode: str, length: int) -> int | None:
    """The fingerprint memq record takes of `length` zero bytes in content mode `mode` (`sampled` or
    `full`), as a signed 64-bit integer (how the trace stores it); None without libxxhash.

    memq_hash.c: `full` hashes every byte, `sampled` the 16 blocks of 64 bytes it reads (all bytes up to
    1,024); both seed XXH3 with the length, so the layout of a 2D/3D span does not matter."""
    xxh = _xxh3()
    if xxh is None or length <= 0:
        return None
    covered = length if mode == "full" else min(length, SAMPLE_BLOCKS * SAMPLE_BLOCK)
    value = xxh.zeros_hash(covered, length)
    return value - (1 << 64) if value >= 1 << 63 else value


_ZERO_TABLE = """CREATE TABLE IF NOT EXISTS memq_zero_fingerprint(content_mode TEXT, bytes INTEGER, hash INTEGER)"""


def fill_zero_fingerprints(engine: Any) -> int:
    """Fills memq_zero_fingerprint with the fingerprints of zeros for every (content mode, length) of a
    fingerprinted copy source in the trace; returns how many rows it added (0 without libxxhash)."""
    engine.rows(_ZERO_TABLE)
    wanted = engine.rows("""INCLUDE PERFETTO MODULE memq.copies;
        SELECT DISTINCT c.content_mode AS mode, c.bytes FROM memq_copy c
        WHERE c.src_hash IS NOT NULL AND c.bytes > 0 AND c.content_mode IN ('sampled', 'full')
          AND NOT EXISTS (SELECT 1 FROM memq_zero_fingerprint z WHERE z.content_mode = c.content_mode
                          AND z.bytes = c.bytes)""").records()
    values = []
    for row in wanted:
        fp = zero_fingerprint(row["mode"], int(row["bytes"]))
        if fp is not None:
            values.append(f"('{row['mode']}', {int(row['bytes'])}, {fp})")
    for lo in range(0, len(values), 500):
        engine.rows("INSERT INTO memq_zero_fingerprint VALUES " + ",".join(values[lo:lo + 500]))
    return len(values)


def rule_rows(engine: Any, name: str) -> Any:
    """The rows of one rule (Rows), its findings in the order of their gain."""
    rule = RULE[name]
    if name == "zero_content":
        fill_zero_fingerprints(engine)
    return engine.rows(f"INCLUDE PERFETTO MODULE memq.{rule.module};\nSELECT * FROM {rule.table}")


NOTE = ("Advice rules (sql/memq/advice/*.sql): each table lists the places to fix, largest gain first; gain_dur is "
        "what fixing it would save at most (NULL: unknown). Zero copies need content fingerprints (memq record "
        "--content) and libxxhash.")


def advice_tables(engine: Any, args: Any = None) -> dict[str, Rows]:
    """`memq advice`'s tables: one row per rule (findings, summed gain, the fix), then each rule's findings."""
    names, addressed, has_events = source_info(engine)
    found = {rule.name: rule_rows(engine, rule.name) if addressed else None for rule in RULES}
    summary = []
    for rule in RULES:
        rows = found[rule.name]
        gains = [] if rows is None else [v for v in rows.column("gain_dur")] if "gain_dur" in rows.columns else []
        summary.append({"rule": rule.name, "what": rule.title, "findings": 0 if rows is None else len(rows),
                        "gain_dur": sum(int(v) for v in gains if not is_null(v)),
                        "unused_bytes": sum(int(v) for v in rows.column("unused_bytes"))
                        if rows is not None and "unused_bytes" in rows.columns else 0,
                        "fix": rule.fix})
    columns = ["rule", "what", "findings", "gain_dur", "unused_bytes", "fix"]
    note = note_for(has_events, addressed, NOTE)
    tables = {"advice": with_attrs(Rows.from_records(summary, columns, as_query=True), applies=addressed, note=note,
                                   sources=names, engine=engine)}
    for rule in RULES:
        rows = found[rule.name]
        if rows is not None and len(rows):
            tables[rule.name] = with_attrs(rows, applies=True, note=note, sources=names)
    return tables


def advice(trace: Any) -> dict[str, Any]:
    """The advice rules as DataFrames (notebook API): `advice` (one row per rule: findings, summed gain, the fix)
    and each rule with findings (its places to fix, largest gain first)."""
    from ctf2perfetto.analysis.base import frame, load

    with load(trace) as engine:
        return {name: frame(rows) for name, rows in advice_tables(engine).items()}


def verdict(tables: dict[str, Rows]) -> list[str]:
    """Two lines in words: how many places to fix, and the largest."""
    first = tables.get("advice")
    if first is None or not first.attrs.get("applies", True):
        return ["No advice: the trace's copies carry no addresses.", "Record with memq record for the rules to apply."]
    rows = [r for r in first.records() if r["findings"]]
    if not rows:
        return ["No advice: none of the rules found waste to fix.",
                "Checked: " + ", ".join(r["what"] for r in first.records()) + "."]
    total = sum(r["findings"] for r in rows)
    best = max(rows, key=lambda r: (r["gain_dur"], r["unused_bytes"]))
    from ctf2perfetto.analysis.base import size_words, time_words

    gain = time_words(best["gain_dur"]) if best["gain_dur"] else size_words(best["unused_bytes"]) + " of memory"
    return [f"{total} place(s) to fix under {len(rows)} rule(s); the largest gain, up to {gain}: {best['what']}.",
            f"Fix: {best['fix']}."]


ANALYSIS = Analysis(
    name="advice",
    help="what to fix: copies of zeros, pinning candidates, synchronous copies in a loop, oversized and churning "
         "pinned buffers, zero-byte copies",
    tables=advice_tables,
    verdict=verdict,
)
