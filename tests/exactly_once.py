"""What a run store must show after a run was stopped any way and resumed to its end: the run
completed at its last step, steps 1..N each once with one new policy version per step that
had a gradient, every scenario position trained once or dropped with a reason (positions
drawn but never consumed are the final checkpoint's pending ones), each step a full batch,
and the metrics file with each step once. Shared by the fault tests.
"""

from __future__ import annotations

import json
import sqlite3
from collections import defaultdict
from pathlib import Path


def integrity(db: Path) -> str:
    with sqlite3.connect(db) as conn:
        result = conn.execute("pragma integrity_check").fetchone()[0]
    conn.close()
    return str(result)


def confirmed_steps(db: Path) -> list[int]:
    with sqlite3.connect(db) as conn:
        steps = [
            r[0]
            for r in conn.execute(
                "select step from checkpoints where kind = 'state' and confirmed = 1 order by step"
            )
        ]
    conn.close()
    return steps


def problems(db: Path, steps: int, groups_per_step: int = 4) -> list[str]:
    """Everything in the store (and the metrics file beside it) that breaks the module's
    rules; empty when the run was resumed exactly once."""
    found: list[str] = []
    conn = sqlite3.connect(db)
    try:
        runs = conn.execute("select status, final_step from runs").fetchall()
        if runs != [("completed", steps)]:
            found.append(f"runs: {runs}, not one completed at step {steps}")
        version = 0
        rows = conn.execute("select step, policy_version, metrics from steps order by step")
        recorded = []
        for step, policy_version, metrics in rows:
            recorded.append(step)
            # One new policy version per step, none for a step without gradient.
            version += 0 if "train/skipped" in json.loads(metrics) else 1
            if policy_version != version:
                found.append(f"step {step}: policy version {policy_version}, not {version}")
        if recorded != list(range(1, steps + 1)):
            found.append(f"steps recorded {recorded}, not 1..{steps} once each")

        by_position = defaultdict(list)
        for row in conn.execute(
            "select scenario_index, scenario_id, status, step, reason "
            "from group_lifecycle order by group_id"
        ):
            by_position[row[0]].append(row)
        if sorted(by_position) != list(range(len(by_position))):
            found.append("a scenario position was skipped")
        final = conn.execute(
            "select resume_state from checkpoints where confirmed = 1 "
            "order by step desc, id desc limit 1"
        ).fetchone()
        leftover = set(json.loads(final[0])["pending"]) if final and final[0] else set()
        per_step: dict[int, int] = defaultdict(int)
        for position, attempts in by_position.items():
            if len({a[1] for a in attempts}) != 1:
                found.append(f"position {position} changed scenario: {attempts}")
            done = [a for a in attempts if a[2] in ("trained", "discarded")]
            if position in leftover:
                if done or not {a[2] for a in attempts} <= {"requeued", "unused"}:
                    found.append(f"pending position {position} was consumed: {attempts}")
                continue
            if len(done) != 1:
                found.append(f"position {position} consumed {len(done)} times: {attempts}")
                continue
            _, _, fate, step, reason = done[0]
            if fate != "trained" and not reason:
                found.append(f"position {position} dropped without a reason: {attempts}")
            if fate == "trained" or reason == "zero_variance":
                per_step[step] += 1
            if any(a[2] != "requeued" for a in attempts if a is not done[0]):
                found.append(
                    f"position {position}: an attempt neither consumed nor requeued: {attempts}"
                )
        # Each step took one full batch: nothing trained twice, none lost.
        if dict(per_step) != {s: groups_per_step for s in range(1, steps + 1)}:
            found.append(f"groups per step {dict(per_step)}, not {groups_per_step} each")
    finally:
        conn.close()

    files = list(db.parent.glob("*.metrics.jsonl"))
    lines = [json.loads(line) for f in files for line in f.read_text().splitlines()]
    logged = [r["step"] for r in lines if r["event"] == "step"]
    if logged != list(range(1, steps + 1)):
        found.append(f"metrics file steps {logged}, not 1..{steps} once each")
    return found


def positions_consumed_twice(db: Path) -> int:
    """Scenario positions trained (or dropped) more than once: the duplicates a fault left."""
    with sqlite3.connect(db) as conn:
        (count,) = conn.execute(
            "select count(*) from (select scenario_index from group_lifecycle where status in "
            "('trained', 'discarded') group by scenario_index having count(*) > 1)"
        ).fetchone()
    conn.close()
    return int(count)


def check_exactly_once(db: Path, steps: int, groups_per_step: int = 4) -> None:
    found = problems(db, steps, groups_per_step)
    assert not found, "\n".join(found)
