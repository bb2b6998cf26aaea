"""`memq duplicated | redundant | summary | leaks` print their tables from engine Rows, without pandas: the
tables must be what the DataFrames of the Python API give, converted for reading with pandas' own
operations (the independent computation here)."""
from __future__ import annotations

import argparse
import io
import json
import random
import subprocess
import sys
from contextlib import redirect_stdout

import numpy as np
import pandas as pd
import pytest

from ctf2perfetto import analyses
from ctf2perfetto.cli import analyses as cli
from ctf2perfetto.cli.output import format_table
from ctf2perfetto.engine.rows import Rows

COMMANDS = ("duplicated", "redundant", "summary", "leaks")


def _human_frame(df: pd.DataFrame, start: int) -> pd.DataFrame:
    """The reading conversion with pandas operations (what the command did before it printed Rows)."""
    out = df.copy()
    if "pid" in out.columns:
        out["pid"] = ["all" if v is None or v != v else int(v) for v in out["pid"].tolist()]
    for col in list(out.columns):
        if col == "ts" or col.endswith("_ts") or col in ("window_start", "window_end"):
            out[col] = ((out[col].astype("float64") - start) / 1e9).round(6)
            out = out.rename(columns={col: f"{col} s"})
        elif col == "bytes" or col.endswith("_bytes") or col == "size" or col == "max_size":
            out[col] = (out[col].astype("float64") / 1048576.0).round(3)
            out = out.rename(columns={col: f"{col} MiB"})
        elif col.endswith("_dur") or col.endswith("dur_sum") or col in ("dur", "byte_ns"):
            scale, unit = (1e6, "ms") if col != "byte_ns" else (1048576.0 * 1e9, "MiB*s")
            out[col] = (out[col].astype("float64") / scale).round(3)
            out = out.rename(columns={col: f"{col} {unit}"})
    return out


def _expected(name: str, trace: str) -> str:
    """The table output built from the API's DataFrames."""
    with analyses.load(trace) as engine:
        frames = analyses.summary(engine) if name == "summary" else {
            "duplicated": lambda: {"duplicated": analyses.duplicated(engine)},
            "redundant": lambda: {"redundant": analyses.redundant(engine)},
            "leaks": lambda: {"leaks": analyses.leaks(engine)},
        }[name]()
        start = int(analyses.module_query(engine, ("trace",), "SELECT start_ts FROM memq_trace")["start_ts"].iloc[0])
        warnings = analyses.trace_warnings(engine)
    # the two-line verdict first (its words are tested in tests/test_verdicts.py)
    from ctf2perfetto.analysis.registry import analysis

    with analyses.load(trace) as engine:
        lines = analysis(name).verdict(analysis(name).tables(engine, argparse.Namespace(unified="auto")))
    lines.append(f"memq {name} (source: {next(iter(frames.values())).attrs['source']})")
    notes = [analyses.UPPER_BOUND]
    for i, df in enumerate(frames.values()):
        for n in [df.attrs["note"], df.attrs["windows_note"]] + (warnings if i == 0 else []):
            if n and not any(n in m for m in notes):
                notes.append(n)
    for key, df in frames.items():
        lines.append("")
        if len(frames) > 1:
            lines.append(f"== {key} ==")
        if not df.attrs["applies"]:
            lines.append(f"({df.attrs['note'] or 'not applicable'})")
            continue
        if key == "redundant":
            df = df.drop(columns=[c for c in df.columns if c.startswith("address_") or c == "content_wall_dur"])
            lines.append("(content_*: the part a content fingerprint proves; the rest has evidence address, "
                         "--format json|csv has both)")
        lines.append(format_table(_human_frame(df, start)).rstrip("\n"))
    lines.append("")
    lines += [f"note: {n}" for n in notes]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def hip_pftrace(fake_hip_trace, tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("tables") / "hip.pftrace"
    subprocess.run([sys.executable, "-m", "ctf2perfetto.cli.convert", str(fake_hip_trace.dir), "-o", str(out)],
                   check=True, capture_output=True)
    return str(out)


@pytest.mark.parametrize("name", COMMANDS)
def test_tables_match_the_dataframes_without_pandas(hip_pftrace: str, name: str) -> None:
    run = ("import sys; from ctf2perfetto.cli.memq import main; rc = main(sys.argv[1:]); "
           "print('pandas' in sys.modules, 'numpy' in sys.modules, file=sys.stderr); sys.exit(rc)")
    proc = subprocess.run([sys.executable, "-c", run, name, hip_pftrace], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.split() == ["False", "False"], proc.stderr  # neither imported
    assert proc.stdout == _expected(name, hip_pftrace)
    # json keeps the DataFrame's raw values (same trace, same figures)
    got = json.loads(subprocess.run([sys.executable, "-m", "ctf2perfetto", name, hip_pftrace, "--format", "json"],
                                    capture_output=True, text=True, check=True).stdout)
    assert sorted(got["tables"]) == (sorted(analyses.SUMMARY_TABLES) if name == "summary" else [name])


def test_rounding_is_numpys() -> None:
    rng = random.Random(7)
    values = [rng.uniform(-1e4, 1e4) for _ in range(20000)] + [k / 2000.0 for k in range(-4000, 4000)]
    values += [-1e-9, -0.0004, 0.0004999, 2.5e-7, 1.5e-6, -2.5e-6]
    for digits in (3, 6):
        expected = np.round(np.array(values), digits).tolist()
        got = [cli._round(v, digits) for v in values]
        assert [repr(v) for v in got] == [repr(v) for v in expected]  # repr: -0.0 and 0.0 differ


def test_top_rows_are_nlargests() -> None:
    rng = random.Random(3)
    for trial in range(200):
        n = rng.randint(cli.TOP_ROWS + 1, 60)
        peak = [rng.choice([None, float(rng.randint(0, 8))]) if trial % 2 else rng.randint(0, 8) for _ in range(n)]
        grouping = [rng.choice(["allocation", "allocation", "total", "direction"]) for _ in range(n)]
        while grouping.count("allocation") <= cli.TOP_ROWS:
            grouping[grouping.index(rng.choice([g for g in grouping if g != "allocation"]))] = "allocation"
        df = pd.DataFrame({"grouping": grouping, "peak_bytes": pd.array(peak, dtype="float64")})
        alloc = df["grouping"] == "allocation"
        expected = pd.concat([df[~alloc], df[alloc].nlargest(cli.TOP_ROWS, "peak_bytes")]).index.tolist()
        table = Rows(["grouping", "peak_bytes"], list(zip(grouping, peak)), lambda: df)
        with redirect_stdout(io.StringIO()):
            shown = cli._shortened("duplicated", table)
        assert shown.rows == [table.rows[i] for i in expected]
