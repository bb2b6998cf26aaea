"""Call sites: map an `ip` (caller address) to binary + function (+ file:line).

The trace says which binary was mapped where (`memq.binary` instants from the
statedump `bin_info` and `lttng_ust_lib:load` events: pid, baddr, memsz, path,
build_id); the binaries on disk say which function holds an address (ELF symbol
tables via binutils `nm`) and, where they carry DWARF, which source line
(`addr2line`). Separate debug files under /usr/lib/debug/.build-id are used when
present.

LTTng's `baddr` is the runtime address of the binary's first PT_LOAD segment, so
the link-time address of `ip` is `ip - baddr + first_load_vaddr` for PIE/shared
objects and executables alike. `ip` is a return address: the call instruction
ends just before it, so `ip - 1` is what gets looked up.
"""
from __future__ import annotations

import bisect
import re
import shutil
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterable

from ctf2perfetto.errors import MemqError

DEBUG_ROOT = Path("/usr/lib/debug/.build-id")
_PT_LOAD = 1
_NT_GNU_BUILD_ID = 3
_FUNCTION_TYPES = set("TtWwi")  # nm letters of code symbols
_VERSION_SUFFIX = re.compile(r"@@?[A-Za-z_][\w.]*$")


@dataclass(frozen=True)
class Mapping:
    """One binary mapped into one process (a memq.binary instant)."""

    pid: int
    baddr: int
    memsz: int
    path: str
    build_id: str = ""
    ts: int = 0  # when the trace reported it

    def contains(self, ip: int) -> bool:
        return self.baddr <= ip < self.baddr + self.memsz


@dataclass(frozen=True)
class CallSite:
    """Where an ip points. Fields are None where they cannot be known."""

    binary: str | None
    function: str | None = None
    source: str | None = None  # "file:line" when the binary has debug info
    offset: int | None = None  # ip - baddr
    problem: str | None = None  # why function is unknown (binary missing, changed, ...)

    def label(self) -> str:
        """Short text for tables: `function (source)` or `binary+0xoffset`."""
        if self.binary is None:
            return "[unknown binary]"
        where = self.function or f"{Path(self.binary).name}+{self.offset:#x}"
        return f"{where} ({self.source})" if self.source else where


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise MemqError(f"`{name}` not found: install binutils (scripts/install.sh) for call-site mapping")
    return found


class ElfFile:
    """What call-site mapping needs from one ELF file on disk."""

    def __init__(self, path: Path) -> None:
        self.path = path
        with path.open("rb") as f:  # the header, program headers and notes only (libraries can be GBs)
            header = f.read(64)
            if len(header) < 64 or header[:4] != b"\x7fELF" or header[4] != 2 or header[5] != 1:
                raise MemqError(f"{path}: not a 64-bit little-endian ELF file")
            self.first_load_vaddr, self.build_id = _read_elf_header(header, f)
        self.debug_file = self._separate_debug_file()
        self._symbols: tuple[list[int], list[int], list[str]] | None = None

    def _separate_debug_file(self) -> Path | None:
        if len(self.build_id) > 2:
            candidate = DEBUG_ROOT / self.build_id[:2] / f"{self.build_id[2:]}.debug"
            if candidate.is_file():
                return candidate
        return None

    def symbols(self) -> tuple[list[int], list[int], list[str]]:
        """Code symbols sorted by address: (starts, sizes, names)."""
        if self._symbols is None:
            table: dict[int, tuple[int, str]] = {}
            sources = [[self.path], ["-D", self.path]] + ([[self.debug_file]] if self.debug_file else [])
            for args in sources:
                out = subprocess.run([_tool("nm"), "-S", "-C", "--defined-only", *map(str, args)],
                                     capture_output=True, text=True).stdout
                for line in out.splitlines():
                    parts = line.split(" ", 3)
                    if len(parts) == 4 and parts[2] in _FUNCTION_TYPES:
                        addr, size = int(parts[0], 16), int(parts[1], 16)
                        name = _VERSION_SUFFIX.sub("", parts[3])  # nm -D: "operator new(...)@@GLIBCXX_3.4"
                        if addr not in table or table[addr][0] < size:
                            table[addr] = (size, name)
            starts = sorted(table)
            self._symbols = (starts, [table[a][0] for a in starts], [table[a][1] for a in starts])
        return self._symbols

    def function(self, vaddr: int) -> str | None:
        starts, sizes, names = self.symbols()
        i = bisect.bisect_right(starts, vaddr) - 1
        if i >= 0 and (vaddr < starts[i] + sizes[i] or sizes[i] == 0):
            return names[i]
        return None

    def sources(self, vaddrs: list[int]) -> list[str | None]:
        """file:line per address from DWARF (None where the binary has none)."""
        target = self.debug_file or self.path
        result: list[str | None] = []
        for chunk in range(0, len(vaddrs), 2000):
            part = vaddrs[chunk:chunk + 2000]
            out = subprocess.run([_tool("addr2line"), "-e", str(target), *(hex(a) for a in part)],
                                 capture_output=True, text=True).stdout.splitlines()
            out += ["??:0"] * (len(part) - len(out))
            for line in out[:len(part)]:
                line = line.split(" (discriminator")[0].strip()
                result.append(None if line.startswith("??") or line.endswith(":?") or line.endswith(":0") else line)
        return result


def _read_elf_header(header: bytes, f: BinaryIO) -> tuple[int, str]:
    """(vaddr of the first PT_LOAD, GNU build-id as hex or '') of an ELF64 LE file open at `f`."""
    e_phoff, = struct.unpack_from("<Q", header, 0x20)
    e_phentsize, e_phnum = struct.unpack_from("<HH", header, 0x36)
    f.seek(e_phoff)
    phdrs = f.read(e_phentsize * e_phnum)
    first_load = None
    build_id = ""
    for i in range(min(e_phnum, len(phdrs) // max(e_phentsize, 1))):
        p_type, _flags, p_offset, p_vaddr, _paddr, p_filesz = struct.unpack_from("<IIQQQQ", phdrs, i * e_phentsize)
        if p_type == _PT_LOAD and first_load is None:
            first_load = p_vaddr
        elif p_type == 4 and not build_id:  # PT_NOTE
            f.seek(p_offset)
            build_id = _note_build_id(f.read(min(p_filesz, 1 << 16)))
    return first_load or 0, build_id


def _note_build_id(notes: bytes) -> str:
    pos = 0
    while pos + 12 <= len(notes):
        namesz, descsz, ntype = struct.unpack_from("<III", notes, pos)
        name_end = pos + 12 + ((namesz + 3) & ~3)
        desc = notes[name_end:name_end + descsz]
        if ntype == _NT_GNU_BUILD_ID and notes[pos + 12:pos + 12 + namesz].rstrip(b"\0") == b"GNU":
            return desc.hex()
        pos = name_end + ((descsz + 3) & ~3)
    return ""


class Symbolizer:
    """Resolves (pid, ip, ts) to CallSites, caching each binary once."""

    def __init__(self, mappings: Iterable[Mapping]) -> None:
        self.by_pid: dict[int, list[Mapping]] = {}
        for m in sorted(mappings, key=lambda m: m.ts):
            self.by_pid.setdefault(m.pid, []).append(m)
        self._elves: dict[str, ElfFile | str] = {}  # path -> ElfFile or the reason it is unusable

    def mapping(self, pid: int, ip: int, ts: int | None = None) -> Mapping | None:
        """The latest mapping of `pid` containing ip reported no later than ts (any, if none was)."""
        candidates = [m for m in self.by_pid.get(pid, ()) if m.contains(ip)]
        if ts is not None:
            before = [m for m in candidates if m.ts <= ts]
            candidates = before or candidates
        return candidates[-1] if candidates else None

    def _elf(self, m: Mapping) -> ElfFile | str:
        if m.path not in self._elves:
            try:
                elf: ElfFile | str = ElfFile(Path(m.path))
                if m.build_id and elf.build_id and m.build_id != elf.build_id:
                    elf = f"{m.path} changed on disk since the recording (build-id differs)"
            except OSError as exc:
                elf = f"{m.path}: {exc.strerror or exc}"
            except MemqError as exc:
                elf = str(exc)
            self._elves[m.path] = elf
        return self._elves[m.path]

    def resolve(self, sites: list[tuple[int, int, int | None]]) -> list[CallSite]:
        """CallSite per (pid, ip, ts); addr2line runs once per binary."""
        result: list[CallSite | None] = [None] * len(sites)
        pending: dict[str, list[tuple[int, int, Mapping]]] = {}
        for i, (pid, ip, ts) in enumerate(sites):
            m = self.mapping(pid, ip, ts) if ip else None
            if m is None:
                result[i] = CallSite(None, problem="ip in no binary the trace reported" if ip else "no ip")
                continue
            elf = self._elf(m)
            if isinstance(elf, str):
                result[i] = CallSite(m.path, offset=ip - m.baddr, problem=elf)
                continue
            pending.setdefault(m.path, []).append((i, ip - m.baddr + elf.first_load_vaddr - 1, m))
        for path, items in pending.items():
            elf = self._elves[path]
            assert isinstance(elf, ElfFile)
            sources = elf.sources([vaddr for _, vaddr, _ in items])
            for (i, vaddr, m), source in zip(items, sources):
                sites_ip = sites[i][1]
                result[i] = CallSite(m.path, elf.function(vaddr), source, sites_ip - m.baddr)
        return [r for r in result if r is not None]

    def problems(self) -> list[str]:
        """Binaries that could not be read, one line each."""
        return sorted(v for v in self._elves.values() if isinstance(v, str))
