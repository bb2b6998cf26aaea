"""Query results (QueryResult batches, as both backends receive them) as pandas DataFrames."""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from perfetto.common.query_result_iterator import (
    QUERY_CELL_FLOAT64_FIELD_ID,
    QUERY_CELL_VARINT_FIELD_ID,
    QueryResultIterator,
)


def typed_frame(column_names: list[str], batches: list[Any]) -> pd.DataFrame:
    """A DataFrame from query batches: integer and float columns get numeric dtypes.

    QueryResultIterator gives object columns. A column is made int64 only when
    every cell is an integer (so 64-bit addresses never pass through float), and
    float64 when every cell is a number and one is a float; the rest (strings,
    NULLs) stays object, with None for NULL.
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
        elif column_kinds <= {QUERY_CELL_VARINT_FIELD_ID, QUERY_CELL_FLOAT64_FIELD_ID}:
            frame.isetitem(i, frame.iloc[:, i].astype(np.float64))
    return frame
