"""The "did you mean" of every error about a mistyped name: a task, a task file, a
command, an option, a choice, a setting. One rule (difflib's closest match, at 0.6) and one
wording, wherever the mistake is caught: the command line, a settings file, a task's own
settings, a setting's choices. In the engine, which the command line imports anyway: the
engine never imports the app.

Standard library only (difflib is imported when a suggestion is wanted): the command line
imports this before anything else.
"""

from __future__ import annotations

from collections.abc import Iterable

#: How alike a word and a candidate must be to suggest it (difflib's ratio).
CUTOFF = 0.6


def close_match(word: str, candidates: Iterable[str]) -> str | None:
    """The candidate `word` was most likely meant to be, if one is close enough."""
    import difflib

    matches = difflib.get_close_matches(word, list(candidates), n=1, cutoff=CUTOFF)
    return matches[0] if matches else None


def did_you_mean(word: str, candidates: Iterable[str], *, else_list: str = "") -> str:
    """ " (did you mean 'x'?)" for a close match; else, with `else_list` (what the
    candidates are: "known settings"), "; known settings: a, b, c"; else ""."""
    candidates = list(candidates)
    match = close_match(word, candidates)
    if match is not None:
        return f" (did you mean {match!r}?)"
    if else_list:
        return f"; {else_list}: {', '.join(sorted(candidates))}"
    return ""
