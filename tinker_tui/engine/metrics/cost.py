"""Tokens and dollars: what a run has cost so far, per step and in total, at the user's prices.

`TokenUsage` counts what the backend was asked to do, as Tinker bills it: prefill (prompt)
tokens of every sampling call, of which some are cached (the service says how many of the
prompt's own in `SampleResponse.prompt_cache_hit_tokens`; for `num_samples = k` the other
k - 1 samples' prefill is billed as cached, per the SDK), sampled tokens, and trained tokens
(every Datum's model input through forward_backward). The base model's scoring for the KL
penalty is prefill too.

Prices are the run's settings (`price_*_per_mtok`, USD per million tokens): the user's, or
on Tinker with none given, the dated list shipped with the package, written into the
settings before the run starts (`engine.metrics.list_prices`). `CostMeter` turns each step's usage into the step's
metrics (`tokens/...`, `cost/...`) and says when the next step would pass `max_cost_usd`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from tinker_tui.engine.metrics import metric_keys as keys


@dataclass
class TokenUsage:
    """Tokens the backend processed (running totals; `minus` gives a step's share)."""

    prefill: int = 0
    prefill_cached: int = 0
    sampled: int = 0
    trained: int = 0

    def add_sample(
        self, prompt_tokens: int, num_samples: int, cache_hits: int, sampled: int
    ) -> None:
        """One sampling call: the prompt is prefilled once per sample; beyond the
        service's cache hits on the prompt itself, the other samples' prefill is cached."""
        self.prefill += prompt_tokens * num_samples
        self.prefill_cached += min(max(cache_hits, 0), prompt_tokens) + prompt_tokens * (
            num_samples - 1
        )
        self.sampled += sampled

    def add_prefill(self, tokens: int) -> None:
        self.prefill += tokens

    def add_trained(self, tokens: int) -> None:
        self.trained += tokens

    def copy(self) -> TokenUsage:
        return replace(self)

    def minus(self, earlier: TokenUsage) -> TokenUsage:
        return TokenUsage(
            **{f.name: getattr(self, f.name) - getattr(earlier, f.name) for f in fields(self)}
        )

    def plus(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            **{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)}
        )


@dataclass(frozen=True)
class Prices:
    """USD per million tokens (the user's settings)."""

    prefill: float = 0.0
    prefill_cached: float = 0.0
    sample: float = 0.0
    train: float = 0.0

    @classmethod
    def from_config(cls, config: Any) -> Prices:
        """The run's prices; cached prefill left unset (negative) costs what prefill does,
        not $0: a run that set only the prefill price would undercount."""
        cached = config.price_prefill_cached_per_mtok
        return cls(
            prefill=config.price_prefill_per_mtok,
            prefill_cached=config.price_prefill_per_mtok if cached < 0 else cached,
            sample=config.price_sample_per_mtok,
            train=config.price_train_per_mtok,
        )

    @property
    def known(self) -> bool:
        """Whether any price is set (without one, the run shows tokens but no dollars)."""
        return any((self.prefill, self.prefill_cached, self.sample, self.train))

    def cost(self, usage: TokenUsage) -> float:
        uncached = usage.prefill - usage.prefill_cached
        return (
            uncached * self.prefill
            + usage.prefill_cached * self.prefill_cached
            + usage.sampled * self.sample
            + usage.trained * self.train
        ) / 1e6


#: How the reason of a stop for the budget (`max_cost_usd`) begins (words for people:
#: readers go by its `RunFinished.cause`, "budget").
BUDGET_STOP = "budget: "

#: How many recent steps the budget's estimate of the next step averages over.
BUDGET_WINDOW = 5


class CostMeter:
    """Per step: the step's tokens and cost, the totals, and the budget check.

    `carried` are the totals of the run's earlier processes (a resumed run): what they
    spent was spent, the steps a resume redoes included."""

    def __init__(self, prices: Prices, max_cost_usd: float = 0.0) -> None:
        self.prices = prices
        self.max_cost_usd = max_cost_usd
        self.carried = TokenUsage()
        self.carried_usd = 0.0
        self._last = TokenUsage()
        self._recent: deque[float] = deque(maxlen=BUDGET_WINDOW)
        self._recent_sampling: deque[float] = deque(maxlen=BUDGET_WINDOW)
        self._warmup_usd = 0.0
        self.total_usd = 0.0
        # A resumed process samples its first step from nothing and samples ahead while
        # it trains: that step costs a step and a step's sampling.
        self._cold = False

    @property
    def budgeted(self) -> bool:
        """Whether there is a budget to keep (`max_cost_usd`, with prices to count)."""
        return self.max_cost_usd > 0 and self.prices.known

    def carry(self, metrics: Mapping[str, float], steps: int = 0) -> None:
        """Continue from the totals of the last step an earlier process recorded, `steps`
        steps into the run. Until this process has trained a step, the estimate of the next
        is the run's mean cost per step so far (else the last step's cost): the last step
        alone could be cheaper than the recent ones whose mean stopped the earlier process,
        and a resume with the same budget would sample again before finding out."""
        self.carried = TokenUsage(
            prefill=int(metrics.get(keys.TOKENS_PREFILL_TOTAL, 0)),
            prefill_cached=int(metrics.get(keys.TOKENS_PREFILL_CACHED_TOTAL, 0)),
            sampled=int(metrics.get(keys.TOKENS_SAMPLED_TOTAL, 0)),
            trained=int(metrics.get(keys.TOKENS_TRAINED_TOTAL, 0)),
        )
        self.carried_usd = float(metrics.get(keys.COST_USD_TOTAL, 0.0))
        self.total_usd = self.carried_usd
        last_step = metrics.get(keys.COST_USD_STEP)
        estimate = self.carried_usd / steps if steps > 0 else last_step
        if self.prices.known and isinstance(estimate, int | float) and estimate > 0:
            self._recent.append(float(estimate))
            if steps > 0:
                self._recent_sampling.append(
                    self.prices.cost(replace(self.carried, trained=0)) / steps
                )
                self._cold = True

    def warmed_up(self, usage: TokenUsage) -> None:
        """The format warm-up ended with the backend's running totals `usage`: its cost is
        counted (in the totals and the first step's share) but does not make the estimate
        of a step."""
        self._warmup_usd = self.prices.cost(usage.minus(self._last)) if self.prices.known else 0.0

    def step_metrics(self, usage: TokenUsage) -> dict[str, float]:
        """The metrics of a step that ends with the backend's running totals `usage`."""
        step = usage.minus(self._last)
        self._last = usage.copy()
        total = self.carried.plus(usage)
        metrics = {
            keys.TOKENS_PREFILL: float(step.prefill),
            keys.TOKENS_PREFILL_CACHED: float(step.prefill_cached),
            keys.TOKENS_SAMPLED: float(step.sampled),
            keys.TOKENS_TRAINED: float(step.trained),
            keys.TOKENS_PREFILL_TOTAL: float(total.prefill),
            keys.TOKENS_PREFILL_CACHED_TOTAL: float(total.prefill_cached),
            keys.TOKENS_SAMPLED_TOTAL: float(total.sampled),
            keys.TOKENS_TRAINED_TOTAL: float(total.trained),
        }
        if self.prices.known:
            step_usd = self.prices.cost(step)
            self.total_usd = self.carried_usd + self.prices.cost(usage)
            self._recent.append(max(step_usd - self._warmup_usd, 0.0))
            self._recent_sampling.append(self.prices.cost(replace(step, trained=0)))
            self._cold = False
            self._warmup_usd = 0.0
            metrics[keys.COST_USD_STEP] = step_usd
            metrics[keys.COST_USD_TOTAL] = self.total_usd
        return metrics

    def next_step_estimate(self) -> float:
        """What the next step will likely cost: the mean of the recent steps (and, the
        first of a resumed process, a step's sampling more)."""
        if not self._recent:
            return 0.0
        estimate = sum(self._recent) / len(self._recent)
        if self._cold and self._recent_sampling:
            estimate += sum(self._recent_sampling) / len(self._recent_sampling)
        return estimate

    def budget_passed_by_next_step(self) -> str:
        """Why the run must stop before the next step (it would pass `max_cost_usd`), or
        "" if it may go on (or there is no budget). Asked after each step and as a resumed
        run starts."""
        if self.max_cost_usd <= 0 or not self._recent:
            return ""
        estimate = self.next_step_estimate()
        if self.total_usd + estimate <= self.max_cost_usd:
            return ""
        return (
            f"the next step (about ${estimate:.4f}) would pass the budget max_cost_usd = "
            f"${self.max_cost_usd:g}: {self._spent(self.total_usd)}"
        )

    def budget_passed_by_training(
        self, usage: TokenUsage, tokens: int, what: str = "this step"
    ) -> str:
        """Why `what`, about to train `tokens`, must not (what is spent, its sampling
        included, and its training would pass `max_cost_usd`), or "" if it may. Asked
        before every step (the first has no estimate, and a step may cost more than the
        recent ones) and before the format warm-up. Rollouts keep sampling while the
        step trains, so what the recent steps sampled counts too: without it a step
        that fits on its own can end past the budget."""
        if not self.budgeted:
            return ""
        spent = self.carried_usd + self.prices.cost(usage)
        training = tokens * self.prices.train / 1e6
        meanwhile = ""
        if self._recent_sampling:
            training += sum(self._recent_sampling) / len(self._recent_sampling)
            meanwhile = ", with what rollouts sample meanwhile"
        if spent + training <= self.max_cost_usd:
            return ""
        return (
            f"training {what} (about ${training:.4f}{meanwhile}) would pass the budget "
            f"max_cost_usd = ${self.max_cost_usd:g}: {self._spent(spent)}"
        )

    def _spent(self, spent: float) -> str:
        over = spent - self.max_cost_usd
        return f"${spent:.4f} spent so far" + (f", ${over:.4f} past it" if over > 0 else "")


def projected_usd(
    total_usd: float, steps_done: int, start_step: int, max_steps: int, carried_usd: float = 0.0
) -> float | None:
    """The run's cost at `max_steps`, projected from the cost per step so far (None
    before the first step)."""
    done = steps_done - start_step
    if done <= 0:
        return None
    per_step = (total_usd - carried_usd) / done
    return total_usd + per_step * max(max_steps - steps_done, 0)
