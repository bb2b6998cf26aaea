"""An analysis that runs out of memory while it runs (not while the trace loads) says so in one line and exits 1.

The trace loads; the analysis' own tables then need more heap than trace_processor may have. SQLite fails the
statement cleanly ("out of memory"), and memq must name the limit that was hit and what to do (`--parts`, a
native engine), never print a bare SQL error, a traceback or die of a signal. The limit is the heap the trace
took to load, measured first in the same way: every growth the analysis asks for is refused. Where the refusal
lands decides the failure (an SQLite allocation: an SQL error it survives; one of trace_processor's own: a
trap); both must read the same.
"""
from __future__ import annotations

import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import pytest

from ctf2perfetto.analysis.registry import ANALYSES
from ctf2perfetto.cli.memq import main
from ctf2perfetto.engine import wasm
from ctf2perfetto.inputs import open_input

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def copy_loop(fake_gpu, tmp_path_factory) -> Path:
    """5,000 steps of the offload loop (25,000 copies) on the fake HIP runtime, converted."""
    out = tmp_path_factory.mktemp("oom")
    for argv in (["record", "-o", str(out / "trace"), "--", sys.executable, str(REPO / "examples" / "hip_offload.py"),
                  "--steps", "5000", "--weights-mib", "1", "--hip-lib", str(fake_gpu.hip_runtime)],
                 ["convert", str(out / "trace"), "-o", str(out / "trace.pftrace")]):
        done = subprocess.run([sys.executable, "-m", "ctf2perfetto", *argv], capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, done.stderr
    return out / "trace.pftrace"


def _heaps(trace: Path, name: str) -> tuple[int, int]:
    """trace_processor's heap after loading `trace`, and after analysis `name` ran on it (32-bit build)."""
    analysis = next(a for a in ANALYSES if a.name == name)
    with open_input(trace) as engine:
        loaded = engine.wasm_heap_bytes()
        analysis.tables(engine, Namespace(unified="auto"))
        return loaded, engine.wasm_heap_bytes()


def test_an_analysis_out_of_heap_is_one_line_naming_the_limit(copy_loop, monkeypatch, capsys):
    # redundant: the analysis that needs the most heap beyond loading (a third more here; the others grow by one
    # step of the heap or none, depending on how the load left it)
    name = "redundant"
    monkeypatch.setenv("MEMQ_WASM_MEMORY64", "0")  # the build whose heap the test limits; no second try
    loaded, analysed = _heaps(copy_loop, name)
    assert analysed > loaded, "the analysis must need more heap than loading (the case this test is about)"
    monkeypatch.setattr(wasm, "_heap_max", lambda memory_type, memory64: loaded)
    capsys.readouterr()
    code = main([name, str(copy_loop)])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 1 and len(lines) == 1, err
    line = lines[0]
    # SQLite's "out of memory" at a memq statement, or trace_processor's own check failing: either way the limit
    assert line.startswith(f"memq: error: {copy_loop}: trace_processor ran out of its {loaded >> 20} MiB WebAssembly "
                           "heap ("), line
    assert "--parts" in line and "MEMQ_WASM_MEMORY64=1" in line and "Traceback" not in err


def test_an_sql_error_after_a_refused_growth_that_is_not_memory_stays_an_sql_error(copy_loop, monkeypatch):
    """Only an error about memory is reported as running out of it."""
    monkeypatch.setenv("MEMQ_WASM_MEMORY64", "0")
    with open_input(copy_loop) as engine:
        engine._tp._host.at_limit = True  # as if a growth had been refused earlier
        with pytest.raises(Exception) as info:
            engine.rows("SELECT no_such_column FROM slice")
    assert str(info.value).startswith("SQL error: no such column"), info.value
