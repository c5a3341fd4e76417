"""Token-level sampling straight from the backend, for rollouts that build their own tokens.

A tinker-cookbook `Env` hands over prompt tokens and takes sampled tokens back; routing that
through the chat server would render messages it never had. `DirectSampler` calls the same
`sample` the policy server calls (the `BackendSession`, or its view from the rollout loop),
with the run's live sampling defaults (or an evaluation's, pinned as on the server), and
returns each sample as the `SampledTurn` the trainer reads: exact tokens, their logprobs and
the policy version that made them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import tinker

from tinker_tui.engine.rollouts.trajectory import SampledTurn
from tinker_tui.engine.sampling_defaults import SamplingDefaults


class _Policy(Protocol):
    """What `DirectSampler` needs of the policy (the policy server needs the same)."""

    @property
    def end_tokens(self) -> Sequence[int]: ...

    async def sample(
        self,
        prompt: tinker.ModelInput,
        num_samples: int,
        sampling_params: tinker.SamplingParams,
        *,
        version: int | None = None,
        top_logprobs: int = 0,
    ) -> tuple[tinker.SampleResponse, int]: ...


class DirectSampler:
    """A `TokenSampler` over the policy: one `sample` call per completion, no HTTP."""

    def __init__(self, policy: _Policy, defaults: SamplingDefaults, tokenizer: Any) -> None:
        self._policy = policy
        self._defaults = defaults
        self._tokenizer = tokenizer

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    async def sample(
        self,
        prompt: Any,
        *,
        stop: Sequence[str] | Sequence[int] = (),
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> SampledTurn:
        model_input = (
            prompt
            if isinstance(prompt, tinker.ModelInput)
            else tinker.ModelInput.from_ints([int(t) for t in prompt])
        )
        stops: list[Any] = list(stop)
        ends = [int(t) for t in self._policy.end_tokens]
        if not stops or all(isinstance(s, int) for s in stops):
            # Token stops: the model's own end tokens end a sample too (as on the server).
            stops = list(dict.fromkeys([*stops, *ends]))
        params = tinker.SamplingParams(
            max_tokens=self._defaults.max_tokens_for(
                None if max_tokens is None else int(max_tokens)
            ),
            temperature=self._defaults.temperature_for(
                None if temperature is None else float(temperature)
            ),
            stop=stops or None,
        )
        response, version = await self._policy.sample(model_input, 1, params)
        sequence = response.sequences[0]
        tokens = [int(t) for t in sequence.tokens]
        logprobs = [float(x) for x in (sequence.logprobs or [])]
        finish = "stop" if sequence.stop_reason == "stop" else "length"
        # A sample ends at the first end token the model declares, as the server's do.
        end_at = next((i for i, t in enumerate(tokens) if t in ends), None)
        if end_at is not None and end_at + 1 < len(tokens):
            tokens, logprobs, finish = tokens[: end_at + 1], logprobs[: end_at + 1], "stop"
        return SampledTurn(
            tuple(model_input.to_ints()), tuple(tokens), tuple(logprobs), version, finish
        )
