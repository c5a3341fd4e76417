"""Capture keys that a rollout reuses: for a task whose harness keeps something for every
address it is given, for as long as it runs (verifiers keeps one HTTP client per endpoint
until the environment stops serving), a fresh address per rollout would grow that without
bound.

A rollout function that carries `capture_keys` (a `CaptureKeys`) gets its capture key from
it (`captured_rollout`): a free key, or a new one when every key is in use, so there are
as many keys as rollouts were ever in flight at once. The key is opened for the rollout
and closed when it ends, as any capture key is; a rollout that returned puts its key back
for the next one, and a rollout that raised, timed out or was cancelled (its requests may
still be on their way) retires it: no rollout is given that key again, so a straggler is
refused (the server refuses a key that is not open) rather than filed under another one.
"""

from __future__ import annotations

import secrets
import threading

__all__ = ["CaptureKeys"]


class CaptureKeys:
    """The reusable capture keys of one task's rollouts (its free keys; a lock, as a task
    may be rolled out on more than one event loop)."""

    def __init__(self) -> None:
        self._free: list[str] = []
        self._lock = threading.Lock()
        #: Keys made so far (the most ever in use at once, plus those retired).
        self.made = 0
        #: Keys retired: their rollout ended without returning.
        self.retired = 0

    def take(self) -> str:
        """A key no rollout is using: the last one put back, else a new one."""
        with self._lock:
            if self._free:
                return self._free.pop()
            self.made += 1
        return secrets.token_hex(8)

    def put_back(self, key: str) -> None:
        """`key`'s rollout returned and its capture is closed: the key is free again."""
        with self._lock:
            self._free.append(key)

    def retire(self, key: str) -> None:
        """`key`'s rollout ended without returning: it is never handed out again."""
        with self._lock:
            self.retired += 1
