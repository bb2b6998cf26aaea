"""Where the installed package keeps its non-Python parts.

In a wheel, `make native` output lands in ctf2perfetto/lib and the SQL package in
ctf2perfetto/sql/memq (see setup.py). In a source checkout (editable install) the
SQL package is the repository's sql/memq and the libraries are in ctf2perfetto/lib.
"""
from pathlib import Path

from ctf2perfetto.errors import MemqError

PACKAGE_DIR = Path(__file__).resolve().parent


def sql_package_dir() -> Path:
    """Directory holding the `memq` PerfettoSQL package (memq/*.sql)."""
    for candidate in (PACKAGE_DIR / "sql" / "memq", PACKAGE_DIR.parent / "sql" / "memq"):
        if candidate.is_dir():
            return candidate
    raise MemqError("the memq SQL package is missing: reinstall memq (scripts/install.sh)")


def native_library(name: str) -> Path:
    """Path of a shared library built by `make native` (e.g. 'libmemq_preload.so')."""
    path = PACKAGE_DIR / "lib" / name
    if not path.is_file():
        raise MemqError(f"{path}: native library not built; run `make native` or scripts/install.sh")
    return path
