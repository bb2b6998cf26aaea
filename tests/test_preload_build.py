"""Building the preload library (preload/Makefile) with a user's own flags and output directory.

The sources are copied to a temporary directory first, so the checkout's own
objects (built with the default flags) are never replaced by these builds.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

PRELOAD = Path(__file__).resolve().parent.parent / "preload"
LIBRARY = "libmemq_preload.so"


def copy_sources(dest: Path) -> Path:
    dest.mkdir()
    for src in PRELOAD.iterdir():
        if src.suffix in (".c", ".h") or src.name == "Makefile":
            shutil.copy(src, dest / src.name)
    return dest


def make(src: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "-s", "-C", str(src), *args], capture_output=True, text=True, timeout=600)


def exported_functions(library: Path) -> set[str]:
    out = subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True, check=True)
    return {line.split()[-1] for line in out.stdout.splitlines() if line.split()[1] in ("T", "W")}


def test_cflags_on_the_command_line_keep_the_required_flags(tmp_path) -> None:
    """`make CFLAGS=-O1` still builds position-independent code exporting only the wrapped names."""
    src, out = copy_sources(tmp_path / "src"), tmp_path / "out"
    out.mkdir()
    proc = make(src, f"OUT={out}", "CFLAGS=-O1 -g0")
    assert proc.returncode == 0, proc.stderr
    exports = exported_functions(out / LIBRARY)
    assert {"cudaMalloc", "hipMemcpy", "cuMemAlloc_v2", "dlsym"} <= exports
    assert not {name for name in exports if name.startswith("memq_")}  # -fvisibility=hidden held
    dynamic = subprocess.run(["readelf", "-d", str(out / LIBRARY)], capture_output=True, text=True, check=True)
    assert "TEXTREL" not in dynamic.stdout  # -fPIC held


def test_clean_removes_what_it_built_where_out_put_it(tmp_path) -> None:
    src, out = copy_sources(tmp_path / "src"), tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("not ours")
    assert make(src, f"OUT={out}").returncode == 0
    assert (out / LIBRARY).is_file() and list(src.glob("*.o"))
    proc = make(src, "clean", f"OUT={out}")
    assert proc.returncode == 0, proc.stderr
    assert not (out / LIBRARY).exists() and not list(src.glob("*.o"))
    assert (out / "keep.txt").read_text() == "not ours"


def test_api_ranges_are_the_headers() -> None:
    """capture/api_ranges.py is preload/memq_api.h's MEMQ_API_RANGES_* and enum memq_runtime, and every wrapped
    function's number lies in its family's range (hip*, cuda* and cu* calls, the libc heap)."""
    import re

    from ctf2perfetto.capture.api_ranges import API_RANGES, RUNTIMES

    header = (PRELOAD / "memq_api.h").read_text()
    ranges = {family.lower(): tuple((int(a), int(b)) for a, b in re.findall(r"X\((\d+), (\d+)\)", body))
              for family, body in re.findall(r"#define MEMQ_API_RANGES_(\w+)\(X\) (.*)", header)}
    assert ranges == API_RANGES
    runtimes = {name.lower(): int(v) for name, v in re.findall(r"MEMQ_RT_(\w+) = (\d+)", header)}
    assert runtimes == RUNTIMES
    apis = re.findall(r"X\(([A-Za-z_]\w*), (\d+)\)", header)
    assert len(apis) > 100
    for name, number in apis:
        family = "hip" if name.startswith("hip") else "cuda" if name.startswith("cu") else "libc"
        assert any(lo <= int(number) <= hi for lo, hi in API_RANGES[family]), (name, number, family)
