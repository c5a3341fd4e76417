"""StableReinforce and GSPO as a run uses them: provenance built from sampled turns, the
`async_style` preset, and short headless runs of both losses on the local backend."""

from __future__ import annotations

import contextlib
import io
import json
import math
import re
import sqlite3

import pytest
import tinker

from tinker_tui.app.cli import main
from tinker_tui.engine.backend.datums import MissingProvenance, build_datums
from tinker_tui.engine.config import ASYNC_PRESETS, SETTINGS, RunConfig
from tinker_tui.engine.local import DEFAULT_BASE_MODEL
from tinker_tui.engine.rollouts.trajectory import SampledTurn, Trajectory, TrajectoryGroup


def _group(turns: tuple[SampledTurn, ...]) -> TrajectoryGroup:
    return TrajectoryGroup(
        group_id=7,
        scenario_id="s",
        started_at=0.0,
        finished_at=1.0,
        trajectories=(Trajectory(turns=turns, reward=1.0), Trajectory(turns=turns, reward=0.0)),
    )


def test_a_two_turn_datum_names_each_token_by_its_sampled_sequence():
    """Turn 2's prompt extends turn 1 (prompt, completion, a tool result): one datum whose
    spans tile its input and targets, sampled runs naming each turn's sequence."""
    first = SampledTurn((1, 2, 3), (4, 5), (-0.1, -0.2), 0, "tool_calls", "seq-a")
    second = SampledTurn((1, 2, 3, 4, 5, 6, 7), (8, 9, 10), (-0.3, -0.4, -0.5), 0, "stop", "seq-b")
    batch = build_datums([_group((first, second))], provenance=True)
    datum = batch[0]
    assert datum.model_input.to_ints() == [1, 2, 3, 4, 5, 6, 7, 8, 9]
    S, P = tinker.SampledProvenanceSpan, tinker.PromptProvenanceSpan
    assert datum.loss_fn_input_spans == [
        P(sequence_id="seq-a", offset=1, length=2),  # targets 2, 3: context
        S(sequence_id="seq-a", offset=0, length=2),  # 4, 5 sampled by a
        P(sequence_id="seq-b", offset=5, length=2),  # 6, 7: the tool result, b's prompt
        S(sequence_id="seq-b", offset=0, length=3),  # 8, 9, 10 sampled by b
    ]
    assert datum.model_input_spans == [
        P(sequence_id="seq-a", offset=0, length=3),
        S(sequence_id="seq-a", offset=0, length=2),
        P(sequence_id="seq-b", offset=5, length=2),
        S(sequence_id="seq-b", offset=0, length=2),
    ]
    # sampled targets are exactly the tokens each span names
    targets = datum.loss_fn_inputs["target_tokens"].tolist()
    assert targets[2:4] == [4, 5] and targets[6:9] == [8, 9, 10]
    # without provenance (every other loss) nothing is attached
    assert build_datums([_group((first, second))])[0].loss_fn_input_spans is None


def test_a_turn_without_a_sequence_id_cannot_train_with_stable_reinforce():
    turn = SampledTurn((1, 2), (3,), (-0.1,), 0)
    with pytest.raises(MissingProvenance, match="no sequence id"):
        build_datums([_group((turn,))], provenance=True)


def test_the_cookbook_preset_sets_its_settings_where_they_are_defaults():
    config = RunConfig(async_style="cookbook")
    assert config.loss_fn == "stable_reinforce" and config.discard_stale is False
    assert RunConfig(async_style="cookbook", loss_fn="ppo").loss_fn == "ppo"  # yours wins
    assert RunConfig().loss_fn == "importance_sampling" and RunConfig().discard_stale
    # `sampling` arrives with in-flight sampling: applied when it is a setting, else skipped
    assert ASYNC_PRESETS["cookbook"]["sampling"] == "inflight"
    if "sampling" in SETTINGS:
        assert config.as_dict()["sampling"] == "inflight"


LOCAL = [
    "--backend",
    "local",
    "--no-ui",
    "--base-model",
    DEFAULT_BASE_MODEL,
    "--warmup-steps",
    "0",
    "--eval-every",
    "0",
    "--steps",
    "3",
    "--group-size",
    "4",
    "--groups-per-step",
    "2",
    "--rollout-workers",
    "2",
]


@pytest.mark.parametrize("loss_fn", ["stable_reinforce", "gspo"])
def test_a_short_local_run_trains_with_the_loss(tmp_path, loss_fn):
    db = tmp_path / "runs.db"
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["run", "example", *LOCAL, "--db", str(db), "--loss-fn", loss_fn])
    assert code == 0, err.getvalue()[-3000:]
    with sqlite3.connect(db) as conn:
        steps = [json.loads(m) for (m,) in conn.execute("select metrics from steps order by step")]
        (stored,) = conn.execute("select config from runs").fetchone()
    assert json.loads(stored)["loss_fn"] == loss_fn
    assert len(steps) == 3
    assert all(math.isfinite(m["reward/mean"]) for m in steps)
    trained = [m for m in steps if "train/loss_sum" in m]
    assert trained and all(math.isfinite(m["train/loss_sum"]) for m in trained)
    assert any(m["train/loss_sum"] != 0.0 for m in trained)


def test_a_resumed_stable_reinforce_run_says_it_samples_the_untrained_groups_again(tmp_path):
    """Recorded sequences belong to the session that sampled them: a resume samples every
    scenario the checkpoint had not trained again, and says so."""
    db = tmp_path / "runs.db"
    args = [*LOCAL, "--db", str(db), "--loss-fn", "stable_reinforce", "--checkpoint-every", "1"]

    def run(*extra: str) -> str:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["run", "example", *args, *extra])
        assert code == 0, err.getvalue()[-3000:]
        return out.getvalue()

    run("--steps", "2")
    with sqlite3.connect(db) as conn:
        (run_id,) = conn.execute("select run_id from runs").fetchone()
    resumed = run("--resume", run_id, "--steps", "3")
    drawn = re.search(r"(\d+) scenario\(s\) drawn but untrained", resumed)
    assert drawn, resumed
    said = re.search(
        r"stable_reinforce: the (\d+) scenario\(s\) not trained by step 2 are "
        r"sampled again",
        resumed,
    )
    if int(drawn.group(1)):
        assert said and said.group(1) == drawn.group(1), resumed
    else:
        assert said is None
    assert "completed at step 3/3" in resumed
