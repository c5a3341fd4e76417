"""The rollouts view's filter language (`reward<0.5`, `v>=3`, words, discard reasons),
parsed once and matched against the dashboard's group rows. No Textual here."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from tinker_tui.app.dashboard_rows import GroupRecord
from tinker_tui.engine.events import (
    TrajectorySummary,
)

# --------------------------------------------------------------------------- the rollouts filter

_COMPARISON = re.compile(
    r"^(reward|r|version|v|tokens)\s*(<=|>=|!=|==|=|<|>)\s*(-?[\d.]+(?:e-?\d+)?)$"
)
_OPS = {
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "=": lambda a, b: math.isclose(a, b, abs_tol=1e-9),
    "==": lambda a, b: math.isclose(a, b, abs_tol=1e-9),
    "!=": lambda a, b: not math.isclose(a, b, abs_tol=1e-9),
}
_REASON_WORDS = {
    "stale": "stale",
    "zero_variance": "zero_variance",
    "zero-variance": "zero_variance",
    "zerovar": "zero_variance",
    "error": "error",
}


def message_text(message: Mapping[str, Any]) -> str:
    """Everything searchable in one message: content, tool names and arguments."""
    parts = [str(message.get("role", "")), str(message.get("content") or "")]
    for call in message.get("tool_calls") or ():
        if isinstance(call, Mapping):
            function = call.get("function", call)
            if isinstance(function, Mapping):
                parts.append(str(function.get("name", "")))
                parts.append(str(function.get("arguments", "")))
    if message.get("name"):
        parts.append(str(message["name"]))
    return "\n".join(parts)


class RolloutFilter:
    """What `/` typed in the rollouts view: space-separated terms, all of which must hold.

    Terms: `reward>0.5` (`r`, `<`, `<=`, `>=`, `=`, `!=`), `version=3` (`v`), `tokens<20`,
    `discarded`, `kept`, `stale`, `zero_variance`, `error`, `scenario:q03`, and any other
    word, which must appear (case-insensitively) in the scenario id or the conversation.
    Reward, version, tokens and text terms are checked per trajectory: a group is shown if
    its group terms hold and at least one trajectory matches (or it has none and there are
    no trajectory terms).
    """

    def __init__(self, text: str = "") -> None:
        self.text = text.strip()
        self.group_terms: list[tuple[str, str]] = []
        self.trajectory_terms: list[tuple[str, str, float]] = []
        self.words: list[str] = []
        self.errors: list[str] = []
        for raw in self.text.split():
            term = raw.lower()
            match = _COMPARISON.match(term)
            if match:
                key, op, number = match.groups()
                key = {"r": "reward", "v": "version"}.get(key, key)
                try:
                    self.trajectory_terms.append((key, op, float(number)))
                except ValueError:
                    self.errors.append(raw)
            elif term in ("discarded", "kept"):
                self.group_terms.append((term, ""))
            elif term in _REASON_WORDS:
                self.group_terms.append(("reason", _REASON_WORDS[term]))
            elif term.startswith("scenario:"):
                self.group_terms.append(("scenario", term.split(":", 1)[1]))
            else:
                self.words.append(term)

    @property
    def active(self) -> bool:
        return bool(self.text)

    def _group_terms_hold(self, group: GroupRecord) -> bool:
        for kind, value in self.group_terms:
            if kind == "discarded" and group.discarded is None:
                return False
            if kind == "kept" and group.discarded is not None:
                return False
            if kind == "reason" and group.discarded != value:
                return False
            if kind == "scenario" and value not in group.scenario_id.lower():
                return False
        return True

    def matches_trajectory(self, group: GroupRecord, trajectory: TrajectorySummary) -> bool:
        for key, op, number in self.trajectory_terms:
            value = {
                "reward": trajectory.reward,
                "version": trajectory.policy_version,
                "tokens": trajectory.num_tokens,
            }[key]
            if not _OPS[op](float(value), number):
                return False
        if self.words:
            haystack = "\n".join(
                [group.scenario_id] + [message_text(m) for m in trajectory.messages]
            ).lower()
            if not all(word in haystack for word in self.words):
                return False
        return True

    def matches_group(self, group: GroupRecord) -> bool:
        if not self._group_terms_hold(group):
            return False
        if not self.trajectory_terms and not self.words:
            return True
        if not group.trajectories:
            # an error discard has no trajectories: only words about the group can match it
            if self.trajectory_terms:
                return False
            haystack = f"{group.scenario_id}\n{group.detail}".lower()
            return all(word in haystack for word in self.words)
        return any(self.matches_trajectory(group, t) for t in group.trajectories)
