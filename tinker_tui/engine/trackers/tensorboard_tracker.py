"""TensorBoard: the step and eval metrics as scalars in event files, one folder per run
(`DIR/<run id>/`), so `tensorboard --logdir DIR` compares runs.

Written with tensorboardX: about 1 MB on top of what the engine already installs (numpy,
protobuf), where the `tensorboard` package brings ~80 MB (gRPC, its data server, Pillow,
Werkzeug) that only viewing needs; the files are TensorBoard's own format either way.

A (re)started run first writes TensorBoard's "session start" marker at the step after the
one it starts from, so TensorBoard drops what an earlier attempt of the run wrote for the
steps it redoes: what it shows matches the store. A rollback writes the same marker after
the step it goes back to (TensorBoard reads a step that goes back as a duplicate, not as a
restart, in event files of this format), and a note of it in the text tab.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tinker_tui.engine.trackers.tensorboardx_private import file_writer
from tinker_tui.engine.trackers.tracker import RunInfo, numeric


def tensorboard_tag(key: str) -> str:
    """The tag a metric key is written under: TensorBoard's tags take letters, digits and
    `-_./` only, so `eval/pass@1` is `eval/pass_1` (as tensorboardX would rename it, without
    its warning on every step)."""
    return re.sub(r"[^-/\w.]", "_", key)


class TensorBoardTracker:
    key = "tensorboard"
    name = "TensorBoard"

    def __init__(self, *, folder: Path) -> None:
        self.folder = Path(folder)
        self.logdir: Path | None = None
        self.writer: Any = None

    def start(self, run: RunInfo) -> list[str]:
        from tensorboardX import SummaryWriter

        if self.writer is None:
            self.logdir = self.folder / run.run_id
            # TensorBoard reads a folder's files in name order, and names carry only the
            # second: the suffix keeps a restart within the same second after the original.
            self.writer = SummaryWriter(
                logdir=str(self.logdir), flush_secs=10, filename_suffix=f".{time.time_ns()}"
            )
        self._purge_from(run.start_step + 1)
        if run.run_name or run.note:  # TensorBoard's text tab: the run's name and note
            self.writer.add_text(
                "run",
                "\n\n".join(
                    t
                    for t in (run.run_name and f"**{run.run_name}** ({run.run_id})", run.note)
                    if t
                ),
                run.start_step,
            )
        return [
            f"TensorBoard: event files in {self.logdir}; view with "
            f"`tensorboard --logdir {self.folder}`"
        ]

    def _purge_from(self, step: int) -> None:
        from tensorboardX.proto.event_pb2 import Event, SessionLog

        writer = file_writer(self.writer)
        writer.add_event(Event(step=step, session_log=SessionLog(status=SessionLog.START)))

    def _scalars(self, step: int, metrics: Mapping[str, float], time: float) -> None:
        for key, value in numeric(metrics).items():
            self.writer.add_scalar(tensorboard_tag(key), value, step, walltime=time)
        self.writer.flush()

    def log_step(
        self, step: int, policy_version: int, metrics: Mapping[str, float], time: float
    ) -> None:
        self._scalars(step, {**metrics, "policy_version": policy_version}, time)

    def log_eval(
        self, step: int, policy_version: int, metrics: Mapping[str, float], time: float
    ) -> None:
        self._scalars(step, metrics, time)

    def log_checkpoint(self, step: int, kind: str, name: str, path: str) -> None:
        pass  # scalars only

    def log_samples(self, step: int, rows: list[tuple[Any, ...]]) -> None:
        pass  # scalars only

    def log_rollback(self, to_step: int, steps_undone: int, reason: str, time: float) -> None:
        self._purge_from(to_step + 1)
        self.writer.add_text(
            "rollback",
            f"rolled back to step {to_step} ({steps_undone} later step(s) undone): {reason}",
            to_step,
            walltime=time,
        )
        self.writer.flush()

    def finish(self, status: str) -> list[str]:
        if self.writer is None:
            return []
        writer, self.writer = self.writer, None
        writer.close()
        return []

    def abort(self) -> None:
        if self.writer is not None:
            writer, self.writer = self.writer, None
            writer.close()
