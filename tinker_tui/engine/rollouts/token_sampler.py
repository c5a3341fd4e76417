"""What a token-level rollout samples with: prompt tokens in, sampled tokens out.

A task that speaks tokens (`Task.samples_tokens`: a tinker-cookbook environment builds its own
prompt tokens and reads back sampled tokens) has no use for an OpenAI client and its HTTP
round trip; its rollout is handed a `TokenSampler` instead, which samples straight from the
backend's own sampling client (the local model, or Tinker's). What comes back is a
`SampledTurn`: exactly what a chat completion's choice carries to the trainer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from tinker_tui.engine.rollouts.trajectory import SampledTurn


@runtime_checkable
class TokenSampler(Protocol):
    """Samples one completion of `prompt` from the policy being trained."""

    async def sample(
        self,
        prompt: Any,
        *,
        stop: Sequence[str] | Sequence[int] = (),
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> SampledTurn:
        """`prompt`: a `tinker.ModelInput` or a sequence of token ids. `stop`: strings or
        token ids that end the sample (the model's own end tokens always do). `max_tokens`
        and `temperature` default to the run's (its live knobs)."""
        ...

    @property
    def tokenizer(self) -> Any:
        """The policy's tokenizer (to decode what was sampled, for display)."""
        ...
