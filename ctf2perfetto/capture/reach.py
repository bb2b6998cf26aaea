"""The preload library's exit reports (which GPU libraries each process loaded, its calls) and their warnings."""
from __future__ import annotations

import json
from pathlib import Path

# Which runtimes' traced calls count as seeing a loaded library's calls: a program on the
# dynamic CUDA runtime reaches the driver through it (one event, the runtime's).
REACH_SEEN_BY = {"hip": ("hip",), "cuda": ("cuda", "driver"), "driver": ("cuda", "driver")}
# The directory the preload library writes its exit reports (reach.PID.json) to.
REACH_ENV = "MEMQ_REACH_DIR"


def read_reach(reach_dir: Path) -> list[dict]:
    """The exit reports (reach.PID.json) the traced processes wrote, by pid; unreadable ones skipped."""
    reports = []
    for path in sorted(reach_dir.glob("reach.*.json")):
        try:
            report = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # a process killed while writing it: nothing to say about it
        if isinstance(report, dict) and isinstance(report.get("calls"), dict):
            reports.append(report)
    return sorted(reports, key=lambda r: r.get("pid", 0))


def reach_warnings(reports: list[dict], apis: tuple[str, ...]) -> list[str]:
    """One line per process that loaded a GPU runtime or driver memq records but made none of its calls,
    one per process whose allocation table dropped updates, and one per process whose asynchronous copies
    outnumbered what content fingerprints keep track of."""
    warnings = []
    for report in reports:
        dropped = report.get("content_dropped", 0)
        if dropped:
            warnings.append(f"pid {report.get('pid')}: {dropped:,} asynchronous copies got no fingerprint after "
                            "completion (more than 1,024 awaited a synchronisation at once): their content "
                            "evidence is partial")
        calls = report["calls"]
        for library in report.get("libraries", []):
            runtime = library.get("runtime")
            api = "hip" if runtime == "hip" else "cuda"
            if runtime not in REACH_SEEN_BY or api not in apis:
                continue
            if any(calls.get(r, 0) for r in REACH_SEEN_BY[runtime]):
                continue
            cause = ("a static CUDA runtime (nvcc's default; build with -cudart shared) or a lookup memq does not "
                     "interpose" if runtime != "hip" else "a lookup memq does not interpose")
            warnings.append(f"pid {report.get('pid')} loaded {library.get('path')} but memq saw none of its memory "
                            f"calls: either it made none, or it reached them another way ({cause}); "
                            "see docs/EVENTS.md, 'How calls are reached'")
        if report.get("table_dropped"):
            warnings.append(f"pid {report.get('pid')}: {report['table_dropped']} allocation-table updates were "
                            "dropped (GPU memory calls from a signal handler that interrupted its own thread inside "
                            "the table, or no memory left): as many frees may record size 0 (unknown)")
    return warnings
