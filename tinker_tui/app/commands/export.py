"""`tinker-tui export [RUN] --format jsonl|csv|wandb|tensorboard`: a run's metrics and
samples as files (wandb and tensorboard: see `app.tracker_export`).

Metrics: one record per step (`kind` "step") and per evaluation (`kind` "eval"), with
`step`, `policy_version`, `time` and the metric keys as the engine names them
(`reward/mean`, `time/step`, `discarded/stale`, ...). Samples: one record per stored
rollout (`kind` "train") and per evaluation rollout (`kind` "eval", its `step` the step
evaluated, no group), with its group and scenario (`group_id`, `scenario_index`, `scenario_id`),
`sample` (its index in the group), `reward`, `policy_version`, `num_tokens`, the group's
fate (`status` trained / discarded / unused, `step`, `reason`), its `messages` and the
`metrics` its rollout reported (`Trajectory.from_choices(..., correct=True)`).

RUN is a run id, a unique prefix, or omitted for the newest run (as for `show`).
jsonl writes both to one file, `RUN.jsonl`, each line with a `record` field, "metrics" or
"sample"; csv writes one table per file: `RUN-metrics.csv` and `RUN-samples.csv` (with
`--what metrics` or `--what samples`, only that one). `--output` is the same for both
formats: a folder (one that exists, or a path ending in `/`) receives those files under
their default names; any other path is the file to write, except for csv with `--what all`
(two files), where it is a folder, created if needed (a path with a suffix, `out.csv`, or
an existing file is refused rather than made a folder); `-` is standard output (one table,
or the jsonl stream). Without `--output` the files go to the current folder. Non-finite numbers are null in jsonl and `nan` / `inf` in csv;
messages are a JSON string in csv, and each metric a column of its own, `metrics.<name>`
(jsonl keeps them in one `metrics` object). Exporting a run that is still running says so
on standard error: the export is partial, up to the last step stored.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import math
import os
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from tinker_tui.app.commands.common import EXIT_OK, add_db_option, one_of, store_path
from tinker_tui.app.export_records import METRIC_FIELDS, SAMPLE_FIELDS, partial_note, read_export
from tinker_tui.engine.errors import UsageError

#: What --format and --what take.
FORMATS = ("jsonl", "csv", "wandb", "tensorboard")
WHAT = ("all", "metrics", "samples")


def add_parser(commands: Any) -> None:
    export = commands.add_parser(
        "export",
        help="write a run's metrics and samples to files",
        description="Write a stored run's metrics and samples as JSON lines or CSV.",
    )
    export.add_argument(
        "run",
        nargs="?",
        metavar="RUN",
        help="run id or a unique prefix of one (default: the newest run)",
    )
    export.add_argument(
        "--format",
        choices=FORMATS,
        type=one_of(FORMATS),
        default="jsonl",
        help="jsonl (default): one file, a record per line; csv: one table "
        "per file; wandb, tensorboard: a W&B run (offline without an API "
        "key) or TensorBoard event files, as --wandb / --tensorboard "
        "would have written them",
    )
    export.add_argument(
        "--project",
        metavar="NAME",
        help="W&B project for --format wandb (default: the run's wandb_project, else tinker-tui)",
    )
    export.add_argument(
        "--what",
        choices=WHAT,
        type=one_of(WHAT),
        default="all",
        help="what to export (default: all)",
    )
    export.add_argument(
        "-o",
        "--output",
        metavar="PATH",
        help="a folder for the default file names (RUN.jsonl, "
        "RUN-metrics.csv, ...), a file, or '-' for standard output; "
        "default: the current folder (wandb, tensorboard: the folder to "
        "write in, default wandb/ and tensorboard/ beside the store)",
    )
    add_db_option(export)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_jsonl(out: IO[str], metrics: Iterable[dict], samples: Iterable[dict]) -> int:
    n = 0
    for kind, records in (("metrics", metrics), ("sample", samples)):
        for record in records:
            line = {"record": kind, **{k: _finite(v) for k, v in record.items()}}
            out.write(json.dumps(line, allow_nan=False) + "\n")
            n += 1
    return n


def _csv_row(record: dict) -> dict:
    """A record as one CSV row: messages as a JSON string, each metric its own column."""
    row = dict(record)
    if isinstance(row.get("messages"), list | dict):
        row["messages"] = json.dumps(row["messages"])
    metrics = row.pop("metrics", None)
    if isinstance(metrics, dict):
        row.update({f"metrics.{name}": value for name, value in metrics.items()})
    return row


def write_csv(out: IO[str], records: list[dict], first: tuple[str, ...]) -> int:
    rows = [_csv_row(r) for r in records]
    fields = [f for f in first if f != "metrics"]
    extra = sorted({k for r in rows for k in r} - set(fields))
    writer = csv.DictWriter(out, fieldnames=[*fields, *extra], lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow(row)
    return len(rows)


@contextmanager
def _open(path: str) -> Iterator[IO[str]]:
    if path == "-":
        yield sys.stdout
        return
    target = Path(path)
    if target.is_dir():
        raise UsageError(f"{target} is a folder; name a file to write")
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "w", encoding="utf-8", newline="") as f:
        yield f


def main(args: argparse.Namespace) -> int:
    try:
        return _export(args)
    except BrokenPipeError:  # `export RUN -o - | head`: the reader has all it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


def is_folder(output: str) -> bool:
    """`--output` names a folder: one that exists, or a path written with a trailing /."""
    return output.endswith(("/", os.sep)) or Path(output).is_dir()


def targets(output: str | None, names: list[str]) -> list[str]:
    """Where each of the files `names` goes for `--output` (see the module docstring)."""
    if output is None:
        return names
    several = len(names) > 1
    if output == "-" or (not is_folder(output) and not several):
        if several:
            raise UsageError(
                f"csv with --what all writes two tables ({', '.join(names)}); "
                "standard output takes one: choose --what metrics or --what "
                "samples, or give --output a folder"
            )
        return [output]
    if several and not is_folder(output) and (Path(output).exists() or Path(output).suffix):
        raise UsageError(
            f"{output} names a file; csv with --what all writes two tables, so "
            "--output names a folder (or choose --what metrics or samples)"
        )
    return [str(Path(output) / name) for name in names]


def _export(args: argparse.Namespace) -> int:
    args.db = store_path(args)
    if args.format in ("wandb", "tensorboard"):
        from tinker_tui.app.tracker_export import export_to_tracker

        return export_to_tracker(args)
    run_id, metrics, samples = asyncio.run(read_export(args.db, args.run))
    if args.what == "metrics":
        samples = []
    elif args.what == "samples":
        metrics = []
    tables = [("metrics", metrics, METRIC_FIELDS), ("samples", samples, SAMPLE_FIELDS)]
    if args.what != "all":
        tables = [t for t in tables if t[0] == args.what]
    if args.format == "jsonl":
        names = [f"{run_id}.jsonl"]
    else:
        names = [f"{run_id}-{name}.csv" for name, _, _ in tables]
    written: list[str] = []
    paths = targets(args.output, names)
    if args.format == "jsonl":
        with _open(paths[0]) as out:
            n = write_jsonl(out, metrics, samples)
        written.append(f"{paths[0]} ({n} records)")
    else:
        for path, (_, records, first) in zip(paths, tables, strict=True):
            with _open(path) as out:
                n = write_csv(out, records, first)
            written.append(f"{path} ({n} rows)")
    if args.output != "-":
        print("wrote " + ", ".join(written), file=sys.stderr)
    note = partial_note(args.db, run_id, metrics)
    if note:
        print(note, file=sys.stderr)
    return EXIT_OK
