"""What `memq record` may be asked for: the options, their parsing and their checks."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ctf2perfetto.capture.triggers import Capture
from ctf2perfetto.errors import UsageError

APIS = ("hip", "cuda", "libc")
MODES = ("blocking", "discard")
# Where `--api libc` events come from: memq's own heap wrappers (blocks at or above
# --host-min-size as events, smaller ones as per-thread totals) or LTTng's libc
# wrapper (every call an event, raw lttng_ust_libc:* events as in older traces).
HOST_SOURCES = ("memq", "lttng")
HOST_MIN_SIZE = 4096
HOST_MIN_SIZE_RE = re.compile(r"^(\d+)([kKmMgG]?)$")
HOST_MIN_SIZE_MAX = 1 << 48  # beyond any heap block: no block would be an event
# Content fingerprints of copies (docs/EVENTS.md "Content fingerprints"), passed to the preload library.
CONTENT_MODES = ("sampled", "full", "off")
SIZE_RE = re.compile(r"^[1-9]\d*[kKmMgG]?$")  # --subbuf-size

# Sub-buffers per per-CPU ring buffer (lttng enable-channel --num-subbuf); their size: plan.subbuf_size().
NUM_SUBBUF = 8


@dataclass(frozen=True)
class RecordOptions:
    """What the user asked for."""

    output: Path
    command: list[str]
    apis: tuple[str, ...] = APIS
    mode: str = "blocking"
    force: bool = False
    subbuf_size: str | None = None  # lttng enable-channel --subbuf-size (power of two, >= page size); None: as
    # the heap needs (subbuf_size())
    num_subbuf: int = NUM_SUBBUF
    capture: Capture = Capture()  # capture windows (default: the whole run)
    host_source: str = "memq"  # HOST_SOURCES
    host_min_size: int = HOST_MIN_SIZE  # bytes (usable size); 0 = every block an event
    content: str = "sampled"  # content fingerprints of copies: sampled, full or off


def parse_apis(text: str) -> tuple[str, ...]:
    """`hip,cuda,libc` -> ('hip', 'cuda', 'libc'), validated."""
    apis = tuple(dict.fromkeys(a.strip() for a in text.split(",") if a.strip()))
    unknown = [a for a in apis if a not in APIS]
    if not apis or unknown:
        raise UsageError(f"--api {text!r}: choose from {','.join(APIS)}")
    return apis


def parse_host_min_size(text: str) -> int:
    """`--host-min-size`: bytes, with an optional k/M/G suffix (powers of 1024); 0 records every block."""
    match = HOST_MIN_SIZE_RE.match(text.strip())
    if not match:
        raise UsageError(f"--host-min-size {text!r}: a size in bytes such as 4096, 64k or 1M "
                         "(0 records every allocation)")
    value = int(match.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30}[match.group(2).lower()]
    if value > HOST_MIN_SIZE_MAX:
        raise UsageError(f"--host-min-size {text!r}: larger than any heap block (at most {HOST_MIN_SIZE_MAX:,} bytes)")
    return value


def check_options(options: RecordOptions) -> None:
    """Refuses, in one line each, what cannot be recorded as asked."""
    if not options.command:
        raise UsageError("no command to record (memq record -o DIR -- COMMAND ...)")
    if options.mode not in MODES:
        raise UsageError(f"--mode {options.mode!r}: choose blocking or discard")
    if options.subbuf_size is not None and not SIZE_RE.match(options.subbuf_size):
        raise UsageError(f"--subbuf-size {options.subbuf_size!r}: a size such as 4096, 64k or 2M")
    if options.num_subbuf < 2:
        raise UsageError(f"--num-subbuf {options.num_subbuf}: at least 2")
    check_capture(options)
    if options.host_source not in HOST_SOURCES:
        raise UsageError(f"--host-source {options.host_source!r}: choose memq or lttng")
    if not 0 <= options.host_min_size <= HOST_MIN_SIZE_MAX:
        raise UsageError(f"--host-min-size {options.host_min_size}: between 0 and {HOST_MIN_SIZE_MAX:,} bytes")
    if options.content not in CONTENT_MODES:
        raise UsageError(f"--content {options.content!r}: choose sampled, full or off")


def check_capture(options: RecordOptions) -> None:
    """Capture windows gate memq's own events (its heap wrappers' included); LTTng's libc wrapper writes
    its events regardless."""
    if options.capture.windowed and "libc" in options.apis and options.host_source == "lttng":
        raise UsageError("--delay/--duration/--capture-range gate memq's own events, and LTTng's libc wrapper "
                         "(--host-source lttng) would still record the whole run: use --host-source memq")

