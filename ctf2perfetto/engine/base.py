"""The one interface every trace_processor backend offers."""
from __future__ import annotations

import abc
from types import TracebackType

import pandas as pd

# Import statistics that mean the trace was read wrongly or partly: callers refuse or warn on them.
IMPORT_PROBLEMS_SQL = """
SELECT name, idx, severity, source, value, description
FROM stats
WHERE value > 0 AND severity IN ('error', 'data_loss')
ORDER BY name, idx
"""


class Engine(abc.ABC):
    """An opened trace answering PerfettoSQL. Use as a context manager or call close()."""

    #: 'embedded' (WebAssembly in-process) or 'native' (trace_processor_shell).
    kind: str = ""

    @abc.abstractmethod
    def query(self, sql: str) -> pd.DataFrame:
        """Run PerfettoSQL (several statements allowed); the last statement's rows as a DataFrame."""

    @abc.abstractmethod
    def close(self) -> None:
        """Free trace_processor and everything it holds. Safe to call twice."""

    def import_problems(self) -> pd.DataFrame:
        """`stats` rows with value > 0 and severity 'error' or 'data_loss' (empty when the import was clean)."""
        return self.query(IMPORT_PROBLEMS_SQL)

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
