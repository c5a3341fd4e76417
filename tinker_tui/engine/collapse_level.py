"""How far a reward must fall to count as a collapse, in one home: the health rule
(`engine.metrics.health`) judges with the fraction, and `--on-collapse`'s help says it
in the words `level_words` gives, so the help, the docs and the code cannot disagree."""

from __future__ import annotations

#: Collapsed below this share of the way from the lowest reward seen to the best mean of a
#: stretch of steps before.
COLLAPSE_LEVEL = 1 / 3

_NAMED = {1 / 2: "halfway", 1 / 3: "a third of the way", 1 / 4: "a quarter of the way"}


def level_words(level: float = COLLAPSE_LEVEL) -> str:
    """`level` as the help and the docs say it: "a third of the way from the lowest
    reward"."""
    named = next(
        (words for value, words in _NAMED.items() if abs(value - level) < 1e-12),
        f"{level:.0%} of the way",
    )
    return f"{named} from the lowest reward"
