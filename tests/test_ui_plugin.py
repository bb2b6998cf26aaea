"""The SQL the UI plugin, the startup commands and the macros run, checked in trace_processor on the
annotated fake-HIP trace (the same trace_processor build family as the UI's engine)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ctf2perfetto.cli.open import PIN_MEMORY_TRACKS
from ctf2perfetto.engine import open_trace
from ui.traces import annotated, converted

UI_PLUGINS = Path(__file__).resolve().parent.parent / "ui_plugins"
PLUGIN = UI_PLUGINS / "com.memq.MemQ" / "index.ts"
# What each command needs from its query (the UI's debug tracks read these columns).
NEEDS = {"dev.perfetto.AddDebugSliceTrack": {"ts", "dur", "name"},
         "dev.perfetto.AddDebugSliceTrackWithPivot": {"ts", "dur", "name"},
         "dev.perfetto.AddDebugCounterTrack": {"ts", "value"},
         "dev.perfetto.RunQuery": set(), "dev.perfetto.RunQueryAndShowTab": set()}
ALLOWED_AT_STARTUP = set(NEEDS) | {"dev.perfetto.PinTracksByRegex", "dev.perfetto.ExpandTracksByRegex"}


@pytest.fixture(scope="module")
def engine(fake_hip_trace, tmp_path_factory):
    hip = converted(fake_hip_trace.dir, tmp_path_factory.mktemp("ui_plugin") / "hip.pftrace")
    with open_trace(annotated(hip, hip.with_name("hip.annotated.pftrace"))) as e:
        yield e


def _commands() -> list[dict]:
    startup = json.loads((UI_PLUGINS / "startup_commands.json").read_text())
    macros = json.loads((UI_PLUGINS / "macros.json").read_text())
    assert startup[0] == PIN_MEMORY_TRACKS, "memq open and the startup commands must pin the same tracks"
    return startup + [c for steps in macros.values() for c in steps]


def test_startup_commands_and_macros_run_in_trace_processor(engine) -> None:
    track_names = set(engine.query("SELECT DISTINCT name FROM track WHERE name IS NOT NULL")["name"])
    for command in _commands():
        assert command["id"] in ALLOWED_AT_STARTUP, command["id"]
        assert all(isinstance(a, str) for a in command["args"])
        if command["id"] == "dev.perfetto.PinTracksByRegex":
            # The UI tests the pattern against track names with JavaScript regexes (same syntax here).
            pattern = re.compile(command["args"][0])
            assert any(pattern.search(n) for n in track_names), command["args"][0]
            continue
        rows = engine.query(command["args"][0])
        assert NEEDS[command["id"]] <= set(rows.columns), (command, list(rows.columns))
        assert len(rows) > 0, f"no rows on the fake HIP workload: {command}"
        if command["id"] == "dev.perfetto.AddDebugSliceTrackWithPivot":
            assert command["args"][1] in rows.columns


def test_pinned_tracks_are_the_memory_and_analysis_tracks(engine) -> None:
    pattern = re.compile(PIN_MEMORY_TRACKS["args"][0])
    names = set(engine.query("SELECT DISTINCT name FROM track WHERE name IS NOT NULL")["name"])
    pinned = {n for n in names if pattern.search(n)}
    assert {"Host heap live bytes", "Pinned live bytes", "Managed live bytes", "GPU 0 device live bytes",
            "Duplicated bytes", "Duplicated bytes HtoD", "Redundant copies: round trip", "Leaked allocations",
            "Leaked bytes"} <= pinned
    assert not {n for n in pinned if "stream" in n}, "copy streams are not pinned"


def _plugin_queries() -> tuple[list[str], list[tuple[str, str]]]:
    """(trace-table queries, (module, query) analysis commands) as written in the plugin source."""
    source = PLUGIN.read_text()
    categories = re.search(r"const MEMQ_CATEGORIES = `([^`]+)`", source).group(1)
    templates = re.findall(r"`([^`]*)`", source)  # left to right, so the backticks pair up
    plain = [q.replace("${MEMQ_CATEGORIES}", categories) for q in templates if "SELECT" in q]
    plain = [q for q in plain if "${" not in q]  # the INCLUDE template is checked with its module below
    analyses = [(m, q) for m, _, q in re.findall(r"module: '([^']+)',\s*query: (['\"])(.*?)\2", source, re.S)]
    package = re.findall(r'"(SELECT [^"]*memq_[^"]*)"', source)
    return plain, analyses + [("memq.duplicated", q) for q in package]


def test_plugin_sql_runs_against_the_trace_and_the_memq_package(engine) -> None:
    plain, analyses = _plugin_queries()
    assert len(plain) >= 4 and len(analyses) >= 5
    for query in plain:
        rows = engine.query(query)
        assert len(rows) > 0, query
    for module, query in analyses:
        rows = engine.query(f"INCLUDE PERFETTO MODULE {module};\n{query}")
        assert len(rows) > 0, f"no rows on the fake HIP workload: {module}: {query}"
    # The device counter the plugin draws ends at the device bytes still live, all GPUs together.
    device = engine.query(plain[[i for i, q in enumerate(plain) if "device live bytes" in q][0]])
    last_per_gpu = engine.query("""
        SELECT SUM(value) AS v FROM (SELECT t.id, c.value FROM counter c JOIN counter_track t ON c.track_id = t.id
        WHERE t.name GLOB 'GPU * device live bytes' AND c.ts = (SELECT MAX(ts) FROM counter WHERE track_id = t.id))""")
    assert device["value"].iloc[-1] == last_per_gpu["v"].iloc[0]
