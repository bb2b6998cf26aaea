"""The trace format module: what its packet builder writes is what the perfetto protos read, and the SQL
package and the UI side use only the names it defines."""
from __future__ import annotations

import fnmatch
import re
from pathlib import Path

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from ctf2perfetto.traceformat import names as N
from ctf2perfetto.traceformat import packets as P
from ctf2perfetto.traceformat import tracks as T
from ctf2perfetto.traceformat import ui

REPO = Path(__file__).resolve().parent.parent


def parse(record: bytes) -> pb.TracePacket:
    trace = pb.Trace.FromString(record)
    assert len(trace.packet) == 1
    return trace.packet[0]


def test_track_event_round_trips_through_the_protos() -> None:
    event = P.track_event(P.TYPE_SLICE_BEGIN, 12345, name="hipMemcpy", category=N.CAT_API,
                          args={"bytes": 4096, "neg": -3, "big": 1 << 63, "ratio": 0.5, "ok": True,
                                "ptr": P.Pointer(0xDEAD), "api": "x", "dims": [[1, 2], [3]],
                                "nested": {"a": 1, "b": "two"}, "skipped": None},
                          flows=[7], terminating=[(1 << 64) - 1])
    p = parse(P.record(P.packet(N.SEQ_KINETO, ts=1_700_000_000_000_000_001, clock=N.CLOCK_REALTIME, event=event)))
    assert (p.timestamp, p.timestamp_clock_id, p.trusted_packet_sequence_id) == \
        (1_700_000_000_000_000_001, N.CLOCK_REALTIME, N.SEQ_KINETO)
    e = p.track_event
    assert (e.type, e.track_uuid, e.name, list(e.categories)) == (1, 12345, "hipMemcpy", [N.CAT_API])
    ann = {a.name: a for a in e.debug_annotations}
    assert set(ann) == {"bytes", "neg", "big", "ratio", "ok", "ptr", "api", "dims", "nested"}
    assert (ann["bytes"].int_value, ann["neg"].int_value, ann["big"].uint_value) == (4096, -3, 1 << 63)
    assert (ann["ratio"].double_value, ann["ok"].bool_value, ann["ptr"].pointer_value) == (0.5, True, 0xDEAD)
    assert (ann["api"].string_value, ann["dims"].string_value) == ("x", "[[1,2],[3]]")
    assert {d.name: (d.int_value or d.string_value) for d in ann["nested"].dict_entries} == {"a": 1, "b": "two"}
    assert list(e.flow_ids) == [7] and list(e.terminating_flow_ids) == [(1 << 64) - 1]
    counter = parse(P.record(P.packet(1, ts=5, event=P.track_event(P.TYPE_COUNTER, 9, counter=-12)))).track_event
    assert (counter.type, counter.counter_value) == (P.TYPE_COUNTER, -12)
    interned = parse(P.record(P.packet(1, event=P.track_event(P.TYPE_INSTANT, name=3, category=2,
                                                              args={4: 10})))).track_event
    assert (interned.name_iid, list(interned.category_iids), interned.debug_annotations[0].name_iid) == (3, [2], 4)


def test_descriptors_and_sequence_start_round_trip() -> None:
    p = parse(T.record(N.SEQ_DESCRIPTORS, T.thread_track(10, 11, "loader"), ts=5, clock=N.CLOCK_MONOTONIC))
    d = p.track_descriptor
    assert (d.uuid, d.thread.pid, d.thread.tid, d.thread.thread_name) == (T.thread_uuid(10, 11), 10, 11, "loader")
    assert (p.timestamp, p.timestamp_clock_id) == (5, N.CLOCK_MONOTONIC)
    d = parse(T.record(3, T.process_track(10, None))).track_descriptor
    assert d.process.pid == 10 and not d.process.HasField("process_name")
    d = parse(T.record(3, T.stream_track(1, "hip", 0x7, 2))).track_descriptor
    assert (d.name, d.parent_uuid, d.sibling_merge_behavior) == ("hip stream 0x7", T.gpu_uuid(1), P.MERGE_NONE)
    d = parse(T.record(3, T.counter_track(42, N.COUNTER_HOST, T.process_uuid(10)))).track_descriptor
    assert (d.name, d.counter.unit, d.parent_uuid) == (N.COUNTER_HOST, pb.CounterDescriptor.UNIT_SIZE_BYTES,
                                                       T.process_uuid(10))
    d = parse(T.record(3, T.analysis_track("x", "about x", rank=2))).track_descriptor
    assert (d.description, d.sibling_order_rank, d.HasField("counter")) == ("about x", 2, False)
    start = parse(P.record(P.sequence_start(17, N.CLOCK_MONOTONIC, track=5, extra_counter_tracks=[6],
                                            interned_entries=[("event_names", 1, "malloc"),
                                                              ("debug_annotation_string_values", 1, "hip")])))
    assert start.sequence_flags == P.SEQ_INCREMENTAL_STATE_CLEARED | P.SEQ_NEEDS_INCREMENTAL_STATE
    defaults = start.trace_packet_defaults
    assert (defaults.timestamp_clock_id, defaults.track_event_defaults.track_uuid,
            list(defaults.track_event_defaults.extra_counter_track_uuids)) == (N.CLOCK_MONOTONIC, 5, [6])
    assert (start.interned_data.event_names[0].name, start.interned_data.debug_annotation_string_values[0].str) == \
        ("malloc", b"hip")


def test_uuids_are_stable_distinct_and_non_zero() -> None:
    made = [T.process_uuid(1), T.thread_uuid(1, 1), T.heap_uuid(1, 1), T.gpu_uuid(1), T.memq_uuid(),
            T.memq_uuid(1), T.libraries_uuid(), T.stream_uuid(1, "hip", 0, 0), T.counter_uuid(1),
            T.analysis_uuid(N.REDUNDANT_TRACK), T.analysis_uuid(N.REDUNDANT_TRACK, 1)]
    assert len(set(made)) == len(made) and all(0 < u < 1 << 63 for u in made)
    assert T.thread_uuid(1, 1) == T.uuid("thread", 1, 1)


def test_varints() -> None:
    for value in (0, 1, 127, 128, 1 << 14, (1 << 63) - 1, (1 << 64) - 1):
        assert P.read_varint(P.varint(value), 0) == (value, len(P.varint(value)))
    assert P.varint(-1) == P.varint((1 << 64) - 1)
    assert P.fixed_varint(5, 4) == b"\x85\x80\x80\x00" and P.read_varint(P.fixed_varint(300, 3), 0) == (300, 3)


def test_units_and_twins() -> None:
    assert [N.format_bytes(n) for n in (0, 512, 4096, 3 << 20, 5 << 30)] == \
        ["0 B", "512 B", "4.0 KiB", "3.0 MiB", "5.0 GiB"]
    assert [N.format_ns(n) for n in (850, 12_400, 1_250_000, 3e9)] == ["850 ns", "12.4 µs", "1.25 ms", "3.00 s"]
    assert N.fmt_key(N.A.bytes) == "bytes_fmt" and N.format_value("redundant_dur", 2000) == "2.0 µs"
    assert N.copy_kind_name("hip", 1) == "hipMemcpyHostToDevice" and N.copy_kind_name("cuda", 99) == "99"


def _names_defined() -> set[str]:
    """Every name the format defines as a string constant, plus the generated forms of the per-device ones."""
    values = {v for v in vars(N).values() if isinstance(v, str)}
    values |= {N.device_counter_name(0), N.gpu_track_name(0), N.duplicated_track_name("HtoD")}
    return values | set(N.PROCESS_COUNTERS.values()) | {ui.DEVICE_COUNTER_GLOB}


def _reads() -> dict[Path, str]:
    """The SQL package and the UI side: what reads a memq trace by name."""
    files = sorted((REPO / "sql" / "memq").glob("*.sql")) + sorted((REPO / "ui_plugins").rglob("*.json")) + \
        sorted((REPO / "ui_plugins").rglob("*.ts"))
    return {path: path.read_text() for path in files}


def test_sql_and_ui_read_only_argument_keys_the_format_defines() -> None:
    for path, text in _reads().items():
        for key in re.findall(r"debug\.([A-Za-z_0-9.]+)", text):
            top = key.split(".")[0]
            assert top in N.ARGS or top.removesuffix(N.FMT_SUFFIX) in N.ARGS, f"{path.name}: debug.{key}"


def test_sql_and_ui_read_only_track_names_and_categories_the_format_defines() -> None:
    track_like = re.compile(r"^(.* live bytes|Duplicated bytes.*|Redundant copies.*|Leaked .*|Staged copies|"
                            r"memq analyses|Libraries|heap|host_small)$")
    categories = {v for k, v in vars(N).items() if k.startswith("CAT_")}
    modules = {p.stem for p in (REPO / "sql" / "memq").glob("*.sql")}
    defined = _names_defined()
    seen = set()
    for path, text in _reads().items():
        for literal in re.findall(r"'([^'\n]+)'", text):
            if re.match(r"^memq\.[a-z_]+$", literal) and literal.removeprefix("memq.") not in modules:
                assert literal in categories, f"{path.name}: category '{literal}' is not a traceformat name"
            elif track_like.match(literal):
                assert literal in defined, f"{path.name}: track '{literal}' is not a traceformat name"
            else:
                continue
            seen.add(literal)
    assert {N.COUNTER_HOST, N.CAT_COPY, N.CAT_HEAP} <= seen  # the check found the names it checks


def test_every_argument_key_is_documented() -> None:
    doc = (REPO / "docs" / "TRACE_FORMAT.md").read_text()
    missing = [key for key in N.ARGS if f"`{key}`" not in doc]
    assert not missing, f"docs/TRACE_FORMAT.md does not describe: {missing}"


# Track tables of trace_processor: a `name` compared in a statement that reads one of them is a track name.
_TRACK_TABLE = re.compile(r"\b(?:FROM|JOIN)\s+(\w*track)\b(?:\s+(?:AS\s+)?(?!ON\b|USING\b|WHERE\b|JOIN\b|LEFT\b|"
                          r"INNER\b|CROSS\b|GROUP\b|ORDER\b)(\w+))?", re.I)
_SOURCE = re.compile(r"\b(?:FROM|JOIN)\s+(\w+)", re.I)
_COMPARED = re.compile(r"(?<![\w.])((?:\w+\.)?name)\s*(?:=|==|!=|<>|\bNOT\s+GLOB\b|\bGLOB\b|\bNOT\s+LIKE\b|\bLIKE\b)"
                       r"\s*'([^']*)'|(?<![\w.])((?:\w+\.)?name)\s+(?:NOT\s+)?IN\s*\(([^()]*)\)", re.I)


def track_name_literals(sql: str) -> list[str]:
    """Every string literal a statement of `sql` compares with the `name` of a track table it reads (`FROM
    counter_track WHERE name = '...'`, `JOIN track t ... t.name GLOB '...'`, `name IN ('...', ...)`). A bare
    `name` belongs to the table of the nearest FROM/JOIN before it (or, in a SELECT list, the first after it)."""
    found = []
    for statement in re.sub(r"--[^\n]*", "", sql).split(";"):
        tracks = {(alias or table).lower() for table, alias in _TRACK_TABLE.findall(statement)}
        if not tracks:
            continue
        sources = [(m.start(), m.group(1).lower()) for m in _SOURCE.finditer(statement)]
        for m in _COMPARED.finditer(statement):
            column, literals = (m.group(1), [m.group(2)]) if m.group(1) else \
                (m.group(3), re.findall(r"'([^']*)'", m.group(4)))
            if "." in column:
                owner = column.split(".")[0].lower()
            else:
                before = [name for at, name in sources if at < m.start()]
                after = [name for at, name in sources if at > m.start()]
                owner = before[-1] if before else after[0] if after else ""
            if owner in tracks:
                found += literals
    return found


def _matches_a_name(literal: str, defined: set[str]) -> bool:
    if literal in defined:
        return True
    if any(c in literal for c in "*?["):  # GLOB: the pattern must match a name the format makes
        return any(fnmatch.fnmatchcase(name, literal) for name in defined)
    if any(c in literal for c in "%_"):  # LIKE (case-insensitive)
        pattern = re.compile("".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in literal), re.I)
        return any(pattern.fullmatch(name) for name in defined)
    return False


def test_every_track_name_the_sql_compares_is_a_traceformat_name() -> None:
    """The SQL package finds tracks by name (counters.sql's live-bytes counters, trace.sql's `Duplicated bytes`):
    each such literal is a name (or a GLOB/LIKE pattern matching a name) that ctf2perfetto.traceformat defines,
    so renaming a track there cannot leave the SQL looking for the old name."""
    defined = _names_defined() | {N.device_counter_name(3), N.gpu_track_name(3)}
    seen = {}
    for path in sorted((REPO / "sql" / "memq").rglob("*.sql")):
        for literal in track_name_literals(path.read_text()):
            assert _matches_a_name(literal, defined), f"{path.name}: track '{literal}' is not a traceformat name"
            seen[literal] = path.name
    # the check reads the places that look tracks up by name
    assert {N.COUNTER_HOST, N.COUNTER_PINNED, N.COUNTER_REGISTERED, N.COUNTER_MANAGED, ui.DEVICE_COUNTER_GLOB,
            N.DUPLICATED_TRACK} <= set(seen), seen


def test_track_name_literals_are_found_however_the_statement_is_written() -> None:
    """The finder itself: misspelt names in each way the SQL compares a track's name are found; a slice's name in
    the same statement is not a track name."""
    sql = """
    SELECT id FROM counter_track WHERE name = 'Host heap live byte';
    SELECT c.ts FROM counter c JOIN counter_track t ON c.track_id = t.id WHERE t.name GLOB 'GPU * device live byte';
    SELECT CASE WHEN name = 'Pinned live byte' THEN 1 END FROM process_counter_track
      WHERE name IN ('Managed live byte', 'Registered live bytes');
    SELECT EXISTS (SELECT 1 FROM track WHERE name LIKE 'Duplicated%bites') AS annotated;
    SELECT s.name FROM slice s JOIN thread_track tt ON s.track_id = tt.id WHERE s.name = 'hipMalloc';
    """
    literals = track_name_literals(sql)
    assert literals == ["Host heap live byte", "GPU * device live byte", "Pinned live byte", "Managed live byte",
                        "Registered live bytes", "Duplicated%bites"]
    defined = _names_defined()
    assert [lit for lit in literals if not _matches_a_name(lit, defined)] == \
        ["Host heap live byte", "GPU * device live byte", "Pinned live byte", "Managed live byte", "Duplicated%bites"]


def test_has_addresses_is_asked_through_its_one_name() -> None:
    """Whether a source's copies carry addresses is one macro, memq_has_addresses!(source) in copies.sql
    (docs/DEFINITIONS.md, "Sources with and without addresses"); no module compares a source with a name itself."""
    asks = re.compile(r"\bsource\s*(?:=|==|!=|<>|\bIN\b)\s*\(?\s*'", re.I)
    for path in sorted((REPO / "sql" / "memq").rglob("*.sql")):
        code = re.sub(r"--[^\n]*", "", path.read_text())
        if path.name == "copies.sql":
            assert "CREATE PERFETTO MACRO memq_has_addresses" in code
            code = code.replace("($source = 'lttng')", "")
        assert not asks.search(code), f"{path.name}: ask memq_has_addresses!(source), not the source's name"
    assert asks.search("WHERE c.source = 'lttng'") and asks.search("source IN ('kineto')")
