"""Numbers and words that must agree wherever a user reads them: a rule's threshold in the
help, the docs and the code."""

from __future__ import annotations

from pathlib import Path

from tinker_tui.engine import collapse_level
from tinker_tui.engine.config import SETTINGS
from tinker_tui.engine.metrics import health

DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_the_collapse_level_has_one_home_and_its_words_say_it():
    assert health.COLLAPSE_LEVEL is collapse_level.COLLAPSE_LEVEL
    words = collapse_level.level_words()
    assert SETTINGS["on_collapse"].meaning.count(words) == 1, SETTINGS["on_collapse"].meaning
    assert "halfway" not in SETTINGS["on_collapse"].meaning
    assert words in " ".join((DOCS / "settings.md").read_text(encoding="utf-8").split())


def test_the_level_words_follow_the_fraction():
    assert collapse_level.level_words(1 / 3) == "a third of the way from the lowest reward"
    assert collapse_level.level_words(1 / 2) == "halfway from the lowest reward"
    assert collapse_level.level_words(0.2) == "20% of the way from the lowest reward"
