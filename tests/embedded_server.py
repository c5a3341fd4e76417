"""The policy server on the embedded model, for the capture tests: a session of its own
and a 4-token default, stopped and closed after."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from tinker_tui.engine.backend.session import BackendSession
from tinker_tui.engine.local import DEFAULT_BASE_MODEL, LocalServiceClient
from tinker_tui.engine.sampling_defaults import SamplingDefaults
from tinker_tui.engine.server import PolicyServer


@asynccontextmanager
async def embedded_policy_server(checkpoint_dir: Path) -> AsyncIterator[PolicyServer]:
    session = BackendSession(
        LocalServiceClient(checkpoint_dir=checkpoint_dir), base_model=DEFAULT_BASE_MODEL
    )
    await session.start()
    server = PolicyServer(session, model_name="policy", defaults=SamplingDefaults(max_tokens=4))
    await server.start()
    try:
        yield server
    finally:
        await server.stop()
        await session.close("success")
