"""Damage a recorded LTTng trace the ways a hostile user (or a failing disk) does, and run memq on it.

    t = TraceCopy.of(recorded_dir, tmp_path / "t")   # a writable copy with its stream files and index/
    t.set_field("memq_0", packet=5, field="packet_size", value=1 << 63)
    proc = run_cli("ctf2perfetto", t.root, "-o", out)  # subprocess, bounded: a hang fails the test

`mutate(copy, rng)` applies one random corruption (fuzzing); every helper writes only
inside the copy.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import struct
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

# LTTng stream packet header + context (ctf2perfetto/ctf/check.py): byte offsets and formats.
FIELDS = {"magic": (0, "<I"), "stream_id": (20, "<I"), "timestamp_begin": (32, "<Q"), "timestamp_end": (40, "<Q"),
          "content_size": (48, "<Q"), "packet_size": (56, "<Q"), "packet_seq_num": (64, "<Q")}
UNPRIVILEGED = ["setpriv", "--inh-caps=-all", "--bounding-set=-all"]  # root without CAP_DAC_OVERRIDE
CLI = {"ctf2perfetto": [sys.executable, "-m", "ctf2perfetto.cli.convert"],
       "memq": [sys.executable, "-m", "ctf2perfetto.cli.memq"]}
TIMEOUT_S = 60  # every case must end well within this (the goal: 10 s)


@dataclass
class TraceCopy:
    """A writable copy of a recorded trace directory."""

    root: Path

    @classmethod
    def of(cls, source: Path, dest: Path) -> "TraceCopy":
        shutil.copytree(source, dest, symlinks=True)
        for base, dirs, files in os.walk(dest):
            for name in dirs + files:
                os.chmod(Path(base) / name, 0o755 if name in dirs else 0o644)
        return cls(dest)

    @property
    def channel(self) -> Path:
        """The stream directory (the one holding `metadata`)."""
        return next(self.root.rglob("metadata")).parent

    def stream(self, name: str) -> Path:
        return self.channel / name

    def streams(self) -> list[Path]:
        return sorted(p for p in self.channel.iterdir() if p.is_file() and p.name != "metadata")

    def packets(self, name: str) -> list[tuple[int, int]]:
        """(offset, size in bytes) of each packet of a stream file, from its index/ file."""
        data = (self.channel / "index" / f"{name}.idx").read_bytes()
        entry = struct.unpack(">IIII", data[:16])[3] if len(data) >= 16 else 0
        if entry < 16:
            return []  # a damaged index (fuzzing)
        # whole entries only: a cut index (fuzzing) may end inside one
        return [(o, s // 8) for o, s in (struct.unpack(">QQ", data[i:i + 16])
                                         for i in range(16, len(data) - 15, entry))]

    def biggest_stream(self) -> str:
        return max(self.streams(), key=lambda p: p.stat().st_size).name

    def set_field(self, name: str, packet: int, field: str, value: int) -> None:
        offset, fmt = FIELDS[field]
        start = self.packets(name)[packet][0]
        with open(self.stream(name), "r+b") as f:
            f.seek(start + offset)
            f.write(struct.pack(fmt, value & ((1 << (8 * struct.calcsize(fmt))) - 1)))

    def field(self, name: str, packet: int, field: str) -> int:
        offset, fmt = FIELDS[field]
        start = self.packets(name)[packet][0]
        with open(self.stream(name), "rb") as f:
            f.seek(start + offset)
            return struct.unpack(fmt, f.read(struct.calcsize(fmt)))[0]

    def events(self) -> int:
        """Events babeltrace2 reads from the copy (its counter sink): the independent count."""
        proc = subprocess.run(["babeltrace2", str(self.root / "ust"), "-c", "sink.utils.counter", "-p", "step=+0"],
                              capture_output=True, text=True, timeout=TIMEOUT_S)
        assert proc.returncode == 0, proc.stderr
        return int(next(line.split()[0] for line in proc.stdout.splitlines() if "Event messages" in line))


def run_cli(tool: str, *args: object, unprivileged: bool = False, env: dict | None = None,
            timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess:
    """`ctf2perfetto ...` or `memq ...` in a subprocess; a hang past `timeout` fails the test."""
    argv = (UNPRIVILEGED if unprivileged else []) + CLI[tool] + [str(a) for a in args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def mutate(copy: TraceCopy, rng: random.Random) -> str:
    """One random corruption of the copy (truncation, byte flip, header field, missing/extra file, ...)."""
    channel = copy.channel
    streams = [p for p in copy.streams() if p.stat().st_size]
    kind = rng.choice(["truncate", "flip", "flip", "field", "field", "remove", "extra", "metadata_flip",
                       "metadata_truncate", "index", "index", "record", "record"])
    if kind == "index":
        return _damage_index(copy, rng)
    if kind == "record":
        return _damage_record(copy, rng)
    if kind in ("truncate", "flip", "field", "remove") and not streams:
        kind = "extra"
    if kind == "truncate":
        f = rng.choice(streams)
        at = rng.randrange(f.stat().st_size)
        os.truncate(f, at)
        return f"{f.name} cut to {at} bytes"
    if kind == "flip":
        return _flip(rng.choice(streams), rng)
    if kind == "field":
        f = rng.choice(streams)
        listed = copy.packets(f.name) if (channel / "index" / f"{f.name}.idx").is_file() else []
        starts = [o for o, _ in listed if o < f.stat().st_size] or [0]
        name = rng.choice(list(FIELDS))
        offset, fmt = FIELDS[name]
        bits = 8 * struct.calcsize(fmt)
        value = rng.choice([0, 1, (1 << bits) - 1, 1 << (bits - 1), rng.randrange(1 << bits)])
        start = rng.choice(starts)
        with open(f, "r+b") as fh:
            fh.seek(start + offset)
            fh.write(struct.pack(fmt, value))
        return f"{f.name} packet at {start}: {name} = {value}"
    if kind == "remove":
        f = rng.choice(streams)
        f.unlink()
        if rng.random() < 0.5:
            os.symlink("/nonexistent/memq-fuzz", f)
            return f"{f.name} replaced by a dangling link"
        return f"{f.name} removed"
    if kind == "extra":
        name = rng.choice(["notes.txt", "out.pftrace", "x"])
        (channel / name).write_bytes(rng.randbytes(rng.choice([0, 3, 100, 5000])))
        return f"extra file {name}"
    if kind == "metadata_flip":
        return _flip(channel / "metadata", rng)
    assert kind == "metadata_truncate"
    meta = channel / "metadata"
    at = rng.randrange(max(1, meta.stat().st_size))
    os.truncate(meta, at)
    return f"metadata cut to {at} bytes"


# index/*.idx: header (magic, major, minor, entry size: u32 big endian), then entries of u64 big endian:
# offset, packet_size, content_size, timestamp_begin, timestamp_end, events_discarded, stream_id, ...
_INDEX_FIELDS = ("offset", "packet_size", "content_size", "timestamp_begin", "timestamp_end", "events_discarded")


def _damage_index(copy: TraceCopy, rng: random.Random) -> str:
    """One damage to index/: a bit flip, a cut, an entry field set to an odd value, two files swapped,
    a file replaced by a FIFO, an empty file, or a link to /dev/zero."""
    index = sorted((copy.channel / "index").glob("*.idx")) if (copy.channel / "index").is_dir() else []
    files = [f for f in index if f.is_file() and not f.is_symlink()]
    if not files:
        return "no index to damage"
    f = rng.choice(files)
    how = rng.choice(["flip", "flip", "cut", "field", "field", "swap", "fifo", "empty", "zero"])
    if how == "flip":
        return _flip(f, rng)
    if how == "cut":
        at = rng.randrange(f.stat().st_size + 1)
        os.truncate(f, at)
        return f"{f.name} cut to {at} bytes"
    if how == "field":
        data = bytearray(f.read_bytes())
        entry = struct.unpack(">I", data[12:16])[0] if len(data) >= 16 else 0
        if entry < 48 or len(data) < 16 + entry:
            return _flip(f, rng)
        number = rng.randrange((len(data) - 16) // entry)
        name = rng.choice(_INDEX_FIELDS)
        at = 16 + number * entry + 8 * _INDEX_FIELDS.index(name)
        value = rng.choice([0, 1, (1 << 64) - 1, 1 << 63, rng.randrange(1 << 64),
                            struct.unpack(">Q", data[at:at + 8])[0] + rng.choice([-4096, -1, 1, 4096])]) % (1 << 64)
        data[at:at + 8] = struct.pack(">Q", value)
        f.write_bytes(bytes(data))
        return f"{f.name} entry {number}: {name} = {value}"
    if how == "swap" and len(files) > 1:
        g = rng.choice([x for x in files if x != f])
        a, b = f.read_bytes(), g.read_bytes()
        f.write_bytes(b)
        g.write_bytes(a)
        return f"{f.name} and {g.name} swapped"
    f.unlink()
    if how == "fifo":
        os.mkfifo(f)
        return f"{f.name} replaced by a FIFO"
    if how == "zero":
        os.symlink("/dev/zero", f)
        return f"{f.name} replaced by a link to /dev/zero"
    f.write_bytes(b"")
    return f"{f.name} emptied"


def _damage_record(copy: TraceCopy, rng: random.Random) -> str:
    """One damage to memq-record.json: its JSON cut or flipped, a count of another type or out of range,
    the file removed, or replaced by a FIFO or a link to /dev/zero."""
    path = copy.root / "memq-record.json"
    if not path.is_file() or path.is_symlink():
        return "no memq-record.json to damage"
    how = rng.choice(["cut", "flip", "value", "value", "value", "remove", "fifo", "zero", "list"])
    if how == "cut":
        at = rng.randrange(path.stat().st_size + 1)
        os.truncate(path, at)
        return f"memq-record.json cut to {at} bytes"
    if how == "flip":
        return _flip(path, rng)
    if how == "value":
        try:
            record = json.loads(path.read_text())
        except ValueError:  # an earlier damage of this case cut or flipped it: damage its bytes again instead
            return _flip(path, rng)
        if not isinstance(record, dict):
            return _flip(path, rng)
        key = rng.choice(["events", "discarded_events", "lost_packets", "clock_readings", "exit_code", "enabled",
                          "warnings"])
        value = rng.choice([None, -1, 1 << 64, 1 << 70, 1e308, "12", [], {}, True, [1, "x", None],
                            {"a": {"b": []}}, rng.randrange(1 << 63)])
        record[key] = value
        path.write_text(json.dumps(record))
        return f"memq-record.json {key} = {value!r}"
    path.unlink()
    if how == "fifo":
        os.mkfifo(path)
        return "memq-record.json replaced by a FIFO"
    if how == "zero":
        os.symlink("/dev/zero", path)
        return "memq-record.json replaced by a link to /dev/zero"
    if how == "list":
        path.write_text("[1, 2, 3]")
        return "memq-record.json a JSON list"
    return "memq-record.json removed"


def _flip(path: Path, rng: random.Random) -> str:
    size = path.stat().st_size
    if not size:
        return f"{path.name} empty, left alone"
    at = rng.randrange(size)
    bit = rng.randrange(8)
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)[0]
        f.seek(at)
        f.write(bytes([byte ^ (1 << bit)]))
    return f"{path.name} byte {at} bit {bit} flipped"


def run_fuzz_runner(cmd: list[str], env: dict, seed: int, timeout_s: float, **popen: object) -> list[dict]:
    """Run a fuzz runner (one JSON line per case on stdout) to its end: a hang or a death fails the test with the
    seed and the last case reached; returns the cases' JSON lines."""
    import pytest

    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, **popen)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"seed {seed}: hung at {out.strip().splitlines()[-1]}")
    lines = out.splitlines()
    assert proc.returncode == 0, f"seed {seed}: died ({proc.returncode}) at {lines[-1] if lines else '?'}: {err[-2000:]}"
    return [json.loads(line) for line in lines if line.startswith("{")]
