"""The repository's PerfettoSQL package `memq` as (module name, SQL) pairs."""
from __future__ import annotations

from pathlib import Path

from ctf2perfetto.paths import sql_package_dir

PACKAGE = "memq"


def module_name(root: Path, file: Path) -> str:
    """`sql/memq/a/b.sql` -> `memq.a.b` (what `INCLUDE PERFETTO MODULE` names)."""
    return ".".join((PACKAGE, *file.relative_to(root).with_suffix("").parts))


def sql_modules() -> list[tuple[str, str]]:
    """Every module of the package, sorted by name."""
    root = sql_package_dir()
    return sorted((module_name(root, f), f.read_text(encoding="utf-8")) for f in root.rglob("*.sql"))
