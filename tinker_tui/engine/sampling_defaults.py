"""The sampling defaults of a run: what a request to the policy server gets when it leaves
temperature or max_tokens out.

An evaluation pins them instead (`pin_temperature`, `cap_max_tokens`): its protocol holds
for every request, whatever the task asks.

Its own module because two sides share one instance: the pipeline changes the temperature
when the live knob is set, and the policy server reads it for the next request.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class SamplingDefaults:
    """Defaults for requests that leave them out; mutable so a live knob change applies to
    the next request."""

    temperature: float = 1.0
    max_tokens: int = 64
    #: An evaluation's protocol (`tinker-tui eval`): `temperature` for every request, the
    #: task's own included, and `max_tokens` as a cap on each request's.
    pin_temperature: bool = False
    cap_max_tokens: bool = False
