"""The one interface every trace_processor backend offers."""
from __future__ import annotations

import abc
import re
from types import TracebackType
from typing import TYPE_CHECKING

from ctf2perfetto.errors import MemqError
from ctf2perfetto.engine.rows import Rows

if TYPE_CHECKING:  # frames are made on demand: the command line prints Rows and never imports pandas
    import pandas as pd

# Import statistics that mean the trace was read wrongly or partly: callers refuse or warn on them.
IMPORT_PROBLEMS_SQL = """
SELECT name, idx, severity, source, value, description
FROM stats
WHERE value > 0 AND severity IN ('error', 'data_loss')
ORDER BY name, idx
"""


# A frame of trace_processor's SQL traceback: 'File "stdin" line 1 col 8' or 'Module include "memq.x" line 3 col 8'.
_FRAME = re.compile(r'^[A-Za-z ]+"(?P<file>[^"]*)" line (?P<line>\d+) col (?P<col>\d+)$')


def sql_error(report: str) -> MemqError:
    """trace_processor's SQL error report (a multi-line 'Traceback') as one line.

    Keeps its message and the innermost frame: the module (or 'stdin' for the
    query itself), line, column and the offending source line.
    """
    lines = [line.strip() for line in report.strip().splitlines() if line.strip()]
    if not lines:
        return MemqError("SQL error")
    frames = [(i, m) for i, line in enumerate(lines) if (m := _FRAME.search(line))]
    if not frames:
        return MemqError("SQL error: " + " ".join(lines))
    i, frame = frames[-1]
    where = f"{frame['file']} line {frame['line']} col {frame['col']}"
    source = lines[i + 1] if i + 2 < len(lines) else ""
    reason = " ".join(line for line in lines[i + 1:] if line != source and set(line) != {"^"})
    return MemqError(f"SQL error: {reason} (at {where}" + (f": {source})" if source else ")"))


class Engine(abc.ABC):
    """An opened trace answering PerfettoSQL. Use as a context manager or call close().

    One query at a time: an engine is not shared between threads.
    """

    #: 'embedded' (WebAssembly in-process) or 'native' (trace_processor_shell).
    kind: str = ""

    @abc.abstractmethod
    def rows(self, sql: str) -> Rows:
        """Run PerfettoSQL (several statements allowed); the last statement's rows."""

    def query(self, sql: str) -> pd.DataFrame:
        """Run PerfettoSQL (several statements allowed); the last statement's rows as a DataFrame."""
        return self.rows(sql).frame()

    @abc.abstractmethod
    def close(self) -> None:
        """Free trace_processor and everything it holds. Safe to call twice."""

    def import_problem_rows(self) -> Rows:
        """`stats` rows with value > 0 and severity 'error' or 'data_loss' (empty when the import was clean)."""
        return self.rows(IMPORT_PROBLEMS_SQL)

    def import_problems(self) -> pd.DataFrame:
        """import_problem_rows as a DataFrame."""
        return self.import_problem_rows().frame()

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
