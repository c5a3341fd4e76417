"""The rollouts' openai client: a group's equal chat requests leave it as one HTTP request.

A task's per-trajectory rollouts start together and send the same first request, n=1 each.
The policy server already samples those as one call (`coalesce`), but every request still
paid a round of the client's HTTP stack and of the server's (HTTP parsing, validation,
rendering, the response), so in the speed bench a group of 32 such rollouts made a tenth of
the completions a second of one request asking n=32. Sent as one, they cost the server one
request; what is left is each rollout's own openai call (building the request, parsing its
answer), which is why a `group_rollout` asking n=n is faster still.

`CoalescingTransport` sits under the official client's HTTP client. The first chat request
for a body opens a batch for `window` seconds; requests that arrive meanwhile with the same
body but for `n` (and the same headers that matter: the token) join it. One request with the
members' `n` summed goes to the server, and its choices are split back in arrival order,
each member's renumbered from 0, with its own usage. The openai client parses each member's
answer as it would the server's own, so a rollout sees no difference.

Sent unchanged (the server coalesces them where it may): streamed requests, seeded requests
(a seed fixes the answer: n=k with a seed is not k requests with it), bodies that are not a
JSON object, and anything but `POST .../chat/completions`. A member that is cancelled leaves
the batch before it is sent, or gives up its share after; the request is cancelled only when
no member waits for it any more. An error answer is every member's answer.
"""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import dataclass, field
from typing import Any, cast

from tinker_tui.engine.server.open_batches import OpenBatches
from tinker_tui.engine.server.schema import MAX_N

#: Headers of the answer that do not survive re-encoding a member's share of it.
_BODY_HEADERS = frozenset({"content-length", "content-encoding", "transfer-encoding"})


def httpx_module() -> Any:
    """The httpx the installed openai sends through (httpx2 for openai 3, httpx before):
    the module of the `AsyncClient` its default client derives from."""
    import openai

    for cls in openai.DefaultAsyncHttpxClient.__mro__:
        if cls.__name__ == "AsyncClient":
            return sys.modules[cls.__module__.partition(".")[0]]
    raise RuntimeError("cannot find the HTTP client module of the installed openai")


@dataclass
class ClientCoalescingStats:
    """Chat requests in, HTTP requests out (coalesced or passed through)."""

    requests: int = 0
    sent: int = 0


@dataclass(eq=False)
class _Member:
    request: Any
    n: int
    future: asyncio.Future[Any]


@dataclass(eq=False)
class _Batch:
    key: tuple[Any, ...]
    body: dict[str, Any]
    members: list[_Member] = field(default_factory=list)
    timer: asyncio.TimerHandle | None = None
    task: asyncio.Task[None] | None = None

    @property
    def n(self) -> int:
        return sum(m.n for m in self.members)

    def waiting(self) -> list[_Member]:
        return [m for m in self.members if not m.future.done()]


class CoalescingTransport:
    """An httpx async transport over `inner` that coalesces equal chat requests (module
    docstring). `window` > 0."""

    def __init__(
        self, inner: Any, *, window: float, max_n: int = MAX_N, full_at: int | None = None
    ) -> None:
        # `max_n`: the most choices one coalesced request asks for (the server's limit);
        # `full_at` (the run's group size): a batch asking that many is a whole group and
        # goes at once, without waiting out the window.
        self.inner = inner
        self.window = window
        self.max_n = max_n
        self.full_at = full_at
        self.stats = ClientCoalescingStats()
        self._httpx = httpx_module()
        self._open: OpenBatches[_Batch] = OpenBatches()

    async def handle_async_request(self, request: Any) -> Any:
        self.stats.requests += 1
        joined = self._joinable(request)
        if joined is None:
            self.stats.sent += 1
            return await self.inner.handle_async_request(request)
        key, body, n = joined
        batch = self._open.get(key)
        if batch is not None and batch.n + n > self.max_n:
            self._send(batch)
            batch = None
        loop = asyncio.get_running_loop()
        if batch is None:
            batch = _Batch(key, body)
            self._open.add(batch, loop, self.window, self._send)
        member = _Member(request, n, loop.create_future())
        batch.members.append(member)
        if batch.n >= min(self.max_n, self.full_at or self.max_n):
            self._send(batch)
        try:
            return await member.future
        except asyncio.CancelledError:
            self._open.left(batch, member)
            raise

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def __aenter__(self) -> CoalescingTransport:
        await self.inner.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.inner.__aexit__(*exc_info)

    # -- what may join --------------------------------------------------------------------
    def _joinable(self, request: Any) -> tuple[tuple[Any, ...], dict[str, Any], int] | None:
        """(key, body, n) of a request that may share an HTTP request; None to send it as
        it is."""
        if request.method != "POST" or not request.url.path.endswith("/chat/completions"):
            return None
        try:
            body = json.loads(request.content)
        except Exception:  # a streamed upload, or not JSON: the server answers it
            return None
        if not isinstance(body, dict) or body.get("stream") or body.get("seed") is not None:
            return None
        n = body.get("n", 1)
        if type(n) is not int or not 1 <= n <= self.max_n:
            return None  # the server's own error, to this request alone
        rest = {k: v for k, v in body.items() if k != "n"}
        key = (
            str(request.url),
            request.headers.get("authorization"),
            json.dumps(rest, sort_keys=True, separators=(",", ":")),
        )
        return key, rest, n

    # -- a batch's life -------------------------------------------------------------------
    def _send(self, batch: _Batch) -> None:
        if not self._open.closing(batch):
            return
        self.stats.sent += 1
        batch.task = asyncio.get_running_loop().create_task(
            self._request(batch), name="coalesced-chat-request"
        )

    async def _request(self, batch: _Batch) -> None:
        first = batch.members[0]
        if len(batch.members) == 1:
            merged = first.request  # alone: sent exactly as it came
        else:
            content = json.dumps({**batch.body, "n": batch.n}).encode()
            headers = [
                (k, v)
                for k, v in first.request.headers.multi_items()
                if k.lower() != "content-length"
            ]
            merged = self._httpx.Request(
                "POST",
                first.request.url,
                headers=headers,
                content=content,
                extensions=first.request.extensions,
            )
        try:
            response = await self.inner.handle_async_request(merged)
            try:
                raw = await response.aread()
            finally:
                await response.aclose()
        except BaseException as exc:
            self._open.failed(batch, exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        shares = self._split(raw, response.status_code, batch)
        headers = [
            (k, v) for k, v in response.headers.multi_items() if k.lower() not in _BODY_HEADERS
        ]
        for member, share in zip(batch.members, shares, strict=True):
            if not member.future.done():
                member.future.set_result(
                    self._httpx.Response(
                        response.status_code,
                        headers=headers,
                        content=share,
                        request=member.request,
                        extensions=response.extensions,
                    )
                )

    def _split(self, raw: bytes, status: int, batch: _Batch) -> list[bytes]:
        """Each member's share of the answer: its choices (renumbered from 0) and usage; an
        error answer (or one that cannot be split) is every member's as it came."""
        if len(batch.members) == 1:
            return [raw]
        try:
            payload = json.loads(raw) if status == 200 else None
        except ValueError:
            payload = None
        choices = payload.get("choices") if isinstance(payload, dict) else None
        if not isinstance(choices, list) or len(choices) != batch.n:
            return [raw] * len(batch.members)
        assert isinstance(payload, dict)
        usage = payload.get("usage")
        shares: list[bytes] = []
        start = 0
        for k, member in enumerate(batch.members):
            own = [{**c, "index": i} for i, c in enumerate(choices[start : start + member.n])]
            start += member.n
            share = {**payload, "choices": own}
            if k and isinstance(payload.get("id"), str):
                share["id"] = f"{payload['id']}-{k}"
            if isinstance(usage, dict):
                share["usage"] = _usage(usage, own)
            shares.append(json.dumps(share, separators=(",", ":"), ensure_ascii=False).encode())
        return shares


def _usage(usage: dict[str, Any], choices: list[dict[str, Any]]) -> dict[str, Any]:
    """A member's usage: the prompt's tokens, and its own choices' sampled tokens where the
    server lists them (it does: `token_ids`)."""
    if not all(isinstance(c.get("token_ids"), list) for c in choices):
        return usage
    completion = sum(len(c["token_ids"]) for c in choices)
    prompt = int(usage.get("prompt_tokens", 0))
    return {**usage, "completion_tokens": completion, "total_tokens": prompt + completion}


def coalescing_http_client(
    window: float, *, full_at: int | None = None, **client_kwargs: Any
) -> tuple[Any, CoalescingTransport]:
    """An HTTP client for `openai.AsyncOpenAI(http_client=...)` whose chat requests coalesce
    within `window` seconds (a whole group, `full_at`, at once), and its transport (for its
    stats). Its connection limits are the openai client's own defaults."""
    import openai

    httpx = httpx_module()
    inner = httpx.AsyncHTTPTransport(
        limits=httpx.Limits(max_connections=1000, max_keepalive_connections=100)
    )
    transport = CoalescingTransport(inner, window=window, full_at=full_at)
    # httpx asks of a transport only these methods (it is not an httpx class: which httpx
    # the installed openai uses is known at run time only).
    client = openai.DefaultAsyncHttpxClient(transport=cast(Any, transport), **client_kwargs)
    return client, transport
