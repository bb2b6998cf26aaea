"""Query results (QueryResult batches, as both backends receive them) as pandas DataFrames."""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from perfetto.common.query_result_iterator import (
    QUERY_CELL_FLOAT64_FIELD_ID,
    QUERY_CELL_NULL_FIELD_ID,
    QUERY_CELL_VARINT_FIELD_ID,
    QueryResultIterator,
)

_NUMBER_OR_NULL = {QUERY_CELL_VARINT_FIELD_ID, QUERY_CELL_FLOAT64_FIELD_ID, QUERY_CELL_NULL_FIELD_ID}


def values_frame(column_names: list[str], rows: list[tuple]) -> pd.DataFrame:
    """A DataFrame from rows of plain values, typed as typed_frame types a query result holding them."""
    frame = pd.DataFrame([list(r) for r in rows], columns=column_names, dtype=object)
    for i in range(len(column_names)):
        kinds = {type(r[i]) for r in rows}
        if kinds == {int}:
            frame.isetitem(i, frame.iloc[:, i].astype(np.int64))
        elif float in kinds and kinds <= {int, float, type(None)}:
            frame.isetitem(i, frame.iloc[:, i].astype(np.float64))
        elif kinds and kinds <= {str, type(None)}:
            frame.isetitem(i, frame.iloc[:, i].infer_objects())
    return frame


def typed_frame(column_names: list[str], batches: list[Any]) -> pd.DataFrame:
    """A DataFrame from query batches, with column types from the cells' types.

    * only integers: int64 (64-bit addresses stay exact, never pass through float);
    * numbers with at least one float (NULLs allowed): float64, NULL as NaN;
    * only strings (NULLs allowed): pandas' string dtype, NULL as NaN (pandas 3's default);
    * anything else (integers with NULLs, mixed types): object, NULL as None.
    """
    frame = QueryResultIterator(column_names, batches).as_pandas_dataframe()
    if frame.empty or not column_names:
        return frame
    kinds = np.concatenate([np.asarray(b.cells, dtype=np.int8) for b in batches]).reshape(-1, len(column_names))
    for i in range(len(column_names)):
        column_kinds = set(np.unique(kinds[:, i]).tolist())
        # By position: a query may repeat a column name.
        if column_kinds == {QUERY_CELL_VARINT_FIELD_ID}:
            frame.isetitem(i, frame.iloc[:, i].astype(np.int64))
        elif QUERY_CELL_FLOAT64_FIELD_ID in column_kinds and column_kinds <= _NUMBER_OR_NULL:
            frame.isetitem(i, frame.iloc[:, i].astype(np.float64))
    return frame
