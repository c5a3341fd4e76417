"""Where rollouts run: on an event loop of their own, in a thread, apart from the trainer.

A rollout is the user's async code plus the official openai client (about 4-5 ms of client CPU
per request, 32 requests at a time) and the policy server that answers it (parsing, rendering,
building responses). On the engine's loop that work kept the trainer, the store writer and the
control endpoint waiting for 100+ ms at a time. `RolloutThread` gives it its own loop:

- the engine loop keeps the pipeline's bookkeeping (pacing, the queue, staleness, events, the
  store, the trainer, the control endpoint) and hands each group's rollouts over with
  `run(coroutine)`, which awaits the result; cancelling the caller cancels the rollouts;
- the rollout loop runs the rollouts, the openai client and the policy server. The server
  reaches the `BackendSession` only through `EngineLoopPolicy`, which runs `BackendSession.sample` on the
  engine loop: the BackendSession (its version counter, its sampling clients per version, its
  retries) and the event bus are only ever used from the engine loop's thread. Two things
  do cross, each for a reason: the trajectories a group returns (built there, not changed
  after), and the run's `SamplingDefaults`, whose temperature a live knob sets on the engine
  loop and the server reads per request (one float attribute: a request sees the old value
  or the new one, as it would across an await).

Threads share one GIL: a thread that wants it waits up to the interpreter's switch interval
(5 ms by default) before the holder is made to let go, and with CPU-bound rollout code on one
thread the engine loop paid that on every wake-up, several times over with the torch thread
also waiting. While it runs, `RolloutThread` sets the switch interval to `SWITCH_INTERVAL`
(1 ms) and puts the old one back when it closes.

Shutdown is cooperative and bounded: `close()` closes what lives on the rollout loop (the
openai client, the server), cancels what still runs there, stops it and waits a set time for
the thread to end. A rollout stuck in blocking code cannot
be interrupted (no thread can be); the thread is a daemon, so it never keeps the process
alive, and `close()` says that it was left behind.

`SameLoop` is the old arrangement (rollouts on the caller's loop), for tests and for
comparison in the benchmark.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import sys
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from tinker_tui.engine.errors import TinkerTuiError
from tinker_tui.engine.metrics.loop_lag import LoopLagMonitor

if TYPE_CHECKING:
    from tinker_tui.engine.backend.session import BackendSession
    from tinker_tui.engine.server.handler import PolicySource

T = TypeVar("T")

#: Seconds `close()` waits for the rollout loop to close what lives there, then for its thread.
CLOSE_TIMEOUT = 5.0
#: Seconds a cancelled caller of `RolloutThread.run` waits for the coroutine to end there.
CANCEL_WAIT = 2.0
#: Seconds the server waits for the engine loop to list the policy versions.
ENGINE_CALL_TIMEOUT = 5.0
#: The GIL switch interval (seconds) while a rollout thread runs; see the module docstring.
SWITCH_INTERVAL = 0.001


class _Job(Generic[T]):
    """A coroutine submitted with `submit` (from any thread): its outcome, and when it really
    ended (a cancelled outcome is known at once; the coroutine ends later, on its loop).
    `end` is called on the rollout thread, once."""

    __slots__ = ("ended", "result")

    def __init__(self) -> None:
        self.result: concurrent.futures.Future[T] = concurrent.futures.Future()
        self.ended: concurrent.futures.Future[None] = concurrent.futures.Future()

    def cancelled(self) -> bool:
        """The caller gave up before the coroutine started (asked on the rollout thread)."""
        return self.result.cancelled()

    def started(self, task: asyncio.Task[T]) -> None:
        """On the rollout thread: cancelling `result`, from any thread, cancels `task`."""
        loop = task.get_loop()

        def cancel_there(result: concurrent.futures.Future[T]) -> None:
            if result.cancelled():
                with contextlib.suppress(RuntimeError):  # the loop is closed: ended
                    loop.call_soon_threadsafe(task.cancel)

        self.result.add_done_callback(cancel_there)

    def end(self, outcome: _Outcome) -> None:
        _settle(self.result, self.ended, outcome, concurrent.futures.InvalidStateError)


class _LoopJob(_Job[T]):
    """A coroutine submitted with `run`, by a caller on an event loop: its outcome and end
    are futures of the caller's loop, set there in one hop (through its `_Mailbox`) when the
    coroutine ends. One round trip per group of rollouts, no chained futures (a `_Job` and
    `wrap_future` cost about a third of the engine loop's share of each round trip).
    `task` and `cancel_requested` are only touched on the rollout thread."""

    __slots__ = ("cancel_requested", "mailbox", "task")

    def __init__(self, mailbox: _Mailbox) -> None:
        self.mailbox = mailbox
        self.result: asyncio.Future[T] = mailbox.loop.create_future()  # type: ignore[assignment]
        self.ended: asyncio.Future[None] = mailbox.loop.create_future()  # type: ignore[assignment]
        self.task: asyncio.Task[T] | None = None
        self.cancel_requested = False

    def cancelled(self) -> bool:
        return self.cancel_requested

    def started(self, task: asyncio.Task[T]) -> None:
        self.task = task

    def cancel_there(self) -> None:
        """On the rollout thread: the caller was cancelled; cancel the coroutine (or do not
        start it)."""
        self.cancel_requested = True
        if self.task is not None:
            self.task.cancel()

    def end(self, outcome: _Outcome) -> None:
        with contextlib.suppress(RuntimeError):  # the caller's loop is closed: nobody waits
            self.mailbox.post(_settle, self.result, self.ended, outcome, asyncio.InvalidStateError)


class _Mailbox:
    """Calls handed to one loop from another thread, delivered in batches.

    `call_soon_threadsafe` per call wakes the loop (a write to its self-pipe, a wake-up from
    its selector, the GIL handed over) once per call: per group of rollouts, both ways. Here
    only the first call posted while none wait schedules a delivery; the calls posted before
    the loop gets to it go with it, in order, so a burst of groups costs one wake-up.

    `after_turn` (the rollout loop's results to the engine loop): a call posted from a running
    loop wakes the receiver once the poster's loop has run what it had ready, not at once.
    Woken at once, the engine thread took the GIL from the rollout thread in the middle of a
    burst of finishing groups, then again for the rest of it: a sixth or more of the CPU per
    group in the pipeline benchmark went to that back and forth. A result waits at most for
    the callbacks its loop already had ready (rollouts last seconds; this is microseconds to
    milliseconds). Rollouts are started at once (the other way): deferring those gained
    nothing measurable and would make them wait for the engine loop's turn."""

    __slots__ = ("_items", "_lock", "after_turn", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop, *, after_turn: bool = False) -> None:
        self.loop = loop
        self.after_turn = after_turn
        self._lock = threading.Lock()
        self._items: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []

    def post(self, callback: Callable[..., Any], *args: Any) -> None:
        """Call `callback(*args)` on the loop soon (from any thread). RuntimeError: the loop
        is closed."""
        with self._lock:
            self._items.append((callback, args))
            if len(self._items) > 1:
                return  # a delivery is already scheduled and has not started
        if self.after_turn:
            try:
                here = asyncio.get_running_loop()
            except RuntimeError:  # posted outside a running loop: wake it now
                pass
            else:
                if here is not self.loop:
                    here.call_soon(self.wake)
                    return
        self.loop.call_soon_threadsafe(self._deliver)

    def wake(self) -> None:
        """Schedule a delivery of what is posted (a spare one delivers nothing)."""
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
            self.loop.call_soon_threadsafe(self._deliver)

    def _deliver(self) -> None:
        with self._lock:
            items, self._items = self._items, []
        for callback, args in items:
            try:
                callback(*args)
            except Exception as exc:  # as the loop treats a failing callback: report, go on
                self.loop.call_exception_handler(
                    {"message": f"exception in {callback!r}", "exception": exc}
                )


#: How a coroutine ended: ("result", value), ("error", exception) or ("cancelled", None).
_Outcome = tuple[str, Any]


def _settle(result: Any, ended: Any, outcome: _Outcome, invalid: type[Exception]) -> None:
    """Hand `outcome` over to `result` (unless it is already done) and mark `ended`; for
    both kinds of futures (concurrent and asyncio), on the thread that may set them."""
    kind, value = outcome
    # try/except, not contextlib.suppress: this runs once per group of rollouts.
    try:
        if not result.done():
            if kind == "result":
                result.set_result(value)
            elif kind == "error":
                result.set_exception(value)
            else:
                result.cancel()
    except invalid:
        pass
    try:
        if not ended.done():
            ended.set_result(None)
    except invalid:
        pass


class DeadlinePassed(TinkerTuiError, TimeoutError):
    """A coroutine of `run_together` was still running when its deadline passed and was
    cancelled; `__context__` is the `CancelledError` raised where it was waiting (its
    traceback says where)."""


async def run_together(
    coros: Iterable[Coroutine[Any, Any, T]], *, timeout: float | None = None
) -> list[T | BaseException]:
    """Run `coros` at once on this loop; each one's result or exception, in order.

    What `asyncio.gather(..., return_exceptions=True)` returns, for about half its cost:
    a group's rollouts are started as plain tasks and awaited in order (awaiting one that
    is done costs nothing), without gather's Python callback per task. Cancelling the
    caller cancels them all and waits for them to end.

    `timeout` (seconds from now): those still running then are cancelled and give a
    `DeadlinePassed`. One timer for all of them: they start together, so it is the
    deadline a timeout of each would give, for a fraction of the cost (a timeout
    context per coroutine was about a quarter of a group's CPU on the rollout loop).
    """
    loop = asyncio.get_running_loop()
    tasks = [loop.create_task(c) for c in coros]
    expired: set[asyncio.Task[T]] = set()

    def expire() -> None:
        for task in tasks:
            if not task.done():
                expired.add(task)
                task.cancel()

    timer = loop.call_later(timeout, expire) if timeout is not None and tasks else None
    caller = asyncio.current_task()
    results: list[T | BaseException] = []
    try:
        for task in tasks:
            try:
                results.append(await task)
            except asyncio.CancelledError as exc:
                if caller is not None and caller.cancelling():
                    raise
                if task in expired:
                    passed = DeadlinePassed(f"still running after {timeout:g} s")
                    passed.__context__ = exc
                    results.append(passed)
                else:
                    results.append(exc)  # the task alone was cancelled
            except Exception as exc:
                results.append(exc)
    except asyncio.CancelledError:
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        raise
    finally:
        if timer is not None:
            timer.cancel()
    return results


class RolloutLoopClosed(TinkerTuiError, RuntimeError):
    """The rollout loop is closed, or its thread ended; nothing more runs on it (the run
    fails: exit 1)."""


class RolloutLoop(Protocol):
    """Runs rollout coroutines somewhere, for a caller on the engine loop."""

    async def run(self, coro: Coroutine[Any, Any, T]) -> T: ...

    def policy_for_server(self, session: BackendSession) -> PolicySource: ...


class SameLoop:
    """Rollouts on the caller's own loop (no thread): the arrangement before `RolloutThread`."""

    lag: LoopLagMonitor | None = None

    async def start(self) -> None:
        return None

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return await coro

    def policy_for_server(self, session: BackendSession) -> PolicySource:
        return session

    async def close(
        self, timeout: float = CLOSE_TIMEOUT, *, before: Callable[[], Awaitable[Any]] | None = None
    ) -> bool:
        if before is not None:
            await asyncio.wait_for(before(), timeout)
        return True


class RolloutThread:
    """An asyncio loop in a daemon thread, for rollouts; started and closed from the engine loop."""

    def __init__(
        self,
        *,
        name: str = "tinker-tui-rollouts",
        lag: LoopLagMonitor | None = None,
        switch_interval: float | None = SWITCH_INTERVAL,
    ) -> None:
        self.name = name
        #: The GIL switch interval to set while running (None: leave it as it is).
        self.switch_interval = switch_interval
        self._lowered_switch_interval = False
        #: Lag of the rollout loop itself (its own health, not the engine's).
        self.lag = lag or LoopLagMonitor()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.engine_loop: asyncio.AbstractEventLoop | None = None
        #: Why the thread ended on its own (an exception out of the loop), if it did.
        self.died: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._closing = False
        self._lock = threading.Lock()
        # Coroutines submitted and not ended: failed if the thread ends first.
        self._pending: set[_Job[Any]] = set()
        # Calls to the rollout loop, and back to each caller's loop (see `_Mailbox`).
        self._inbox: _Mailbox | None = None
        self._outboxes: dict[asyncio.AbstractEventLoop, _Mailbox] = {}

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    async def start(self) -> None:
        """Start the thread and its loop; returns once the loop runs."""
        if self._thread is not None:
            raise RuntimeError("the rollout loop was already started")
        engine_loop = asyncio.get_running_loop()
        self.engine_loop = engine_loop
        ready: asyncio.Future[None] = engine_loop.create_future()

        def started() -> None:
            if not ready.done():
                ready.set_result(None)

        def main() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            self._inbox = _Mailbox(loop)
            self.loop = loop
            lag = loop.create_task(self.lag.run(), name="rollout-loop-lag")
            loop.call_soon(engine_loop.call_soon_threadsafe, started)
            try:
                loop.run_forever()
            except BaseException as exc:  # e.g. SystemExit from a rollout: the loop is gone
                self.died = exc
            finally:
                with self._lock:
                    self._closing = True
                lag.cancel()
                self._finish(loop)

        if self.switch_interval is not None:
            _switch_interval.lower(self.switch_interval)
            self._lowered_switch_interval = True
        self._thread = threading.Thread(target=main, name=self.name, daemon=True)
        self._thread.start()
        await ready

    def _finish(self, loop: asyncio.AbstractEventLoop) -> None:
        """On the thread, once its loop stopped: give what is left a second to end
        cancelled, fail the rest of what callers wait for, close the loop."""
        leftovers = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for task in leftovers:
            task.cancel()
        if leftovers:
            try:
                loop.run_until_complete(asyncio.wait(leftovers, timeout=1.0))
            except BaseException:  # a second failure on the way out changes nothing
                pass
        with self._lock:
            pending = list(self._pending)
        for job in pending:
            self._end(job, error=RolloutLoopClosed(self._ended()))
        # A wake-up deferred to a turn of this loop that will not come (see `_Mailbox`).
        with self._lock:
            boxes = list(self._outboxes.values())
        for box in boxes:
            box.wake()
        loop.close()

    def _ended(self) -> str:
        cause = self.died
        return "the rollout loop ended" + (
            f": {type(cause).__name__}: {cause}" if cause is not None else ""
        )

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule `coro` on the rollout loop (from any thread); cancelling the returned
        future cancels it there."""
        return self._submit(coro).result

    def _submit(self, coro: Coroutine[Any, Any, T], job: _Job[T] | None = None) -> _Job[T]:
        job = job if job is not None else _Job()
        with self._lock:
            if self._closing or self.loop is None or self._inbox is None or not self.alive:
                coro.close()
                raise RolloutLoopClosed(
                    self._ended() if self.died else "the rollout loop is closed"
                )
            loop, inbox = self.loop, self._inbox
            self._pending.add(job)

        def start() -> None:  # on the rollout loop
            if job.cancelled():
                coro.close()
                self._end(job)
                return
            task = loop.create_task(coro)
            task.add_done_callback(lambda _: self._end(job, task))
            job.started(task)

        try:
            inbox.post(start)
        except RuntimeError:  # the loop closed meanwhile
            coro.close()
            self._end(job)
            raise RolloutLoopClosed(self._ended()) from None
        return job

    def _end(
        self,
        job: _Job[Any],
        task: asyncio.Task[Any] | None = None,
        error: BaseException | None = None,
    ) -> None:
        """Hand the outcome over (once) and mark the job ended."""
        outcome: _Outcome
        if error is not None:
            outcome = ("error", error)
        elif task is None or task.cancelled():
            outcome = ("cancelled", None)
        elif isinstance(task.exception(), Exception):
            outcome = ("error", task.exception())
        elif task.exception() is not None:  # SystemExit, KeyboardInterrupt: the loop ends
            outcome = ("error", RolloutLoopClosed(self._ended()))
        else:
            outcome = ("result", task.result())
        job.end(outcome)
        with self._lock:
            self._pending.discard(job)

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the rollout loop and await its result here.

        Cancelling the caller cancels it there and, as awaiting it on this loop would, waits
        until it has ended (at most `CANCEL_WAIT` seconds: a rollout blocked in synchronous
        code cannot be waited for), so what it held (requests, connections) is let go
        before the caller goes on."""
        job: _LoopJob[T] = _LoopJob(self._outbox(asyncio.get_running_loop()))
        self._submit(coro, job)
        try:
            return await job.result
        except asyncio.CancelledError:
            caller = asyncio.current_task()
            if self.died is not None and caller is not None and not caller.cancelling():
                # Cancelled there because the thread died, not because the caller was.
                raise RolloutLoopClosed(self._ended()) from None
            inbox = self._inbox
            if inbox is not None:
                with contextlib.suppress(RuntimeError):  # the loop is closed: it ended
                    inbox.post(job.cancel_there)  # after its start, if that still waits
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(job.ended), CANCEL_WAIT)
            raise

    def _outbox(self, caller_loop: asyncio.AbstractEventLoop) -> _Mailbox:
        """The mailbox to `caller_loop` (on that loop's thread; one per caller loop)."""
        box = self._outboxes.get(caller_loop)
        if box is None:
            with self._lock:
                box = self._outboxes.setdefault(caller_loop, _Mailbox(caller_loop, after_turn=True))
        return box

    def policy_for_server(self, session: BackendSession) -> PolicySource:
        """The policy as a server on this loop must see it (see `EngineLoopPolicy`)."""
        assert self.engine_loop is not None, "start() first"
        return EngineLoopPolicy(session, self.engine_loop)

    async def close(
        self, timeout: float = CLOSE_TIMEOUT, *, before: Callable[[], Awaitable[Any]] | None = None
    ) -> bool:
        """Run `before` there (closing what lives on the loop), cancel what still runs,
        stop the loop and end the thread; returns whether the thread ended.

        Waits at most `timeout` seconds for all that. If the loop does not answer (a rollout
        blocks it in synchronous code), the thread gets one more second and is then left
        behind: it is a daemon, so it does not keep the process alive.
        """
        self._restore_switch_interval()
        thread, loop = self._thread, self.loop
        if thread is None or loop is None or not thread.is_alive():
            return True

        async def shut_down() -> None:
            if before is not None:
                await before()
            current = asyncio.current_task()
            tasks = [t for t in asyncio.all_tasks() if t is not current]
            for task in tasks:
                task.cancel()
            if tasks:
                await asyncio.wait(tasks)
            await loop.shutdown_asyncgens()

        answered = True
        try:
            await asyncio.wait_for(asyncio.wrap_future(self.submit(shut_down())), timeout)
        except (TimeoutError, RolloutLoopClosed):
            answered = False
        with self._lock:
            self._closing = True
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(loop.stop)
        await asyncio.to_thread(thread.join, timeout if answered else min(timeout, 1.0))
        return not thread.is_alive()

    def _restore_switch_interval(self) -> None:
        if self._lowered_switch_interval:
            self._lowered_switch_interval = False
            _switch_interval.restore()


class _SwitchInterval:
    """The interpreter's GIL switch interval is one per process: lowered while any rollout
    thread runs, put back when the last one closes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users = 0
        self._saved = 0.0

    def lower(self, interval: float) -> None:
        with self._lock:
            if self._users == 0:
                self._saved = sys.getswitchinterval()
            self._users += 1
            sys.setswitchinterval(min(interval, sys.getswitchinterval()))

    def restore(self) -> None:
        with self._lock:
            self._users -= 1
            if self._users == 0:
                sys.setswitchinterval(self._saved)


_switch_interval = _SwitchInterval()


class EngineLoopPolicy:
    """The `BackendSession` as the policy server on the rollout loop sees it.

    `sample` runs `BackendSession.sample` on the engine loop, so the BackendSession's mutable state (the
    current version and its sampling client, which change together in `BackendSession._publish`;
    the cache of earlier versions' clients; retries, which publish events) is only touched
    there. Three plain reads cross threads, each for a stated reason: `renderer` and
    `end_tokens` are set by `BackendSession.start` before the server starts and never
    replaced while it runs, and `version` (an int, for `/health`) is informative only: a
    request for the current policy is resolved on the engine loop, not from this read.
    """

    def __init__(self, session: BackendSession, engine_loop: asyncio.AbstractEventLoop) -> None:
        self._session = session
        self._engine_loop = engine_loop

    @property
    def renderer(self) -> Any:
        return self._session.renderer

    @property
    def end_tokens(self) -> Sequence[int]:
        """The model's declared end tokens: without them here, the server on this loop
        ended samples at its renderer's stops only."""
        return tuple(self._session.end_tokens)

    @property
    def version(self) -> int:
        return int(self._session.version)

    async def sample(
        self,
        prompt: Any,
        num_samples: int,
        sampling_params: Any,
        *,
        version: int | None = None,
        top_logprobs: int = 0,
        constraint: Any = None,
        constraint_prefix: str = "",
    ) -> Any:
        # `constraint` (a forced tool call's shape) is immutable: it may cross.
        future = asyncio.run_coroutine_threadsafe(
            self._session.sample(
                prompt,
                num_samples,
                sampling_params,
                version=version,
                top_logprobs=top_logprobs,
                constraint=constraint,
                constraint_prefix=constraint_prefix,
            ),
            self._engine_loop,
        )
        return await asyncio.wrap_future(future)

    def available_versions(self) -> list[int]:
        """Asked on the engine loop (the list and cache live there); `GET /v1/models` is
        rare, so waiting one hop for it here is cheap."""
        future: concurrent.futures.Future[list[int]] = concurrent.futures.Future()

        def ask() -> None:
            try:
                future.set_result(list(self._session.available_versions()))
            except BaseException as exc:  # handed back to the caller
                future.set_exception(exc)

        self._engine_loop.call_soon_threadsafe(ask)
        return future.result(timeout=ENGINE_CALL_TIMEOUT)
