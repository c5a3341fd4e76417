"""The run store: every engine event in a SQLite file, read back by `show`, `attach`, `runs`,
`export` and `run --resume`.

- `schema.py`: the file's tables, their migrations, the checks that a file is ours.
- `codec.py`: events <-> rows (each event type's table and columns, both ways), and the
  records read back (`StoredRun`, `GroupFate`).
- `writer.py`: `RunStore`, the event-bus subscriber that writes events in batches.
- `eval_records.py`: the evaluations of `tinker-tui eval`, each rollout kept as it ends.
- `reader.py`: `StoreReader`: runs and the one run lookup (`find_run`), a run's events
  (`events`, `events_after` with an `EventCursor`), checkpoints, resume points.
"""

from tinker_tui.engine.store.codec import READABLE_TABLES, GroupFate, GroupSpan, StoredRun
from tinker_tui.engine.store.reader import EventCursor, NoSuchRun, StoreReader, find_run, pick_run
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
    "EventCursor",
    "GroupFate",
    "GroupSpan",
    "NoSuchRun",
    "RunStore",
    "StoreError",
    "StoreReader",
    "StoredRun",
    "find_run",
    "pick_run",
]
