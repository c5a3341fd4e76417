"""Tokens and cost (engine.metrics.cost): counting as Tinker bills, the user's prices, totals across
a resume, and the budget that stops a run before the step that would pass it."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tinker_tui.app.exit_codes import EXIT_BUDGET
from tinker_tui.engine.config import ConfigError, RunConfig
from tinker_tui.engine.metrics import metric_keys as keys
from tinker_tui.engine.metrics.cost import CostMeter, Prices, TokenUsage, projected_usd

ROOT = Path(__file__).resolve().parents[1]  # this checkout's code, not an installed one


def test_a_sampling_call_prefills_each_sample_and_the_shared_ones_are_cached():
    usage = TokenUsage()
    usage.add_sample(prompt_tokens=100, num_samples=16, cache_hits=40, sampled=16 * 8)
    assert usage.prefill == 1600
    assert usage.prefill_cached == 40 + 15 * 100
    assert usage.sampled == 128
    usage.add_sample(prompt_tokens=10, num_samples=1, cache_hits=999, sampled=3)
    assert usage.prefill_cached == 1540 + 10  # never more than the prompt


def test_cost_at_the_users_prices():
    prices = Prices(prefill=2.0, prefill_cached=0.5, sample=4.0, train=6.0)
    usage = TokenUsage(
        prefill=3_000_000, prefill_cached=2_000_000, sampled=500_000, trained=1_000_000
    )
    assert prices.cost(usage) == pytest.approx(1 * 2.0 + 2 * 0.5 + 0.5 * 4.0 + 1 * 6.0)
    assert not Prices().known


def test_step_metrics_give_each_step_its_share_and_the_totals():
    meter = CostMeter(Prices(train=1.0, sample=2.0))
    running = TokenUsage(sampled=1_000_000, trained=2_000_000)
    first = meter.step_metrics(running)
    running = running.plus(TokenUsage(sampled=500_000))
    second = meter.step_metrics(running)
    assert first[keys.TOKENS_TRAINED] == 2_000_000 and second[keys.TOKENS_TRAINED] == 0
    assert second[keys.TOKENS_SAMPLED] == 500_000
    assert second[keys.TOKENS_SAMPLED_TOTAL] == 1_500_000
    assert first[keys.COST_USD_STEP] == pytest.approx(4.0)
    assert second[keys.COST_USD_STEP] == pytest.approx(1.0)
    assert second[keys.COST_USD_TOTAL] == pytest.approx(5.0)
    # without prices: tokens, no dollars
    assert keys.COST_USD_TOTAL not in CostMeter(Prices()).step_metrics(running)


def test_a_resumed_run_carries_what_was_spent():
    meter = CostMeter(Prices(train=1.0))
    meter.carry({keys.TOKENS_TRAINED_TOTAL: 3_000_000, keys.COST_USD_TOTAL: 3.0})
    metrics = meter.step_metrics(TokenUsage(trained=1_000_000))
    assert metrics[keys.TOKENS_TRAINED_TOTAL] == 4_000_000
    assert metrics[keys.COST_USD_TOTAL] == pytest.approx(4.0)
    assert projected_usd(
        4.0, steps_done=11, start_step=10, max_steps=20, carried_usd=3.0
    ) == pytest.approx(13.0)
    assert projected_usd(0.0, steps_done=10, start_step=10, max_steps=20) is None


def test_the_budget_stops_before_the_step_that_would_pass_it():
    meter = CostMeter(Prices(train=1.0), max_cost_usd=3.5)
    running = TokenUsage()
    stops = []
    for _ in range(5):
        running = running.plus(TokenUsage(trained=1_000_000))  # $1 a step
        meter.step_metrics(running)
        stops.append(meter.budget_passed_by_next_step())
    assert [bool(s) for s in stops] == [False, False, True, True, True]
    assert "max_cost_usd = $3.5" in stops[2] and "$3.0000 spent" in stops[2]
    assert not CostMeter(Prices(train=1.0)).budget_passed_by_next_step()  # no budget


def test_a_step_that_would_pass_the_budget_is_not_trained_even_the_first():
    """No estimate yet (the first step), or a step dearer than the recent ones: what is
    spent (its sampling included) and its training are known before it trains."""
    meter = CostMeter(Prices(sample=1.0, train=1.0), max_cost_usd=0.5)
    sampled = TokenUsage(sampled=200_000)  # $0.2 of sampling so far
    assert meter.budget_passed_by_training(sampled, 200_000) == ""  # $0.4 in all: fits
    why = meter.budget_passed_by_training(sampled, 400_000)  # $0.6: it would not
    assert why.startswith(
        "training this step (about $0.4000) would pass the budget "
        "max_cost_usd = $0.5: $0.2000 spent so far"
    ), why
    assert "past it" not in why
    spent = meter.budget_passed_by_training(TokenUsage(sampled=700_000), 0)
    assert spent.endswith("$0.7000 spent so far, $0.2000 past it"), spent  # says so
    assert CostMeter(Prices(train=1.0)).budget_passed_by_training(sampled, 10**9) == ""


def test_what_rollouts_sample_while_a_step_trains_counts_against_the_budget():
    """Sampling runs on while a step trains: a step whose training alone fits, but whose
    step ends past the budget once the recent steps' sampling is added, is not trained."""
    meter = CostMeter(Prices(sample=1.0, train=1.0), max_cost_usd=1.0)
    running = TokenUsage(sampled=100_000, trained=100_000)  # a step: $0.1 + $0.1
    meter.step_metrics(running)
    assert meter.budget_passed_by_training(running, 700_000) == ""  # 0.2 + 0.7 + 0.1
    why = meter.budget_passed_by_training(running, 750_000)  # 0.2 + 0.75 + 0.1 > 1
    assert why.startswith(
        "training this step (about $0.8500, with what rollouts sample meanwhile) would pass"
    ), why


def test_a_resumed_run_past_its_budget_stops_before_its_first_step():
    """The last step an earlier process recorded is the estimate of the next: a run the
    budget stopped, resumed with the same budget, must not train another step."""
    meter = CostMeter(Prices(train=1.0), max_cost_usd=3.5)
    meter.carry(
        {keys.COST_USD_TOTAL: 3.0, keys.COST_USD_STEP: 1.0, keys.TOKENS_TRAINED_TOTAL: 3_000_000}
    )
    assert "the next step (about $1.0000) would pass" in meter.budget_passed_by_next_step()
    roomier = CostMeter(Prices(train=1.0), max_cost_usd=10.0)
    roomier.carry({keys.COST_USD_TOTAL: 3.0, keys.COST_USD_STEP: 1.0})
    assert roomier.budget_passed_by_next_step() == ""
    # The last step was cheap ($0.5), the run's steps cost $1 each on average: the mean,
    # as the earlier process's recent steps said, not the last step alone.
    cheap_last = CostMeter(Prices(train=1.0), max_cost_usd=3.8)
    cheap_last.carry({keys.COST_USD_TOTAL: 3.0, keys.COST_USD_STEP: 0.5}, steps=3)
    assert "the next step (about $1.0000) would pass" in cheap_last.budget_passed_by_next_step()
    # A resumed process samples its first step from nothing and ahead while it trains:
    # $0.5 of a $1 step is sampling, so its first step is estimated at $1.5.
    sampler = CostMeter(Prices(sample=1.0, train=1.0), max_cost_usd=4.2)
    sampler.carry(
        {
            keys.COST_USD_TOTAL: 3.0,
            keys.TOKENS_SAMPLED_TOTAL: 1_500_000,
            keys.TOKENS_TRAINED_TOTAL: 1_500_000,
        },
        steps=3,
    )
    assert "the next step (about $1.5000) would pass" in sampler.budget_passed_by_next_step()
    sampler.step_metrics(TokenUsage(sampled=500_000, trained=500_000))  # it trained one
    assert sampler.next_step_estimate() == pytest.approx(1.0)


def test_the_warm_up_counts_in_the_totals_but_not_in_a_steps_estimate():
    meter = CostMeter(Prices(train=1.0), max_cost_usd=100.0)
    warm = TokenUsage(trained=10_000_000)  # a $10 warm-up
    meter.warmed_up(warm)
    first = meter.step_metrics(warm.plus(TokenUsage(trained=1_000_000)))
    assert first[keys.COST_USD_STEP] == pytest.approx(11.0)  # the steps still add up
    assert first[keys.COST_USD_TOTAL] == pytest.approx(11.0)
    assert meter.next_step_estimate() == pytest.approx(1.0)


def test_a_budget_without_prices_is_refused():
    with pytest.raises(ConfigError, match="max_cost_usd needs prices"):
        RunConfig(max_cost_usd=1.0)
    with pytest.raises(ConfigError, match="price_train_per_mtok must be 0 or more"):
        RunConfig(price_train_per_mtok=-1.0)


def _run(tmp_path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        k: v for k, v in os.environ.items() if k not in ("TINKER_API_KEY", "TINKER_CREDENTIAL_CMD")
    }
    env["HOME"] = str(tmp_path)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "tinker_tui.app.cli",
            "run",
            "example",
            "--no-ui",
            "--db",
            str(tmp_path / "runs.db"),
            "--warmup-steps",
            "0",
            "--eval-every",
            "0",
            *args,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        cwd=ROOT,
    )


def _metrics(tmp_path) -> list[dict]:
    (path,) = tmp_path.glob("*.metrics.jsonl")
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in rows if keys.TOKENS_TRAINED in json.dumps(r)]


def _step_metrics(row: dict) -> dict:
    return row.get("metrics", row)


def test_a_run_on_the_local_backend_stops_at_its_budget_naming_it(tmp_path):
    """Tokens and dollars per step reach the JSONL; the run stops gracefully (a final
    checkpoint, exit 5) before the step that would pass max_cost_usd."""
    first = _run(
        tmp_path,
        "--steps",
        "2",
        "--price-train-per-mtok",
        "1000000",
        "--price-sample-per-mtok",
        "1000000",
        "--price-prefill-per-mtok",
        "1000000",
    )
    assert first.returncode == 0, first.stderr[-2000:]
    rows = [_step_metrics(r) for r in _metrics(tmp_path)]
    per_step = rows[-1][keys.COST_USD_TOTAL] / len(rows)
    for row in rows:  # sampling runs ahead of training: a step may sample nothing new
        assert row[keys.TOKENS_TRAINED] > 0
        assert row[keys.TOKENS_PREFILL] >= row[keys.TOKENS_PREFILL_CACHED] >= 0
    assert sum(r[keys.TOKENS_SAMPLED] for r in rows) > 0
    assert sum(r[keys.TOKENS_PREFILL_CACHED] for r in rows) > 0
    budget = per_step * 3.5  # about three and a half steps' worth
    for old in tmp_path.glob("*.metrics.jsonl"):
        old.unlink()
    (tmp_path / "runs.db").unlink()
    done = _run(
        tmp_path,
        "--steps",
        "40",
        "--price-train-per-mtok",
        "1000000",
        "--price-sample-per-mtok",
        "1000000",
        "--price-prefill-per-mtok",
        "1000000",
        "--max-cost-usd",
        f"{budget:.6f}",
    )
    assert done.returncode == EXIT_BUDGET, done.stderr[-2000:]  # not a completed run's 0
    assert "max_cost_usd" in done.stdout + done.stderr
    steps = [line for line in done.stdout.splitlines() if line.startswith("step ")]
    assert steps and all(re.search(r"  spent \$\d+\.\d{4}  ", line) for line in steps), steps
    assert re.search(
        r"^  spent: \$\d+\.\d{4}; tokens prefill [\d,]+ \([\d,]+ cached\), "
        r"sampled [\d,]+, trained [\d,]+$",
        done.stdout,
        re.M,
    ), done.stdout
    # The same budget would stop a resume at once: the command to continue raises it.
    assert re.search(r"continue: .* --resume \S+ .*--max-cost-usd \d", done.stdout), done.stdout
    rows = [_step_metrics(r) for r in _metrics(tmp_path)]
    assert 1 <= len(rows) < 40
    assert rows[-1][keys.COST_USD_TOTAL] <= budget
    assert rows[-1][keys.COST_USD_TOTAL] == pytest.approx(sum(r[keys.COST_USD_STEP] for r in rows))
    with sqlite3.connect(tmp_path / "runs.db") as conn:
        stops = conn.execute("select source, args from commands where command = 'stop'").fetchall()
    conn.close()
    # The run stopped itself: the control view's "from" column must not say a person did.
    assert [source for source, _ in stops] == ["engine"], stops
    assert "budget" in stops[0][1]
    # Resumed with the same budget: it stops before its first step, and says what to do.
    run_id = re.search(r"--resume (\S+)", done.stdout)[1]
    again = subprocess.run(
        [
            sys.executable,
            "-m",
            "tinker_tui.app.cli",
            "run",
            "example",
            "--resume",
            run_id,
            "--no-ui",
            "--db",
            str(tmp_path / "runs.db"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        env={**os.environ, "HOME": str(tmp_path)},
    )
    assert again.returncode == EXIT_BUDGET, again.stderr[-2000:]
    assert not [line for line in again.stdout.splitlines() if line.startswith("step ")]
    assert "raise max_cost_usd to go on" in again.stdout, again.stdout
    assert len(_metrics(tmp_path)) == len(rows)


# ---------------------------------------------------------------------- reconciliation
def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    full = dict(os.environ, **env)
    full.pop("HF_HUB_OFFLINE", None)
    return subprocess.run(
        [sys.executable, "-m", "tinker_tui.app.cli", *args],
        capture_output=True,
        text=True,
        env=full,
        timeout=600,
        cwd=ROOT,
    )


def test_cost_reconciles_a_tinker_run_with_the_services_billing(tmp_path):
    """Through the double: the run's tokens beside Tinker's billing usage for its session;
    a key without billing access and data that lags are said as such."""
    from tinker_double import Burst, Faults, TinkerDouble

    db = str(tmp_path / "runs.db")
    with TinkerDouble(tmp_path / "ckpt") as double:
        env = double.env()
        ran = _cli(
            env,
            "run",
            "example",
            "--backend",
            "tinker",
            "--no-ui",
            "--db",
            db,
            "--base-model",
            "tinker-tui/tiny-chat",
            "--warmup-steps",
            "0",
            "--eval-every",
            "0",
            "--steps",
            "2",
            "--group-size",
            "4",
            "--groups-per-step",
            "2",
            "--price-train-per-mtok",
            "3",
            "--price-sample-per-mtok",
            "2",
            "--price-prefill-per-mtok",
            "1",
        )
        assert ran.returncode == 0, ran.stderr[-2000:]
        (session,) = double.service.sessions
        done = _cli(env, "cost", "--db", db)
        assert done.returncode == 0, done.stderr[-2000:]
        out = done.stdout
        assert "Tinker billed" in out and session in out
        trained = next(line for line in out.splitlines() if line.strip().startswith("trained"))
        ours, theirs, diff = trained.split()[-3:]
        assert ours == theirs and int(ours.replace(",", "")) > 0 and diff == "+0", out
        for label in ("sampled", "prefill (cached)"):
            line = next(x for x in out.splitlines() if x.strip().startswith(label))
            # the service also bills what came after the last step (the server's warm-up
            # request, rollouts in flight at the end): never less than counted
            assert int(line.split()[-1].replace(",", "").replace("+", "")) >= 0, out

        double.faults = Faults(billing_lag=3600.0)
        late = _cli(env, "cost", "--db", db)
        assert late.returncode == 0 and "lags real time by hours" in late.stdout, late.stdout

        double.faults = Faults(fail={"billing": Burst(403)})
        refused = _cli(env, "cost", "--db", db)
        assert refused.returncode == 1
        assert "no billing access" in refused.stdout and "Traceback" not in refused.stderr
        assert "trained" in refused.stdout  # the run's own count is shown anyway

        keyless = {k: v for k, v in env.items() if k != "TINKER_API_KEY"}
        keyless["TINKER_API_KEY"] = ""  # not set: the service is not asked
        unasked = _cli(keyless, "cost", "--db", db)
        assert unasked.returncode == 1, unasked.stderr
        assert "billing usage was not asked for" in unasked.stdout, unasked.stdout
        assert "trained" in unasked.stdout and "Traceback" not in unasked.stderr
        # this run set no cached-prefill price: it costs what prefill does, and says so
        assert "cached prefill counted at the prefill price" in unasked.stdout


def test_the_dashboards_cost_line():
    from tinker_tui.app.view_maths import cost_text

    assert cost_text({}, 0, 10) == ""  # a run from before tokens were counted
    tokens = {
        keys.TOKENS_PREFILL_TOTAL: 20_000.0,
        keys.TOKENS_PREFILL_CACHED_TOTAL: 15_000.0,
        keys.TOKENS_SAMPLED_TOTAL: 1_500.0,
        keys.TOKENS_TRAINED_TOTAL: 4_000.0,
    }
    assert (
        cost_text(tokens, 4, 10) == "tokens 20k prefill (75% cached) · 1.5k sampled · 4.0k trained"
    )
    line = cost_text({**tokens, keys.COST_USD_TOTAL: 0.2}, 4, 10)
    assert line.startswith("cost $0.2000 · $0.0500/step · ~$0.5000 at step 10 · tokens 20k")
    assert "at step" not in cost_text({**tokens, keys.COST_USD_TOTAL: 2.0}, 10, 10)
    # with a budget: it is shown, and a projection past it (the run stops there) is not
    budgeted = cost_text({**tokens, keys.COST_USD_TOTAL: 0.2}, 4, 10, budget=0.3)
    assert budgeted.startswith("cost $0.2000 · $0.0500/step · budget $0.3000 · tokens"), budgeted
    # a run priced from the shipped list says so beside the dollars (not a bill)
    listed = cost_text({**tokens, keys.COST_USD_TOTAL: 0.2}, 4, 10, priced_as=" (list prices of X)")
    assert listed.startswith("cost $0.2000 (list prices of X) · $0.0500/step"), listed


def test_a_narrow_cost_line_drops_whole_parts_never_cuts_a_number():
    """At 80 columns the pane had room for part of the line: '~$0.5147 at step 20' (of 200)
    read as a wrong fact. What does not fit whole is left to the tooltip."""
    from tinker_tui.app.view_maths import fit_parts

    parts = ["cost $0.0707", "$0.0027/step", "~$0.5400 at step 200", "tokens 87k prefill"]
    assert fit_parts(parts, 40) == "cost $0.0707 · $0.0027/step"
    assert fit_parts(parts, 49) == "cost $0.0707 · $0.0027/step"
    assert fit_parts(parts, 50) == "cost $0.0707 · $0.0027/step · ~$0.5400 at step 200"
    assert fit_parts(parts, 5) == "cost $0.0707"  # the first part stays (cut by the view)
    assert fit_parts([], 40) == ""


async def test_the_dashboard_shows_the_cost_line():
    """The throughput pane's cost line: dollars so far, per step, projected at max_steps,
    and the tokens (hidden while the run has no token counts)."""
    import dataclasses

    os.environ.setdefault("TEXTUAL_ANIMATIONS", "none")
    from fake_session import FakeSession, scripted_events, wait_for_charts
    from textual.widgets import Label

    from tinker_tui.app.tui import TinkerTuiApp
    from tinker_tui.engine.events import StepTrained

    def with_cost(clock):
        events = scripted_events(clock)
        out = []
        for e in events:
            if isinstance(e, StepTrained):
                e = dataclasses.replace(
                    e,
                    metrics={
                        **e.metrics,
                        keys.TOKENS_PREFILL_TOTAL: 1000.0 * e.step,
                        keys.TOKENS_PREFILL_CACHED_TOTAL: 900.0 * e.step,
                        keys.TOKENS_SAMPLED_TOTAL: 100.0 * e.step,
                        keys.TOKENS_TRAINED_TOTAL: 500.0 * e.step,
                        keys.COST_USD_TOTAL: 0.01 * e.step,
                    },
                )
            out.append(e)
        return out

    for script, shown in ((with_cost, True), (None, False)):
        session = FakeSession(script=script)
        app = TinkerTuiApp(session, clock=session.clock, refresh_interval=0.05)
        async with app.run_test(size=(120, 36)) as pilot:
            await asyncio.wait_for(session.script_done.wait(), timeout=5)
            await wait_for_charts(pilot)
            app.refresh_panes()
            await pilot.pause()
            label = app.screen.query_one("#cost", Label)
            assert label.display == shown and (label.region.height == 1) == shown
            if shown:
                text = str(label.render())
                assert text.startswith(f"cost ${0.01 * app.state.step:.4f} · $0.0100/step")
                # the pane shows the parts that fit whole; the tooltip has the whole line
                assert len(text) <= app.screen.query_one("ThroughputPanel").content_size.width
                assert text in str(label.tooltip) and "tokens" in str(label.tooltip)


def test_cached_prefill_is_priced_as_prefill_unless_set():
    """A run that set only the prefill price counted its cached prefill at $0."""

    assert Prices.from_config(RunConfig(price_prefill_per_mtok=2.0)).prefill_cached == 2.0
    set_apart = RunConfig(price_prefill_per_mtok=2.0, price_prefill_cached_per_mtok=0.5)
    assert Prices.from_config(set_apart).prefill_cached == 0.5
    free = RunConfig(price_prefill_per_mtok=2.0, price_prefill_cached_per_mtok=0.0)
    assert Prices.from_config(free).prefill_cached == 0.0
    assert not Prices.from_config(RunConfig()).known
    with pytest.raises(ConfigError, match="max_cost_usd needs prices"):
        RunConfig(max_cost_usd=1.0)
