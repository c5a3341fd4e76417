"""Scenarios from data: a JSONL file, or a Hugging Face `datasets` dataset on local disk.

Both helpers return a `ScenarioSet`, which is what a task's `scenarios` and
`eval_scenarios` take::

    problems = scenarios_from_jsonl("problems.jsonl", id_field="id")
    held_out = scenarios_from_jsonl("held_out.jsonl", shuffle=False)
    TASK = Task(name="maths", scenarios=problems, eval_scenarios=held_out.all, ...)

Called with the run's `rng`, a set yields its rows as `Scenario(id, data=row)` epoch after
epoch (endless unless `epochs` is given), in a new order each epoch, shuffled with that
`rng` alone. The run's scenario stream is therefore a function of the seed, so a resumed run
replays it to its checkpoint's position and continues with exactly the scenarios, and the
epoch order, the first run would have drawn.

Rows are read when the helper is called (when the task file is loaded), so a missing file
or a malformed line stops the command before anything starts, naming the file and line.
Nothing is downloaded: `scenarios_from_dataset` takes a `datasets.Dataset` (or a
`DatasetDict` and a `split`) you built, a folder written by `Dataset.save_to_disk`, or a
local `.json`/`.jsonl`/`.csv`/`.parquet` file.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from tinker_tui.engine.rollouts.task import Scenario, TaskError

__all__ = ["ScenarioSet", "scenarios_from_dataset", "scenarios_from_jsonl"]

#: Data files `scenarios_from_dataset` reads with the `datasets` library, by suffix.
DATA_FILE_READERS = {
    ".json": "from_json",
    ".jsonl": "from_json",
    ".csv": "from_csv",
    ".parquet": "from_parquet",
}


class ScenarioSet:
    """Rows of data as scenarios: call it with an `rng` for shuffled epochs (a task's
    `scenarios`), or use `all()` for every row once, in order (a task's `eval_scenarios`).

    `rows`: anything with `len()` and `rows[i]` (a list, a `datasets.Dataset`); each row
    becomes a Scenario's `data` as it is. Ids are `<name>-<row index>`, or the row's
    `id_field` value."""

    def __init__(
        self,
        rows: Sequence[Any],
        *,
        name: str,
        id_field: str | None = None,
        shuffle: bool = True,
        epochs: int | None = None,
    ) -> None:
        if epochs is not None and (
            isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1
        ):
            raise TaskError(
                f"epochs must be a whole number of at least 1 (or None: endless), got {epochs!r}"
            )
        if len(rows) == 0:
            raise TaskError(f"{name} has no rows: a task needs at least one scenario")
        self.rows = rows
        self.name = name
        self.id_field = id_field
        self.shuffle = shuffle
        self.epochs = epochs
        if id_field is not None:
            for index in range(len(rows)):
                self._id(index)  # every row has its id: say so now, not mid-run

    def __len__(self) -> int:
        return len(self.rows)

    def __repr__(self) -> str:
        return f"ScenarioSet({self.name!r}, {len(self)} rows)"

    def _id(self, index: int) -> str:
        if self.id_field is None:
            return f"{self.name}-{index}"
        row = self.rows[index]
        value = row.get(self.id_field) if isinstance(row, dict) else None
        if value is None or isinstance(value, dict | list):
            raise TaskError(
                f"{self.name}: row {index} has no usable {self.id_field!r} "
                f"(id_field): got {value!r}"
            )
        return str(value)

    def scenario(self, index: int) -> Scenario:
        return Scenario(id=self._id(index), data=self.rows[index])

    def __call__(self, rng: random.Random) -> Iterator[Scenario]:
        """Every row once per epoch, each epoch in an order drawn from `rng` (the rows'
        own order when `shuffle` is off)."""
        epoch = 0
        while self.epochs is None or epoch < self.epochs:
            order = list(range(len(self.rows)))
            if self.shuffle:
                rng.shuffle(order)
            for index in order:
                yield self.scenario(index)
            epoch += 1

    def all(self) -> list[Scenario]:
        """Every row once, in order: for `eval_scenarios`."""
        return [self.scenario(index) for index in range(len(self.rows))]


def scenarios_from_jsonl(
    path: str | Path,
    *,
    id_field: str | None = None,
    shuffle: bool = True,
    epochs: int | None = None,
) -> ScenarioSet:
    """One scenario per line of a JSON Lines file (blank lines skipped); the line's JSON
    value is the scenario's `data`."""
    file = Path(path).expanduser()
    where = f"scenario file {str(file)!r}"
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TaskError(f"{where} not found") from None
    except IsADirectoryError:
        raise TaskError(f"{where} is a folder; expected a .jsonl file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskError(f"{where} cannot be read: {exc}") from None
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except ValueError as exc:
            raise TaskError(f"{where} line {number} is not JSON: {exc}") from None
    return ScenarioSet(rows, name=file.stem, id_field=id_field, shuffle=shuffle, epochs=epochs)


def scenarios_from_dataset(
    source: Any,
    *,
    split: str | None = None,
    id_field: str | None = None,
    shuffle: bool = True,
    epochs: int | None = None,
    cache_dir: str | Path | None = None,
) -> ScenarioSet:
    """One scenario per row of a Hugging Face dataset on this machine (never downloaded):
    a `datasets.Dataset`, a `DatasetDict` with `split`, a folder saved with
    `save_to_disk`, or a `.json`/`.jsonl`/`.csv`/`.parquet` file (read with the `datasets`
    library; `cache_dir` is where it keeps its Arrow copy, default its own cache). Each
    row (a dict of the dataset's columns) is a scenario's `data`."""
    try:
        import datasets
    except ImportError:  # pragma: no cover - a dependency of tinker-cookbook
        raise TaskError(
            "scenarios_from_dataset needs the datasets package: pip install datasets"
        ) from None
    name = "dataset"
    if isinstance(source, str | Path):
        path = Path(source).expanduser()
        name = path.stem or path.name
        source = _load_local(datasets, path, cache_dir)
    if isinstance(source, datasets.DatasetDict):
        if split is None:
            raise TaskError(f"the dataset has splits {', '.join(source)}: name one (split=...)")
        if split not in source:
            raise TaskError(f"the dataset has no split {split!r}; it has {', '.join(source)}")
        source = source[split]
        name = f"{name}-{split}"
    elif split is not None and split != "train":
        raise TaskError(
            f"split={split!r} needs a dataset with splits (a DatasetDict); this "
            "one has a single table"
        )
    if not isinstance(source, datasets.Dataset):
        raise TaskError(
            "scenarios_from_dataset takes a datasets.Dataset, a DatasetDict, a "
            "folder saved with save_to_disk or a local data file, got a "
            f"{type(source).__name__}"
        )
    return ScenarioSet(source, name=name, id_field=id_field, shuffle=shuffle, epochs=epochs)


def _load_local(datasets: Any, path: Path, cache_dir: str | Path | None) -> Any:
    """A dataset from a local folder or data file, without touching the Hub."""
    where = f"dataset {str(path)!r}"
    if not path.exists():
        raise TaskError(
            f"{where} not found: scenarios_from_dataset reads local files only "
            "(to use a Hub dataset, download it with datasets.load_dataset and "
            "pass the Dataset)"
        )
    bars = datasets.utils.is_progress_bar_enabled()
    datasets.utils.disable_progress_bars()  # nothing on the terminal the dashboard draws on
    try:
        if path.is_dir():
            return datasets.load_from_disk(str(path))
        reader = DATA_FILE_READERS.get(path.suffix.lower())
        if reader is None:
            raise TaskError(
                f"{where}: expected a folder saved with save_to_disk or a "
                f"{', '.join(sorted(DATA_FILE_READERS))} file"
            )
        options = {"cache_dir": str(cache_dir)} if cache_dir is not None else {}
        return getattr(datasets.Dataset, reader)(str(path), **options)
    except TaskError:
        raise
    except Exception as exc:
        raise TaskError(
            f"{where} cannot be read: {type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}"
        ) from None
    finally:
        if bars:
            datasets.utils.enable_progress_bars()
