"""The sampling clients of recent policy versions, kept loaded for `model@step` requests.

The `keep` most recently used stay loaded, always the current version's; an evicted or older
version is loaded again from its sampler weights while the retention policy keeps them.
"""

from __future__ import annotations

from collections import OrderedDict

from tinker_tui.engine.backend.capabilities import SamplingClient


class SamplerCache:
    """Loaded sampling clients by policy version, least recently used first."""

    def __init__(self, keep: int) -> None:
        self.keep = max(1, keep)
        self._clients: OrderedDict[int, SamplingClient] = OrderedDict()
        self._loaded_from: dict[int, str] = {}  # version -> path its client was loaded from

    def versions(self) -> set[int]:
        return set(self._clients)

    def __len__(self) -> int:
        return len(self._clients)

    def __contains__(self, version: object) -> bool:
        return version in self._clients

    def get(self, version: int) -> SamplingClient | None:
        """The loaded client of `version` (now the most recently used), if any."""
        client = self._clients.get(version)
        if client is not None:
            self._clients.move_to_end(version)
        return client

    def put(
        self, version: int, client: SamplingClient, *, current: int, loaded_from: str | None = None
    ) -> None:
        """Keep `client` for `version`: just published, or loaded from sampler weights at
        `loaded_from`; then evict down to `keep`, never the `current` version."""
        self._clients[version] = client
        self._clients.move_to_end(version)
        if loaded_from is None:
            self._loaded_from.pop(version, None)
        else:
            self._loaded_from[version] = loaded_from
        while len(self._clients) > self.keep:
            victim = next(v for v in self._clients if v != current)
            self._drop(victim)

    def forget_loaded_from(self, version: int, path: str) -> None:
        """Sampler weights at `path` were deleted: drop the client loaded from them."""
        if self._loaded_from.get(version) == path:
            self._drop(version)

    def drop_published(self) -> None:
        """Drop every published client (not loaded from sampler weights): in-flight clients
        that a newer publish has moved to its weights."""
        for version in [v for v in self._clients if v not in self._loaded_from]:
            self._drop(version)

    def drop_after(self, version: int) -> None:
        """A rollback to `version`: later versions no longer exist."""
        for later in [v for v in self._clients if v > version]:
            self._drop(later)

    def _drop(self, version: int) -> None:
        self._clients.pop(version, None)
        self._loaded_from.pop(version, None)
