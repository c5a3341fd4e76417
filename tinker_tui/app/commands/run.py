"""`tinker-tui run TASK`: train a task and watch it live (or headless).

The command checks everything that needs no model first — arguments, the task, the
settings, the backend's credentials, the store — and only then imports the engine (torch,
transformers, the backend), so a mistake costs well under a second. Headless (`--no-ui`, no
terminal, or `CI` set) the run happens in this process. With the dashboard, the command
starts that headless run as a process of its own (`app.engine_process`: its own session,
its output in `RUN_ID.engine.log` beside the store) and watches it as `tinker-tui attach`
does (`app.watch`): the screen can never freeze the run, nor the run the screen, and the
run outlives the dashboard.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tinker_tui.app.argparse_private import HelpFormatter
from tinker_tui.app.commands.common import (
    BACKENDS,
    DEFAULT_DB,
    TENSORBOARD_BESIDE_STORE,
    add_db_option,
    add_label_options,
    config_overrides,
    one_of,
    run_label,
    store_path,
    wants_ui,
)
from tinker_tui.app.exit_codes import EXIT_HEALTH_STOP, run_exit_code
from tinker_tui.app.interrupts import EXIT_CODES as SIGNAL_EXIT_CODES
from tinker_tui.app.interrupts import (
    StopSignals,
    quiet_after_the_stop,
    release_signals,
    take_signals,
)
from tinker_tui.engine.errors import UsageError
from tinker_tui.engine.fork import InitFrom

if TYPE_CHECKING:
    from tinker_tui.app.notify import Notifier
    from tinker_tui.engine.clock import Clock
    from tinker_tui.engine.config import RunConfig
    from tinker_tui.engine.control.interface import Session
    from tinker_tui.engine.rollouts.task import Task
    from tinker_tui.engine.run import Run

#: Seconds a graceful stop may take after SIGINT/SIGTERM before the run is cancelled.
STOP_TIMEOUT = 60.0
#: Seconds between the headless run's reminders that it is still paused.
PAUSE_REMINDER = 300.0

EXAMPLES = """\
examples:
  tinker-tui run example
      the built-in example, with the dashboard
  tinker-tui run my_task.py --steps 200 --learning-rate 1e-3 --no-ui
      a task file of yours, headless, two settings
"""


def add_parser(commands: Any) -> None:
    run = commands.add_parser(
        "run",
        help="train a task and watch it live",
        description="Train a task with RL and watch it live.\n\nEvery setting has a default "
        "(shown); the task's settings, its backend's,\n--config and then these "
        "flags override it, in that order.",
        usage="tinker-tui run TASK [options]",
        epilog=EXAMPLES,
        formatter_class=HelpFormatter,
    )
    group = run.add_argument_group("run")
    group.add_argument(
        "task",
        metavar="TASK",
        help="a built-in task (example, binary_prefix_tool, next_number, "
        "cookbook_yes_no_maybe), a file path/to/task.py[:NAME], a module "
        "package.module[:NAME] or an installed verifiers environment vf:ENV_ID",
    )
    group.add_argument(
        "--steps",
        type=int,
        metavar="N",
        dest="max_steps",
        help="optimizer steps in the whole run (default the task's, else 40)",
    )
    group.add_argument(
        "--config",
        type=Path,
        metavar="TOML",
        help="settings from a TOML file (keys named like the flags, with _)",
    )
    group.add_argument(
        "--resume",
        nargs="?",
        const="latest",
        metavar="RUN",
        help="continue a stored run (id or prefix; default: the newest of TASK)",
    )
    group.add_argument(
        "--init-from",
        metavar="RUN@STEP",
        help="start from another run's weights (RUN@STEP, RUN for its newest checkpoint, "
        "or a tinker:// path), recorded as this run's parent",
    )
    group.add_argument(
        "--with-optimizer",
        action="store_true",
        help="with --init-from: also take its optimizer state (needs a full checkpoint)",
    )
    group.add_argument(
        "--no-ui",
        action="store_true",
        help="no dashboard: one line per step (also when not on a terminal)",
    )
    group.add_argument(
        "--json",
        action="store_true",
        help="no dashboard: a JSON object per line on stdout (start, steps, "
        "evaluations, checkpoints, end; tinker-tui.run-line/1), the "
        "text lines on stderr",
    )
    add_label_options(group)
    alerts = run.add_argument_group("alerts")
    alerts.add_argument(
        "--notify",
        action="store_true",
        help="on a pause, collapse, failure, finish or stop of the run's own: "
        "the terminal's bell and a desktop notification through its "
        "escapes (OSC 9 / OSC 777)",
    )
    alerts.add_argument(
        "--notify-command",
        metavar="CMD",
        help="a shell command run on each of those alerts (with "
        "TINKER_TUI_ALERT, _TITLE, _MESSAGE and _RUN set)",
    )
    pipeline = run.add_argument_group("pipeline")
    backend = run.add_argument_group("backend")
    backend.add_argument(
        "--backend",
        choices=BACKENDS,
        type=one_of(BACKENDS),
        help="local (embedded, CPU) or tinker (needs TINKER_API_KEY); default "
        "tinker when a key is configured, else local",
    )
    store = run.add_argument_group("store")
    add_db_option(store)
    trackers = run.add_argument_group("trackers")
    trackers.add_argument(
        "--wandb",
        metavar="PROJECT",
        dest="wandb_project",
        help="log to this W&B project (offline without an API key; needs "
        'pip install "tinker-tui[wandb]")',
    )
    trackers.add_argument(
        "--tensorboard",
        nargs="?",
        const=TENSORBOARD_BESIDE_STORE,
        metavar="DIR",
        dest="tensorboard_dir",
        help="TensorBoard event files in DIR/RUN_ID (default DIR: "
        "tensorboard/ beside the store; needs pip install "
        '"tinker-tui[tensorboard]")',
    )
    # The run id a dashboard chose for the engine it starts (with --resume: the run resumed).
    group.add_argument("--run-id", help=argparse.SUPPRESS)
    # Set by a dashboard on the engine it starts: someone watches, so a health pause waits
    # for them (on_health_pause = auto) instead of stopping as an unwatched run does.
    group.add_argument("--watched", action="store_true", help=argparse.SUPPRESS)
    add_config_flags({"run": group, "pipeline": pipeline, "backend": backend, "trackers": trackers})


#: The flags `add_config_flags` made: the reference pages list them once, as settings (another
#: command's flag of the same name, `eval --eval-temperature`, is that command's own).
SETTING_FLAGS: weakref.WeakSet[argparse.Action] = weakref.WeakSet()


def add_config_flags(groups: dict[str, Any]) -> None:
    """One flag per run setting (`engine.config.SETTINGS`), under its group, with its one-line
    meaning, so every setting can be overridden the same way."""
    from tinker_tui.engine.config import SETTINGS

    for name, spec in SETTINGS.items():
        if name == "max_steps":  # --steps above; --max-steps is the same flag
            groups["run"].add_argument(
                "--max-steps", type=int, dest="max_steps", metavar="N", help=argparse.SUPPRESS
            )
            continue
        group = groups.get(spec.group, groups["run"])
        flag = "--" + name.replace("_", "-")
        choices = f": {spec.allowed()}" if spec.choices else ""
        help_text = f"{spec.meaning}{choices} (default {_default_text(spec.default)})"
        if name in _SHORTER_FLAG:  # the shorter flag above is the one --help lists
            help_text = argparse.SUPPRESS
        if spec.value_type is bool:
            action = group.add_argument(
                flag, action=argparse.BooleanOptionalAction, default=None, help=help_text
            )
        else:
            action = group.add_argument(
                flag,
                type=spec.value_type,
                default=None,
                dest=name,
                metavar=_METAVARS.get(spec.value_type, "TEXT"),
                help=help_text,
            )
        SETTING_FLAGS.add(action)


_METAVARS: dict[type, str] = {int: "N", float: "X", str: "TEXT"}

#: Settings that also have a shorter flag (`--wandb PROJECT` for `--wandb-project`).
_SHORTER_FLAG = ("wandb_project", "tensorboard_dir")


def _default_text(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, str):
        return repr(value) if value else "none"
    return f"{value:g}" if isinstance(value, float) else str(value)


def load_task(name: str) -> Task:
    """The checked task: a built-in name, a task file or a module (see app.task_loader)."""
    from tinker_tui.app.task_loader import load_task as load

    return load(name)


# ---------------------------------------------------------------------- checks first


@dataclass(frozen=True)
class RunPlan:
    """A run that passed every check that needs no model: what `build_session` builds."""

    task: Task
    config: RunConfig
    backend: str
    db_path: Path
    run_id: str | None = None  # set when resuming, or pinned by `--run-id`
    resume: bool = False
    task_spec: str = ""  # how later commands name the task (`task_loader.spec_to_store`)
    #: What a resume took from the checkpoint, and which flags won over it (logged).
    resume_notes: tuple[str, ...] = ()
    run_name: str = ""  # `--name`, `--note` ("" keeps a resumed run's)
    note: str = ""
    #: `--init-from`: the weights a fork starts from, and how lineage names its parent.
    init_from: InitFrom | None = None


def plan_fork(args: argparse.Namespace, db: Path, backend: str, flags: dict[str, Any]) -> InitFrom:
    """The checkpoint `--init-from` names, checked against this run's backend; the parent's
    base model and LoRA rank become this run's unless the flags set them (`flags` changes)."""
    from tinker_tui.app.checkpoint_ref import resolve

    with_optimizer = bool(args.with_optimizer)
    ref = asyncio.run(resolve(db, args.init_from, need_state=with_optimizer))
    if with_optimizer and "/sampler_weights/" in ref.path:
        raise UsageError(
            f"--with-optimizer: {ref.path} is sampler weights (no optimizer state); "
            "name a full checkpoint (tinker://.../weights/...)"
        )
    if ref.backend and ref.backend != backend:
        raise UsageError(
            f"--init-from {args.init_from}: saved by the {ref.backend} backend; "
            f"this run uses {backend} (pass --backend {ref.backend})"
        )
    if ref.base_model:
        flags.setdefault("base_model", ref.base_model)
        if flags["base_model"] != ref.base_model:
            raise UsageError(
                f"--init-from {args.init_from}: weights of {ref.base_model!r}, "
                f"not of --base-model {flags['base_model']!r}"
            )
    if ref.lora_rank is not None:
        flags.setdefault("lora_rank", ref.lora_rank)
    return InitFrom(path=ref.path, parent=ref.label, with_optimizer=with_optimizer)


def fork_of(db: Path, run_id: str) -> InitFrom | None:
    """A resumed fork's parent checkpoint, should it have no checkpoint of its own yet (it
    then starts over from the parent's weights, and its optimizer state when the fork took
    it). None for a run that is no fork, or whose parent's checkpoint is gone."""
    from tinker_tui.app.checkpoint_ref import resolve
    from tinker_tui.engine.store import find_run

    run = asyncio.run(find_run(db, run_id))
    if not run.parent:
        return None
    try:
        ref = asyncio.run(resolve(db, run.parent, need_state=run.parent_optimizer))
    except UsageError:
        return None
    return InitFrom(path=ref.path, parent=run.parent, with_optimizer=run.parent_optimizer)


def check_store(path: Path, *, explicit: bool) -> None:
    """UsageError/StoreError now, before any model loads, if the run store cannot be used:
    a folder, a folder that does not exist (unless it is the default one, made when the run
    opens the store), a file that is not a run store, damaged, newer than this code, locked
    or read-only (`engine.store.schema.check_file`, which creates and writes nothing)."""
    path = path.expanduser()
    if path.is_dir():
        raise UsageError(
            f"--db {path} is a folder; name a database file in it (e.g. {path / DEFAULT_DB.name})"
        )
    if explicit and not path.parent.is_dir():
        raise UsageError(
            f"--db {path}: the folder {path.parent} does not exist; create it "
            f"(mkdir -p {path.parent}) or choose another --db"
        )
    from tinker_tui.engine.store.schema import check_file

    check_file(path)  # the store's own checks, with the standard library: creates nothing


def plan_run(args: argparse.Namespace) -> RunPlan:
    """Check the task, the settings, the backend's credentials and the store (UsageError
    or StoreError at once); nothing heavy is imported here."""
    from tinker_tui.app.task_loader import (
        layered_config,
        load_config_file,
        spec_to_store,
        task_source,
    )
    from tinker_tui.engine.backend.choice import check_base_model, choose_backend
    from tinker_tui.engine.metrics.list_prices import with_list_prices

    run_name, note = run_label(args)
    task = load_task(args.task)
    spec = spec_to_store(args.task)
    path = store_path(args)
    if getattr(args, "init_from", None) and getattr(args, "resume", None) is not None:
        raise UsageError("--init-from starts a new run; it cannot be used with --resume")
    if getattr(args, "resume", None) is not None:
        from tinker_tui.app.resume import resume_plan

        check_store(path, explicit=args.db is not None)  # before reading the run from it
        config, backend, run_id, notes = resume_plan(args, task, path)
        return RunPlan(
            init_from=fork_of(path, run_id),
            task=task,
            config=config,
            backend=backend,
            db_path=path,
            run_id=run_id,
            resume=True,
            task_spec=spec,
            run_name=run_name,
            note=note,
            resume_notes=notes,
        )
    backend = choose_backend(args.backend)
    config_path = getattr(args, "config", None)
    flags = config_overrides(args)
    init_from = None
    if getattr(args, "init_from", None):
        check_store(path, explicit=args.db is not None)
        init_from = plan_fork(args, path, backend, flags)
    elif getattr(args, "with_optimizer", False):
        raise UsageError("--with-optimizer needs --init-from")
    config = layered_config(
        task,
        backend,
        load_config_file(config_path) if config_path else None,
        flags,
        config_path=config_path,
        where=task_source(task),
    )
    check_base_model(backend, config.base_model)
    config = with_list_prices(config, backend)  # on Tinker, with no price given
    check_store(path, explicit=args.db is not None)
    return RunPlan(
        init_from=init_from,
        task=task,
        config=config,
        backend=backend,
        db_path=path,
        run_id=getattr(args, "run_id", None),
        task_spec=spec,
        run_name=run_name,
        note=note,
    )


def build_session(plan: RunPlan, clock: Clock | None = None, *, headless: bool = False) -> Run:
    """The engine's `Run` for a checked plan (imports torch and the backend). `headless`:
    no dashboard watches it, so a health pause stops it (on_health_pause = auto). On
    Tinker, first the service is asked whether it serves the base model: a retired or
    mistyped one stops here, in seconds, before anything of the run is stored."""
    if plan.backend == "tinker":
        from tinker_tui.engine.backend.served_models import check_served

        check_served(plan.config.base_model)
    from tinker_tui.engine.run import Run

    run = Run(
        task=plan.task,
        config=plan.config,
        backend=plan.backend,
        db_path=plan.db_path,
        run_id=plan.run_id,
        resume=plan.resume,
        clock=clock,
        headless=headless,
        task_spec=plan.task_spec,
        run_name=plan.run_name,
        note=plan.note,
        notes=plan.resume_notes,
        init_from=plan.init_from,
    )
    run.preload()  # before the run's loop (headless) or in the dashboard's build thread
    return run


def make_notifier(args: argparse.Namespace, *, write: Any = None) -> Notifier | None:
    """The run's alerts (`--notify`, `--notify-command`), None when neither was asked for.
    `write`: the headless run's terminal; a dashboard gives its own. Alerts start from now:
    a resumed run's earlier end is not alerted again."""
    import time

    from tinker_tui.app.notify import Notifier

    if not getattr(args, "notify", False) and not getattr(args, "notify_command", None):
        return None
    return Notifier(
        terminal=bool(args.notify),
        write=write if args.notify else None,
        command=args.notify_command or None,
        since=time.time(),
        tmux=bool(os.environ.get("TMUX")),
        warn=lambda line: print(f"tinker-tui: {line}", file=sys.stderr),
    )


def terminal_writer(stream: Any = None) -> Any:
    """Writes to the headless run's terminal, if its output is one (else None); with
    `--json` that is stderr, so the escapes never land among the JSON lines."""
    stream = stream or sys.stdout
    if not stream.isatty():
        return None

    def write(text: str) -> None:
        stream.write(text)
        stream.flush()

    return write


def make_session(args: argparse.Namespace) -> Run:
    return build_session(plan_run(args))


async def run_headless(
    session: Session,
    *,
    stop_timeout: float = STOP_TIMEOUT,
    task: str = "",
    pause_reminder: float = PAUSE_REMINDER,
    json_lines: bool = False,
    notifier: Notifier | None = None,
) -> int:
    """Run without a dashboard; its last lines are the run's summary (`app.run_summary`;
    `task`: how the command line named the task, for the command that continues it).
    `json_lines`: stdout gets a JSON object per line (`app.json_output.RunLines`) and the
    text goes to stderr.

    The first SIGINT/SIGTERM stops gracefully (current step, checkpoint, flush); if that
    takes longer than `stop_timeout` seconds the run is cancelled, which still closes the
    store. Signals within `SAME_STOP_WINDOW` of the first are the same request (`timeout`
    signals the process, then its group). A later one, or one while the run is already
    stopping (a stop command from a dashboard), exits at once: SQLite's committed
    transactions keep the store consistent; at most the last fraction of a second of events
    is lost. It still marks the run interrupted in the store, removes the control file and
    the lock file and prints the summary, of a run interrupted.
    """
    from dataclasses import replace

    from tinker_tui.app.headless import HeadlessReporter, MetricsFile, start_control_endpoint
    from tinker_tui.app.run_summary import SummaryCollector, summary_lines
    from tinker_tui.engine.training.resume import drop_lock_file

    human = sys.stderr if json_lines else sys.stdout
    if json_lines:
        from tinker_tui.app.json_output import RunLines

        session.events.subscribe(RunLines(sys.stdout).handle)
    reporter = HeadlessReporter(human, db_path=session.db_path)
    session.events.subscribe(reporter.handle)
    summary = SummaryCollector(task=task, db_path=session.db_path)
    if session.db_path is not None:  # a resumed run: its steps before this process
        reporter.remember(await summary.read_earlier(session.db_path, session.run_id))
    session.events.subscribe(summary.handle)
    if notifier is not None:  # after the summary: an alert's command sees the run's end
        session.events.subscribe(notifier.handle)
    metrics = MetricsFile(session.db_path.parent) if session.db_path is not None else None
    if metrics is not None:
        session.events.subscribe(metrics.handle)
    endpoint = await start_control_endpoint(session, human)  # for `tinker-tui attach`
    loop = asyncio.get_running_loop()
    received: list[int] = []
    stops = StopSignals()
    run_task = asyncio.ensure_future(session.run())

    def exit_at_once(signum: int) -> None:
        name = signal.Signals(signum).name
        reason = f"{name} while stopping: stopped at once"
        if endpoint is not None:
            endpoint.remove_file()
        if session.db_path is not None:
            mark_interrupted(session.db_path, session.run_id, reason, summary.summary().step)
            drop_lock_file(session.db_path, session.run_id)
        if summary.summary().run_id:
            ended = replace(summary.summary(), status="interrupted", reason=reason)
            print("\n".join(summary_lines(ended)), file=human, flush=True)
        os._exit(SIGNAL_EXIT_CODES[signum])

    def on_signal(signum: int) -> None:
        code = SIGNAL_EXIT_CODES[signum]
        action = stops.take(stopping=session.control.stopping and not received)
        if action == "same":
            return  # the same stop, signalled twice (`timeout`: the process, then its group)
        if action == "force":
            exit_at_once(signum)
        received.append(code)
        session.control.stop(f"received {signal.Signals(signum).name}")
        waiting = getattr(session.control, "waiting_for", None)
        print(
            f"  {waiting() + '; ' if callable(waiting) else ''}Ctrl+C again stops at once "
            "(the step in flight is lost)",
            file=human,
            flush=True,
        )
        loop.call_later(stop_timeout, run_task.cancel)

    async def remind_while_paused() -> None:
        """A pause lasts until someone resumes it: say so again every `pause_reminder`
        seconds, so the log of a run nobody watches shows why nothing moves."""
        paused_since: float | None = None
        said = 0
        while True:
            await asyncio.sleep(min(5.0, pause_reminder / 2))
            if not session.control.paused or session.control.stopping:
                paused_since, said = None, 0
                continue
            now = loop.time()
            paused_since = now if paused_since is None else paused_since
            if now - paused_since >= pause_reminder * (said + 1):
                said += 1
                reporter.paused_reminder(now - paused_since)

    reminder = asyncio.ensure_future(remind_while_paused())
    taken = take_signals(loop, on_signal)
    try:
        await run_task
    except asyncio.CancelledError:
        if not received:
            raise
        print(f"tinker-tui: graceful stop took over {stop_timeout:g} s; cancelled", file=sys.stderr)
    finally:
        reminder.cancel()
        release_signals(loop, taken)
        quiet_after_the_stop(taken)
        if endpoint is not None:
            await endpoint.stop()
        if metrics is not None:
            metrics.close()
        if summary.summary().run_id:
            print("\n".join(summary_lines(summary.summary())), file=human, flush=True)
    if received:
        return received[0]
    ended = summary.summary()
    if not ended.ended and session.control.health_stop_reason:  # no end recorded
        return EXIT_HEALTH_STOP
    return run_exit_code(ended.status, ended.cause)


def mark_interrupted(db_path: Path, run_id: str, reason: str, step: int) -> None:
    """Record in the store that the run ended at once (the process is about to `_exit`,
    its writer's last batch unwritten): status interrupted, not `running` for ever. A
    plain sqlite3 write with a short wait; the run's rows are as the last commit left them."""
    import sqlite3
    import time

    try:
        with contextlib.closing(sqlite3.connect(db_path, timeout=2.0)) as db, db:
            db.execute(
                "UPDATE runs SET status = 'interrupted', cause = 'interrupted', reason = ?, "
                "ended_at = ?, "
                "final_step = max(?, coalesce((SELECT max(step) FROM steps WHERE run_id = ?), "
                "0)) WHERE run_id = ? AND status = 'running'",
                (reason, time.time(), step, run_id, run_id),
            )
    except sqlite3.Error:  # locked or gone: front ends say "interrupted" of it anyway
        pass


def run_with_dashboard(plan: RunPlan, args: argparse.Namespace, held: list[int]) -> int:
    """Watch a checked plan's run in the dashboard; its engine (the headless run, in its own
    process) starts once the dashboard has drawn its first frame, so that frame does not
    wait behind the engine's imports. `held`: the signals `hold_signals` keeps meanwhile; one
    before the engine's start cancels it (nothing of the run is stored)."""
    from tinker_tui.app.engine_process import EngineProcess
    from tinker_tui.app.run_summary import SummaryCollector
    from tinker_tui.app.store_session import StoreSession
    from tinker_tui.app.watch import watch
    from tinker_tui.engine.clock import SystemClock
    from tinker_tui.engine.run_id import new_run_id

    run_id = plan.run_id or new_run_id(plan.task.name, SystemClock())
    engine = EngineProcess(args.argv, run_id=run_id, db_path=plan.db_path)  # not started yet
    session = StoreSession(plan.db_path, run_id=run_id, follow=True, engine=engine)
    return watch(
        session,
        SummaryCollector(task=args.task, db_path=plan.db_path),
        held,
        notifier=make_notifier(args),
    )


def main(args: argparse.Namespace) -> int:
    """Check the plan, then run it headless or with the dashboard. A signal until then ends
    the command before anything has started (`app.interrupts`); the dashboard holds them
    from before its imports on."""
    from tinker_tui.app.interrupts import hold_signals, interrupted, interrupting

    held: list[int] | None = None
    session = None
    with interrupting() as noted:
        try:
            plan = plan_run(args)
            if wants_ui(args):
                held = hold_signals()  # takes over from `interrupting` with no gap
            else:
                watched = getattr(args, "watched", False)  # a dashboard started this engine
                session = build_session(plan, headless=not watched)
        except Exception:
            if noted:  # the signal, wrapped into another error by the code it hit (pydantic)
                raise interrupted(noted[0]) from None
            raise
    if noted:
        raise interrupted(noted[0])  # one an import swallowed: the run never starts
    if held is not None:
        return run_with_dashboard(plan, args, held)
    assert session is not None
    # an engine a dashboard started alerts nothing: the dashboard does, on its terminal
    notifier = (
        None
        if getattr(args, "watched", False)
        else make_notifier(args, write=terminal_writer(sys.stderr if args.json else sys.stdout))
    )
    return asyncio.run(
        run_headless(session, task=args.task, json_lines=args.json, notifier=notifier)
    )
