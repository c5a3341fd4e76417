"""Prices without typing them: on Tinker, a run with no `--price-*` of its own is priced
from the dated list shipped with the package (cached prefill as listed), its cost lines say
"list prices of DATE", any price flag replaces the list, and the local backend never uses it.
The end-to-end case runs the `run` command through the real SDK against the double, with a
list that names the model the double serves."""

from __future__ import annotations

import re
from datetime import date

import pytest
from tinker_double import TinkerDouble

from tinker_tui.app.cli import build_parser, main
from tinker_tui.app.commands.run import plan_run
from tinker_tui.app.run_summary import spending_text
from tinker_tui.engine.config import RunConfig
from tinker_tui.engine.local import DEFAULT_BASE_MODEL
from tinker_tui.engine.metrics import list_prices
from tinker_tui.engine.metrics.cost import Prices, TokenUsage
from tinker_tui.engine.metrics.list_prices import (
    TINKER_LIST_PRICES,
    ListedPrice,
    PriceList,
    priced_as,
    with_list_prices,
)

LISTED = PriceList(
    date="2026-12-01",
    source="a test's own list",
    models={
        "Qwen/Qwen3.6-35B-A3B": ListedPrice(prefill=0.5, sample=1.5, train=1.0, prefill_cached=0.1),
        "Qwen/Qwen3.6-27B": ListedPrice(prefill=2.0, sample=6.0, train=4.0),
    },
)


def _config(**settings) -> RunConfig:
    return RunConfig().with_overrides({"base_model": "Qwen/Qwen3.6-35B-A3B", **settings})


def test_a_tinker_run_without_prices_is_priced_from_the_list_with_cached_prefill_as_listed():
    config = with_list_prices(_config(), "tinker", LISTED)
    prices = Prices.from_config(config)
    assert prices == Prices(prefill=0.5, prefill_cached=0.1, sample=1.5, train=1.0)
    assert config.price_list_date == "2026-12-01"
    assert priced_as(config.as_dict()) == " (list prices of 2026-12-01)"
    usage = TokenUsage(prefill=3_000_000, prefill_cached=1_000_000, sampled=1_000_000)
    assert prices.cost(usage) == pytest.approx(2 * 0.5 + 1 * 0.1 + 1 * 1.5)
    # an entry without a cached price: cached prefill costs what prefill does
    other = Prices.from_config(
        with_list_prices(_config(base_model="Qwen/Qwen3.6-27B"), "tinker", LISTED)
    )
    assert other.prefill_cached == other.prefill == 2.0


@pytest.mark.parametrize(
    ("backend", "settings"),
    [
        ("local", {}),  # the local backend is not billed
        ("tinker", {"price_train_per_mtok": 0.3}),  # any price of the user's replaces the list
        ("tinker", {"price_prefill_cached_per_mtok": 0.0}),
        ("tinker", {"base_model": "meta-llama/Llama-3.1-8B"}),  # not on the list
    ],
)
def test_the_list_is_not_used(backend, settings):
    config = _config(**settings)
    assert with_list_prices(config, backend, LISTED) == config
    assert priced_as(config.as_dict()) == ""


def test_the_shipped_list_is_dated_wherever_it_has_prices():
    """Only figures read on Tinker's pages, each list with the day it was read."""
    if TINKER_LIST_PRICES.models:
        assert date.fromisoformat(TINKER_LIST_PRICES.date)
    for price in TINKER_LIST_PRICES.models.values():
        assert min(price.prefill, price.sample, price.train) >= 0
    assert TINKER_LIST_PRICES.source.startswith("https://tinker-docs.thinkingmachines.ai/")
    assert spending_text({"cost/usd_total": 1.5}, " (list prices of 2026-12-01)").startswith(
        "$1.5000 (list prices of 2026-12-01); "
    )


def test_the_run_command_prices_a_tinker_run_from_the_list_and_flags_override(
    tmp_path, monkeypatch, capsys
):
    table = PriceList(
        date="2026-12-01",
        source="a test's own list",
        models={DEFAULT_BASE_MODEL: ListedPrice(prefill=10.0, sample=20.0, train=30.0)},
    )
    monkeypatch.setattr(list_prices, "TINKER_LIST_PRICES", table)
    db = tmp_path / "runs.db"
    args = ["run", "example", "--backend", "tinker", "--no-ui", "--db", str(db)]
    args += ["--base-model", DEFAULT_BASE_MODEL, "--warmup-steps", "0", "--eval-every", "0"]
    args += ["--steps", "2", "--group-size", "4", "--groups-per-step", "2"]
    with TinkerDouble(tmp_path / "service") as double:
        for name, value in double.env().items():
            monkeypatch.setenv(name, value)
        code = main(args)
        out, err = capsys.readouterr()
        assert code == 0, err[-2000:]
        steps = [line for line in out.splitlines() if "spent $" in line]
        assert len(steps) == 2, out
        assert all(re.search(r"spent \$\d+\.\d{4} \(list prices of 2026-12-01\)", s) for s in steps)
        spent = next(line for line in out.splitlines() if line.strip().startswith("spent:"))
        assert "(list prices of 2026-12-01);" in spent
        # a price flag replaces the list: the user's prices, and no date
        flagged = plan_run(build_parser().parse_args([*args, "--price-train-per-mtok", "1"]))
        assert flagged.config.price_train_per_mtok == 1.0
        assert flagged.config.price_prefill_per_mtok == 0.0
        assert flagged.config.price_list_date == ""
        # the local backend never uses it
        local = plan_run(build_parser().parse_args([*args[:3], "local", *args[4:]]))
        assert local.config.price_list_date == "" and local.config.price_train_per_mtok == 0.0
