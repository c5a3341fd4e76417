"""A run: wires backend, policy server, pipeline and store together for one training run.

`Run` is the `Session` every front end drives (the Textual app, the headless reporter):
it exposes the event bus and the control interface before anything starts, and `run()`
does the whole life cycle, always leaving the store flushed and the server closed.

With `resume=True` the run continues the stored run `run_id` (see `engine.training.resume`): from
its last confirmed full checkpoint (weights, optimizer state, step, policy version, the
scenario position and random state) after reconciling the store to that step; or from
the start, under the same id, if it never wrote one. `max_steps` counts the whole run.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import importlib
import random
from collections.abc import Coroutine, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from tinker_tui.engine import faults
from tinker_tui.engine.backend.blocking import on_daemon_thread
from tinker_tui.engine.backend.capabilities import (
    KeepsCheckpointsHere,
    KnowsTrainingIdentity,
    ServiceClient,
)
from tinker_tui.engine.backend.checkpoint_retention import CheckpointRecord
from tinker_tui.engine.backend.choice import context_length_of, make_service_client
from tinker_tui.engine.backend.retry import BackendInterrupted, call_with_retry
from tinker_tui.engine.backend.session import BackendSession
from tinker_tui.engine.checkpoint_paths import run_checkpoint_dir
from tinker_tui.engine.clock import Clock, SystemClock
from tinker_tui.engine.config import RunConfig
from tinker_tui.engine.events import (
    SOURCE_ENGINE,
    EventBus,
    LogEmitted,
    RunFinished,
    RunResumed,
    RunStarted,
    RunStatus,
    SessionStarted,
    StartupPhase,
    StartupProgressed,
    StopCause,
)
from tinker_tui.engine.fork import InitFrom
from tinker_tui.engine.metrics.collapse_memory import EARLIER_KINDS
from tinker_tui.engine.metrics.cost import BUDGET_STOP
from tinker_tui.engine.metrics.loop_lag import LoopLagMonitor
from tinker_tui.engine.rollouts.task import Task
from tinker_tui.engine.run_id import new_run_id
from tinker_tui.engine.sampling_defaults import SamplingDefaults
from tinker_tui.engine.store import RunStore
from tinker_tui.engine.trackers import TrackerFeeds, with_tracker_ids
from tinker_tui.engine.training.pipeline import Pipeline
from tinker_tui.engine.training.resume import ResumeError, ResumeState, RunLock
from tinker_tui.engine.training.rollout_loop import CLOSE_TIMEOUT, RolloutThread, SameLoop

if TYPE_CHECKING:
    import openai
    import tinker

    from tinker_tui.engine.server import PolicyServer
    from tinker_tui.engine.training.warmup_cache import WarmupCache

T = TypeVar("T")

#: How a run's end is told to the backend's session (`ServiceClient.close`).
_SESSION_STATUS = {"completed": "success", "stopped": "interrupted", "failed": "errored"}


class Run:
    """The engine's `Session` (see `engine.control.interface`): this process drives the run."""

    read_only = False
    attached = False

    def __init__(
        self,
        *,
        task: Task,
        config: RunConfig,
        backend: str,
        db_path: Path,
        checkpoint_dir: Path | None = None,
        clock: Clock | None = None,
        service_client: ServiceClient | None = None,
        run_id: str | None = None,
        resume: bool = False,
        rollout_thread: bool = True,
        headless: bool = False,
        task_spec: str = "",
        notes: tuple[str, ...] = (),
        run_name: str = "",
        note: str = "",
        init_from: InitFrom | None = None,
    ) -> None:
        if resume and not run_id:
            raise ValueError("resume=True needs the run_id of the run to resume")
        self.resume = resume
        #: A fork's starting checkpoint (`run --init-from`); None: the base model's weights.
        self.init_from = init_from
        self.task = task
        self.task_spec = task_spec  # how the command line named it (RunStarted.task_spec)
        #: Said in the run's log once it started (a resume's knobs, say).
        self.notes = notes
        self.run_name = run_name  # the run's own name and note (`--name`, `--note`)
        self.note = note
        self.backend = backend
        self.db_path = Path(db_path)
        self.clock = clock or SystemClock()
        self.run_id = run_id or new_run_id(task.name, self.clock)
        self.config = config = with_tracker_ids(config, self.run_id)
        self.checkpoint_dir = Path(checkpoint_dir or run_checkpoint_dir(self.db_path))
        self.events = EventBus()
        self._service_client = service_client
        self.session: BackendSession | None = None
        self.server: PolicyServer | None = None
        self._openai: openai.AsyncOpenAI | None = None
        # The rollouts, the openai client and the policy server run on a loop of their own
        # (engine.training.rollout_loop) so they never starve the trainer, the store writer or the
        # control endpoint; `rollout_thread=False` keeps them on this loop (for comparison).
        self.rollouts: RolloutThread | SameLoop = RolloutThread() if rollout_thread else SameLoop()
        self.sampling_defaults = SamplingDefaults(
            temperature=config.temperature, max_tokens=config.max_tokens
        )
        #: The run's store while `_run` runs: the pipeline flushes it at checkpoints and
        #: reconciles it on a rollback (`_flush_store`, `_rewind_store`).
        self._store: RunStore | None = None
        self.pipeline = Pipeline(
            config=config,
            task=task,
            session=self._make_session(),
            client_factory=self._client,
            model_name=task.name,
            bus=self.events,
            clock=self.clock,
            rng=random.Random(config.seed),
            sampling_defaults=self.sampling_defaults,
            rollouts=self.rollouts,
            # on_health_pause = auto: nobody can resume a run without a dashboard
            health_pause_default="stop" if headless else "wait",
            # No checkpoint until the model is built and warmed up (`_warmup`, or a resume
            # state): a stop during the start-up must not record weights no resume can use.
            warmup_done=False,
            rewind_store=self._rewind_store,
            commit_events=self._flush_store,
            captures=lambda: self.server.captures if self.server is not None else None,
        )
        self._start_step = 0
        #: Seconds a resumed run was down before this session (`RunResumed.down_seconds`).
        self._down_seconds = 0.0

    def preload(self) -> None:
        """Import now, off the event loop, what a Tinker start-up imports later: the SDK's
        tokenizer loader (transformers) and the cookbook's renderers. Imported on the loop,
        they stall it for seconds; on a thread, native libraries hold the GIL as long. Paid
        here, they are part of the command's start (call it before the loop runs, or from
        the thread that builds the run). The local backend needs neither."""
        if self.backend == "tinker":
            import tinker_cookbook.renderers  # noqa: F401
            from transformers import AutoTokenizer, PreTrainedTokenizerFast  # noqa: F401

    @property
    def control(self) -> Pipeline:
        return self.pipeline

    def _make_session(self) -> BackendSession:
        if self._service_client is None:
            self._service_client = make_service_client(self.backend, self.checkpoint_dir)
        self.session = BackendSession.from_config(
            self._service_client, self.config, on_event=self.events.publish, clock=self.clock
        )
        self.session.run_id = self.run_id
        return self.session

    def _client(self) -> openai.AsyncOpenAI:
        """One shared OpenAI client (and connection pool) for every worker."""
        assert self._openai is not None
        return self._openai

    async def _serve(self) -> None:
        """On the main loop: the model's context length read from the backend, the policy
        server started and warmed up on the rollout loop, which serves it (`_start_server`),
        then its address logged."""
        context_length = await self._context_length()
        await self.rollouts.run(self._start_server(context_length))
        assert self.server is not None
        context = "" if context_length is None else f", context {context_length} tokens"
        self._log(
            "info",
            f"policy server on {self.server.base_url} (token {self.server.token_hint}{context})",
        )

    async def _context_length(self) -> int | None:
        """The base model's context as the backend states it, so the policy server refuses a
        longer prompt (`context_length_exceeded`) before it reaches the sampler. If the backend
        cannot say, the server falls back on the tokenizer's `model_max_length`."""
        assert self.session is not None
        try:
            return await call_with_retry(
                lambda _: context_length_of(self.backend, self.config.base_model),
                operation="read the model's context length",
                policy=self.session.retry,
                retry=False,
            )
        except Exception as exc:
            self._log(
                "warning",
                f"could not read {self.config.base_model}'s context length "
                f"({type(exc).__name__}: {exc}); prompts are checked against "
                "the tokenizer's",
            )
            return None

    async def _start_server(self, context_length: int | None) -> None:
        """Runs on the rollout loop, which serves it: start the policy server, then pay its
        one-time costs (`_warm_up_server`). Its module is imported in a thread: fastapi and the
        request models take a while."""
        assert self.session is not None
        # On a daemon thread, like openai's import (`_warm_up_server`).
        server = await on_daemon_thread(importlib.import_module, "tinker_tui.engine.server")
        self.server = server.PolicyServer(
            self.rollouts.policy_for_server(self.session),
            model_name=self.task.name,
            defaults=self.sampling_defaults,
            # what the run's own settings ask for is never refused as too long
            max_tokens_limit=max(1024, self.config.max_tokens, self.config.eval_max_tokens),
            context_length=context_length,
            coalesce_window=self.config.sample_coalesce_ms / 1000,
            group_size=self.config.group_size,
        )
        await self.server.start()
        await self._warm_up_server()

    async def _warm_up_server(self) -> None:
        """Runs on the rollout loop, which owns it: the shared openai client.

        Pays one-time costs (openai's lazy imports, first-request model building) before the
        pipeline starts, so they never show up as event-loop lag while training."""
        assert self.server is not None
        # On a daemon thread: a stop during the start-up abandons the import instead of
        # waiting seconds for it when the process exits (`asyncio.to_thread`'s are joined).
        await on_daemon_thread(importlib.import_module, "openai.types.chat")
        self._openai = self.server.client()
        await self._openai.chat.completions.create(
            model=self.task.name, messages=[{"role": "user", "content": "ready?"}], max_tokens=1
        )

    async def _close_rollout_side(self) -> None:
        """Close the openai client and the server on the rollout loop, then end that loop.

        The wait is bounded: a rollout stuck in blocking code must not keep the run (and the
        process) from ending; what could not be closed is said in the log."""
        openai_client, server = self._openai, self.server
        problems: list[str] = []

        async def close_both() -> None:  # on the rollout loop: it owns both
            closers = [
                ("openai client", None if openai_client is None else openai_client.close),
                ("policy server", None if server is None else server.stop),
            ]
            for what, close in closers:
                try:
                    if close is not None:
                        await close()
                except Exception as exc:
                    problems.append(f"could not close the {what}: {type(exc).__name__}: {exc}")

        try:
            ended = await self.rollouts.close(CLOSE_TIMEOUT, before=close_both)
        except TimeoutError:  # rollouts on this loop (no thread) that did not close in time
            ended = False
        for problem in problems:
            self._log("warning", problem)
        if not ended:
            self._log(
                "warning",
                "the rollouts' loop did not end within "
                f"{CLOSE_TIMEOUT:g} s (a rollout blocks it); left behind",
            )

    def _log(self, level: str, message: str) -> None:
        self.events.publish(LogEmitted(time=self.clock.now(), level=level, message=message))

    def _phase(self, phase: StartupPhase, **fields: Any) -> None:
        self.events.publish(StartupProgressed(time=self.clock.now(), phase=phase, **fields))

    def _publish_started(self, start_step: int | None = None) -> None:
        self._start_step = self.pipeline.step if start_step is None else start_step
        self.events.publish(
            RunStarted(
                time=self.clock.now(),
                run_id=self.run_id,
                name=self.task.name,
                backend=self.backend,
                base_model=self.config.base_model,
                max_steps=self.config.max_steps,
                start_step=self._start_step,
                config=self.config.as_dict(),
                task_spec=self.task_spec,
                run_name=self.run_name,
                note=self.note,
                parent=self.init_from.parent if self.init_from is not None else "",
                parent_optimizer=self.init_from is not None and self.init_from.with_optimizer,
            )
        )

    async def _unless_stopped(self, work: Coroutine[Any, Any, T]) -> T | None:
        """Start-up work (building the model, the warm-up) that a graceful stop abandons:
        `work`'s result, or None, with `work` cancelled, if a stop comes first. Threads it
        started run on to their end, but nothing waits for them."""
        if self.pipeline.stopping:
            work.close()
            return None
        task = asyncio.ensure_future(work)
        stop = asyncio.ensure_future(self.pipeline.stop_requested())
        try:
            await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not task.done():
                task.cancel()
                await asyncio.wait({task})
        if task.cancelled():
            return None
        return task.result()

    async def run(self) -> RunStatus:
        lock = RunLock(self.db_path, self.run_id)
        lock.acquire()  # RunLocked if another process runs this run
        try:
            store = await RunStore.open(self.db_path)
        except BaseException:
            lock.release()
            raise
        try:
            return await self._run(store)
        finally:
            lock.release()

    async def _flush_store(self) -> None:
        """Commit what the store has been handed (the checkpointer waits for its rows)."""
        if self._store is not None:
            await self._store.flush()

    async def _rewind_store(self, step: int) -> Mapping[str, int]:
        """A rollback, as a resume does: flush the store and reconcile it to `step`."""
        # Below the step a resumed run started from, the run now ends where it trains.
        self._start_step = min(self._start_step, step)
        if self._store is None:
            return {}
        await self._store.flush()
        return await self._store.reconcile(self.run_id, step)

    async def _run(self, store: RunStore) -> RunStatus:
        self.events.subscribe(store.handle)
        trackers = TrackerFeeds.start(
            self.config,
            store_folder=self.db_path.parent,
            publish=self.events.publish,
            clock=self.clock,
        )
        for handler in trackers.handlers():
            self.events.subscribe(handler)
        self._store = store
        # A full disk under the store: stop now (nothing more can be recorded), then fail.
        store.on_failure = lambda failure: self.pipeline.stop(
            "the run store's disk is full", source=SOURCE_ENGINE, cause="error"
        )
        # What is loaded by now (torch, the SDK, the app) lives for the whole run: out of
        # the cyclic GC, whose full passes over it took seconds during start-up, stalling
        # the loop from whichever thread set one off.
        gc.freeze()
        # The loop's lag over the whole run, start-up included (the pipeline measures its
        # own, while training); reported when the run ends.
        lag = LoopLagMonitor(max_samples=100_000)
        lag_task = asyncio.create_task(lag.run(), name="run-loop-lag")
        status: RunStatus = "failed"
        reason = ""
        cause: StopCause = "failed"
        in_pipeline = False
        try:
            points = await self._resume_points(store) if self.resume else []
            self._publish_started(points[0]["step"] if points else None)
            for note in self.notes:
                self._log("warning", note)  # shown by every front end, headless included
            assert self.session is not None
            if points and points[0]["step"] >= self.config.max_steps:
                self.pipeline.restore(ResumeState.from_dict(points[0]["resume_state"]))
                self._log(
                    "warning",
                    f"run {self.run_id} is already at step {self.pipeline.step} "
                    f"of {self.config.max_steps}; nothing to do (raise --steps "
                    "to train further)",
                )
                status, reason, cause = "completed", "reached max_steps", "max_steps"
                return status
            session = SessionStarted(
                time=self.clock.now(), backend=self.backend, base_model=self.config.base_model
            )
            if self.resume:  # down since the last thing its previous session recorded
                await store.flush()
                last = await store.last_record_before(self.run_id, session.time)
                self._down_seconds = 0.0 if last is None else max(0.0, session.time - last)
            self.events.publish(session)
            self._phase("loading_model", detail=self.config.base_model)
            # A stop during the start-up skips the rest of it: the pipeline then only
            # writes the final checkpoint, if the warm-up was done (`Pipeline.run`).
            point = await self._unless_stopped(self._start_policy(points))
            if not self.pipeline.stopping:
                if self.resume:
                    await self._resume_from(store, point)
                await self.rollouts.start()
                await self._unless_stopped(self._warm_up_policy_and_server())
            if not self.pipeline.stopping:
                # Everything loaded so far (torch, the model, openai, the app) lives for the
                # whole run; keep it out of the cyclic GC, whose full passes over it took
                # 100-350 ms each and stalled the event loop.
                gc.freeze()
                self._phase("first_rollouts")
            in_pipeline = True
            status = await self.pipeline.run()
            if store.failure is not None:
                raise store.failure
            reason = (
                self.pipeline.end_reason or "reached max_steps"
                if status == "completed"
                else self.pipeline.stop_reason or "stopped before max_steps"
            )
            cause = (
                "failed"
                if status == "failed"
                else self.pipeline.stop_cause
                if status == "stopped"
                else "no_signal"
                if self.pipeline.trained_nothing
                else "ran_out"
                if self.pipeline.end_reason
                else "max_steps"
            )
            return status
        except BaseException as exc:
            if (
                self.pipeline.stopping
                and isinstance(exc, Exception)
                and (isinstance(exc, BackendInterrupted) or not in_pipeline)
            ):
                # Stopped while starting (the service slow or failing): a call given up
                # because of the stop, or failing for it. Nothing trained.
                status, reason = "stopped", f"stopped before training: {exc}"
                cause = self.pipeline.stop_cause
                self._log("warning", reason)
                return status
            reason = f"{type(exc).__name__}: {exc}"
            self._log("error", f"run failed: {reason}")
            raise
        finally:
            await self._close_rollout_side()
            if self.session is not None:
                await self.session.close(_SESSION_STATUS[status], reason or None)
            lag_task.cancel()
            self._log(
                "info",
                f"event loop lag over the run: p99 {lag.percentile(99) * 1e3:.1f} "
                f"ms, max {lag.worst * 1e3:.1f} ms ({len(lag.samples)} samples)",
            )
            # A resumed run stopped before it was reconciled is still at its start step.
            self.events.publish(
                RunFinished(
                    time=self.clock.now(),
                    status=status,
                    final_step=max(self.pipeline.step, self._start_step),
                    reason=reason,
                    cause=cause,
                )
            )
            try:
                await trackers.close()  # before the store: their last lines are stored
            finally:
                await store.close()

    # ------------------------------------------------------------------ resume
    async def _resume_points(self, store: RunStore) -> list[dict[str, Any]]:
        """The run's confirmed full checkpoints it can resume from, newest first."""
        if await store.run(self.run_id) is None:
            raise ResumeError(f"no run {self.run_id} in {self.db_path}")
        stored = await store.resume_points(self.run_id)
        if not stored and await store.checkpoints(self.run_id):
            raise ResumeError(
                f"run {self.run_id} has checkpoints but none with a resume state (it was "
                "recorded by an older tinker-tui); it cannot be resumed exactly"
            )
        # A checkpoint taken before the format warm-up finished (a stop during the start-up,
        # recorded by tinker-tui before it stopped writing those) holds no usable weights:
        # without a later one the run starts over, warm-up included.
        points = [p for p in stored if p["resume_state"].get("warmup_done", True) or p["step"] > 0]
        for point in points:
            ResumeState.from_dict(point["resume_state"])  # ResumeError now if unreadable
        return points

    async def _resume_from(self, store: RunStore, point: dict[str, Any] | None) -> None:
        """Reconcile the store to the checkpoint the policy was loaded from (or to the
        start) and set the pipeline to continue from it. Only after the checkpoint loaded:
        a checkpoint folder that is missing for now must not cost the store its later rows."""
        await store.flush()
        step = point["step"] if point is not None else 0
        # The totals (tokens, cost, groups) of the last step recorded, undone ones included:
        # what they spent was spent.
        spent = (await store.last_metrics()).get(self.run_id, {})
        counts = await store.reconcile(self.run_id, step)
        if point is None:
            state = ResumeState(
                step=0,
                policy_version=0,
                next_position=0,
                pending=(),
                next_group_id=counts["next_group_id"],
                warmup_done=False,
            )
            checkpoint = ""
        else:
            state = ResumeState.from_dict(point["resume_state"])
            state = dataclasses.replace(
                state, next_group_id=max(state.next_group_id, counts["next_group_id"])
            )
            checkpoint = point["name"]
        self.pipeline.restore(state)
        self.pipeline.carry_totals({k: v for k, v in spent.items() if isinstance(v, int | float)})
        # The checkpoints kept up to here are rollback points too (engine.metrics.health).
        for kept in await self._resume_points(store):
            if kept["step"] <= step:
                self.pipeline.checkpointer.adopt(
                    kept["step"],
                    kept["name"],
                    kept["path"],
                    ResumeState.from_dict(kept["resume_state"]),
                    requested=bool(kept.get("requested")),
                )
        self.events.publish(
            RunResumed(
                time=self.clock.now(),
                run_id=self.run_id,
                step=step,
                checkpoint=checkpoint,
                steps_undone=counts["steps_removed"],
                groups_requeued=counts["groups_requeued"],
                scenarios_pending=len(state.pending),
                down_seconds=self._down_seconds,
            )
        )
        if self.config.loss_fn == "stable_reinforce" and state.pending:
            # Recorded sequences belong to the session that sampled them (and expire): none
            # of the old session's rollouts can be trained here, so they are drawn again
            # (a warning: sampled work is thrown away, and a headless run shows it).
            self._log(
                "warning",
                f"stable_reinforce: the {len(state.pending)} scenario(s) not trained by step "
                f"{step} are sampled again (recorded sequences belong to the session that "
                "sampled them and expire)",
            )
        stored = await store.run(self.run_id)
        if stored is not None:  # the collapse tracking goes on (engine.metrics.collapse_memory)
            self.pipeline.remember(await store.events(stored, EARLIER_KINDS), step)

    async def _start_policy(self, points: list[dict[str, Any]]) -> dict[str, Any] | None:
        """Start the policy fresh (no points), or from the newest resume point that loads;
        returns that point."""
        assert self.session is not None
        faults.hit("build", 0)  # test hook (engine.faults)
        if not points and self.init_from is not None:
            fork = self.init_from
            await self.session.start(from_state=fork.path, with_optimizer=fork.with_optimizer)
            what = "weights and optimizer state" if fork.with_optimizer else "weights"
            self._log("info", f"forked from {fork.parent}: starting from its {what} ({fork.path})")
            return None
        if not points:
            await self.session.start()
            return None
        for i, point in enumerate(points):
            try:
                # The version the checkpoint's weights are (a step with no gradient, all
                # groups of equal reward, made no new version: it can trail the step).
                await self.session.start(
                    from_state=point["path"], version=int(point["resume_state"]["policy_version"])
                )
                self.session.adopt_checkpoints(
                    [
                        CheckpointRecord("state", p["step"], p["name"], p["path"])
                        for p in reversed(points[i:])
                    ]
                )
                return point
            except BackendInterrupted:
                raise  # stopping: no other checkpoint is tried
            except Exception as exc:
                if i + 1 == len(points):
                    raise ResumeError(
                        f"run {self.run_id}: no confirmed checkpoint could be "
                        f"loaded (the store is left as it was); the last tried, "
                        f"{point['path']}, failed: {type(exc).__name__}: "
                        f"{exc}"
                    ) from exc
                self._log(
                    "warning",
                    f"checkpoint {point['path']} could not be loaded "
                    f"({type(exc).__name__}: {exc}); trying the one before",
                )
                self._publish_started(points[i + 1]["step"])
        raise AssertionError("unreachable")

    async def _warm_up_policy_and_server(self) -> None:
        # The format warm-up is torch work on the backend's thread, which leaves the GIL
        # free most of the time: starting the policy server and its one-time costs
        # (importing its web framework and openai, the first request) overlap with it
        # instead of adding to it.
        async with asyncio.TaskGroup() as group:
            group.create_task(self._serve())
            group.create_task(self._warmup())

    async def _warmup(self) -> None:
        """Supervised format steps before RL, on the task's own examples, if any; on the
        local backend an identical earlier warm-up is reused (`engine.training.warmup_cache`)."""
        steps = self.config.warmup_steps
        if not steps or not self.task.warmup:
            self.pipeline.warmup_done = True
            return
        if self.pipeline.step > 0 or (self.resume and self.pipeline.warmup_done):
            return  # the resumed weights already include it
        if self.init_from is not None:
            self.pipeline.warmup_done = True  # the parent's weights already include it
            self._log("info", f"format warm-up skipped: forked from {self.init_from.parent}")
            return
        assert self.session is not None
        examples = list(self.task.warmup)
        # Rendered once; each step trains on a draw of them (the same draws, in the same
        # order, as sampling the conversations themselves), made up front for the cache key.
        datums = await asyncio.to_thread(self.session.supervised_datums, examples)
        rng = random.Random(self.config.seed)
        batch_size = min(len(examples), self.config.group_size * self.config.groups_per_step)
        draws = [rng.sample(range(len(datums)), batch_size) for _ in range(steps)]
        what = f"{steps} supervised steps on {len(examples)} examples"
        cache, key = await self._warmup_cache(datums, draws)
        hit = cache.get(key) if cache is not None and key is not None else None
        if hit is not None:
            assert cache is not None and key is not None
            folder, meta = hit
            try:
                await self.session.load_training_state(str(folder))
            except Exception as exc:
                cache.discard(key)
                self._log(
                    "warning",
                    f"format warm-up: the saved result {key[:12]} could not "
                    f"be loaded ({type(exc).__name__}: {exc}); running it",
                )
                await self.session.start()  # a failed load poisons the training client
            else:
                await self.session.publish()
                self.pipeline.warmup_done = True
                self._phase("warmup", done=steps, total=steps, detail="reused")
                self._log(
                    "info",
                    f"format warm-up: {what} reused from an identical earlier "
                    f"run (final loss {meta.get('final_loss', '?')} per "
                    f"example; saved result {key[:12]})",
                )
                return
        over_budget = (
            self.pipeline.cost.budget_passed_by_training(
                self.session.usage,
                sum(datums[i].model_input.length for draw in draws for i in draw),
                what=f"the format warm-up of {what}",
            )
            if self.pipeline.cost.budgeted
            else ""
        )
        if over_budget:
            self.pipeline.stop(
                f"{BUDGET_STOP}{over_budget}; lower warmup_steps or raise max_cost_usd",
                source=SOURCE_ENGINE,
                cause="budget",
            )
            return
        loss = 0.0
        self._phase("warmup", done=0, total=steps)
        for done, draw in enumerate(draws, start=1):
            if self.pipeline.stopping:
                return
            faults.hit("warmup", done)  # test hook (engine.faults)
            loss = await self.session.train_cross_entropy(
                [datums[i] for i in draw], learning_rate=self.config.warmup_learning_rate
            )
            self._phase("warmup", done=done, total=steps, loss=loss / batch_size)
        final = f"{loss / batch_size:.3f}"
        if cache is not None and key is not None:
            await self._save_warmup(cache, key, final)
        await self.session.publish()
        self.pipeline.warmup_done = True
        self.pipeline.cost.warmed_up(self.session.usage)
        self._log("info", f"format warm-up: {what}, final loss {final} per example")

    async def _warmup_cache(
        self, datums: list[tinker.Datum], draws: list[list[int]]
    ) -> tuple[WarmupCache | None, str | None]:
        """The local backend's warm-up cache and this warm-up's key (None, None elsewhere)."""
        assert self.session is not None
        training = self.session.training_client
        service = self._service_client
        if (
            self.backend != "local"
            or not isinstance(service, KeepsCheckpointsHere)
            or not isinstance(training, KnowsTrainingIdentity)
        ):
            return None, None
        checkpoint_dir = service.checkpoint_dir
        from tinker_tui.engine.training.warmup_cache import CACHE_DIR, WarmupCache, warmup_key

        identity = await training.training_identity()
        if identity is None:
            return None, None
        key = await asyncio.to_thread(
            warmup_key,
            identity,
            datums,
            draws,
            learning_rate=self.config.warmup_learning_rate,
            adam=self.session.adam,
        )
        return WarmupCache(Path(checkpoint_dir) / CACHE_DIR), key

    async def _save_warmup(self, cache: WarmupCache, key: str, final_loss: str) -> None:
        """Keep the warm-up's result for the next identical run; a failure only warns."""
        assert self.session is not None
        try:
            from tinker_tui.engine.local.checkpoints import resolve

            path = await self.session.save_training_state(
                f"warmup-{key[:16]}", {"final_loss": final_loss}
            )
            service = self._service_client
            assert isinstance(service, KeepsCheckpointsHere)  # as `_warmup_cache` checked
            folder = resolve(Path(service.checkpoint_dir), path)
            await asyncio.to_thread(cache.put, key, folder)
        except Exception as exc:
            self._log(
                "warning",
                f"format warm-up: could not keep its result for reuse "
                f"({type(exc).__name__}: {exc})",
            )
