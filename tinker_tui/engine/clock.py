"""Clocks injected into the engine so runs, tests and snapshots can be deterministic."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds; only differences and ordering are meaningful."""
        ...


class SystemClock:
    """Wall-clock time (seconds since the epoch), used for real runs."""

    def now(self) -> float:
        return time.time()


class FakeClock:
    """A clock that moves only when told to; for tests and snapshot replays."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += seconds
