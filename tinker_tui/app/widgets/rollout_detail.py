"""The selected step, group or trajectory in full: every turn of the conversation, tool
calls and their results, the reward and the policy version stamps."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.content import Content
from textual.widgets import Static

from tinker_tui.app.dashboard_rows import GroupRecord
from tinker_tui.app.dashboard_state import DashboardState
from tinker_tui.app.view_maths import version_text, versions_are_bounds
from tinker_tui.app.widgets.rollouts_tree import REASON_LABELS, RolloutRef
from tinker_tui.app.widgets.updates import set_subtitle

ROLE_STYLES = {
    "system": "$text-muted",
    "user": "$text-primary",
    "assistant": "$text-success",
    "tool": "$text-accent",
    "transcript": "$text-secondary",
}


def _tool_call_text(call: Any) -> str:
    if not isinstance(call, Mapping):
        return str(call)
    function = call.get("function", call)
    if not isinstance(function, Mapping):
        return str(function)
    name = function.get("name", "?")
    arguments = function.get("arguments", "")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments)
    return f"{name}({arguments})"


#: A role marker a transcript ends with when the model's turn ended where the next one begins.
_TRAILING_MARKER = re.compile(r"\n?\s*(User|Assistant|System|Tool)\s*:\s*$")


def without_empty_turn(text: str) -> str:
    """A transcript without the empty next turn (`…\nUser:`) it may end with."""
    return _TRAILING_MARKER.sub("", text.rstrip()).rstrip()


def message_lines(message: Mapping[str, Any]) -> list[Content]:
    role = str(message.get("role", "?"))
    title = role
    if role == "tool":
        who = message.get("name") or message.get("tool_call_id")
        title = f"tool result ({who})" if who else "tool result"
    lines = [Content.styled(f"── {title} ", f"bold {ROLE_STYLES.get(role, '$text')}")]
    content = message.get("content")
    if isinstance(content, list):  # OpenAI content parts
        content = "\n".join(
            str(p.get("text", p)) if isinstance(p, Mapping) else str(p) for p in content
        )
    if content and role == "transcript":
        content = without_empty_turn(str(content))
    if content:
        lines.extend(Content(line) for line in str(content).splitlines() or [""])
    for call in message.get("tool_calls") or ():
        lines.append(Content.assemble(("  ↳ tool call ", "$text-accent"), _tool_call_text(call)))
    return lines


def metrics_text(metrics: Mapping[str, Any]) -> str:
    """A trajectory's metrics on one line: `correct yes · tool_calls 2`."""

    def shown(value: Any) -> str:
        if isinstance(value, bool):
            return "yes" if value else "no"
        return f"{value:g}" if isinstance(value, int | float) else str(value)

    return " · ".join(f"{name} {shown(value)}" for name, value in metrics.items())


def group_status(group: GroupRecord, short: bool = False, finished: bool = False) -> Content:
    if short and group.discarded == "zero_variance":
        return (
            Content.styled("converged", "$text-success")
            if group.at_best
            else Content.styled("no learning signal", "$text-warning")
        )
    if group.discarded is None:
        if group.step is None:
            return Content.styled(
                "never trained (the run ended)" if finished else "waiting to be trained",
                "$text-muted",
            )
        if group.failed and not short:
            members = len(group.trajectories) + group.failed
            return Content.styled(
                f"trained with {len(group.trajectories)} of {members} "
                f"rollouts; {group.failed} failed: {group.failure}",
                "$text-warning",
            )
        return Content.styled("trained", "$text-success")
    if group.discarded == "zero_variance" and group.at_best:
        return Content.styled(
            "converged: equal rewards at the best seen (no gradient, counted in the step's reward)",
            "$text-success",
        )
    if group.discarded == "zero_variance":
        return Content.styled(
            "no learning signal: equal rewards below the best seen (counted in the step's reward)",
            "$text-warning",
        )
    reason = REASON_LABELS.get(group.discarded, group.discarded)
    detail = f": {group.detail}" if group.detail else ""
    behind = ""
    if group.trainer_version is not None and group.discarded == "stale":
        behind = f" (sampled by v{group.policy_version}, trainer at v{group.trainer_version})"
    return Content.styled(
        f"discarded, {reason}{detail}{behind}",
        "$text-error" if group.discarded == "error" else "$text-warning",
    )


def where_filed(state: DashboardState, group: GroupRecord) -> str:
    """Which step the group belongs to, in words."""
    if group.step is None:
        return (
            "left over after the last step"
            if state.state == "finished"
            else f"queued for step {state.step + 1}"
        )
    if group.discarded is not None and group.discarded != "zero_variance":
        return f"dropped while step {group.step} was collected"
    return f"in the batch of step {group.step}"


def summary_line(group: GroupRecord, finished: bool = False) -> Content:
    mean = f"r̄ {group.reward_mean:.3f}" if group.trajectories else "no rollouts"
    return Content.assemble(
        f"  g{group.group_id} {group.scenario_id}  {mean}  ",
        group_status(group, short=True, finished=finished),
    )


def detail_content(state: DashboardState, ref: RolloutRef | None) -> Content:
    if ref is None and not state.groups:
        phase = state.phase_text()
        return Content.styled(
            "No rollouts yet"
            + (f": {phase}." if phase else ".")
            + "\n\nThe run's steps appear on the left as it trains.",
            "$text-muted",
        )
    if ref is None:
        return Content.styled(
            "Select a step, group or trajectory on the left.\n\n"
            "enter / → expands · / filters, e.g. reward<0.5, stale, "
            "maybe",
            "$text-muted",
        )
    if ref.kind == "note":
        return Content.styled(
            "These steps' rollouts are not in this view; the note on the "
            "left says why and where to find them.",
            "$text-muted",
        )
    if ref.kind == "waiting":
        groups = state.groups.waiting()
        count = f"{len(groups)} group{'s' if len(groups) != 1 else ''}"
        lines = (
            [
                Content.styled("left over", "bold"),
                Content(f"{count} sampled after the run's last step took its batch; never trained"),
            ]
            if state.state == "finished"
            else [
                Content.styled("queued", "bold"),
                Content(f"{count} sampled and waiting for the trainer (step {state.step + 1})"),
            ]
        )
        lines += [summary_line(group, state.state == "finished") for group in groups]
        return Content("\n").join(lines)
    if ref.kind == "step":
        assert ref.step is not None
        groups = state.groups.of(ref.step)
        trained = ref.step <= state.step
        count = f"{len(groups)} group" + ("" if len(groups) == 1 else "s")
        what = (
            f"{count} taken or dropped by step {ref.step}"
            if trained
            else f"step {ref.step} is being collected: {count} dropped so far"
        )
        lines = [Content.styled(f"step {ref.step}", "bold"), Content(what)]
        if not groups and trained:
            lines.append(Content.styled("its groups are no longer kept in memory", "$text-muted"))
        lines += [summary_line(group, state.state == "finished") for group in groups]
        return Content("\n").join(lines)
    group = state.groups.get(ref.group_id) if ref.group_id is not None else None
    if group is None:
        return Content.styled("This group is no longer kept in memory.", "$text-muted")
    bound = versions_are_bounds(state.config)
    header = [
        Content.assemble(
            ("group ", "bold"),
            (f"{group.group_id}", "bold"),
            f" · scenario {group.scenario_id} · {where_filed(state, group)}",
        ),
        Content(
            f"policy {version_text(group.policy_version, bound)} · "
            f"{len(group.trajectories)} rollouts · "
            f"{group.num_tokens} tokens"
            + (f" · mean reward {group.reward_mean:.3f}" if group.trajectories else "")
        ),
        group_status(group, finished=state.state == "finished"),
    ]
    if ref.kind == "group":
        rewards = ", ".join(f"{t.reward:.2f}" for t in group.trajectories)
        if rewards:
            header.append(Content(f"rewards: {rewards}"))
        return Content("\n").join(header)
    assert ref.index is not None
    trajectory = group.trajectories[ref.index]
    lines = [
        Content.assemble(
            (f"trajectory {ref.index + 1} of {len(group.trajectories)}", "bold"),
            f" · group {group.group_id} · scenario {group.scenario_id}",
        ),
        Content.assemble(
            ("reward ", "$text-muted"),
            (f"{trajectory.reward:.3f}", "bold"),
            ("  policy ", "$text-muted"),
            version_text(trajectory.policy_version, bound),
            ("  tokens ", "$text-muted"),
            f"{trajectory.num_tokens}",
            ("  ", ""),
            where_filed(state, group),
        ),
    ]
    if trajectory.metrics:
        lines.append(
            Content.assemble(("metrics ", "$text-muted"), metrics_text(trajectory.metrics))
        )
    lines += [
        group_status(group, finished=state.state == "finished"),
        Content(""),
    ]
    if not trajectory.messages:
        lines.append(Content.styled("(the rollout recorded no messages)", "$text-muted"))
    for message in trajectory.messages:
        lines.extend(message_lines(message))
    return Content("\n").join(lines)


class RolloutDetail(VerticalScroll):
    """Scrollable text of the selected node."""

    ALLOW_MAXIMIZE = True

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.ref: RolloutRef | None = None
        self._shown: tuple[object, ...] | None = None

    def compose(self) -> ComposeResult:
        yield Static("", id="rollout-text")

    def on_mount(self) -> None:
        self.border_title = "Detail"

    def show(self, state: DashboardState, ref: RolloutRef | None) -> None:
        group = state.groups.get(ref.group_id) if ref and ref.group_id is not None else None
        key = (
            ref,
            state.groups.revision if ref and ref.kind in ("step", "waiting") else None,
            (group.discarded, group.step, group.at_best) if group else None,
            state.phase_text() if ref is None and not state.groups else None,
        )
        if key == self._shown:
            return
        self._shown = key
        self.ref = ref
        self.query_one("#rollout-text", Static).update(detail_content(state, ref))
        if ref is not None:
            set_subtitle(self, ref.kind)
