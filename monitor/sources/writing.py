"""Writing parquet (the demo world, the simulator and the tests)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def write_parquet(
    path: str | Path,
    columns: Mapping[str, np.ndarray],
    *,
    row_group_size: int | None = None,
) -> None:
    """Write ``columns`` (name -> 1-D array of equal length) to a parquet file at ``path``.

    ``datetime64`` arrays are written as UTC timestamps of the same unit; parent directories are
    created. Used by the demo world, the simulator and the tests.
    """
    arrays = {}
    for name, values in columns.items():
        arr = np.asarray(values)
        if np.issubdtype(arr.dtype, np.datetime64):
            unit = np.datetime_data(arr.dtype)[0]
            arrays[name] = pa.array(arr, type=pa.timestamp(unit, tz="UTC"))
        else:
            arrays[name] = pa.array(arr)
    table = pa.table(arrays)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, target, row_group_size=row_group_size)
