"""The headless side of a run: one plain line per step (for CI, pipes and `--no-ui`), a
JSONL metrics file beside the store, and the control endpoint `tinker-tui attach` uses."""

from __future__ import annotations

import json
import math
import os
import re
import sys
import sysconfig
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from tinker_tui.app.group_counts import ZeroVarianceSplit
from tinker_tui.app.run_summary import db_flag, stuck_text
from tinker_tui.engine.control.interface import Session
from tinker_tui.engine.events import (
    DISCARD_REASONS,
    CheckpointDeleted,
    CheckpointSaved,
    CommandReceived,
    EvalCompleted,
    Event,
    GroupDiscarded,
    GroupSampled,
    LogEmitted,
    RunFinished,
    RunResumed,
    RunStarted,
    RunStateChanged,
    SessionStarted,
    StartupProgressed,
    StepTrained,
    ThroughputMeasured,
    TrackerReported,
)
from tinker_tui.engine.metrics import metric_keys as keys
from tinker_tui.engine.metrics.collapse_memory import fold
from tinker_tui.engine.metrics.health import HealthWindow
from tinker_tui.engine.metrics.list_prices import priced_as

if TYPE_CHECKING:
    from tinker_tui.engine.control.endpoint import ControlServer


class HeadlessReporter:
    """Prints what a person watching a log needs; subscribe `handle` to the event bus. The
    run's end is printed by its summary (`app.run_summary`), after every other line."""

    def __init__(self, out: TextIO | None = None, *, db_path: Path | None = None) -> None:
        self.out = out or sys.stdout
        self.db_path = db_path  # for the command that shows a logged traceback whole
        self.max_steps = 0
        self.discarded = dict.fromkeys(DISCARD_REASONS, 0)
        #: Each step's (stale, error, failed rollouts), so a rollback forgets its undone
        #: steps' counts as the store does (`show` reads them back without those).
        self._step_counts: dict[int, tuple[int, int, int]] = {}
        #: Zero-variance groups: converged (not a discard) or no signal, as the dashboard
        #: counts them (`app.group_counts`).
        self.zero_variance = ZeroVarianceSplit()
        self.rollouts_failed = 0  # over the run (a resumed run's earlier steps included)
        self.started_at: float | None = None
        #: The start of this process of the run, its last step, and the seconds the run's
        #: earlier processes worked (`_session`).
        self._session_at: float | None = None
        self._last_step_at: float | None = None
        self._earlier_seconds = 0.0
        self._resumed_at: float | None = None  # this process's start, when it resumes
        self._phase: str | None = None
        self._run_id = "RUN"
        self._closed = False  # the output's reader went away
        self._last_shape: tuple[str, str, str] | None = None  # the last warning/error printed
        self._repeats = 0  # how often it came again since
        self._last_line = ""  # its first line, as printed
        #: Read as the engine reads it: a collapsed run's step lines say so.
        self.health = HealthWindow()
        self._earlier: list[Event] = []  # `remember`'s, until the run says where it starts
        self._stuck_said: set[int] = set()  # groups whose stuck rollouts were warned of
        self._finished = False  # RunFinished seen: the summary now has the last word
        self._rollout_timeout: object = None  # the run's setting, for the warning
        self._priced_as = ""  # " (list prices of DATE)" for a run priced from the list

    def remember(self, earlier: list[Event]) -> None:
        """The stored events of a resumed run before this process (`SummaryCollector.
        read_earlier`): its step lines go on from the run's totals and elapsed time, as
        `show` prints them, and say whether it has collapsed."""
        self._earlier = list(earlier)

    def _take_in(self, earlier: list[Event], start_step: int) -> None:
        """Count the earlier events the resume keeps (those up to `start_step`; it
        deletes the later steps and their groups from the store) as if they had come
        live, without printing them."""
        kept = [
            e
            for e in earlier
            if not isinstance(e, StepTrained | CheckpointSaved | GroupDiscarded)
            or e.step <= start_step
        ]
        groups = {g for e in kept if isinstance(e, StepTrained) for g in e.group_ids}
        groups |= {e.group_id for e in kept if isinstance(e, GroupDiscarded)}
        for before in kept:
            if isinstance(before, RunStarted):
                self._session(before.time)  # the run's start, as `show` counts from
            elif isinstance(before, GroupSampled):
                if before.group_id in groups:
                    self.zero_variance.sampled(before)
            elif isinstance(before, GroupDiscarded):
                self.zero_variance.discarded(before)
            elif isinstance(before, StepTrained):
                self._last_step_at = before.time
                self._count_step(before)
                fold(self.health, before)
            elif isinstance(before, CommandReceived) and before.command == "rolled_back":
                self._roll_back(int(before.args.get("to_step", 0)))
                fold(self.health, before)
            else:
                fold(self.health, before)

    def _session(self, time: float) -> None:
        """A process of the run started at `time`: the run's first (its `RunStarted`), or
        a resume (its first log line: the store keeps one `RunStarted` a run). Elapsed time
        is each earlier process's, from its start to its last step, and this one's so far:
        the time the run was down between them is not counted."""
        if self.started_at is None:
            self.started_at = time
        elif self._last_step_at is not None and self._session_at is not None:
            self._earlier_seconds += max(0.0, self._last_step_at - self._session_at)
        self._session_at = time
        self._last_step_at = None

    def elapsed(self, time: float) -> float:
        """Seconds the run has worked by `time` (`_session`)."""
        if self._session_at is None:
            return 0.0
        return self._earlier_seconds + time - self._session_at

    def _count_step(self, event: StepTrained) -> int:
        """Add the step's discards and failed rollouts to the run's; returns the failed."""
        m = event.metrics
        stale = int(m.get(keys.discarded("stale"), 0))
        error = int(m.get(keys.discarded("error"), 0))
        failed = int(m.get(keys.ROLLOUTS_FAILED, 0))
        self._step_counts[event.step] = (stale, error, failed)
        self.discarded["stale"] += stale
        self.discarded["error"] += error
        self.rollouts_failed += failed
        self.zero_variance.trained(event.group_ids, event.step)
        return failed

    def _roll_back(self, to_step: int) -> None:
        """A rollback to `to_step`: the steps it undid no longer count."""
        self._step_counts = {s: c for s, c in self._step_counts.items() if s <= to_step}
        self.discarded["stale"] = sum(c[0] for c in self._step_counts.values())
        self.discarded["error"] = sum(c[1] for c in self._step_counts.values())
        self.rollouts_failed = sum(c[2] for c in self._step_counts.values())
        self.zero_variance.rolled_back(to_step)

    def _startup(self, event: StartupProgressed) -> None:
        """One line when the start-up enters a phase (not one per warm-up step)."""
        if event.phase == self._phase:
            return
        self._phase = event.phase
        if event.phase == "loading_model":
            self._print(f"starting: loading the model {event.detail}".rstrip())
        elif event.phase == "warmup":
            self._print(
                f"starting: format warm-up, {event.total} supervised steps"
                + (" (reused from an identical earlier run)" if event.detail == "reused" else "")
            )
        else:
            self._print("starting: first rollouts")

    def _print(self, line: str) -> None:
        if self._closed:
            return
        try:
            print(line, file=self.out, flush=True)
        except BrokenPipeError:  # `run --no-ui | head`: the reader has what it wanted
            self._closed = True  # the run goes on, recorded in the store as ever
            if self.out is sys.stdout:
                from tinker_tui.app.cli import quiet_stdout

                quiet_stdout()

    def handle(self, event: Event) -> None:
        if isinstance(event, SessionStarted):  # a process of the run begins (`_session`)
            if self.started_at is not None:  # a later one, read back by `show`
                self._session(event.time)
            elif self._earlier:  # this process, resuming: its start is counted from here
                self._resumed_at = event.time
        if isinstance(event, RunStarted):
            self.max_steps = event.max_steps
            self._run_id = event.run_id
            self.health.configure(event.config)
            self._rollout_timeout = event.config.get("rollout_timeout")
            self._priced_as = priced_as(event.config)
            earlier, self._earlier = self._earlier, []
            self._take_in(earlier, event.start_step)
            if self._session_at is None or self._resumed_at is not None:
                self._session(event.time if self._resumed_at is None else self._resumed_at)
            self._resumed_at = None
            self._print(
                f"run {event.run_id}: task {event.name}, {event.backend} backend, "
                f"base model {event.base_model}, "
                + (
                    f"{event.max_steps} " + ("step" if event.max_steps == 1 else "steps")
                    if event.max_steps > 0
                    else "length not said"
                )
            )
        elif isinstance(event, StartupProgressed):
            self._startup(event)
        elif isinstance(event, GroupSampled):
            self.zero_variance.sampled(event)
            self.health.sampled(
                [t.reward for t in event.trajectories], event.reward_mean, failed=event.failed
            )
        elif isinstance(event, GroupDiscarded):
            self.zero_variance.discarded(event)
        elif isinstance(event, StepTrained):
            m = event.metrics
            failed = self._count_step(event)
            d, z = self.discarded, self.zero_variance
            self._last_step_at = event.time
            elapsed = self.elapsed(event.time)
            failures = ""
            if self.rollouts_failed:  # a reward that raises on most answers must show
                ended = int(m.get(keys.ROLLOUTS_ENDED, 0))
                failures = f"failed rollouts {failed}/{ended} ({self.rollouts_failed} in all)  "
            fold(self.health, event)
            collapse = self.health.collapse
            health = (
                ""
                if collapse is None
                else f"  collapsed (best {collapse.best:.3f} at step {collapse.best_step})"
            )
            usd = m.get(keys.COST_USD_TOTAL)  # where prices are set
            spent = f"spent ${usd:.4f}{self._priced_as}  " if isinstance(usd, int | float) else ""
            # A reward that never varies must show at once (before the health mark, which
            # ends the line).
            nothing = (
                "  trained nothing (every group's rewards equal)"
                if m.get(keys.TRAIN_SKIPPED)
                else ""
            )
            self._print(
                f"step {event.step:>4}/{steps_of(self.max_steps)}  "
                f"reward {m.get(keys.REWARD_MEAN, float('nan')):.3f}  "
                f"rollouts/s {m.get(keys.ROLLOUTS_PER_S, 0.0):6.1f}  "
                f"discarded stale/no-signal/error {d['stale']}/{z.no_signal}/{d['error']}  "
                f"converged {z.converged}  "
                f"{failures}"
                f"staleness {'≤' if m.get(keys.STALENESS_BOUND) else ''}"
                f"{m.get(keys.STALENESS_MEAN, 0.0):.2f}  "
                f"step {m.get(keys.STEP_TIME, 0.0):.2f}s  "
                f"{spent}"
                f"elapsed {elapsed:.1f}s{nothing}{health}"
            )
        elif isinstance(event, CommandReceived | CheckpointDeleted):
            if isinstance(event, CommandReceived) and event.command == "rolled_back":
                self._roll_back(int(event.args.get("to_step", 0)))
            fold(self.health, event)  # a rollback, a checkpoint the retention deleted
        elif isinstance(event, EvalCompleted):
            self._print(eval_line(event, self.max_steps))
        elif isinstance(event, CheckpointSaved):
            fold(self.health, event)
            kept = ", kept as asked for" if event.requested else ""
            self._print(
                f"checkpoint {event.name} ({event.kind}) at step {event.step}{kept}: {event.path}"
            )
        elif isinstance(event, RunStateChanged) and event.state in ("paused", "stopping"):
            self._end_repeats()
            self._print(f"{event.state}: {event.reason}")
            if event.state == "paused":
                self._print(f"  {self.paused_hint()}")
        elif isinstance(event, TrackerReported):  # where W&B / TensorBoard records go
            if event.level == "info" and self._finished:
                return  # a tracker's last word: the run's summary ends with it, once
            self._print(
                event.message if event.level == "info" else f"{event.level}: {event.message}"
            )
        elif isinstance(event, ThroughputMeasured):
            for stuck in event.stalled:  # once per stuck group: a log shows why nothing moves
                if stuck.group_id not in self._stuck_said:
                    self._stuck_said.add(stuck.group_id)
                    self._end_repeats()
                    self._print(f"warning: {stuck_text(stuck)}{self._timeout_hint()}")
        elif isinstance(event, RunFinished):
            self._end_repeats()
            self._finished = True
        elif isinstance(event, RunResumed):
            self._print(event.message)  # what the resume went back to and does again
        elif isinstance(event, LogEmitted) and event.level in ("warning", "error"):
            lines = event.message.splitlines()
            where = innermost_frame(lines)
            shape = (event.level, _VALUES.sub("#", lines[0]), where)
            if shape == self._last_shape:  # the same message with other values: counted
                self._repeats += 1
                return
            self._end_repeats()
            self._last_shape, self._last_line = shape, lines[0]
            self._print(f"{event.level}: {lines[0]}")
            if where:
                show = f"tinker-tui show {self._run_id} --log{db_flag(self.db_path)}"
                self._print(f"  {where}  (whole: {show})")

    def _timeout_hint(self) -> str:
        timeout = self._rollout_timeout
        if isinstance(timeout, int | float) and timeout > 0:
            return f"; cancelled at rollout_timeout ({timeout:g} s)"
        return "; rollout_timeout is 0: nothing cancels it"

    def paused_hint(self) -> str:
        """How to go on from a pause: nothing resumes a headless run by itself (a pause
        asked for from a page that was then closed still waits for someone)."""
        return (
            f"it waits, paused, until resumed: tinker-tui attach {self._run_id}"
            f"{db_flag(self.db_path)}, then p (or stop it: kill -TERM {os.getpid()})"
        )

    def paused_reminder(self, seconds: float) -> None:
        """Said again while a pause lasts, so a log shows why nothing moves."""
        self._print(f"still paused after {seconds / 60:.0f} min; {self.paused_hint()}")

    def _end_repeats(self) -> None:
        """Say how often the last warning or error came again, if it did."""
        if self._repeats:  # lines may have come between: it says which message it counts
            self._print(f"  (and {self._repeats} more like {_shorten(self._last_line)!r})")
        self._repeats, self._last_shape = 0, None


def innermost_frame(lines: list[str]) -> str:
    """Where a logged traceback was raised in the user's code, in one line (`at FILE:LINE in
    FUNC: CODE`), or "" when the message holds none: the deepest frame that is not this
    package's, the standard library's or an installed package's (a chained traceback's cause
    included). A headless log keeps one line per message, and that place is what the user
    needs first; the whole traceback is in the stored log."""
    for i in range(len(lines) - 1, -1, -1):
        match = _FRAME.match(lines[i])
        if match and _is_user_file(match["file"]):
            code = lines[i + 1].strip() if i + 1 < len(lines) else ""
            code = "" if _FRAME.match(code) or code.startswith(("^", "~")) else code
            where = f"at {match['file']}:{match['line']} in {match['func']}"
            return f"{where}: {code}" if code else where
    return ""


_FRAME = re.compile(r'\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>.+)$')
#: What differs between repeats of one message: numbers and quoted values
#: ("invalid literal for int() with base 10: 'man'", then 'travel').
_VALUES = re.compile(r"'[^']*'|\"[^\"]*\"|\d+")


def _shorten(line: str, most: int = 72) -> str:
    return line if len(line) <= most else line[: most - 1] + "…"


def _is_user_file(filename: str) -> bool:
    return not filename.startswith(_NOT_USER_CODE) and not filename.startswith("<")


#: Where code that is not the user's lives: this package's folders, the standard library and
#: installed packages.
_NOT_USER_CODE = tuple(
    {
        str(form) + os.sep
        for folder in [
            Path(module.__file__).parent
            for module in (sys.modules["tinker_tui.app"], sys.modules["tinker_tui.engine"])
            if module.__file__
        ]
        + [
            Path(path)
            for name, path in sysconfig.get_paths().items()
            if name in ("stdlib", "platstdlib", "purelib", "platlib")
        ]
        for form in (folder, folder.resolve())
    }
)


def steps_of(max_steps: int) -> str:
    """A run's length in a step line: "?" where it is not known (a folder of another
    program that does not say it)."""
    return str(max_steps) if max_steps > 0 else "?"


def eval_line(event: EvalCompleted, max_steps: int) -> str:
    """`eval   40/40  reward 0.875  scenarios 16`, with errors and, for a mixed task, each
    part's mean reward."""
    m = event.metrics
    line = (
        f"eval {event.step:>4}/{steps_of(max_steps)}  "
        f"reward {m.get(keys.EVAL_REWARD_MEAN, float('nan')):.3f}  "
        f"scenarios {int(m.get(keys.EVAL_NUM_SCENARIOS, 0))}"
    )
    errors = int(m.get(keys.EVAL_ERRORS, 0))
    if errors:
        line += f"  errors {errors}"
    parts = keys.eval_parts(m)
    if parts:
        line += "  (" + ", ".join(f"{part} {value:.3f}" for part, value in parts.items()) + ")"
    return line


METRICS_FILE_SUFFIX = ".metrics.jsonl"


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None  # strict JSON has no NaN or infinity
    return value


class MetricsFile:
    """Appends one JSON object per `StepTrained` and `EvalCompleted` to
    `<folder>/<run id>.metrics.jsonl` (the file is named when the run starts).

    Step lines: {"event": "step", "run_id", "time", "step", "policy_version", <metrics>};
    eval lines the same with "event": "eval". Metric keys are the engine's
    (`reward/mean`, `time/step`, `eval/reward_mean`, ...); non-finite values are null.
    A resumed run first drops the records after the step it resumes from.
    """

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self.path: Path | None = None
        self.run_id = ""
        self._file: TextIO | None = None
        self.lines = 0

    def handle(self, event: Event) -> None:
        if isinstance(event, RunStarted):
            self.close()
            self.run_id = event.run_id
            self.folder.mkdir(parents=True, exist_ok=True)
            self.path = self.folder / f"{event.run_id}{METRICS_FILE_SUFFIX}"
            if self.path.exists():
                _keep_until(self.path, event.start_step)
            self._file = open(self.path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115
            return
        if isinstance(event, StepTrained | EvalCompleted) and self._file is not None:
            record: dict[str, Any] = {
                "event": "step" if isinstance(event, StepTrained) else "eval",
                "run_id": self.run_id,
                "time": event.time,
                "step": event.step,
                "policy_version": event.policy_version,
            }
            record.update({str(k): _finite(v) for k, v in event.metrics.items()})
            try:
                self._file.write(json.dumps(record, allow_nan=False) + "\n")
            except OSError as exc:  # a full disk: say so once; the store is the record
                self._give_up(exc)
                return
            self.lines += 1
        elif isinstance(event, CommandReceived) and event.command == "rolled_back":
            # A rollback undoes the later steps, as a resume does: they are trained again.
            if self.path is not None and self._file is not None:
                self.close()
                _keep_until(self.path, int(event.args.get("to_step", 0)))
                self._file = open(self.path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115
        elif isinstance(event, RunFinished):
            self.close()

    def _give_up(self, exc: OSError) -> None:
        print(
            f"warning: stopped writing {self.path}: {exc.strerror or exc}",
            file=sys.stderr,
            flush=True,
        )
        self.close()

    def close(self) -> None:
        if self._file is not None:
            file, self._file = self._file, None
            try:
                file.close()
            except OSError:  # its last line could not be written (a full disk)
                pass


def _keep_until(path: Path, step: int) -> None:
    """A resumed run continues from `step`: drop the records of later steps (it trains them
    again) and a line cut short by a crash, so no step appears twice, as in the store."""
    kept = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and int(record.get("step") or 0) <= step:
                kept.append(line if line.endswith("\n") else line + "\n")
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(kept), encoding="utf-8")
    os.replace(tmp, path)


async def start_control_endpoint(
    session: Session, out: TextIO | None = None
) -> ControlServer | None:
    """Serve the session's control on 127.0.0.1 for `tinker-tui attach`, with its address
    and token in a 0600 file beside the store; None for a session without a store.
    Call `stop()` on the result when the run is over (it removes the file)."""
    db_path, run_id = session.db_path, session.run_id
    if db_path is None or not run_id:
        return None
    from tinker_tui.engine.control.client import control_file_path
    from tinker_tui.engine.control.endpoint import ControlServer

    server = ControlServer(session.control, run_id=run_id)
    await server.start(control_file_path(db_path, run_id), extra={"store": str(db_path)})
    print(f"control: tinker-tui attach {run_id} --db {db_path}", file=out or sys.stdout, flush=True)
    return server
