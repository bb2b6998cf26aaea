"""The SQLite databases other profilers write (RPD, rocpd, Nsight Systems exports), opened read-only.

Standard library only: sniffing a file's format must not import numpy.
"""
from __future__ import annotations

import sqlite3
from pathlib import Path
from urllib.parse import quote

from ctf2perfetto.errors import MemqError

SQLITE_MAGIC = b"SQLite format 3\x00"  # the 16-byte header of every SQLite 3 database


def open_sqlite(path: Path, what: str) -> sqlite3.Connection:
    """`path` opened read-only (never written, never locked, no journal made beside it)."""
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError as exc:
        raise MemqError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if head != SQLITE_MAGIC:
        raise MemqError(f"{path}: not an SQLite database, expected {what}")
    try:
        db = sqlite3.connect(f"file:{quote(str(Path(path).resolve()))}?mode=ro&immutable=1", uri=True)
        db.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.Error as exc:
        raise MemqError(f"{path}: unreadable SQLite database ({exc}), expected {what}") from None
    return db


def tables(db: sqlite3.Connection) -> dict[str, str]:
    """Table and view names -> their type ('table' or 'view')."""
    return {name: kind for name, kind in db.execute("SELECT name, type FROM sqlite_master WHERE type IN "
                                                    "('table', 'view')")}


def columns(db: sqlite3.Connection, table: str) -> list[str]:
    return [row[1] for row in db.execute(f'PRAGMA table_info("{table}")')]


def query(db: sqlite3.Connection, path: Path, sql: str, args: tuple = ()):
    """Rows of `sql`; a damaged or unexpected database is one line naming the file."""
    try:
        return db.execute(sql, args).fetchall()
    except sqlite3.Error as exc:
        raise MemqError(f"{path}: cannot read the database: {exc}") from None
