"""A run: wires backend, policy server, pipeline and store together for one training run.

`Run` is the `Session` every front end drives (the Textual app, the headless reporter):
it exposes the event bus and the control interface before anything starts, and `run()`
does the whole life cycle, always leaving the store flushed and the server closed.
"""

from __future__ import annotations

import asyncio
import gc
import importlib
import random
import time
from pathlib import Path
from typing import Any

from engine.backend import Policy, make_service_client
from engine.clock import Clock, SystemClock
from engine.config import RunConfig
from engine.events import EventBus, LogEmitted, RunFinished, RunStarted, RunStatus
from engine.pipeline import Pipeline
from engine.server import PolicyServer, SamplingDefaults
from engine.store import RunStore
from engine.task import Task


def new_run_id(name: str, clock: Clock) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(clock.now()))
    return f"{name}-{stamp}-{random.SystemRandom().randrange(16**4):04x}"


class Run:
    def __init__(
        self,
        *,
        task: Task,
        config: RunConfig,
        backend: str,
        db_path: Path,
        checkpoint_dir: Path | None = None,
        clock: Clock | None = None,
        service_client: Any = None,
        run_id: str | None = None,
    ) -> None:
        self.task = task
        self.config = config
        self.backend = backend
        self.db_path = Path(db_path)
        self.clock = clock or SystemClock()
        self.run_id = run_id or new_run_id(task.name, self.clock)
        self.checkpoint_dir = Path(checkpoint_dir or self.db_path.parent / "checkpoints")
        self.events = EventBus()
        self._service_client = service_client
        self.policy: Policy | None = None
        self.server: PolicyServer | None = None
        self._openai: Any = None
        self.sampling_defaults = SamplingDefaults(temperature=config.temperature,
                                                  max_tokens=config.max_tokens)
        self.pipeline = Pipeline(
            config=config, task=task, policy=self._make_policy(), client_factory=self._client,
            model_name=task.name, bus=self.events, clock=self.clock,
            rng=random.Random(config.seed), sampling_defaults=self.sampling_defaults)

    @property
    def control(self) -> Pipeline:
        return self.pipeline

    def _make_policy(self) -> Policy:
        if self._service_client is None:
            self._service_client = make_service_client(self.backend, self.checkpoint_dir)
        self.policy = Policy(self._service_client, base_model=self.config.base_model,
                             lora_rank=self.config.lora_rank, seed=self.config.seed)
        return self.policy

    def _client(self) -> Any:
        """One shared OpenAI client (and connection pool) for every worker."""
        assert self._openai is not None
        return self._openai

    async def _warm_up_server(self) -> None:
        """Pay one-time costs (openai's lazy imports, first-request model building) before
        the pipeline starts, so they never show up as event-loop lag while training."""
        assert self.server is not None
        await asyncio.to_thread(importlib.import_module, "openai.types.chat")
        self._openai = self.server.client()
        await self._openai.chat.completions.create(
            model=self.task.name, messages=[{"role": "user", "content": "ready?"}],
            max_tokens=1)

    def _log(self, level: str, message: str) -> None:
        self.events.publish(LogEmitted(time=self.clock.now(), level=level, message=message))

    async def run(self) -> RunStatus:
        store = await RunStore.open(self.db_path)
        self.events.subscribe(store.handle)
        status: RunStatus = "failed"
        reason = ""
        try:
            self.events.publish(RunStarted(
                time=self.clock.now(), run_id=self.run_id, name=self.task.name,
                backend=self.backend, base_model=self.config.base_model,
                max_steps=self.config.max_steps, start_step=self.pipeline.step,
                config=self.config.as_dict()))
            assert self.policy is not None
            self._log("info", f"starting {self.backend} backend, base model "
                              f"{self.config.base_model}")
            await self.policy.start()
            self.server = PolicyServer(self.policy, model_name=self.task.name,
                                       defaults=self.sampling_defaults)
            await self.server.start()
            self._log("info", f"policy server on {self.server.base_url} "
                              f"(token {self.server.token_hint})")
            await self._warm_up_server()
            # Everything loaded so far (torch, transformers, the model, the app) lives for
            # the whole run; keep it out of the cyclic GC, whose full passes over it took
            # 100-350 ms each and stalled the event loop.
            gc.freeze()
            await self._warmup()
            status = await self.pipeline.run()
            reason = ("reached max_steps" if status == "completed"
                      else "stopped before max_steps")
            return status
        except BaseException as exc:
            reason = f"{type(exc).__name__}: {exc}"
            self._log("error", f"run failed: {reason}")
            raise
        finally:
            self.events.publish(RunFinished(time=self.clock.now(), status=status,
                                            final_step=self.pipeline.step, reason=reason))
            if self._openai is not None:
                await self._openai.close()
            if self.server is not None:
                await self.server.stop()
            await store.close()

    async def _warmup(self) -> None:
        """Supervised format steps before RL, on the task's own examples, if any."""
        steps = self.config.warmup_steps
        if not steps or not self.task.warmup or self.pipeline.step > 0:
            return
        assert self.policy is not None
        examples = list(self.task.warmup)
        rng = random.Random(self.config.seed)
        batch_size = min(len(examples), self.config.group_size * self.config.groups_per_step)
        loss = 0.0
        for _ in range(steps):
            if self.pipeline.stopping:
                return
            batch = rng.sample(examples, batch_size)
            loss = await self.policy.train_supervised(batch,
                                                      learning_rate=self.config.warmup_learning_rate)
        await self.policy.publish()
        self._log("info", f"format warm-up: {steps} supervised steps on {len(examples)} "
                          f"examples, final loss {loss / batch_size:.3f} per example")
