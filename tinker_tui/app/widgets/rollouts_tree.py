"""Step → group → trajectory, newest step first, filtered; groups and trajectories are
added when their parent is expanded, so long runs stay cheap to show.

Each group is filed under the step whose batch took it (or that was being collected when it
was dropped); groups sampled but not yet taken wait in a "queued" node on top. Every step
the run trained is listed; steps whose rollouts are not in memory are named at the bottom
with the reason. The view holds still while the run goes on: new steps are inserted only
while the cursor is on the top line; otherwise they are announced in the pane's subtitle
and `home` shows them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.widgets import Tree
from textual.widgets.tree import TreeNode

from tinker_tui.app.dashboard_rows import GroupRecord
from tinker_tui.app.dashboard_state import DashboardState
from tinker_tui.app.rollout_filter import RolloutFilter
from tinker_tui.app.textual_private import KeysInOrder, number_tree_lines
from tinker_tui.app.view_maths import version_text, versions_are_bounds
from tinker_tui.app.widgets.in_order_keys import take_key_in_order
from tinker_tui.app.widgets.updates import set_subtitle

REASON_LABELS = {"stale": "stale", "zero_variance": "no signal", "error": "error"}


@dataclass(frozen=True, slots=True)
class RolloutRef:
    """What a tree node stands for: a step, a group, or one trajectory of a group."""

    kind: str  # "waiting" | "step" | "group" | "trajectory" | "note"
    step: int | None
    group_id: int | None = None
    index: int | None = None


def preview(text: str, width: int = 28) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def step_label(step: int, groups: list[GroupRecord], collecting: bool = False) -> Text:
    count = len(groups)
    label = Text.assemble(
        ("step ", "dim"),
        (f"{step}", "bold"),
        (" collecting" if collecting else "", "italic"),
        f"  {count} group{'s' if count != 1 else ''}",
    )
    rewards = [g.reward_mean for g in groups if g.reward_mean is not None and g.trajectories]
    if rewards:
        label.append(f"  r̄ {sum(rewards) / len(rewards):.3f}")
    dropped = sum(1 for g in groups if g.discarded and not converged(g))
    if dropped:
        label.append(f"  ✗{dropped}", "yellow")
    return label


def converged(group: GroupRecord) -> bool:
    """Equal rewards at the best reward seen: the policy converged on it."""
    return group.discarded == "zero_variance" and group.at_best


def waiting_label(groups: list[GroupRecord], state: DashboardState) -> Text:
    count = len(groups)
    groups_text = f" group{'s' if count != 1 else ''}"
    if state.state == "finished":  # nothing will take them now
        return Text.assemble(
            ("left over ", "dim"), (f"{count}", "bold"), f"{groups_text} never trained"
        )
    return Text.assemble(
        ("queued ", "dim"), (f"{count}", "bold"), f"{groups_text} for step {state.step + 1}"
    )


def group_label(group: GroupRecord, bound: bool = False) -> Text:
    """`bound`: the run's versions are lower bounds (in-flight sampling): `v≥3`."""
    label = Text.assemble(
        (f"g{group.group_id} ", "dim"),
        group.scenario_id,
        (f"  {version_text(group.policy_version, bound)}", "dim"),
    )
    if group.reward_mean is not None and group.trajectories:
        label.append(f"  r̄ {group.reward_mean:.3f}")
    if converged(group):
        label.append("  = converged", "green")
    elif group.discarded:
        style = "red" if group.discarded == "error" else "yellow"
        label.append(f"  ✗ {REASON_LABELS.get(group.discarded, group.discarded)}", style)
    return label


def last_words(messages: Sequence[Mapping[str, Any]]) -> str:
    """What the policy said last: the last assistant message, or in a transcript the text
    after its last "Assistant:"."""
    for message in reversed(messages):
        content = str(message.get("content") or "")
        if message.get("role") == "assistant" and content:
            return content
        if message.get("role") == "transcript" and content:
            head, sep, tail = content.rpartition("Assistant:")
            return (tail.strip().splitlines() or [""])[0] if sep else content
    return ""


def trajectory_label(group: GroupRecord, index: int, bound: bool = False) -> Text:
    t = group.trajectories[index]
    label = Text.assemble(
        (f"#{index + 1} ", "dim"),
        (f"r {t.reward:.2f}", "bold"),
        (f"  {version_text(t.policy_version, bound)}  {t.num_tokens} tok", "dim"),
    )
    said = last_words(t.messages)
    if said:
        label.append(f"  {preview(said)}")
    return label


class RolloutsTree(KeysInOrder, Tree[RolloutRef]):
    """The rollouts of the run, filtered by a `RolloutFilter` (see the module docstring).

    Its keys are taken in order (`take_key_in_order`), and `/` opens the screen's filter
    from here, so that keys typed right behind it go into the filter."""

    ALLOW_MAXIMIZE = True

    BINDINGS = [
        Binding("home", "newest", "Newest", show=False, id="newest_steps"),
        Binding("slash", "screen.filter", "Filter", id="filter"),
    ]

    async def take_key(self, event: events.Key) -> None:
        await take_key_in_order(self, event)

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("rollouts", id=id)
        self.show_root = False
        self.guide_depth = 2
        self.filter = RolloutFilter()
        self._state: DashboardState | None = None
        self._waiting: TreeNode[RolloutRef] | None = None
        self._step_nodes: dict[int, TreeNode[RolloutRef]] = {}
        self._notes: list[TreeNode[RolloutRef]] = []
        self._raw: dict[int, tuple[object, ...]] = {}  # per step: what its label shows
        self._shown: dict[int, int] = {}  # per step: groups that pass the filter
        self._populated: set[int] = set()  # node ids whose children were added
        self._dirty: set[int] = set()  # steps whose open children wait for a refill
        self._revision = -1
        #: Newer steps not inserted because the user is reading further down.
        self.held: list[int] = []

    def on_mount(self) -> None:
        self.border_title = "Rollouts"

    def set_filter(self, rollout_filter: RolloutFilter) -> None:
        """Filter the tree; the item under the cursor stays under it if the filter shows it
        (clearing a filter goes back to what was open)."""
        keep = self.cursor_node.data if self.cursor_node is not None else None
        self.filter = rollout_filter
        self._rebuild()
        if keep is not None and keep.kind != "note":
            self.reveal(keep)

    def reveal(self, ref: RolloutRef) -> bool:
        """Open the path to `ref` (its step, its group) and put the cursor on it; False when
        the tree does not show it (filtered out, or not inserted yet)."""
        if self._state is None:
            return False
        parent = (
            self._waiting
            if ref.kind == "waiting" or ref.step is None
            else self._step_nodes.get(ref.step)
        )
        if parent is None:
            return False
        target: TreeNode[RolloutRef] | None = parent
        if ref.kind in ("group", "trajectory"):
            if parent.id not in self._populated:
                self._fill_step(
                    parent,
                    self._visible_groups(ref.step)
                    if ref.step is not None
                    else [g for g in self._state.groups.waiting() if self.filter.matches_group(g)],
                )
            parent.expand()
            target = next(
                (
                    c
                    for c in parent.children
                    if c.data is not None and c.data.group_id == ref.group_id
                ),
                None,
            )
            if target is not None and ref.kind == "trajectory":
                group = self._state.groups.get(ref.group_id)  # type: ignore[arg-type]
                if group is None:
                    return False
                if target.id not in self._populated:
                    self._fill_group(target, group)
                target.expand()
                target = next(
                    (
                        c
                        for c in target.children
                        if c.data is not None and c.data.index == ref.index
                    ),
                    None,
                )
        if target is None:
            return False
        number_tree_lines(self)  # the lines the expansions added
        self.move_cursor(target)
        return True

    @property
    def following(self) -> bool:
        """The cursor is on the top line: new steps may appear above it."""
        return self.cursor_line <= 0 and self.scroll_y == 0

    def action_newest(self) -> None:
        self.show_newest()

    def show_newest(self) -> None:
        """`home`: insert the held steps and put the cursor on the top line."""
        self.cursor_line = 0
        self.scroll_home(animate=False, immediate=True)
        self._revision = -1
        if self._state is not None:
            self.sync(self._state)
        self.cursor_line = 0

    def _visible_groups(self, step: int) -> list[GroupRecord]:
        assert self._state is not None
        return [g for g in self._state.groups.of(step) if self.filter.matches_group(g)]

    def _rebuild(self) -> None:
        self.clear()
        self._waiting = None
        self._step_nodes.clear()
        self._notes.clear()
        self._raw.clear()
        self._shown.clear()
        self._populated.clear()
        self._dirty.clear()
        self.held = []
        self._revision = -1
        if self._state is not None:
            self.sync(self._state)
            self.cursor_line = 0

    def sync(self, state: DashboardState) -> None:
        """Bring the tree up to date with the model (cheap when nothing changed)."""
        self._state = state
        if state.groups.revision == self._revision:
            return
        self._revision = state.groups.revision
        following = self.following
        keep = self.cursor_node if self.cursor_line >= 0 else None
        self._sync_waiting(state, following)
        kept = [s for s in state.groups.all_steps() if not self._trimmed(state, s)]
        for step in list(self._step_nodes):
            if step not in kept:  # trimmed from the model
                self._step_nodes.pop(step).remove()
                self._raw.pop(step, None)
        newest = max(self._step_nodes, default=None)
        self.held = []
        for step in reversed(kept):  # newest first
            records = state.groups.of(step)
            collecting = step > state.step
            raw = (
                len(records),
                sum(1 for g in records if g.discarded),
                sum(len(g.trajectories) for g in records),
                collecting,
            )
            if self._raw.get(step) == raw and step in self._step_nodes:
                continue  # nothing new in this step
            groups = [g for g in records if self.filter.matches_group(g)]
            self._shown[step] = len(groups)
            node = self._step_nodes.get(step)
            if not groups and self.filter.active:
                if node is not None:
                    self._step_nodes.pop(step).remove()
                self._raw[step] = raw
                continue
            if node is None:
                if newest is not None and step > newest and not following:
                    self.held.append(step)  # announced, inserted on `home`
                    continue
                self._raw[step] = raw
                self._step_nodes[step] = self._add_step(step, step_label(step, groups, collecting))
                continue
            self._raw[step] = raw
            node.set_label(step_label(step, groups, collecting))
            if node.id in self._populated:
                if following or self._at_or_below_cursor(node):
                    self._fill_step(node, groups)
                else:
                    self._dirty.add(step)
        self._sync_notes(state)
        set_subtitle(self, self._subtitle(state))
        if keep is not None and not following:
            self._keep_cursor_on(keep)
        elif following and self.cursor_line < 0 and (self._step_nodes or self._waiting):
            self.cursor_line = 0

    def _trimmed(self, state: DashboardState, step: int) -> bool:
        return state.groups.trimmed_before is not None and step < state.groups.trimmed_before

    def _add_step(self, step: int, label: Text) -> TreeNode[RolloutRef]:
        """A step node in its place: steps newest first, below the queued node."""
        older = [s for s in self._step_nodes if s < step]
        ref = RolloutRef("step", step)
        if older:
            return self.root.add(label, ref, before=self._step_nodes[max(older)])
        if self._notes:
            return self.root.add(label, ref, before=self._notes[0])
        return self.root.add(label, ref)

    def _sync_waiting(self, state: DashboardState, following: bool) -> None:
        groups = [g for g in state.groups.waiting() if self.filter.matches_group(g)]
        if not groups:
            if self._waiting is not None:
                self._waiting.remove()
                self._waiting = None
            return
        label = waiting_label(groups, state)
        if self._waiting is None:
            if self._step_nodes and not following:
                return  # a new top line would push the view down: wait for `home`
            first = next(iter(self.root.children), None)
            self._waiting = (
                self.root.add(label, RolloutRef("waiting", None), before=first)
                if first is not None
                else self.root.add(label, RolloutRef("waiting", None))
            )
            return
        self._waiting.set_label(label)
        if self._waiting.id in self._populated and (
            following or self._waiting.is_expanded and self._at_or_below_cursor(self._waiting)
        ):
            self._fill_groups(self._waiting, groups)

    def _sync_notes(self, state: DashboardState) -> None:
        """Why steps are missing: rollouts dropped from memory, or from before a resume."""
        notes: list[str] = []
        if state.groups.trimmed_before is not None:
            notes.append(
                f"steps before {state.groups.trimmed_before}: rollouts no longer kept in "
                f"memory (the newest {state.groups.keep:,} groups are); "
                "`tinker-tui export` has them all"
            )
        first = min(self._step_nodes, default=None)
        if state.start_step > 0 and (first is None or first > state.start_step):
            notes.append(
                f"steps 1–{state.start_step}: trained before this run resumed; "
                "`tinker-tui show` has their rollouts"
            )
        if [str(n.label) for n in self._notes] == notes:
            return
        for node in self._notes:
            node.remove()
        self._notes = [
            self.root.add_leaf(Text(note, style="dim italic"), RolloutRef("note", None))
            for note in notes
        ]

    def _at_or_below_cursor(self, node: TreeNode[RolloutRef]) -> bool:
        return node.line >= self.cursor_line >= 0 or node.line < 0

    def _keep_cursor_on(self, node: TreeNode[RolloutRef]) -> None:
        """Lines changed above the cursor (a step was trimmed, a label grew): keep it on the
        node it was on."""
        try:
            self.get_node_by_id(node.id)
        except Exception:  # the node was removed (trimmed or filtered out)
            return
        number_tree_lines(self)  # after the changes
        if self.cursor_node is not node:
            self.move_cursor(node)

    def _subtitle(self, state: DashboardState) -> str:
        shown = sum(self._shown.get(s, 0) for s in self._step_nodes)
        text = (
            f"{shown:,} of {len(state.groups):,} groups match"
            if self.filter.active
            else f"{len(state.groups):,} groups · {len(self._step_nodes)} steps"
        )
        if self.held:
            count = len(self.held)
            text = (
                f"[b $warning]▲ {count} new step{'s' if count != 1 else ''} · "
                f"home: show[/] · {text}"
            )
        return text

    def _bound(self) -> bool:
        return self._state is not None and versions_are_bounds(self._state.config)

    def _fill_step(self, node: TreeNode[RolloutRef], groups: list[GroupRecord]) -> None:
        self._fill_groups(node, groups)
        if node.data is not None and node.data.step is not None:
            self._dirty.discard(node.data.step)

    def _fill_groups(self, node: TreeNode[RolloutRef], groups: list[GroupRecord]) -> None:
        expanded = {
            child.data.group_id
            for child in node.children
            if child.data is not None and child.is_expanded
        }
        node.remove_children()
        for group in groups:
            child = node.add(
                group_label(group, self._bound()),
                RolloutRef("group", group.step, group.group_id),
                allow_expand=bool(group.trajectories),
            )
            if group.group_id in expanded:
                self._fill_group(child, group)
                child.expand()
        self._populated.add(node.id)

    def _fill_group(self, node: TreeNode[RolloutRef], group: GroupRecord) -> None:
        node.remove_children()
        for index, trajectory in enumerate(group.trajectories):
            if self.filter.trajectory_terms or self.filter.words:
                if not self.filter.matches_trajectory(group, trajectory):
                    continue
            node.add_leaf(
                trajectory_label(group, index, self._bound()),
                RolloutRef("trajectory", group.step, group.group_id, index),
            )
        self._populated.add(node.id)

    def on_tree_node_expanded(self, event: Tree.NodeExpanded[RolloutRef]) -> None:
        node, ref = event.node, event.node.data
        if ref is None or self._state is None:
            return
        if (
            ref.kind == "step"
            and ref.step is not None
            and (node.id not in self._populated or ref.step in self._dirty)
        ):
            self._fill_step(node, self._visible_groups(ref.step))
        elif ref.kind == "waiting":
            self._fill_groups(
                node, [g for g in self._state.groups.waiting() if self.filter.matches_group(g)]
            )
        elif (
            ref.kind == "group"
            and node.id not in self._populated
            and ref.group_id is not None
            and ref.group_id in self._state.groups
        ):
            self._fill_group(node, self._state.groups[ref.group_id])
