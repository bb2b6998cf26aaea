"""What the Perfetto UI side needs, made from the trace format's names.

`memq open` runs `startup_commands(pin_only=True)` when the trace loads; ui_plugins/ holds the
same for the stock UI (startup_commands.json, macros.json) and the plugin's names
(com.memq.MemQ/memq_names.ts). Those files are generated, never edited:

    python3 -m ctf2perfetto.traceformat.ui            # rewrite them
    python3 -m ctf2perfetto.traceformat.ui --check    # exit 1 if one differs (tests/test_ui_plugin.py)

The UI's in-browser engine has no memq SQL package, so these queries read the trace's own tables.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ctf2perfetto.traceformat import names as N

A = N.A
DEVICE_COUNTER_GLOB = "GPU * device live bytes"
# Pinned when a trace opens: few enough to fit the pinned area (the rest stays in its group).
PINNED = (N.DUPLICATED_TRACK, N.device_counter_name(0), N.REDUNDANT_TRACK)
PIN_PATTERN = (f"^({N.DUPLICATED_TRACK}|{N.gpu_track_name(0).replace('0', '[0-9]+')}"
               f"{N.DEVICE_COUNTER_SUFFIX}|{N.REDUNDANT_TRACK})$")
# Timestamp format the UI shows a memq trace in: its primary clock is REALTIME, so wall-clock time of day
# reads better than the default timecode (days since 1970 at the trace's start).
TIMESTAMP_FORMAT = "utc"  # the UI's TimestampFormat.UTC ("Realtime (UTC)")
SETTINGS_KEY = "perfettoSettings"  # localStorage key of the UI's settings (v52 and later)


def _arg(key: str) -> str:
    return f"EXTRACT_ARG(arg_set_id, 'debug.{key}')"


DEVICE_TOTAL_SQL = (
    "SELECT c.ts, SUM(c.value) OVER (ORDER BY c.ts, c.id ROWS UNBOUNDED PRECEDING) AS value FROM (SELECT c.id, "
    "c.ts, c.value - COALESCE(LAG(c.value) OVER (PARTITION BY c.track_id ORDER BY c.ts, c.id), 0) AS value FROM "
    f"counter c JOIN counter_track t ON c.track_id = t.id WHERE t.name GLOB '{DEVICE_COUNTER_GLOB}') c")
COPIES_BY_DIRECTION_SQL = (
    f"SELECT s.ts, s.dur, s.name, {_arg(A.direction).replace('arg_set_id', 's.arg_set_id')} AS direction, "
    f"{_arg(A.bytes).replace('arg_set_id', 's.arg_set_id')} AS bytes FROM slice s WHERE s.category = '{N.CAT_COPY}'")


def pin_command() -> dict:
    return {"id": "dev.perfetto.PinTracksByRegex", "args": [PIN_PATTERN]}


def startup_commands(pin_only: bool = False) -> list[dict]:
    """Commands to run once a memq trace is loaded: pin the summary tracks (and add two debug tracks)."""
    if pin_only:
        return [pin_command()]
    return [pin_command(),
            {"id": "dev.perfetto.AddDebugCounterTrack", "args": [DEVICE_TOTAL_SQL, "memq: device live bytes, all GPUs"]},
            {"id": "dev.perfetto.AddDebugSliceTrackWithPivot",
             "args": [COPIES_BY_DIRECTION_SQL, A.direction, "memq: copies by direction"]}]


def macros() -> dict[str, list[dict]]:
    """Named macros (Settings > Macros), run from the command palette."""
    analysis = f"category = '{N.CAT_ANALYSIS}'"
    copies_per_direction = (
        f"SELECT {_arg(A.direction)} AS direction, COUNT(*) AS copies, SUM({_arg(A.bytes)}) AS bytes, "
        f"SUM(dur) / 1e6 AS time_ms, ROUND(SUM({_arg(A.bytes)}) / 1e9 / MAX(SUM(dur) / 1e9, 1e-9), 3) AS gb_per_s "
        f"FROM slice WHERE category = '{N.CAT_COPY}' GROUP BY direction ORDER BY bytes DESC")
    redundant_per_class = (
        f"SELECT {_arg(A['class'])} AS class, COUNT(*) AS copies, SUM({_arg(A.redundant_bytes)}) AS redundant_bytes, "
        f"SUM({_arg(A.redundant_dur)}) / 1e6 AS redundant_time_ms FROM slice s JOIN track t ON s.track_id = t.id "
        f"WHERE s.{analysis} AND t.name = '{N.REDUNDANT_TRACK}' GROUP BY class ORDER BY redundant_bytes DESC")
    leaks_per_kind = (
        "SELECT SUBSTR(key, 12, INSTR(SUBSTR(key, 12), '.') - 1) AS mem_kind, "
        "MAX(IIF(key GLOB '*.allocations', int_value, NULL)) AS allocations, "
        "MAX(IIF(key GLOB '*.bytes', int_value, NULL)) AS bytes FROM args WHERE arg_set_id IN (SELECT s.arg_set_id "
        f"FROM slice s JOIN track t ON s.track_id = t.id WHERE t.name = '{N.LEAKS_TRACK}') "
        "AND key GLOB 'debug.kinds.*' AND key NOT GLOB '*.largest.*' GROUP BY mem_kind ORDER BY bytes DESC")
    return {
        "memq: pin memory tracks": [pin_command()],
        "memq: copies per direction": [{"id": "dev.perfetto.RunQueryAndShowTab", "args": [copies_per_direction]}],
        "memq: copies by direction track": [startup_commands()[2]],
        "memq: device live bytes, all GPUs": [startup_commands()[1]],
        "memq: redundant copies per class": [{"id": "dev.perfetto.RunQueryAndShowTab", "args": [redundant_per_class]}],
        "memq: leaks per kind": [{"id": "dev.perfetto.RunQueryAndShowTab", "args": [leaks_per_kind]}],
    }


def settings_script() -> str:
    """JavaScript run before the UI starts (served by `memq open`): the timestamp format, unless the user
    chose one."""
    return ("try{var k=%s,s=JSON.parse(localStorage.getItem(k)||'{}');if(!('timestampFormat' in s)){"
            "s.timestampFormat=%s;localStorage.setItem(k,JSON.stringify(s));}}catch(e){}\n"
            % (json.dumps(SETTINGS_KEY), json.dumps(TIMESTAMP_FORMAT)))


def plugin_names() -> str:
    """ui_plugins/com.memq.MemQ/memq_names.ts: the trace-format names the plugin uses."""
    consts = {
        "PIN_PATTERN": PIN_PATTERN,
        "DEVICE_COUNTER_GLOB": DEVICE_COUNTER_GLOB,
        "DUPLICATED_TRACK": N.DUPLICATED_TRACK,
        "TIMESTAMP_FORMAT": TIMESTAMP_FORMAT,
        "CAT_COPY": N.CAT_COPY,
        "CAT_SET": N.CAT_SET,
        "ARG_BYTES": f"debug.{A.bytes}",
        "ARG_BYTES_FMT": f"debug.{N.fmt_key(A.bytes)}",
    }
    lines = ["// Generated by `python3 -m ctf2perfetto.traceformat.ui` from ctf2perfetto/traceformat: do not edit.",
             "// The trace-format names the plugin reads (docs/TRACE_FORMAT.md).", ""]
    lines += [f"export const {name} = {json.dumps(value)};" for name, value in consts.items()]
    categories = ", ".join(f"'{c}'" for c in (N.CAT_HEAP, N.CAT_API, N.CAT_COPY, N.CAT_SET))
    lines.append(f"export const MEMQ_CATEGORIES = {json.dumps(f'({categories})')};")
    return "\n".join(lines) + "\n"


def generated(root: Path) -> dict[Path, str]:
    """Every generated file under the repository `root`, with its content."""
    plugins = root / "ui_plugins"
    return {plugins / "startup_commands.json": json.dumps(startup_commands(), indent=2) + "\n",
            plugins / "macros.json": json.dumps(macros(), indent=2) + "\n",
            plugins / "com.memq.MemQ" / "memq_names.ts": plugin_names()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m ctf2perfetto.traceformat.ui", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only say which generated file differs (exit 1)")
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[2], help="repository root")
    args = parser.parse_args(argv)
    stale = []
    for path, text in generated(args.root).items():
        if not path.is_file() or path.read_text() != text:
            stale.append(path)
            if not args.check:
                path.write_text(text)
    for path in stale:
        print(f"{path}: {'differs from the trace format' if args.check else 'rewritten'}", file=sys.stderr)
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
