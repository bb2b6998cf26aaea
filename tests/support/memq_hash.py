"""preload/memq_hash.c on its own, through ctypes: the fingerprint function of `memq record --content`.

`HashLib(build_dir)` compiles memq_hash.c into a small shared library (no LTTng) and
exposes `hash(addr, width, height, pitch, depth, slice, mode, safe)`; the tests check
its definition (rows concatenated, sampled blocks) and bench/content_missrate.py
measures what `sampled` misses with it.
"""
from __future__ import annotations

import ctypes
import subprocess
from pathlib import Path

PRELOAD = Path(__file__).resolve().parent.parent.parent / "preload"
SAMPLED, FULL = 1, 2
BLOCKS, BLOCK = 16, 64  # memq_hash.h MEMQ_SAMPLE_BLOCKS, MEMQ_SAMPLE_BLOCK


def block_offsets(length: int) -> list[int]:
    """Where `sampled` reads a span of `length` (> BLOCKS * BLOCK) bytes, as memq_hash.h defines it:
    block i at (length - BLOCK) * i / (BLOCKS - 1), rounded down to a multiple of BLOCK but the last."""
    raw = [(length - BLOCK) * i // (BLOCKS - 1) for i in range(BLOCKS)]
    return [r - r % BLOCK for r in raw[:-1]] + [raw[-1]]


class Span(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in ("addr", "width", "height", "pitch", "depth", "slice")]


class HashLib:
    """The compiled memq_hash.c."""

    def __init__(self, build_dir: Path) -> None:
        build_dir.mkdir(parents=True, exist_ok=True)
        lib = build_dir / "libmemqhash.so"
        subprocess.run(["gcc", "-O2", "-fPIC", "-shared", "-std=gnu11", "-Wall", "-Wextra", "-Werror",
                        f"-I{PRELOAD}", "-o", str(lib), str(PRELOAD / "memq_hash.c")], check=True)
        self.lib = ctypes.CDLL(str(lib))
        self.lib.memq_hash_span.restype = ctypes.c_int
        self.lib.memq_hash_span.argtypes = [ctypes.POINTER(Span), ctypes.c_int, ctypes.c_int,
                                            ctypes.POINTER(ctypes.c_uint64)]

    def hash(self, addr: int, width: int, height: int = 1, pitch: int | None = None, depth: int = 1,
             slice: int = 0, mode: int = SAMPLED, safe: bool = False) -> int | None:
        """The fingerprint of the span, None when a safe read failed."""
        span = Span(addr, width, height, width if pitch is None else pitch, depth, slice)
        out = ctypes.c_uint64()
        return out.value if self.lib.memq_hash_span(ctypes.byref(span), mode, int(safe), ctypes.byref(out)) == 0 \
            else None
