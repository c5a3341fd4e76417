"""The run store: every engine event in a SQLite file, read back by `show`, `attach`, `runs`,
`export` and `run --resume`.

- `schema.py`: the file's tables, their migrations, the checks that a file is ours.
- `codec.py`: events <-> rows (each event type's table and columns, both ways).
- `writer.py`: `RunStore`, the event-bus subscriber that writes events in batches.
- `reader.py`: `StoreReader`, the queries (runs, checkpoints, resume points, rows).
"""

from tinker_tui.engine.store.reader import READABLE_TABLES, StoreReader
from tinker_tui.engine.store.schema import (
    APPLICATION_ID,
    MIGRATIONS,
    SCHEMA_VERSION,
    StoreError,
)
from tinker_tui.engine.store.writer import RunStore

__all__ = [
    "APPLICATION_ID",
    "MIGRATIONS",
    "READABLE_TABLES",
    "SCHEMA_VERSION",
    "RunStore",
    "StoreError",
    "StoreReader",
]
