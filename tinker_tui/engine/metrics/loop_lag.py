"""Event-loop lag: how late the loop wakes a task that asked to sleep.

Everything in the engine shares one asyncio loop (server, workers, trainer, UI), so any
blocking call shows up here. Measured in real time, not on the injected clock: lag is a
property of this machine, not of the run.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque


class LoopLagMonitor:
    def __init__(self, interval: float = 0.01, max_samples: int = 2048) -> None:
        self.interval = interval
        self.samples: deque[float] = deque(maxlen=max_samples)
        self.worst = 0.0  # the largest lag since the start, kept past max_samples

    async def run(self) -> None:
        while True:
            started = time.perf_counter()
            await asyncio.sleep(self.interval)
            lag = max(0.0, time.perf_counter() - started - self.interval)
            self.samples.append(lag)
            self.worst = max(self.worst, lag)

    def percentile(self, q: float) -> float:
        """The q-th percentile (0..100) of recent lags in seconds; 0 before any sample."""
        if not self.samples:
            return 0.0
        ordered = sorted(self.samples)
        index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
        return ordered[index]
