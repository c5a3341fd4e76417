"""Trajectories filed by the server: every completion made under an address prefix
`/r/<key>/` is kept under that key, so a rollout that never sees its `choices` (a
subprocess, an agent library) is still trained on the exact tokens sampled for it.

A key is open from `open()` until `close(key)` hands back what was sampled under it, in the
order the replies were made; a request under a key that is not open is refused (404), and a
reply is filed only under the opening of its key that it came in under (`opening`), so a late
straggler never trains a finished trajectory, nor the next one opened under the same key (a
rollout may reuse its keys: `engine.rollouts.capture_keys`). A key may carry sampling
defaults of its own (an in-run evaluation's protocol), which its requests get instead of the
server's: the prefix reaches whatever the rollout hands its address to. Lives on the loop
that runs the server.
"""

from __future__ import annotations

import re
import secrets
from typing import Any

from tinker_tui.engine.sampling_defaults import SamplingDefaults

#: `/r/<key>/rest`: the prefix and the rest of the path.
PREFIX = re.compile(r"^/r/([A-Za-z0-9_-]{1,64})(/.*)$")


class Captures:
    """The open trajectories: key -> the choices (chat-completion dicts, with their token
    extension fields) the server returned under it."""

    def __init__(self) -> None:
        self._open: dict[str, list[dict[str, Any]]] = {}
        self._defaults: dict[str, SamplingDefaults] = {}
        #: The server's root address (`http://127.0.0.1:PORT`), set once it listens.
        self.root = ""

    def __len__(self) -> int:
        return len(self._open)

    def open(self, key: str | None = None, *, defaults: SamplingDefaults | None = None) -> str:
        """Open `key` (a new one if None); `defaults`: its requests' own sampling defaults."""
        key = key or secrets.token_hex(8)
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", key):
            raise ValueError(f"a capture key is 1-64 letters, digits, '_' or '-', got {key!r}")
        self._open.setdefault(key, [])
        if defaults is not None:
            self._defaults[key] = defaults
        return key

    def defaults_for(self, key: str) -> SamplingDefaults | None:
        """The sampling defaults `key` was opened with, if any."""
        return self._defaults.get(key)

    def opening(self, key: str) -> object | None:
        """`key`'s current opening, None when it is not open: a request takes it as it comes
        in, and its reply is filed (`record`) only if that opening is still the key's."""
        return self._open.get(key)

    def record(self, key: str, choices: list[dict[str, Any]], *, opening: object) -> None:
        """File `choices` under `key`, if it is still open as `opening` (a reply that
        outlived its rollout's capture is dropped, even where the key was opened again)."""
        kept = self._open.get(key)
        if kept is not None and kept is opening:
            kept.extend(choices)

    def close(self, key: str) -> list[dict[str, Any]]:
        """What was sampled under `key`, oldest first; the key is no longer open."""
        self._defaults.pop(key, None)
        return self._open.pop(key, [])

    def base_url(self, key: str) -> str:
        """The address a client files its requests under `key` by: OpenAI clients take
        it with `/v1` added (`openai_base_url`), Anthropic clients as it is."""
        return f"{self.root}/r/{key}"

    def openai_base_url(self, key: str) -> str:
        return f"{self.base_url(key)}/v1"

    def client_for(self, client: Any, key: str) -> Any:
        """`client` (an `openai.AsyncOpenAI`) aimed at `key`'s prefix, sharing its
        connections; anything else comes back unchanged."""
        with_options = getattr(client, "with_options", None)
        if with_options is None or not self.root:
            return client
        return with_options(base_url=self.openai_base_url(key))
