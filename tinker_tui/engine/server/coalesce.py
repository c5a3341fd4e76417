"""Coalesced sampling: a group's concurrent requests become one `sample(num_samples=k)`.

A group's rollouts start together and send the same messages, so their chat requests
render to the same prompt with the same sampling parameters. Sent one by one they cost
k round trips and k prefills (which Tinker bills per token); sent as one request with
`num_samples=k` they cost one of each. `SampleCoalescer` sits between the chat handler and
the policy: the first request for a prompt opens a batch for `window` seconds (a lone
request is held that long and no longer), the requests that arrive meanwhile with the
same key join it, and one sampling call serves them all, its sequences split back in
arrival order (`n` of them to a request that asked for `n`).

What must match to share a call (`_key`): the prompt's tokens, every sampling parameter
but the seed, the requested policy version, top_logprobs and the forced-call constraint.
A seeded request keeps its seed's meaning: it shares a call only with requests of the
same seed and the same `n`, which get the very same sequences it would have got alone
(a seed fixes the answer). A member that is cancelled (its client left) leaves the batch
before it is sent, or gives up its share after; the call is cancelled only when no member
waits for it any more. An error of the call is every member's error.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import tinker

from tinker_tui.engine.server.open_batches import OpenBatches

if TYPE_CHECKING:
    from tinker_tui.engine.server.handler import PolicySource

#: The most samples one coalesced call asks for; a batch that would pass it is sent and a
#: new one opened.
MAX_SAMPLES_PER_CALL = 128


@dataclass(eq=False)
class _Member:
    num_samples: int
    future: asyncio.Future[tuple[Any, int]]


@dataclass(eq=False)
class _Batch:
    key: tuple[Any, ...]
    prompt: tinker.ModelInput
    params: tinker.SamplingParams
    version: int | None
    top_logprobs: int
    constraint: Any
    constraint_prefix: str
    #: Seeded: every member gets the same `num_samples` sequences (see the module).
    shared: bool
    members: list[_Member] = field(default_factory=list)
    timer: asyncio.TimerHandle | None = None
    task: asyncio.Task[None] | None = None

    @property
    def num_samples(self) -> int:
        if self.shared:
            return self.members[0].num_samples if self.members else 0
        return sum(m.num_samples for m in self.members)

    def waiting(self) -> list[_Member]:
        return [m for m in self.members if not m.future.done()]


@dataclass
class CoalescingStats:
    """What coalescing did, for benches and the log: requests in, sampling calls out."""

    requests: int = 0
    calls: int = 0
    samples: int = 0


class SampleCoalescer:
    """A `PolicySource` that coalesces concurrent equal requests into one sampling call.

    `window` 0 sends every request at once, as it comes (no coalescing). `full_at` (the
    run's group size): a batch that holds that many samples is a whole group and is sent at
    once, without waiting out the window."""

    def __init__(
        self,
        session: PolicySource,
        *,
        window: float,
        max_samples: int = MAX_SAMPLES_PER_CALL,
        full_at: int | None = None,
    ) -> None:
        self.session = session
        self.window = window
        self.max_samples = max_samples
        self.full_at = full_at
        self.stats = CoalescingStats()
        self._open: OpenBatches[_Batch] = OpenBatches()

    # The handler reads these from its policy.
    @property
    def renderer(self) -> Any:
        return self.session.renderer

    @property
    def version(self) -> int:
        return int(self.session.version)

    @property
    def end_tokens(self) -> Sequence[int]:
        return tuple(self.session.end_tokens)

    async def sample(
        self,
        prompt: tinker.ModelInput,
        num_samples: int,
        sampling_params: tinker.SamplingParams,
        *,
        version: int | None = None,
        top_logprobs: int = 0,
        constraint: Any = None,
        constraint_prefix: str = "",
    ) -> tuple[Any, int]:
        self.stats.requests += 1
        if self.window <= 0 or num_samples > self.max_samples:
            self.stats.calls += 1
            self.stats.samples += num_samples
            response, used = await self.session.sample(
                prompt,
                num_samples,
                sampling_params,
                version=version,
                top_logprobs=top_logprobs,
                constraint=constraint,
                constraint_prefix=constraint_prefix,
            )
            return response, used
        shared = sampling_params.seed is not None
        key = _key(
            prompt,
            num_samples,
            sampling_params,
            version,
            top_logprobs,
            constraint,
            constraint_prefix,
        )
        batch = self._open.get(key)
        if batch is not None and not shared and batch.num_samples + num_samples > self.max_samples:
            self._send(batch)
            batch = None
        if batch is None:
            batch = _Batch(
                key,
                prompt,
                sampling_params,
                version,
                top_logprobs,
                constraint,
                constraint_prefix,
                shared,
            )
            self._open.add(batch, asyncio.get_running_loop(), self.window, self._send)
        member = _Member(num_samples, asyncio.get_running_loop().create_future())
        batch.members.append(member)
        if self.full_at is not None and batch.num_samples >= self.full_at:
            self._send(batch)
        try:
            return await member.future
        except asyncio.CancelledError:
            self._open.left(batch, member)
            raise

    def _send(self, batch: _Batch) -> None:
        if not self._open.closing(batch):
            return
        self.stats.calls += 1
        self.stats.samples += batch.num_samples
        batch.task = asyncio.get_running_loop().create_task(
            self._call(batch), name="coalesced-sample"
        )

    async def _call(self, batch: _Batch) -> None:
        asked = batch.num_samples
        try:
            response, used = await self.session.sample(
                batch.prompt,
                asked,
                batch.params,
                version=batch.version,
                top_logprobs=batch.top_logprobs,
                constraint=batch.constraint,
                constraint_prefix=batch.constraint_prefix,
            )
            sequences = list(response.sequences)
            if len(sequences) != asked:
                raise RuntimeError(
                    f"the sampler returned {len(sequences)} sequences for num_samples={asked}"
                )
        except BaseException as exc:
            self._open.failed(batch, exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        split: Callable[[int, int], Any] = (
            (lambda start, count: response)
            if batch.shared
            else (
                lambda start, count: dataclasses.replace(
                    response, sequences=sequences[start : start + count]
                )
            )
        )
        start = 0
        for member in batch.members:
            if not member.future.done():
                member.future.set_result((split(start, member.num_samples), used))
            if not batch.shared:
                start += member.num_samples


def _key(
    prompt: tinker.ModelInput,
    num_samples: int,
    params: tinker.SamplingParams,
    version: int | None,
    top_logprobs: int,
    constraint: Any,
    constraint_prefix: str,
) -> tuple[Any, ...]:
    """What requests must share to share a call (see the module docstring)."""
    fields = params.model_dump()
    seed = fields.pop("seed", None)
    per_seed = (seed, num_samples) if seed is not None else None
    return (
        tuple(prompt.to_ints()),
        json.dumps(fields, sort_keys=True, default=str),
        per_seed,
        version,
        top_logprobs,
        id(constraint) if constraint is not None else None,
        constraint_prefix,
    )
