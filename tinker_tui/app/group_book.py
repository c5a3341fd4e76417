"""The groups of rollouts a dashboard keeps, and which step took each.

Its own concept, apart from the rest of `DashboardState`: the rollouts view, the scenario
board and the signals view read it. A group is waiting until a step takes (trains or
drops) it; a step's event may name a group whose sampling the reader has not seen yet
(`taken`); the oldest steps' groups go once more than `keep` are held; a rollback forgets
the steps after its target."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from tinker_tui.app.dashboard_rows import GroupRecord


class GroupBook:
    """Groups by id, the group ids each step took, and those still waiting."""

    def __init__(self, keep: int = 20_000) -> None:
        #: How many groups are kept (the oldest steps' go first).
        self.keep = keep
        self.records: dict[int, GroupRecord] = {}
        self.by_step: dict[int, list[int]] = {}
        self._waiting: dict[int, None] = {}  # group ids sampled, not yet taken by a step
        #: Groups a step took before their GroupSampled came (a reader's late row): the
        #: step each goes to when it comes, instead of "waiting" for good.
        self._taken_unseen: dict[int, int] = {}
        self.trained_steps: list[int] = []
        self.trimmed_before: int | None = None  # steps before this lost their groups
        #: Bumped on every change, so panes can skip redrawing unchanged groups.
        self.revision = 0

    def __len__(self) -> int:
        return len(self.records)

    def __contains__(self, group_id: object) -> bool:
        return group_id in self.records

    def __getitem__(self, group_id: int) -> GroupRecord:
        return self.records[group_id]

    def __iter__(self) -> Iterator[int]:
        return iter(self.records)

    def get(self, group_id: int) -> GroupRecord | None:
        return self.records.get(group_id)

    def values(self) -> Iterable[GroupRecord]:
        return self.records.values()

    def add(self, record: GroupRecord) -> None:
        """A group first seen: it waits for a step (trims the oldest steps' groups)."""
        self.records[record.group_id] = record
        self._waiting[record.group_id] = None
        self.revision += 1
        while len(self.records) > self.keep and self.by_step:
            oldest = min(self.by_step)
            for group_id in self.by_step.pop(oldest):
                self.records.pop(group_id, None)
            self.trimmed_before = max(self.trimmed_before or 0, oldest + 1)

    def sampled(self, record: GroupRecord) -> None:
        """The group's sampling was folded into `record`: a step that took it already
        gets it now."""
        step = self._taken_unseen.pop(record.group_id, None)
        if step is not None:
            self.assign(record, step)
        self.revision += 1

    def assign(self, record: GroupRecord, step: int) -> None:
        """The group goes to `step` (it trained, or was dropped while collecting it)."""
        if record.step == step:
            return
        if record.step is not None:
            ids = self.by_step.get(record.step, [])
            if record.group_id in ids:
                ids.remove(record.group_id)
        self._waiting.pop(record.group_id, None)
        record.step = step
        self.by_step.setdefault(step, []).append(record.group_id)

    def trained(self, step: int, group_ids: Iterable[int], time: float) -> None:
        """A step trained the groups `group_ids`; without the list (older records), the
        waiting groups sampled by `time`."""
        named = list(group_ids)
        taken = named or [g for g in self._waiting if self.records[g].time <= time]
        for group_id in taken:
            record = self.records.get(group_id)
            if record is not None:
                self.assign(record, step)
            elif named:
                self._taken_unseen[group_id] = step
        if step not in self.by_step:
            self.by_step[step] = []
        self.trained_steps.append(step)
        self.revision += 1

    def rewind(self, step: int) -> list[GroupRecord]:
        """A rollback to `step`: the groups of later steps, and the waiting ones (sampled
        for steps that will not come), are forgotten; returns them."""
        gone: list[GroupRecord] = []
        self.trained_steps = [s for s in self.trained_steps if s <= step]
        for later in [s for s in self.by_step if s > step]:
            for group_id in self.by_step.pop(later):
                record = self.records.pop(group_id, None)
                if record is not None:
                    gone.append(record)
        for group_id in list(self._waiting):
            self._waiting.pop(group_id)
            record = self.records.pop(group_id, None)
            if record is not None:
                gone.append(record)
        self.revision += 1
        return gone

    def steps_with_groups(self) -> list[int]:
        """Steps that took (or dropped) a group still kept, oldest first."""
        return sorted(s for s, ids in self.by_step.items() if ids)

    def all_steps(self) -> list[int]:
        """Every step the rollouts view lists: each trained step, and the step being
        collected when it already dropped groups; oldest first."""
        return sorted(set(self.trained_steps) | set(self.steps_with_groups()))

    def of(self, step: int) -> list[GroupRecord]:
        """The groups `step` took, in the order it took them."""
        return [self.records[g] for g in self.by_step.get(step, []) if g in self.records]

    def waiting(self) -> list[GroupRecord]:
        """Groups sampled and not yet taken by a step (queued for training)."""
        return [self.records[g] for g in self._waiting if g in self.records]
