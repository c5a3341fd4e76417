"""`tinker-tui eval`: a task's scenarios rolled out k times each on fixed weights (a run's
checkpoint, or a base model as it is), under a pinned protocol, each rollout kept in the run
store as it ends so that a second invocation runs only what is missing or failed.

The rollouts go through the same task code as a run's, and sample as a run's do, so an
evaluation measures what training sees: a chat rollout through the policy server, a
token-level one (`Task.samples_tokens`: a tinker-cookbook env) through a `DirectSampler`
straight from the backend. Both pin the protocol's temperature and cap max_tokens on every
request (`EvalProtocol.sampling_defaults`), the task's own values included. The backend session is started as a run's is (its tokenizer and renderer), then
samples from the evaluated weights: sampler weights or the base model as they are
(`BackendSession.sample_from`), a full checkpoint loaded as a resumed run loads it.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tinker_tui.engine.backend.capabilities import ServiceClient
from tinker_tui.engine.backend.choice import context_length_of, make_service_client
from tinker_tui.engine.backend.direct_sampler import DirectSampler
from tinker_tui.engine.backend.session import BackendSession
from tinker_tui.engine.checkpoint_paths import is_full_state
from tinker_tui.engine.errors import TinkerTuiError, UsageError
from tinker_tui.engine.events import Event, LogEmitted
from tinker_tui.engine.metrics.eval_stats import EvalSummary, summarize
from tinker_tui.engine.rollouts.distributions import truncated
from tinker_tui.engine.rollouts.task import Scenario, Task, captured_rollout, part_of
from tinker_tui.engine.store import RunStore
from tinker_tui.engine.store.eval_records import (
    FAILED,
    OK,
    EvalTarget,
    StoredRollout,
    begin_eval,
    eval_id,
    finish_eval,
    record_rollout,
    stored_rollouts,
)
from tinker_tui.engine.training.eval_protocol import EvalProtocol

if TYPE_CHECKING:
    from tinker_tui.engine.server import PolicyServer

#: Rollouts in flight at once.
CONCURRENCY = 16
#: Seconds one rollout may take before it counts as failed.
ROLLOUT_TIMEOUT = 600.0


class EvalError(TinkerTuiError):
    """An evaluation cannot go on as its protocol says."""


@dataclass(frozen=True, slots=True)
class EvalResult:
    eval_id: str
    target: EvalTarget
    protocol: EvalProtocol
    summary: EvalSummary
    #: Rollouts this invocation ran, and those it found stored (succeeded) and kept.
    ran: int
    reused: int
    #: The first failure's message, if any rollout failed.
    first_error: str = ""


def eval_scenarios(task: Task, split: str, seed: int) -> list[tuple[str, Scenario]]:
    """The scenarios of `split` with ids unique within it ("id#2" for a repeated id)."""
    if split == "eval_scenarios":
        if task.eval_scenarios is None:
            raise UsageError(
                f"task {task.name!r} has no eval_scenarios; evaluate the first N of its "
                "training scenarios with --split scenarios:N"
            )
        scenarios = list(task.eval_scenarios())
    else:
        count = scenarios_count(split)
        stream = task.scenarios(random.Random(seed))
        scenarios = [s for _, s in zip(range(count), stream, strict=False)]
    if not scenarios:
        raise UsageError(f"task {task.name!r} gives no scenarios for {split}")
    seen: dict[str, int] = {}
    out = []
    for s in scenarios:
        seen[s.id] = seen.get(s.id, 0) + 1
        out.append((s.id if seen[s.id] == 1 else f"{s.id}#{seen[s.id]}", s))
    return out


def scenarios_count(split: str) -> int:
    """N of a split "scenarios:N" (UsageError for any other split)."""
    head, _, count = split.partition(":")
    if head != "scenarios" or not count.isdigit() or int(count) < 1:
        raise UsageError(
            f"--split {split!r}: use eval_scenarios, or scenarios:N (the first N training "
            "scenarios, N >= 1)"
        )
    return int(count)


class StandaloneEval:
    def __init__(
        self,
        *,
        task: Task,
        target: EvalTarget,
        protocol: EvalProtocol,
        db_path: Path,
        checkpoint_dir: Path,
        renderer: str = "",
        lora_rank: int = 32,
        service_client: ServiceClient | None = None,
        on_progress: Callable[[int, int, int], None] | None = None,
        on_log: Callable[[str, str], None] | None = None,
        concurrency: int = CONCURRENCY,
        rollout_timeout: float = ROLLOUT_TIMEOUT,
    ) -> None:
        self.task = task
        self.target = target
        self.protocol = protocol
        self.db_path = Path(db_path)
        self.checkpoint_dir = Path(checkpoint_dir)
        self.renderer = renderer
        self.lora_rank = lora_rank
        self._service_client = service_client
        self.on_progress = on_progress or (lambda done, total, failed: None)
        self.on_log = on_log or (lambda level, message: None)
        self.concurrency = max(1, concurrency)
        self.rollout_timeout = rollout_timeout
        self.eval_id = eval_id(target, protocol.key())

    async def run(self) -> EvalResult:
        store = await RunStore.open(self.db_path)  # creates or migrates the store
        await store.close()
        scenarios = eval_scenarios(self.task, self.protocol.split, self.protocol.seed)
        await asyncio.to_thread(
            begin_eval, self.db_path, self.eval_id, self.target, self.protocol.as_dict()
        )
        stored = await asyncio.to_thread(stored_rollouts, self.db_path, self.eval_id)
        kept = {(r.scenario_id, r.sample) for r in stored if r.status == OK}
        todo = [
            (sid, scenario, sample)
            for sid, scenario in scenarios
            for sample in range(self.protocol.k)
            if (sid, sample) not in kept
        ]
        total = len(scenarios) * self.protocol.k
        reused = total - len(todo)
        first_error = ""
        if todo:
            first_error = await self._roll_out(todo, done_before=reused, total=total)
        else:
            self.on_progress(total, total, 0)
        wanted = {(sid, sample) for sid, _ in scenarios for sample in range(self.protocol.k)}
        rows = [
            r
            for r in await asyncio.to_thread(stored_rollouts, self.db_path, self.eval_id)
            if (r.scenario_id, r.sample) in wanted
        ]
        rewards: dict[str, list[float]] = {sid: [] for sid, _ in scenarios}
        for r in rows:
            if r.status == OK and r.reward is not None:
                rewards[r.scenario_id].append(float(r.reward))
        failed = sum(1 for r in rows if r.status != OK)
        summary = summarize(
            rewards, k=self.protocol.k, threshold=self.protocol.success_threshold, failed=failed
        )
        if failed and not first_error:
            first_error = next(r.error for r in rows if r.status != OK)
        await asyncio.to_thread(finish_eval, self.db_path, self.eval_id, summary.as_dict())
        return EvalResult(
            eval_id=self.eval_id,
            target=self.target,
            protocol=self.protocol,
            summary=summary,
            ran=len(todo),
            reused=reused,
            first_error=first_error,
        )

    # ------------------------------------------------------------------ the rollouts
    def _on_event(self, event: Event) -> None:
        if isinstance(event, LogEmitted) and event.level in ("warning", "error"):
            self.on_log(event.level, event.message)

    async def _roll_out(
        self, todo: list[tuple[str, Scenario, int]], *, done_before: int, total: int
    ) -> str:
        """Start the backend (and the policy server, for chat rollouts), run `todo`,
        recording each rollout as it ends; the first failure's message ("" if none failed)."""
        target, protocol = self.target, self.protocol
        service = self._service_client or make_service_client(target.backend, self.checkpoint_dir)
        session = BackendSession(
            service,
            base_model=target.base_model,
            lora_rank=self.lora_rank,
            renderer_name=self.renderer or None,
            sampler_checkpoint_every=0,  # nothing of the evaluation is saved as weights
            on_event=self._on_event,
            backend=None,
        )
        status = "errored"
        server: PolicyServer | None = None
        try:
            if is_full_state(target.model_path):
                # loaded as a run resumes it (as `chat` does): Tinker samples sampler
                # weights only
                await session.start(from_state=target.model_path, with_optimizer=False)
            else:
                await session.start()
                await session.sample_from(target.model_path or None)
            if session.renderer_name != protocol.renderer:  # `renderer_name` is the rule
                raise EvalError(
                    f"the session renders with {session.renderer_name}, not the "
                    f"protocol's {protocol.renderer}: the evaluation would be mislabelled"
                )
            # what each rollout samples with, as in a run: a token-level part gets a
            # sampler straight from the backend, a chat one the policy server's client (under
            # a capture key of its own)
            token_sampler = DirectSampler(session, protocol.sampling_defaults(), session.tokenizer)
            client: Any = None
            captures: Any = None
            if not all(self._samples_tokens(scenario) for _, scenario, _ in todo):
                server = await self._policy_server(session)
                client, captures = server.client(), server.captures
            counts = {"done": done_before, "failed": 0}
            errors: list[str] = []
            gate = asyncio.Semaphore(self.concurrency)
            self.on_progress(counts["done"], total, 0)

            async def one(sid: str, scenario: Scenario, sample: int) -> None:
                tokens = self._samples_tokens(scenario)
                async with gate:
                    outcome = await self._one(
                        token_sampler if tokens else client,
                        None if tokens else captures,
                        sid,
                        scenario,
                        sample,
                    )
                counts["done"] += 1
                if outcome:
                    counts["failed"] += 1
                    errors.append(outcome)
                self.on_progress(counts["done"], total, counts["failed"])

            await asyncio.gather(*(one(*item) for item in todo))
            status = "success"
            return errors[0] if errors else ""
        finally:
            if server is not None:
                await server.stop()
            await session.close(status)

    def _samples_tokens(self, scenario: Scenario) -> bool:
        """Whether `scenario`'s rollout speaks tokens (its part of a mixed task)."""
        return part_of(self.task, scenario)[1].samples_tokens

    async def _policy_server(self, session: BackendSession) -> PolicyServer:
        """The policy server a chat rollout samples through, started, with the protocol's
        sampling defaults pinned on every request."""
        from tinker_tui.engine.server import PolicyServer

        try:
            context = await context_length_of(self.target.backend, self.target.base_model)
        except Exception:
            context = None  # the server falls back on the tokenizer's
        server = PolicyServer(
            session,
            model_name=self.task.name,
            defaults=self.protocol.sampling_defaults(),
            context_length=context,
            max_tokens_limit=max(1024, self.protocol.max_tokens),
        )
        await server.start()
        return server

    async def _one(
        self, client: Any, captures: Any, sid: str, scenario: Scenario, sample: int
    ) -> str:
        """One rollout (under a capture key of its own, as in a run), recorded; its
        failure's message, or ""."""
        try:
            trajectory = await asyncio.wait_for(
                captured_rollout(self.task, client, self.task.name, scenario, captures),
                self.rollout_timeout,
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if isinstance(exc, TimeoutError):
                error = f"timed out after {self.rollout_timeout:g} s"
            else:
                error = f"{type(exc).__name__}: {exc}"
            rollout = StoredRollout(sid, sample, FAILED, None, error=error)
            await asyncio.to_thread(record_rollout, self.db_path, self.eval_id, rollout)
            return f"scenario {sid} sample {sample}: {error}"
        rollout = StoredRollout(
            sid,
            sample,
            OK,
            float(trajectory.reward),
            num_tokens=trajectory.num_tokens,
            truncated=truncated(trajectory),
        )
        await asyncio.to_thread(
            record_rollout,
            self.db_path,
            self.eval_id,
            rollout,
            messages=trajectory.messages,
            metrics=trajectory.metrics,
        )
        return ""
