"""The token view's maths, without Textual: what each colour channel reads from a trained
trajectory's arrays, the colour of a value, how pieces are shown, how tokens wrap into lines,
and where the largest mismatch is. `screens.tokens` draws it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from tinker_tui.engine.events import TrajectoryTokens


@dataclass(frozen=True, slots=True)
class Channel:
    """A colour channel: its key (`name`), its words, and the range of its scale."""

    name: str
    label: str
    low: float
    high: float
    #: Diverging around 0 (negative one colour, positive another), else low -> high.
    diverging: bool = False
    #: Only sampled tokens have a value (context tokens are drawn uncoloured).
    sampled_only: bool = True


CHANNELS = (
    Channel("sampled", "sampled logprob", -5.0, 0.0),
    Channel("trainer", "trainer logprob", -5.0, 0.0),
    Channel("diff", "sampled - trainer logprob", -0.5, 0.5, diverging=True),
    Channel("advantage", "advantage", -1.0, 1.0, diverging=True),
    Channel("mask", "loss mask (trained or context)", 0.0, 1.0, sampled_only=False),
    Channel("version", "policy version that sampled it", 0.0, 1.0),
    Channel("entropy", "trainer entropy (nats)", 0.0, 3.0),
)
CHANNEL_NAMES = tuple(c.name for c in CHANNELS)

# The colour ends of the scales (RGB): bad/low red, good/high green, neutral grey.
_RED, _GREEN, _BLUE, _GREY = (200, 50, 50), (40, 150, 70), (50, 100, 210), (70, 70, 70)
_YELLOW = (210, 170, 30)
#: Policy versions cycle through these (a step usually trains two or three).
VERSION_COLOURS = (
    (50, 100, 210),
    (200, 120, 40),
    (140, 70, 190),
    (40, 150, 150),
    (190, 60, 120),
    (110, 140, 40),
)


def channels_of(tokens: TrajectoryTokens) -> tuple[Channel, ...]:
    """The channels this trajectory has (entropy only where the backend gave it)."""
    has_entropy = (
        tokens.entropy is not None
        and len(tokens.entropy) == len(tokens.tokens)
        and bool(np.isfinite(tokens.entropy).any())
    )
    return tuple(c for c in CHANNELS if c.name != "entropy" or has_entropy)


def values(tokens: TrajectoryTokens, channel: str) -> np.ndarray:
    """The channel's value per token (float64)."""
    if channel == "diff":
        return differences(tokens)
    if channel == "entropy":
        return np.asarray(tokens.entropy, dtype=np.float64)
    return np.asarray(getattr(tokens, channel), dtype=np.float64)


def differences(tokens: TrajectoryTokens) -> np.ndarray:
    """sampled - trainer logprob per token, 0 for context."""
    diff = np.asarray(tokens.sampled, np.float64) - np.asarray(tokens.trainer, np.float64)
    return np.where(np.asarray(tokens.mask) > 0, diff, 0.0)


def largest_mismatch(tokens: TrajectoryTokens) -> int | None:
    """The position of the sampled token whose logprobs differ most (None: no sampled one)."""
    mask = np.asarray(tokens.mask) > 0
    if not mask.any():
        return None
    magnitude = np.where(mask, np.abs(differences(tokens)), -1.0)
    return int(np.argmax(magnitude))


def turns(tokens: TrajectoryTokens) -> np.ndarray:
    """Per token, the assistant turn it belongs to (1, 2, ...; a context token the turn
    after it)."""
    mask = np.asarray(tokens.mask) > 0
    starts = mask & ~np.concatenate([[False], mask[:-1]])
    return np.cumsum(starts)


def _blend(a: tuple[int, int, int], b: tuple[int, int, int], t: float) -> tuple[int, int, int]:
    t = min(1.0, max(0.0, t))
    return (
        round(a[0] + (b[0] - a[0]) * t),
        round(a[1] + (b[1] - a[1]) * t),
        round(a[2] + (b[2] - a[2]) * t),
    )


def colour(
    channel: Channel, value: float, sampled: bool, versions: tuple[int, ...] = ()
) -> tuple[int, int, int] | None:
    """The background of a token with `value` (None: drawn without one)."""
    if (channel.sampled_only and not sampled) or not np.isfinite(value):
        return None
    if channel.name == "mask":
        return _BLUE if sampled else None
    if channel.name == "version":
        index = versions.index(int(value)) if int(value) in versions else 0
        return VERSION_COLOURS[index % len(VERSION_COLOURS)]
    if channel.diverging:
        if value >= 0:
            return _blend(
                _GREY, _GREEN if channel.name == "advantage" else _RED, value / channel.high
            )
        return _blend(_GREY, _RED if channel.name == "advantage" else _BLUE, value / channel.low)
    share = (value - channel.low) / (channel.high - channel.low)
    if channel.name == "entropy":
        return _blend(_GREY, _YELLOW, share)
    return _blend(_RED, _GREEN, share)


def shown_piece(piece: str | None, token: int) -> str:
    """A token's text as drawn: whitespace made visible (a newline as ↵, which then breaks
    the line; a tab as →); a token with no known piece as its id."""
    if piece is None or piece == "":
        return f"⟨{token}⟩"
    return piece.replace("\t", "→").replace("\r", "␍").replace("\n", "↵")


def layout(
    pieces: list[str], breaks: list[bool], width: int, cells: Callable[[str], int] = len
) -> list[list[int]]:
    """Token positions per line: pieces in order, wrapped at `width` cells (`cells` measures
    a piece), and a new line after a token whose text held a newline (`breaks`). A piece
    wider than a line gets a line of its own."""
    lines: list[list[int]] = [[]]
    used = 0
    for i, piece in enumerate(pieces):
        size = cells(piece)
        if lines[-1] and used + size > width:
            lines.append([])
            used = 0
        lines[-1].append(i)
        used += size
        if breaks[i]:
            lines.append([])
            used = 0
    if not lines[-1] and len(lines) > 1:
        lines.pop()
    return lines


def version_order(tokens: TrajectoryTokens) -> tuple[int, ...]:
    """The policy versions of the sampled tokens, oldest first (for their colours)."""
    mask = np.asarray(tokens.mask) > 0
    return tuple(sorted(set(np.asarray(tokens.version)[mask].tolist())))


def piece_texts(
    tokens: TrajectoryTokens, pieces: Mapping[int, str]
) -> tuple[list[str], list[bool]]:
    """Per token, its shown text and whether a line ends after it."""
    ids = np.asarray(tokens.tokens).tolist()
    raw = [pieces.get(t) for t in ids]
    return (
        [shown_piece(p, t) for p, t in zip(raw, ids, strict=True)],
        [p is not None and "\n" in p for p in raw],
    )
