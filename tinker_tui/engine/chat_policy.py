"""A checkpoint to talk to: the run's backend, model and renderer, loaded from one of its
kept checkpoints (or the base weights), behind the same policy server the rollouts call.

Why the policy server and not a direct sampling call: a chat is the run's own format end to
end (the family's chat template, tools, stop tokens, thinking), exactly what the rollouts
saw, with nothing rendered twice. The run's folders are only read: no sampler is saved
(`sampler_checkpoint_every` 0) and nothing is trained."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tinker_tui.engine.backend.choice import make_service_client
from tinker_tui.engine.backend.session import BackendSession
from tinker_tui.engine.clock import Clock, SystemClock
from tinker_tui.engine.config import RunConfig
from tinker_tui.engine.sampling_defaults import SamplingDefaults

if TYPE_CHECKING:
    import openai

    from tinker_tui.engine.server import PolicyServer


@dataclass(frozen=True)
class ChatTarget:
    """What to load: the run's backend and settings, and a checkpoint (None: the base
    weights, before any step)."""

    run_id: str
    backend: str
    config: RunConfig
    checkpoint_dir: Path
    step: int = 0
    checkpoint: str = ""
    path: str | None = None
    version: int = 0

    @property
    def label(self) -> str:
        where = f"{self.checkpoint} (step {self.step})" if self.path else "base weights"
        return f"{self.run_id} @ {where}"


@dataclass
class Reply:
    """One answer: its text, why it ended, and the tokens it took."""

    content: str
    finish_reason: str
    tokens: int
    tool_calls: tuple[dict[str, Any], ...] = ()


class ChatPolicy:
    """The loaded checkpoint and its policy server; `reply` asks it one turn."""

    def __init__(self, target: ChatTarget, session: BackendSession, server: PolicyServer):
        self.target = target
        self.session = session
        self.server = server
        self.client: openai.AsyncOpenAI = server.client()

    @classmethod
    async def open(cls, target: ChatTarget, clock: Clock | None = None) -> ChatPolicy:
        from tinker_tui.engine.server import PolicyServer

        config = target.config.with_overrides({"sampler_checkpoint_every": 0})
        service = make_service_client(target.backend, target.checkpoint_dir)
        session = BackendSession.from_config(service, config, clock=clock or SystemClock())
        await session.start(from_state=target.path, version=target.version)
        server = PolicyServer(
            session,
            model_name=target.run_id,
            defaults=SamplingDefaults(temperature=config.temperature, max_tokens=config.max_tokens),
        )
        await server.start()
        return cls(target, session, server)

    @property
    def renderer(self) -> str:
        return self.session.renderer_name or ""

    async def reply(
        self,
        messages: list[dict[str, Any]],
        *,
        temperature: float,
        max_tokens: int,
        tools: list[dict[str, Any]] | None = None,
    ) -> Reply:
        extra: dict[str, Any] = {"tools": tools} if tools else {}
        completion = await self.client.chat.completions.create(
            model=self.target.run_id,
            messages=messages,  # type: ignore[arg-type]  # plain dicts, as the API takes
            temperature=temperature,
            max_tokens=max_tokens,
            **extra,
        )
        choice = completion.choices[0]
        calls = tuple(
            {"name": function.name, "arguments": function.arguments}
            for call in choice.message.tool_calls or ()
            if (function := getattr(call, "function", None)) is not None
        )
        usage = completion.usage
        return Reply(
            content=choice.message.content or "",
            finish_reason=choice.finish_reason or "",
            tokens=usage.completion_tokens if usage is not None else 0,
            tool_calls=calls,
        )

    async def close(self) -> None:
        try:
            await self.server.stop()
        finally:
            await self.session.close("success")
