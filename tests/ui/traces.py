"""The fake HIP workload's trace as the UI tests use it: converted with `memq convert`, annotated with
`memq annotate` (both run as a user runs them, in a subprocess)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

MEMQ = [sys.executable, "-m", "ctf2perfetto.cli.memq"]


def memq(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run `memq ARGS...`; the finished process (not checked)."""
    return subprocess.run([*MEMQ, *args], capture_output=True, text=True, timeout=timeout)


def converted(trace_dir: Path, out: Path) -> Path:
    """`memq convert TRACE_DIR -o OUT`, checked."""
    done = memq("convert", str(trace_dir), "-o", str(out))
    assert done.returncode == 0, done.stderr
    return out


def annotated(trace: Path, out: Path) -> Path:
    """`memq annotate TRACE -o OUT`, checked."""
    done = memq("annotate", str(trace), "-o", str(out))
    assert done.returncode == 0, done.stderr
    return out
