"""`tinker-tui cost [RUN]`: what a run cost, as tinker-tui counted it and as Tinker billed it.

tinker-tui counts tokens as it sends them (engine.metrics.cost; the totals of the run's last step)
and prices them at the run's own price settings. For a Tinker run the service's billing
usage (SDK `AdminClient.get_billing_usage`, hourly buckets) is read for the hours the run
ran, kept to the run's own sessions (each process of a resumed run opened one), and set
beside it, kind by kind, with the service's own estimated cost. Billing data lags real time
by hours and needs the organization's billing access: both are said plainly, and the
run's own count is shown either way.
"""

from __future__ import annotations

import argparse
import asyncio
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from tinker_tui.app.commands.common import EXIT_OK, add_db_option, store_path
from tinker_tui.app.json_output import add_json_option, document, print_json
from tinker_tui.engine.errors import EXIT_FAILED, UsageError
from tinker_tui.engine.metrics import metric_keys as keys

#: The widest window one billing request may ask for.
MOST_PER_REQUEST = timedelta(days=14)
#: Within this long after a run's end, missing usage is most likely not billed *yet*.
BILLING_LAG = timedelta(hours=6)
#: How long the service may take to answer.
TIMEOUT = 120.0

#: (label, the billing kind), in the order `cost` lists them
KINDS = (
    ("prefill (uncached)", "sampling_prefill"),
    ("prefill (cached)", "sampling_prefill_cached"),
    ("sampled", "sampling_sample"),
    ("trained", "training"),
)


def add_parser(commands: Any) -> None:
    cost = commands.add_parser(
        "cost",
        help="a run's tokens and cost, reconciled with Tinker's billing",
        description="A run's tokens and cost as tinker-tui counted them (at the run's price "
        "settings), and for a Tinker run the service's own billing usage for "
        "the run's sessions beside them. Billing data lags by hours and needs "
        "billing access in your organization.",
    )
    cost.add_argument(
        "run",
        nargs="?",
        metavar="RUN",
        help="a run id or a unique prefix (default: the newest run)",
    )
    add_db_option(cost)
    add_json_option(cost, "cost")


@dataclass
class Billed:
    """The service's billing usage for a run's sessions."""

    tokens: dict[str, int] = field(default_factory=dict)
    usd: float = 0.0
    unpriced: int = 0  # events without an estimated cost (not reconciled yet)
    latest_bucket: datetime | None = None


def counted(metrics: dict[str, Any]) -> dict[str, int]:
    """tinker-tui's totals by billing kind, from its last step's metrics."""
    prefill = int(metrics.get(keys.TOKENS_PREFILL_TOTAL, 0))
    cached = int(metrics.get(keys.TOKENS_PREFILL_CACHED_TOTAL, 0))
    return {
        "sampling_prefill": prefill - cached,
        "sampling_prefill_cached": cached,
        "sampling_sample": int(metrics.get(keys.TOKENS_SAMPLED_TOTAL, 0)),
        "training": int(metrics.get(keys.TOKENS_TRAINED_TOTAL, 0)),
    }


def billed(events: list[Any], sessions: set[str]) -> Billed:
    out = Billed()
    for event in events:
        if event.session_id not in sessions:
            continue
        info = event.event_info
        kind = info.type
        if kind not in ("training", "sampling_prefill", "sampling_sample"):
            continue  # checkpoints and storage are not tokens
        if kind == "sampling_prefill" and info.cached:
            kind = "sampling_prefill_cached"
        out.tokens[kind] = out.tokens.get(kind, 0) + int(info.token_count)
        if event.estimated_cost_usd is None:
            out.unpriced += 1
        else:
            out.usd += float(event.estimated_cost_usd)
        end = event.bucket_end
        if out.latest_bucket is None or end > out.latest_bucket:
            out.latest_bucket = end
    return out


def windows(start: datetime, end: datetime) -> list[tuple[datetime, datetime]]:
    """[start, end) on UTC hours, in pieces of at most 14 days."""
    start = start.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    rounded = end.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    end = rounded if rounded == end else rounded + timedelta(hours=1)
    out = []
    while start < end:
        out.append((start, min(end, start + MOST_PER_REQUEST)))
        start = out[-1][1]
    return out


def fetch_usage(start: datetime, end: datetime) -> list[Any]:
    """The organization's billing events in [start, end), from the service (blocking)."""
    import tinker

    admin = tinker.AdminClient()
    events: list[Any] = []
    for since, before in windows(start, end):
        response = admin.get_billing_usage(since, before).result(timeout=TIMEOUT)
        events.extend(response.data)
    return events


def _usd(value: float) -> str:
    return f"${value:,.4f}" if math.isfinite(value) else "-"


def report(
    run: Any,
    metrics: dict[str, Any],
    sessions: list[tuple[float, str, str]],
    service: Billed | None,
    now: datetime,
) -> list[str]:
    """The lines `cost` prints (service None: the service was not asked)."""
    ours = counted(metrics)
    step = metrics.get("_step", run.final_step)
    lines = [
        f"run {run.run_id} ({run.backend}, {run.base_model}), counted by tinker-tui "
        f"up to step {step}:"
    ]
    header = f"  {'':20} {'tinker-tui':>14}"
    if service is not None:
        header += f" {'Tinker billed':>14} {'difference':>12}"
    lines.append(header)
    for label, kind in KINDS:
        line = f"  {label:20} {ours[kind]:>14,}"
        if service is not None:
            theirs = service.tokens.get(kind, 0)
            line += f" {theirs:>14,} {theirs - ours[kind]:>+12,}"
        lines.append(line)
    ours_usd = metrics.get(keys.COST_USD_TOTAL)
    cost = f"  {'cost (USD)':20} {_usd(float(ours_usd)) if ours_usd is not None else '-':>14}"
    if service is not None:
        cost += f" {_usd(service.usd):>14}"
    lines.append(cost)
    if ours_usd is None:
        lines.append(
            "  (no prices set for this run: price_prefill_per_mtok, "
            "price_prefill_cached_per_mtok, price_sample_per_mtok, "
            "price_train_per_mtok, in USD per million tokens)"
        )
    elif (
        ours["sampling_prefill_cached"]
        and run.config.get("price_prefill_cached_per_mtok", 0.0) == 0
    ):
        # runs from before cached prefill defaulted to the prefill price stored 0
        lines.append(
            "  (cached prefill counted at $0: this run's price_prefill_cached_per_mtok is 0)"
        )
    elif (
        ours["sampling_prefill_cached"] and run.config.get("price_prefill_cached_per_mtok", 0.0) < 0
    ):
        lines.append(
            "  (cached prefill counted at the prefill price: this run set no "
            "price_prefill_cached_per_mtok)"
        )
    lines.append(
        "  tinker-tui's count stops at its last step; sampling after it (the final "
        "evaluation, rollouts in flight at the end) is billed too."
    )
    if service is None:
        return lines
    ids = ", ".join(s for _, s, _ in sessions)
    lines.append(
        f"  Tinker's figures: billing usage of the run's session(s) {ids}; its cost "
        "is the service's estimate before credits, not an invoice."
    )
    if service.unpriced:
        lines.append(
            f"  {service.unpriced} billing event(s) have no cost estimate yet (the "
            "service prices a day once it reconciles)."
        )
    ended = datetime.fromtimestamp(run.ended_at, UTC) if run.ended_at else now
    short = any(service.tokens.get(kind, 0) < ours[kind] for _, kind in KINDS)
    if short and now - ended < BILLING_LAG:
        through = (
            f"it reaches {service.latest_bucket:%Y-%m-%d %H:%M} UTC"
            if service.latest_bucket is not None
            else "none of it is in yet"
        )
        lines.append(
            f"  Tinker's billing data lags real time by hours ({through}; the run "
            f"ended {ended:%Y-%m-%d %H:%M} UTC): run `tinker-tui cost "
            f"{run.run_id}` again later."
        )
    return lines


async def read_run(
    db_path: Path, wanted: str | None
) -> tuple[Any, dict[str, Any], list[tuple[float, str, str]]]:
    from tinker_tui.engine.store import StoreReader

    async with await StoreReader.open_readonly(db_path) as store:
        run = await store.find_run(wanted)
        metrics = (await store.last_metrics()).get(run.run_id, {})
        sessions = await store.backend_sessions(run.run_id)
        progress = (await store.progress()).get(run.run_id, {})
    return run, {**metrics, "_step": progress.get("step")}, sessions


def cost_document(
    run: Any,
    metrics: dict[str, Any],
    sessions: list[tuple[float, str, str]],
    service: Billed | None,
    note: str | None,
) -> dict[str, Any]:
    """`cost --json` (`app.json_output`): the run's own count by billing kind, and the
    service's when it was asked (`billed`, else null and `note` says why)."""
    ours_usd = metrics.get(keys.COST_USD_TOTAL)
    return document(
        "cost",
        run_id=run.run_id,
        backend=run.backend,
        base_model=run.base_model,
        step=metrics.get("_step", run.final_step),
        counted=counted(metrics),
        cost_usd=None if ours_usd is None else float(ours_usd),
        sessions=[
            {"time": t, "session_id": sid, "base_model": model} for t, sid, model in sessions
        ],
        billed=None
        if service is None
        else {
            "tokens": {kind: service.tokens.get(kind, 0) for _, kind in KINDS},
            "usd": service.usd,
            "unpriced": service.unpriced,
            "latest_bucket": None
            if service.latest_bucket is None
            else service.latest_bucket.timestamp(),
        },
        note=note.strip() if note else None,
    )


def main(args: argparse.Namespace) -> int:
    run, metrics, sessions = asyncio.run(read_run(store_path(args), args.run))
    now = datetime.now(UTC)
    service, note, code = reconcile(run, sessions, now)
    if args.json:
        print_json(cost_document(run, metrics, sessions, service, note))
        return code
    for line in report(run, metrics, sessions, service, now):
        print(line)
    if note:
        print(note)
    return code


def reconcile(
    run: Any, sessions: list[tuple[float, str, str]], now: datetime
) -> tuple[Billed | None, str | None, int]:
    """The service's billing usage for the run's sessions (None when not asked or not
    read), what to say about it, and the exit code."""
    if run.backend != "tinker":
        return (
            None,
            (
                f"  the {run.backend} backend is not billed: the dollars above are the "
                "run's prices applied to its tokens; there is nothing to reconcile."
            ),
            EXIT_OK,
        )
    if not sessions:
        return (
            None,
            (
                "  no Tinker session is recorded for this run (a store written before "
                "tinker-tui kept them): the service's usage cannot be told apart from "
                "others'."
            ),
            EXIT_OK,
        )
    from tinker_tui.engine.backend.choice import choose_backend

    try:
        choose_backend("tinker")  # a key, in a form the SDK takes
    except UsageError as exc:
        return (
            None,
            (
                f"tinker-tui: Tinker's billing usage was not asked for: {exc}; the "
                "figures above are tinker-tui's own count."
            ),
            EXIT_FAILED,
        )
    import tinker

    start = datetime.fromtimestamp(min(t for t, _, _ in sessions), UTC)
    end = datetime.fromtimestamp(run.ended_at, UTC) if run.ended_at else now
    try:
        events = fetch_usage(start, min(end + timedelta(hours=1), now + timedelta(hours=1)))
    except (tinker.PermissionDeniedError, tinker.AuthenticationError) as exc:
        return (
            None,
            (
                f"tinker-tui: this Tinker key has no billing access "
                f"({type(exc).__name__}): billing usage needs the admin or "
                "billing-admin role in your organization; the figures above are "
                "tinker-tui's own count."
            ),
            EXIT_FAILED,
        )
    except tinker.BadRequestError as exc:
        raise UsageError(f"the billing service refused the window: {exc}") from None
    except (tinker.TinkerError, TimeoutError) as exc:
        return (
            None,
            (f"tinker-tui: could not read Tinker's billing usage: {type(exc).__name__}: {exc}"),
            EXIT_FAILED,
        )
    return billed(events, {s for _, s, _ in sessions}), None, EXIT_OK
