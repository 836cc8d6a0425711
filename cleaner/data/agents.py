"""Which agent loop the rows of a data file select: verl picks the loop from each row's `agent_name` column."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq

from cleaner.data.rows import read_rows

AGENT_COLUMN = "agent_name"


def agent_name_counts(path: Path) -> Counter[str | None]:
    """Rows per `agent_name` value; rows without one (no such column, or null) are counted under None."""
    if path.suffix == ".parquet":
        parquet = pq.ParquetFile(path)
        if AGENT_COLUMN not in parquet.schema_arrow.names:
            return Counter({None: parquet.metadata.num_rows})
        return Counter(parquet.read(columns=[AGENT_COLUMN]).column(AGENT_COLUMN).to_pylist())
    return Counter(row.get(AGENT_COLUMN) for row in read_rows(path))
