"""The maths and words the dashboard's panes show, as plain functions tested alone:
debiased EMA, windowed rates, ETA, bars, knob parsing and formatting
(the health words are `engine.metrics.health`'s, shared with the engine's pauses).
No Textual here."""

from __future__ import annotations

import math
import re
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence

from rich.cells import cell_len

from tinker_tui.engine.config import LIVE_KNOBS, SETTINGS

#: EMA weights `s` cycles through (0 = no smoothing), as W&B's and TensorBoard's slider.
SMOOTHING_STEPS = (0.9, 0.95, 0.99, 0.0, 0.6, 0.8)

#: Log levels in increasing order; the log pane's filter shows lines at or above one.
LOG_LEVELS = ("debug", "info", "warning", "error")
_LEVEL_ALIASES = {"warn": "warning", "critical": "error", "fatal": "error"}


# --------------------------------------------------------------------------- pure maths


def windowed_rate(
    points: Iterable[tuple[float, float]],
    now: float,
    window: float,
    since: float | None = None,
) -> float:
    """Amount per second over the last `window` seconds before `now`.

    `points` are `(time, amount)` pairs. Points in `(now - window, now]` count. When the
    run began less than `window` seconds ago (`since`), the rate is taken over the time
    actually elapsed, so the first seconds of a run are not under-reported.
    """
    if window <= 0:
        raise ValueError("window must be positive")
    start = now - window
    total = sum(amount for t, amount in points if start < t <= now)
    span = window
    if since is not None:
        span = min(window, now - since)
    if span <= 0:
        return 0.0
    return total / span


def rate_history(
    points: Sequence[tuple[float, float]],
    now: float,
    window: float,
    step: float,
    count: int,
    since: float | None = None,
) -> list[float]:
    """`windowed_rate` sampled every `step` seconds up to `now`, oldest first.

    At most `count` samples; when `since` (the run's start) is given, no sample is taken
    at or before it. `points` must be sorted by time (events arrive in time order).
    """
    if step <= 0:
        raise ValueError("step must be positive")
    if window <= 0:
        raise ValueError("window must be positive")
    times = [t for t, _ in points]
    cumulative = [0.0]
    for _, amount in points:
        cumulative.append(cumulative[-1] + amount)

    def total_in(start: float, end: float) -> float:
        return cumulative[bisect_right(times, end)] - cumulative[bisect_right(times, start)]

    samples: list[float] = []
    for k in range(count - 1, -1, -1):
        t = now - k * step
        span = window if since is None else min(window, t - since)
        if span <= 0:
            continue
        samples.append(total_in(t - window, t) / span)
    return samples


def debiased_ema(values: Iterable[float], beta: float = 0.9) -> list[float]:
    """Exponential moving average with the start-up bias removed (as in Adam).

    `beta` is the weight of the past (W&B's and TensorBoard's "smoothing"); 0 returns the
    series unchanged. The first value of the result equals the first input.
    """
    if not 0.0 <= beta < 1.0:
        raise ValueError("beta must be in [0, 1)")
    out: list[float] = []
    acc = 0.0
    for i, value in enumerate(values, start=1):
        acc = beta * acc + (1.0 - beta) * value
        out.append(acc / (1.0 - beta**i))
    return out


def next_smoothing(beta: float) -> float:
    """The smoothing after `beta` in `SMOOTHING_STEPS` (the first one if `beta` is not there)."""
    try:
        index = SMOOTHING_STEPS.index(beta)
    except ValueError:
        return SMOOTHING_STEPS[0]
    return SMOOTHING_STEPS[(index + 1) % len(SMOOTHING_STEPS)]


def eta_seconds(
    step_times: Sequence[float],
    step: int,
    max_steps: int,
    window: int = 10,
    min_span: float = 0.0,
) -> float | None:
    """Seconds until `max_steps`, from the mean duration of the last `window` steps, or of
    more of those kept when the last `window` span less than `min_span` seconds.

    `step_times` are the times the most recent steps finished, oldest first. None when
    there is nothing to go on (fewer than two step times, or no target). The async
    pipeline trains in bursts (a queue of batches trained back to back, then a wait for
    rollouts): ten steps of one burst made the ETA jump (14:15, then 06:08); a span of a
    minute or more holds bursts and waits both.
    """
    if max_steps <= 0:
        return None
    remaining = max_steps - step
    if remaining <= 0:
        return 0.0
    times = list(step_times)
    count = min(len(times), window + 1)
    while count < len(times) and times[-1] - times[-count] < min_span:
        count += 1
    recent = times[-count:]
    if len(recent) < 2:
        return None
    per_step = (recent[-1] - recent[0]) / (len(recent) - 1)
    if per_step <= 0:
        return None
    return remaining * per_step


def format_elapsed(seconds: float) -> str:
    """`MM:SS`, or `H:MM:SS` from one hour on; negative durations show as 00:00."""
    total = max(0, int(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{minutes:02d}:{secs:02d}"


def format_rate(value: float) -> str:
    """Short human form: 12.3, 456, 7.8k, 12k, 1.2M."""
    if not math.isfinite(value):
        return "-"
    if value >= 1_000_000:
        return f"{value / 1_000_000:.1f}M"
    if value >= 10_000:
        return f"{value / 1_000:.0f}k"
    if value >= 1_000:
        return f"{value / 1_000:.1f}k"
    if value >= 100:
        return f"{value:.0f}"
    return f"{value:.1f}"


def _usd(value: float) -> str:
    """Dollars with the precision small sums need: $0.0042, $1.23, $1,234."""
    if value >= 1000:
        return f"${value:,.0f}"
    return f"${value:.2f}" if value >= 1 else f"${value:.4f}"


#: Between the parts of a one-line summary (the cost line).
PART_SEPARATOR = " · "


def cost_text(
    metrics: Mapping[str, float],
    step: int,
    max_steps: int,
    budget: float = 0.0,
    priced_as: str = "",
) -> str:
    """The dashboard's cost line from the last step's metrics (`cost_parts`), whole."""
    return PART_SEPARATOR.join(cost_parts(metrics, step, max_steps, budget, priced_as))


def fit_parts(parts: Sequence[str], width: int, separator: str = PART_SEPARATOR) -> str:
    """As many of `parts`, from the first, as fit in `width` cells: a line cut short
    drops what does not fit whole (a number cut in the middle reads as another fact); the
    first part is kept even if too long (the view shortens it with an ellipsis)."""
    text = ""
    for part in parts:
        longer = f"{text}{separator}{part}" if text else part
        if text and cell_len(longer) > width:
            break
        text = longer
    return text


def cost_parts(
    metrics: Mapping[str, float],
    step: int,
    max_steps: int,
    budget: float = 0.0,
    priced_as: str = "",
) -> list[str]:
    """The dashboard's cost line from the last step's metrics, most telling first: dollars
    so far (with `priced_as`, " (list prices of DATE)" for a run priced from the list, so
    the figure never passes for a bill), per step, the budget, projected at max_steps (when
    prices are set), and the run's tokens; none before any."""
    from tinker_tui.engine.metrics import metric_keys as keys
    from tinker_tui.engine.metrics.cost import projected_usd

    prefill = metrics.get(keys.TOKENS_PREFILL_TOTAL)
    if prefill is None:
        return []
    cached = metrics.get(keys.TOKENS_PREFILL_CACHED_TOTAL, 0.0)
    share = f" ({cached / prefill:.0%} cached)" if prefill else ""
    # three parts, so a narrow pane drops a whole count rather than cut one
    tokens = [
        f"tokens {format_rate(prefill)} prefill{share}",
        f"{format_rate(metrics.get(keys.TOKENS_SAMPLED_TOTAL, 0.0))} sampled",
        f"{format_rate(metrics.get(keys.TOKENS_TRAINED_TOTAL, 0.0))} trained",
    ]
    total = metrics.get(keys.COST_USD_TOTAL)
    if total is None:
        return tokens
    parts = [f"cost {_usd(total)}{priced_as}"]
    if step > 0:
        parts.append(f"{_usd(total / step)}/step")
    if budget > 0:
        parts.append(f"budget {_usd(budget)}")
    if step > 0:
        projected = projected_usd(total, step, 0, max_steps)
        if projected is not None and max_steps > step and not 0 < budget < projected:
            parts.append(f"~{_usd(projected)} at step {max_steps}")
    return [*parts, *tokens]


def split_rate(value: float) -> tuple[str, str]:
    """A rate as (number, unit prefix) for big digits: 2500 → ("2.5", "k"), 45.3 → ("45.3", "")."""
    text = format_rate(value)
    if text[-1:] in ("k", "M"):
        return text[:-1], text[-1]
    return text, ""


def idle_percent(busy: float) -> int:
    """A busy fraction (0..1, clamped) as whole percent idle."""
    return round(100 * (1.0 - min(1.0, max(0.0, busy))))


def versions_are_bounds(config: Mapping[str, object]) -> bool:
    """Whether a run's policy versions are lower bounds: with `sampling = inflight` a
    sampler moves to newer weights while it runs, so "v3" means sampled from v3 or newer."""
    return config.get("sampling") == "inflight"


def version_text(version: object, bound: bool) -> str:
    """`v3`, or `v≥3` where the version is a lower bound (`versions_are_bounds`)."""
    return f"v≥{version}" if bound else f"v{version}"


def staleness_rows(
    in_flight: Mapping[int, int], queued: Mapping[int, int]
) -> list[tuple[int, int, int]]:
    """`(versions behind, in-flight count, queued count)` for every staleness seen, in order."""
    keys = sorted(set(in_flight) | set(queued))
    return [(k, int(in_flight.get(k, 0)), int(queued.get(k, 0))) for k in keys]


def bar(count: float, most: float, width: int) -> str:
    """A horizontal bar of `width` cells at most, scaled to `most`; at least one cell when
    `count` is positive."""
    if width <= 0 or most <= 0 or count <= 0:
        return ""
    return "█" * max(1, round(width * count / most))


def normalise_level(level: str) -> str:
    """A log level in lower case with the usual aliases folded (warn, critical)."""
    low = level.strip().lower()
    return _LEVEL_ALIASES.get(low, low)


def level_at_least(level: str, minimum: str) -> bool:
    """True if `level` is `minimum` or more severe; unknown levels count as info."""
    rank = {name: i for i, name in enumerate(LOG_LEVELS)}
    return rank.get(normalise_level(level), 1) >= rank.get(normalise_level(minimum), 0)


def next_log_level(minimum: str) -> str:
    """The log filter after `minimum`: debug → info → warning → error → debug."""
    index = LOG_LEVELS.index(minimum) if minimum in LOG_LEVELS else 0
    return LOG_LEVELS[(index + 1) % len(LOG_LEVELS)]


def parse_knob_value(name: str, text: str) -> float | int:
    """The value typed for knob `name`, checked as the engine checks it (`Setting.parse`);
    ValueError with a message. Accepts `1e-3`, `0.001`, `4`."""
    if name not in LIVE_KNOBS:
        raise ValueError(f"unknown knob {name!r}")
    value: float | int = SETTINGS[name].parse(text)
    return value


def format_knob(name: str, value: float | int | None) -> str:
    spec = SETTINGS.get(name)
    if spec is None:
        return "-" if value is None else f"{value:g}"
    return spec.format(value)


def shorten_middle(text: str, width: int) -> str:
    """`text` in at most `width` cells, cut in the middle (`/runs/…/step-000010`), so both
    the start and the end of a path stay readable."""
    if width <= 0:
        return ""
    if len(text) <= width:
        return text
    if width <= 2:
        return text[:width]
    head = max(1, (width - 1) // 4)  # the end (which file, which step) matters most
    tail = width - 1 - head
    return f"{text[:head]}…{text[len(text) - tail :]}"


def shorten_path(path: str, width: int) -> str:
    """A path in at most `width` cells by a rule a reader can undo: whole folders left
    out from the start (`…/checkpoints/step-000060`, never `runs…s/step-000060`, a cut
    that reads as another name); a last part that alone has no room is cut in the middle."""
    if len(path) <= width:
        return path
    sep = "\\" if "\\" in path and "/" not in path else "/"
    parts = path.rstrip(sep).split(sep)
    for start in range(1, len(parts)):
        tail = "…" + sep + sep.join(parts[start:])
        if len(tail) <= width:
            return tail
    return shorten_middle(parts[-1], width)


_NUMBER = re.compile(r"\d+(?:\.\d+)?(?:e-?\d+)?")


def message_shape(message: str) -> str:
    """A log message with its numbers masked: repeats of one message differ only there."""
    return _NUMBER.sub("#", message)


#: How far back a repeated warning or error is looked for before it is shown again.
COLLAPSE_LOOKBACK = 8
#: The eight heights of a text sparkline.
SPARK_BLOCKS = "▁▂▃▄▅▆▇█"


def text_sparkline(
    values: Sequence[float], width: int = 16, scale: tuple[float, float] | None = None
) -> str:
    """The last `width` values as block characters, lowest to highest of them, or of
    `scale` (low, high) shared by several rows so their heights compare ("" for none): a
    reward curve in a table cell."""
    shown = [v for v in values if math.isfinite(v)][-width:]
    if not shown:
        return ""
    low, high = scale if scale is not None else (min(shown), max(shown))
    shown = [min(high, max(low, v)) for v in shown]
    span = high - low
    if span <= 1e-12:
        return SPARK_BLOCKS[3] * len(shown)
    return "".join(SPARK_BLOCKS[min(7, int((v - low) / span * 8))] for v in shown)


#: Why a run ended, in a word or two beside its status where the status alone misleads
#: or hides it: "completed · trained nothing", "stopped · budget" (`RunFinished.cause`).
CAUSE_WORDS = {
    "no_signal": "trained nothing",
    "budget": "budget",
    "health": "health check",
    "user": "by user",
    "ran_out": "scenarios ran out",
    "error": "error",
}


def ended_text(status: str, cause: str) -> str:
    """A run's end as a list or a status line shows it: its status and, where it says
    more, its cause."""
    words = CAUSE_WORDS.get(cause)
    return f"{status} · {words}" if words else status
