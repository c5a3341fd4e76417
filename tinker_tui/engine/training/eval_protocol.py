"""An evaluation's protocol: everything besides the weights that moves its numbers (the
sampling settings, the renderer and thinking, the scenarios, k, what counts as success).

Two evaluations' numbers compare only when their protocols are equal (a maintainer of
tinker-cookbook: scores stay comparable only when the protocol is pinned), so every
evaluation stores its protocol with its result (`tinker-tui eval` and the evaluations during
a run alike), and `compare` and `runs` mark numbers whose protocols differ.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from tinker_tui.engine.sampling_defaults import SamplingDefaults

#: The success threshold when none is given: a sample succeeds when its reward is >= 1.
DEFAULT_SUCCESS_THRESHOLD = 1.0
#: Fields that do not change what a sample's number means: how many samples were drawn
#: (pass@k is labelled with its k, and mean@k is the same mean for any k).
NOT_COMPARED = frozenset({"k"})


@dataclass(frozen=True, slots=True)
class EvalProtocol:
    #: Which scenarios: "eval_scenarios", or "scenarios[:N]" (the first N of the task's
    #: training stream, seeded `seed`, when the task has no eval scenarios).
    split: str = "eval_scenarios"
    k: int = 1
    temperature: float = 1.0
    #: Whether `temperature` is pinned on every sampling request (`tinker-tui eval`), or
    #: only the default for requests that leave it out (evaluations during a run).
    temperature_pinned: bool = False
    #: A cap on each request's max_tokens (pinned), else the default for requests that
    #: leave it out.
    max_tokens: int = 64
    max_tokens_pinned: bool = False
    renderer: str = ""
    #: "on", "off", or "" when the renderer does not say.
    thinking: str = ""
    success_threshold: float = DEFAULT_SUCCESS_THRESHOLD
    seed: int = 0

    @classmethod
    def build(
        cls,
        renderer: str,
        *,
        temperature: float | None,
        max_tokens: int | None,
        defaults: SamplingDefaults | None = None,
        k: int = 1,
        split: str = "eval_scenarios",
        success_threshold: float = DEFAULT_SUCCESS_THRESHOLD,
        seed: int = 0,
    ) -> EvalProtocol:
        """The one way an evaluation's protocol is made (`tinker-tui eval`, a run's
        evaluations), so equal settings give equal keys: a `temperature` or `max_tokens`
        given is pinned (on every request; a cap), None takes `defaults`' (the run's) for
        requests that leave it out."""
        fallback = defaults if defaults is not None else SamplingDefaults()
        return cls(
            split=split,
            k=k,
            temperature=fallback.temperature if temperature is None else temperature,
            temperature_pinned=temperature is not None,
            max_tokens=fallback.max_tokens if max_tokens is None else max_tokens,
            max_tokens_pinned=max_tokens is not None,
            renderer=renderer,
            thinking=thinking_of(renderer),
            success_threshold=success_threshold,
            seed=seed,
        )

    def sampling_defaults(self) -> SamplingDefaults:
        """What the policy server applies to this evaluation's requests."""
        return SamplingDefaults(
            temperature=self.temperature,
            max_tokens=self.max_tokens,
            pin_temperature=self.temperature_pinned,
            cap_max_tokens=self.max_tokens_pinned,
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> EvalProtocol | None:
        """The protocol stored as `data`; None for an evaluation that stored none (recorded
        by an older tinker-tui)."""
        if not data:
            return None
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def compared(self) -> dict[str, Any]:
        return {k: v for k, v in self.as_dict().items() if k not in NOT_COMPARED}

    def key(self) -> str:
        """A short stable id of what makes numbers comparable (k left out)."""
        text = json.dumps(self.compared(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:10]

    def text(self) -> str:
        pinned = {True: "", False: " (default)"}
        return (
            f"{self.split}, k={self.k}, temperature {self.temperature:g}"
            f"{pinned[self.temperature_pinned]}, max_tokens {self.max_tokens}"
            f"{pinned[self.max_tokens_pinned]}, renderer {self.renderer or '-'}"
            f", thinking {self.thinking or 'n/a'}, success: reward >= "
            f"{self.success_threshold:g}"
        )


@dataclass(frozen=True, slots=True)
class RunEvalSettings:
    """What a run's `eval_*` settings (`engine.config`) say its own evaluations sample
    under: a pinned temperature and max_tokens cap (None: the run's sampling defaults, for
    requests that leave them out), k samples per scenario, the success threshold. Read by
    the run's evaluator and by `tinker-tui eval` of the run's checkpoints, so both build
    the same protocol from them."""

    temperature: float | None = None
    max_tokens: int | None = None
    k: int = 1
    success_threshold: float = DEFAULT_SUCCESS_THRESHOLD

    @classmethod
    def of(cls, settings: Mapping[str, Any]) -> RunEvalSettings:
        """From a run's settings (`RunConfig.as_dict()`, or as its store keeps them: a run
        of an older tinker-tui has none, and sampled as the defaults say)."""
        temperature = float(settings.get("eval_temperature", -1.0))
        max_tokens = int(settings.get("eval_max_tokens", 0) or 0)
        threshold = settings.get("eval_success_threshold", DEFAULT_SUCCESS_THRESHOLD)
        return cls(
            temperature=None if temperature < 0 else temperature,  # -1: not pinned
            max_tokens=max_tokens or None,  # 0: not pinned
            k=int(settings.get("eval_samples", 1) or 1),
            success_threshold=float(threshold),
        )

    @property
    def pinned(self) -> bool:
        """Whether the run set any of them (each differs from its default)."""
        return self != RunEvalSettings()

    def protocol(self, renderer: str, defaults: SamplingDefaults) -> EvalProtocol:
        """The protocol of the run's evaluations; `defaults`: the run's sampling defaults."""
        return EvalProtocol.build(
            renderer,
            temperature=self.temperature,
            max_tokens=self.max_tokens,
            defaults=defaults,
            k=self.k,
            success_threshold=self.success_threshold,
        )


def thinking_of(renderer: str) -> str:
    """Whether a tinker-cookbook renderer thinks, where its name says so."""
    if "disable_thinking" in renderer:
        return "off"
    if renderer.startswith(("qwen3", "deepseekv3_thinking", "kimi_k2")):
        return "on"
    return ""


def differences(a: EvalProtocol | None, b: EvalProtocol | None) -> list[str]:
    """The compared fields in which two protocols differ ("protocol" when one is unknown)."""
    if a is None or b is None:
        return [] if a is b else ["protocol"]
    x, y = a.compared(), b.compared()
    return [k for k in x if x[k] != y.get(k)]
