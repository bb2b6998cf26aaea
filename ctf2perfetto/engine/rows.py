"""Query results as plain Python values, without pandas.

Importing pandas (and numpy with it) costs ~0.4 s, a third of a `memq leaks` run on a
small trace, so the command line computes and prints its tables from `Rows`. The
Python API turns the same `Rows` into the DataFrames it has always returned
(`frame()`: frames.typed_frame for a query result, so the dtypes stay exactly those).
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable, Iterator

if TYPE_CHECKING:
    import pandas as pd

# QueryResult.CellsBatch cell types (perfetto's query_result_iterator, which imports pandas).
CELL_NULL, CELL_VARINT, CELL_FLOAT64, CELL_STRING, CELL_BLOB = 1, 2, 3, 4, 5


def _strings(raw: str | bytes) -> list[str]:
    """A batch's string cells: NUL-terminated, concatenated."""
    text = raw.decode("utf-8", "ignore") if isinstance(raw, bytes) else raw
    parts = text.split("\0")
    return parts[:-1] if parts else parts


def decode_batches(column_count: int, batches: list[Any]) -> list[tuple]:
    """The rows of QueryResult batches as tuples of int, float, str, bytes or None."""
    cells: list[Any] = []
    for batch in batches:
        pools = {CELL_VARINT: iter(batch.varint_cells), CELL_FLOAT64: iter(batch.float64_cells),
                 CELL_STRING: iter(_strings(batch.string_cells)), CELL_BLOB: iter(batch.blob_cells)}
        cells.extend(None if kind == CELL_NULL else next(pools[kind]) for kind in batch.cells)
    if not column_count:
        return []
    return [tuple(cells[i:i + column_count]) for i in range(0, len(cells), column_count)]


def column_arrays(column_count: int, batches: list[Any]) -> list[Any] | None:
    """A query result's columns decoded in bulk: a column of integers as a numpy int64 array, a column of strings
    as a list of str; None when a column holds NULL, floats or blobs, or mixes kinds (decode_batches reads any).
    A plot's hundreds of thousands of samples decode here in milliseconds, cell by cell in about a second."""
    import numpy as np

    kinds_of: Any = None
    ints: list[Any] = []
    strings: list[list[str]] = []
    for batch in batches:
        if not len(batch.cells):
            continue
        kinds = np.array(batch.cells, dtype=np.int8).reshape(-1, column_count)
        first = kinds[0]
        if (kinds != first).any() or (kinds_of is not None and (first != kinds_of).any()) \
                or not np.isin(first, (CELL_VARINT, CELL_STRING)).all():
            return None
        kinds_of = first
        ints.append(np.array(batch.varint_cells, dtype=np.int64).reshape(len(kinds), -1))
        strings.append(_strings(batch.string_cells))
    if kinds_of is None:
        return [np.zeros(0, dtype=np.int64) for _ in range(column_count)]
    out: list[Any] = []
    int_at = str_at = 0
    n_str = int((kinds_of == CELL_STRING).sum())
    for kind in kinds_of:
        if kind == CELL_VARINT:
            out.append(np.concatenate([m[:, int_at] for m in ints]))
            int_at += 1
        else:
            out.append([v for part in strings for v in part[str_at::n_str]])
            str_at += 1
    return out


class Rows:
    """A table: column names, rows (tuples of plain values) and `attrs` (as DataFrame.attrs).

    `make_frame` builds the equivalent DataFrame for the Python API, only when asked for."""

    def __init__(self, columns: list[str], rows: list[tuple] | Callable[[], list[tuple]],
                 make_frame: Callable[[], pd.DataFrame], attrs: dict[str, Any] | None = None) -> None:
        self.columns = list(columns)
        self._rows = rows
        self._make_frame = make_frame
        self.attrs: dict[str, Any] = dict(attrs or {})
        self.frame_typed = False  # True: the values are a DataFrame's already (from_frame)
        self.batches: list[Any] | None = None  # a query result's QueryResult batches (from_batches)

    @classmethod
    def from_batches(cls, column_names: list[str], batches: list[Any]) -> "Rows":
        """A query result; its rows are decoded when first read."""
        def frame() -> pd.DataFrame:
            from ctf2perfetto.engine.frames import typed_frame

            return typed_frame(column_names, batches)

        rows = cls(column_names, lambda: decode_batches(len(column_names), batches), frame)
        rows.batches = batches  # what came back, for handing the result to another process as it is
        return rows

    @classmethod
    def from_records(cls, records: list[dict[str, Any]], columns: list[str], *, as_query: bool = False) -> "Rows":
        """Rows built from dicts (as `pd.DataFrame(records, columns=columns)`; `as_query`: typed as a query result
        holding these values would be, frames.values_frame)."""
        rows = [tuple(r.get(c) for c in columns) for r in records]

        def frame() -> pd.DataFrame:
            import pandas as pd

            if as_query:
                from ctf2perfetto.engine.frames import values_frame

                return values_frame(columns, rows)
            return pd.DataFrame(records, columns=columns)

        return cls(columns, rows, frame)

    @classmethod
    def from_frame(cls, df: pd.DataFrame) -> "Rows":
        """A DataFrame's rows (values as `Series.tolist()` gives them), for printing."""
        columns = [str(c) for c in df.columns]
        values = [df.iloc[:, i].tolist() for i in range(len(columns))]
        rows = cls(columns, list(zip(*values)) if columns else [], lambda: df, dict(df.attrs))
        rows.frame_typed = True
        return rows

    @property
    def rows(self) -> list[tuple]:
        if callable(self._rows):
            self._rows = self._rows()
        return self._rows

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[tuple]:
        return iter(self.rows)

    def column(self, name: str) -> list[Any]:
        """One column's values, NULL as None."""
        i = self.columns.index(name)
        return [row[i] for row in self.rows]

    def first(self, name: str) -> Any:
        """The first row's value of column `name`."""
        return self.rows[0][self.columns.index(name)]

    def records(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, row)) for row in self.rows]

    def arrays(self) -> list[Any] | None:
        """column_arrays of a query result (None for other Rows, or where it returns None)."""
        return None if self.batches is None else column_arrays(len(self.columns), self.batches)

    def typed_columns(self) -> list[list[Any]]:
        """Each column's values as the DataFrame's `tolist()` gives them: a column of numbers with at
        least one float is all floats (frames.typed_frame makes it float64), NULL as None."""
        out = []
        for i in range(len(self.columns)):
            values = [row[i] for row in self.rows]
            kinds = {type(v) for v in values}
            if not self.frame_typed and float in kinds and kinds <= {int, float, type(None)}:
                values = [None if v is None else float(v) for v in values]
            out.append(values)
        return out

    def frame(self) -> pd.DataFrame:
        """The DataFrame the Python API returns, with these attrs."""
        df = self._make_frame()
        df.attrs.update(self.attrs)
        return df


def is_null(value: Any) -> bool:
    """None or NaN (pandas' NULL in float and string columns)."""
    return value is None or (isinstance(value, float) and math.isnan(value))
