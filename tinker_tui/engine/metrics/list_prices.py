"""Tinker's published per-model prices, dated, shipped with the package: a run on Tinker
with no `price_*` setting of its own is priced from them, without the network.

Prices change and differ by model, so the table says the day it was read, and a run priced
from it says so wherever it shows dollars ("list prices of DATE"); any `--price-*` flag
replaces the whole table for that run. Cached prefill is priced as Tinker publishes it (its
own column); an entry without one costs what prefill does, as the user's settings do.

Only figures read on Tinker's own pages go here. None could be verified yet (its Models &
Pricing page renders its table in the browser, and transcriptions elsewhere are not the
source), so `TINKER_LIST_PRICES` ships empty and a run falls back to the user's prices.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tinker_tui.engine.config import RunConfig


@dataclass(frozen=True)
class ListedPrice:
    """One model's published prices, USD per million tokens (cached prefill: None when the
    page gives none, then it costs what prefill does)."""

    prefill: float
    sample: float
    train: float
    prefill_cached: float | None = None


@dataclass(frozen=True)
class PriceList:
    """A dated table of published prices (`date`: ISO day it was read; `source`: where)."""

    date: str
    source: str
    models: Mapping[str, ListedPrice] = field(default_factory=dict)


#: Tinker's published prices. Empty: no figure could be verified on Tinker's own pages
#: (see the module docstring); add entries only with the day they were read.
TINKER_LIST_PRICES = PriceList(
    date="", source="https://tinker-docs.thinkingmachines.ai/tinker/models/", models={}
)

#: The settings a user prices a run with; any of them given replaces the list.
PRICE_SETTINGS = (
    "price_prefill_per_mtok",
    "price_prefill_cached_per_mtok",
    "price_sample_per_mtok",
    "price_train_per_mtok",
)


def user_priced(config: RunConfig) -> bool:
    """Whether the run has a price of the user's (cached prefill's unset is -1)."""
    return bool(
        config.price_prefill_per_mtok
        or config.price_sample_per_mtok
        or config.price_train_per_mtok
        or config.price_prefill_cached_per_mtok >= 0
    )


def with_list_prices(config: RunConfig, backend: str, prices: PriceList | None = None) -> RunConfig:
    """`config` priced from the list (`TINKER_LIST_PRICES` unless given) where it applies:
    on Tinker, with no price of the user's, for a model the list has. The prices go into
    the settings (so the store, a resume and every reader see them) with `price_list_date`
    saying where they came from."""
    prices = prices if prices is not None else TINKER_LIST_PRICES
    listed = prices.models.get(config.base_model)
    if backend != "tinker" or listed is None or user_priced(config):
        return config
    return config.with_overrides(
        {
            "price_prefill_per_mtok": listed.prefill,
            "price_prefill_cached_per_mtok": (
                -1.0 if listed.prefill_cached is None else listed.prefill_cached
            ),
            "price_sample_per_mtok": listed.sample,
            "price_train_per_mtok": listed.train,
            "price_list_date": prices.date,
        }
    )


def priced_as(config_values: Mapping[str, object]) -> str:
    """ " (list prices of DATE)" for a run priced from the list, else "" (for the lines
    that show dollars; `config_values`: the run's settings, as `RunStarted` carries them)."""
    date = config_values.get("price_list_date")
    return f" (list prices of {date})" if isinstance(date, str) and date else ""
