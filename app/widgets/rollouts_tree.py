"""Step → group → trajectory, newest step first, filtered; groups and trajectories are
added when their parent is expanded, so long runs stay cheap to show."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.widgets import Tree
from textual.widgets.tree import TreeNode
from tinker_tui.app.run_model import GroupRecord, RolloutFilter, RunModel
from tinker_tui.app.widgets.updates import set_subtitle

REASON_LABELS = {"stale": "stale", "zero_variance": "zero variance", "error": "error"}


@dataclass(frozen=True, slots=True)
class RolloutRef:
    """What a tree node stands for: a step, a group, or one trajectory of a group."""

    kind: str  # "step" | "group" | "trajectory"
    step: int
    group_id: int | None = None
    index: int | None = None


def preview(text: str, width: int = 28) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def step_label(step: int, groups: list[GroupRecord]) -> Text:
    count = len(groups)
    label = Text.assemble(("step ", "dim"), (f"{step}", "bold"),
                          f"  {count} group{'s' if count != 1 else ''}")
    rewards = [g.reward_mean for g in groups if g.reward_mean is not None and g.trajectories]
    if rewards:
        label.append(f"  r̄ {sum(rewards) / len(rewards):.3f}")
    dropped = sum(1 for g in groups if g.discarded)
    if dropped:
        label.append(f"  ✗{dropped}", "yellow")
    return label


def group_label(group: GroupRecord) -> Text:
    label = Text.assemble((f"g{group.group_id} ", "dim"), group.scenario_id,
                          (f"  v{group.policy_version}", "dim"))
    if group.reward_mean is not None and group.trajectories:
        label.append(f"  r̄ {group.reward_mean:.3f}")
    if group.discarded:
        style = "red" if group.discarded == "error" else "yellow"
        label.append(f"  ✗ {REASON_LABELS.get(group.discarded, group.discarded)}", style)
    return label


def last_words(messages) -> str:
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


def trajectory_label(group: GroupRecord, index: int) -> Text:
    t = group.trajectories[index]
    label = Text.assemble((f"#{index + 1} ", "dim"), (f"r {t.reward:.2f}", "bold"),
                          (f"  v{t.policy_version}  {t.num_tokens} tok", "dim"))
    said = last_words(t.messages)
    if said:
        label.append(f"  {preview(said)}")
    return label


class RolloutsTree(Tree[RolloutRef]):
    """The rollouts of the run, filtered by a `RolloutFilter`."""

    ALLOW_MAXIMIZE = True

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("rollouts", id=id)
        self.show_root = False
        self.guide_depth = 2
        self.filter = RolloutFilter()
        self._model: RunModel | None = None
        self._step_nodes: dict[int, TreeNode[RolloutRef]] = {}
        self._raw: dict[int, tuple[int, int, int]] = {}  # per step: groups, discards, rollouts
        self._shown: dict[int, int] = {}  # per step: groups that pass the filter
        self._populated: set[int] = set()  # node ids whose children were added
        self._revision = -1

    def on_mount(self) -> None:
        self.border_title = "Rollouts"

    def set_filter(self, rollout_filter: RolloutFilter) -> None:
        self.filter = rollout_filter
        self._rebuild()

    def _visible_groups(self, step: int) -> list[GroupRecord]:
        assert self._model is not None
        return [g for g in self._model.groups_of(step) if self.filter.matches_group(g)]

    def _rebuild(self) -> None:
        self.clear()
        self._step_nodes.clear()
        self._raw.clear()
        self._shown.clear()
        self._populated.clear()
        self._revision = -1
        if self._model is not None:
            self.sync(self._model)

    def sync(self, model: RunModel) -> None:
        """Bring the tree up to date with the model (cheap when nothing changed)."""
        self._model = model
        if model.groups_revision == self._revision:
            return
        self._revision = model.groups_revision
        keep = self.cursor_node if self.cursor_line >= 0 else None
        steps = model.steps_with_groups()
        for step in list(self._step_nodes):
            if step not in model.groups_by_step:  # trimmed from the model
                self._step_nodes.pop(step).remove()
                self._raw.pop(step, None)
        for step in steps:
            records = model.groups_of(step)
            raw = (len(records), sum(1 for g in records if g.discarded),
                   sum(len(g.trajectories) for g in records))
            if self._raw.get(step) == raw:
                continue  # nothing new in this step
            self._raw[step] = raw
            groups = [g for g in records if self.filter.matches_group(g)]
            self._shown[step] = len(groups)
            node = self._step_nodes.get(step)
            if not groups:
                if node is not None:
                    self._step_nodes.pop(step).remove()
                continue
            label = step_label(step, groups)
            if node is None:
                # newest first: before the newest older step shown, else at the end
                older = [s for s in self._step_nodes if s < step]
                ref = RolloutRef("step", step)
                if older:
                    node = self.root.add(label, ref, before=self._step_nodes[max(older)])
                else:
                    node = self.root.add(label, ref)
                self._step_nodes[step] = node
                continue
            node.set_label(label)
            if node.id in self._populated:
                self._fill_step(node, groups)
        set_subtitle(self, self._subtitle(model))
        if keep is not None:
            self._keep_cursor_on(keep)
        if self.cursor_line < 0 and self._step_nodes:
            self.cursor_line = 0  # the newest step, so enter / arrows work at once

    def _keep_cursor_on(self, node: TreeNode[RolloutRef]) -> None:
        """New steps arrive above the cursor: keep it on the node it was on."""
        try:
            self.get_node_by_id(node.id)
        except Exception:  # the node was removed (trimmed or filtered out)
            return
        self._tree_lines  # noqa: B018  # rebuild line numbers after the additions
        if self.cursor_node is not node:
            self.move_cursor(node)

    def _subtitle(self, model: RunModel) -> str:
        shown = sum(self._shown.get(s, 0) for s in self._step_nodes)
        if self.filter.active:
            return f"{shown:,} of {len(model.groups):,} groups match"
        return f"{len(model.groups):,} groups · {len(self._step_nodes)} steps"

    def _fill_step(self, node: TreeNode[RolloutRef], groups: list[GroupRecord]) -> None:
        expanded = {child.data.group_id for child in node.children
                    if child.data is not None and child.is_expanded}
        node.remove_children()
        for group in groups:
            child = node.add(group_label(group), RolloutRef("group", node.data.step,
                                                            group.group_id),
                             allow_expand=bool(group.trajectories))
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
            node.add_leaf(trajectory_label(group, index),
                          RolloutRef("trajectory", group.step, group.group_id, index))
        self._populated.add(node.id)

    def on_tree_node_expanded(self, event: Tree.NodeExpanded[RolloutRef]) -> None:
        node, ref = event.node, event.node.data
        if ref is None or node.id in self._populated or self._model is None:
            return
        if ref.kind == "step":
            self._fill_step(node, self._visible_groups(ref.step))
        elif ref.kind == "group" and ref.group_id in self._model.groups:
            self._fill_group(node, self._model.groups[ref.group_id])
