"""Exactly-once resume: scenarios by position, the state a checkpoint carries, a run lock.

Every scenario a worker draws gets its position in the run's scenario stream (0, 1, 2, ...).
The stream is `task.scenarios(rng)` with `rng = random.Random(seed)`, so position p is the
same scenario in every process that replays the stream from the seed. A full checkpoint at
step s carries a `ResumeState`: the next new position, the positions drawn but not consumed
by step s (in flight, queued, held by the trainer, or consumed only after step s), the next
group id and the generator's random state. A resumed run loads the checkpoint's weights and
optimizer state, replays the stream to the saved position, runs the unconsumed positions
first, then continues with new ones. The store reconciles its rows to step s
(`RunStore.reconcile`), so nothing consumed after the checkpoint counts twice.

`RunLock` keeps two processes from running (or resuming) the same run: an advisory lock on
`<run id>.lock` beside the store, held for the run's whole life and dropped by the kernel
when the process dies, even by SIGKILL.
"""

from __future__ import annotations

import inspect
import os
import random
import time
import traceback
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tinker_tui.engine.errors import EXIT_OK, TinkerTuiError
from tinker_tui.engine.store import StoreError

if TYPE_CHECKING:
    from tinker_tui.engine.rollouts.task import Scenario, Task

try:
    import fcntl
except ImportError:  # not POSIX: no run lock
    fcntl = None  # type: ignore[assignment]

#: Version of the resume state's layout.
RESUME_FORMAT = 1
LOCK_SUFFIX = ".lock"


class ResumeError(StoreError):
    """A run cannot be resumed as asked; the message says why and what to do."""


class RunLocked(ResumeError):
    """Another live process runs this run."""


class ScenarioError(TinkerTuiError):
    """The task's `scenarios` raised, or yielded something that is not a `Scenario`: the
    run fails (exit 1) with one line naming the line of the task's file; what it trained
    is checkpointed, so `--resume` continues it once the task is fixed."""


#: How the reason of a run that ended as its scenarios ran out begins (words for people:
#: readers go by its `RunFinished.cause`, "ran_out").
RAN_OUT = "scenarios ran out"


class ScenariosExhausted(TinkerTuiError):
    """The task's scenarios ran out (a finite list, or a generator that returned): the
    run ends by itself once it has trained what was drawn, which is no failure."""

    exit_code = EXIT_OK

    def __init__(self, drawn: int) -> None:
        super().__init__(f"{RAN_OUT} after {drawn}")
        self.drawn = drawn


def scenario_error(task: Task, exc: BaseException, position: int) -> ScenarioError:
    """`exc`, raised by the task's scenarios at `position`, in one line with where: the
    deepest frame in the file that defines them (else the deepest outside this package)."""
    try:
        source = inspect.getsourcefile(inspect.unwrap(task.scenarios))
    except TypeError:
        source = None
    frames = traceback.extract_tb(exc.__traceback__)
    own = [f for f in frames if source is not None and f.filename == source] or [
        f for f in frames if not f.filename.startswith(_PACKAGE)
    ]
    where = ""
    if own:
        frame = own[-1]
        code = (frame.line or "").strip()
        where = f" at {frame.filename}:{frame.lineno}" + (f" ({code})" if code else "")
    message = f"{type(exc).__name__}: {exc}" if not isinstance(exc, ScenarioError) else str(exc)
    return ScenarioError(
        f"the scenarios of task {task.name!r} failed at scenario {position}"
        f"{where}: {message}; fix them, then continue the run with --resume"
    )


_PACKAGE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep


@dataclass(frozen=True, slots=True)
class ResumeState:
    step: int
    policy_version: int
    next_position: int
    pending: tuple[int, ...]
    next_group_id: int
    rng_state: Any = None
    warmup_done: bool = True
    #: The live knobs at the checkpoint (a resumed run continues with them; None: recorded
    #: before they were kept).
    knobs: dict[str, float | int] | None = None
    format: int = RESUME_FORMAT

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["pending"] = list(self.pending)
        return d

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ResumeState:
        try:
            if int(data.get("format", 0)) != RESUME_FORMAT:
                raise ValueError(f"unknown resume state format {data.get('format')!r}")
            return cls(
                step=int(data["step"]),
                policy_version=int(data["policy_version"]),
                next_position=int(data["next_position"]),
                pending=tuple(sorted(int(p) for p in data["pending"])),
                next_group_id=int(data["next_group_id"]),
                rng_state=data.get("rng_state"),
                warmup_done=bool(data.get("warmup_done", True)),
                knobs=_knobs(data.get("knobs")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ResumeError(f"the checkpoint's resume state is unreadable: {exc}") from None


def _knobs(data: Any) -> dict[str, float | int] | None:
    if not isinstance(data, Mapping):
        return None
    return {
        str(k): v for k, v in data.items() if isinstance(v, int | float) and not isinstance(v, bool)
    }


def rng_state_to_json(state: Any) -> Any:
    """`random.Random.getstate()` as JSON-able lists."""
    if isinstance(state, tuple | list):
        return [rng_state_to_json(s) for s in state]
    return state


def rng_state_from_json(data: Any) -> Any:
    if isinstance(data, list):
        return tuple(rng_state_from_json(d) for d in data)
    return data


class ScenarioSource:
    """The run's scenarios by position (see the module docstring).

    `redo` positions (below `next_position`) are drawn first, in order; then new ones.
    Replaying to `next_position` costs one generator step per position.
    """

    def __init__(
        self,
        task: Task,
        rng: random.Random,
        *,
        next_position: int = 0,
        redo: Iterable[int] = (),
        rng_state: Any = None,
    ) -> None:
        self._task = task
        self._rng = rng
        self._iter: Iterator[Scenario] | None = None  # the task's, on the first draw
        self._redo: deque[tuple[int, Scenario]] = deque()
        self.next_position = 0
        #: True once the task's scenarios ran out (`draw` raised ScenariosExhausted).
        self.exhausted = False
        wanted = set(redo)
        while self.next_position < next_position:
            try:
                scenario = self._next()
            except ScenariosExhausted:
                raise ResumeError(
                    f"the task's scenario stream ends at position {self.next_position}, "
                    f"before the checkpoint's position {next_position}: it is not the "
                    "stream the run was started with"
                ) from None
            if self.next_position in wanted:
                self._redo.append((self.next_position, scenario))
            self.next_position += 1
        #: False if the generator's random state after the replay differs from the saved
        #: one: the task's scenarios are not a function of the seed alone.
        self.reproducible = True
        if rng_state is not None:
            saved = rng_state_from_json(rng_state)
            if rng.getstate() != saved:
                self.reproducible = False
                rng.setstate(saved)

    def _next(self) -> Scenario:
        """The task's next scenario. ScenariosExhausted when there is none; ScenarioError
        when the task's code raised (or yielded something else than a Scenario)."""
        from tinker_tui.engine.rollouts.task import Scenario

        if self.exhausted:
            raise ScenariosExhausted(self.next_position)
        try:
            if self._iter is None:
                self._iter = iter(self._task.scenarios(self._rng))
            scenario = next(self._iter)
        except StopIteration:
            self.exhausted = True
            raise ScenariosExhausted(self.next_position) from None
        except Exception as exc:
            self.exhausted = True  # a generator that raised is finished too
            raise scenario_error(self._task, exc, self.next_position) from exc
        if not isinstance(scenario, Scenario):
            self.exhausted = True
            raise scenario_error(
                self._task,
                ScenarioError(
                    f"it gave a {type(scenario).__name__}, expected a Scenario(id=..., data=...)"
                ),
                self.next_position,
            )
        return scenario

    def draw(self) -> tuple[int, Scenario]:
        """(position, scenario) of the next scenario to run; ScenariosExhausted or
        ScenarioError (see `_next`) when there is none."""
        if self._redo:
            return self._redo.popleft()
        scenario = self._next()
        position = self.next_position
        self.next_position += 1
        return position, scenario

    def waiting(self) -> list[int]:
        """Positions to run again that no worker has drawn yet."""
        return [p for p, _ in self._redo]

    def rng_state(self) -> Any:
        return rng_state_to_json(self._rng.getstate())


# ---------------------------------------------------------------------------- run lock
def lock_path(db_path: str | Path, run_id: str) -> Path:
    return Path(db_path).expanduser().parent / f"{run_id}{LOCK_SUFFIX}"


class RunLock:
    """An exclusive advisory lock on a run (see the module docstring)."""

    def __init__(self, db_path: str | Path, run_id: str) -> None:
        self.path = lock_path(db_path, run_id)
        self.run_id = run_id
        self._fd: int | None = None

    def acquire(self) -> None:
        if fcntl is None or self._fd is not None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            for attempt in range(5):  # `run_is_live` holds a shared lock for an instant
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if attempt == 4:
                        raise
                    time.sleep(0.05)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise RunLocked(
                f"run {self.run_id} is running in another process (pid {holder}); "
                "stop that process first, or wait for it to end"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            self.path.unlink(missing_ok=True)  # while still held: no one locks a stale file
        finally:
            os.close(fd)


def drop_lock_file(db_path: str | Path, run_id: str) -> None:
    """Remove the run's lock file if this process holds it, for a process about to exit at
    once (`os._exit`, no `RunLock.release`): the kernel drops the lock, the file would stay."""
    path = lock_path(db_path, run_id)
    try:
        holder = path.read_text().strip()
    except OSError:
        return
    if holder == str(os.getpid()):
        path.unlink(missing_ok=True)


def run_is_live(db_path: str | Path, run_id: str) -> bool:
    """Whether a process holds the run's lock now (never creates the lock file)."""
    if fcntl is None:
        return False
    try:
        fd = os.open(lock_path(db_path, run_id), os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False
