"""Scenarios from data files and `datasets` datasets on local disk: rows, ids, shuffled epochs,
an exact resume, the mistakes a user makes, and nothing downloaded."""

import json
import random

import pytest

from tinker_tui import Task, scenarios_from_dataset, scenarios_from_jsonl
from tinker_tui.engine.rollouts.task import TaskError, check_task
from tinker_tui.engine.training.resume import ScenarioSource

ROWS = [{"id": f"p{i}", "question": f"What is {i} + 1?", "answer": i + 1} for i in range(7)]


@pytest.fixture
def jsonl(tmp_path):
    path = tmp_path / "problems.jsonl"
    path.write_text(
        "\n".join(json.dumps(r) for r in ROWS[:3])
        + "\n\n"
        + "\n".join(json.dumps(r) for r in ROWS[3:])
        + "\n"
    )
    return path


def draw(scenarios, count, seed=0):
    stream = scenarios(random.Random(seed))
    return [next(stream) for _ in range(count)]


def test_every_row_once_per_epoch_each_epoch_shuffled_by_the_runs_rng(jsonl):
    problems = scenarios_from_jsonl(jsonl)
    assert len(problems) == 7
    drawn = draw(problems, 21)
    epochs = [[s.data["id"] for s in drawn[i : i + 7]] for i in (0, 7, 14)]
    assert all(sorted(e) == sorted(r["id"] for r in ROWS) for e in epochs)
    assert len({tuple(e) for e in epochs}) == 3, "each epoch has its own order"
    assert [s.id for s in draw(problems, 21)] == [s.id for s in drawn], "same seed, same stream"
    assert [s.id for s in draw(problems, 7, seed=1)] != [s.id for s in drawn[:7]]
    # ids: file stem and row index, or a field of the row
    assert drawn[0].id.startswith("problems-")
    assert {s.id for s in draw(scenarios_from_jsonl(jsonl, id_field="id"), 7)} == {
        r["id"] for r in ROWS
    }


def test_in_order_finite_and_all_for_evaluation(jsonl):
    held_out = scenarios_from_jsonl(jsonl, shuffle=False, epochs=2)
    assert [s.data["id"] for s in held_out(random.Random(0))] == [r["id"] for r in ROWS] * 2
    assert [s.data for s in held_out.all()] == ROWS
    task = Task(name="t", scenarios=held_out, rollout=_rollout, eval_scenarios=held_out.all)
    check_task(task)  # both fit the task's fields


async def _rollout(client, model, scenario):
    raise AssertionError("not run")


def test_a_resume_replays_the_shuffled_epochs_exactly(jsonl):
    """Positions 0..29 drawn by a first run; a run resumed at position 12 with 9 and 11
    pending (drawn but untrained) redoes those, then continues as the first run did."""
    task = Task(name="t", scenarios=scenarios_from_jsonl(jsonl), rollout=_rollout)
    first = ScenarioSource(task, random.Random(5))
    drawn = [first.draw() for _ in range(30)]
    rng = random.Random(5)
    replay = ScenarioSource(task, random.Random(5))
    for _ in range(12):
        replay.draw()
    resumed = ScenarioSource(
        task, rng, next_position=12, redo=(9, 11), rng_state=replay.rng_state()
    )
    assert resumed.reproducible
    again = [resumed.draw() for _ in range(20)]
    ids = {position: scenario.id for position, scenario in drawn}
    assert [(p, s.id) for p, s in again] == [(9, ids[9]), (11, ids[11])] + [
        (p, ids[p]) for p in range(12, 30)
    ]


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "not found"),
        ('{"a": 1}\n{"a": \n', "line 2 is not JSON"),
        ("\n\n", "has no rows"),
    ],
)
def test_file_mistakes_are_task_errors_naming_the_file(tmp_path, content, message):
    path = tmp_path / "data.jsonl"
    if content is not None:
        path.write_text(content)
    with pytest.raises(TaskError, match=message) as info:
        scenarios_from_jsonl(path)
    assert "data" in str(info.value)
    with pytest.raises(TaskError, match="row 0 has no usable 'id'"):
        (tmp_path / "noid.jsonl").write_text('{"q": 1}\n')
        scenarios_from_jsonl(tmp_path / "noid.jsonl", id_field="id")
    with pytest.raises(TaskError, match="epochs must be"):
        (tmp_path / "ok.jsonl").write_text('{"q": 1}\n')
        scenarios_from_jsonl(tmp_path / "ok.jsonl", epochs=0)


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """Any attempt to reach the Hugging Face Hub fails: nothing may be downloaded."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    import datasets

    return datasets


def test_datasets_objects_folders_and_files(offline, tmp_path):
    datasets = offline
    table = datasets.Dataset.from_list(ROWS)
    from_object = scenarios_from_dataset(table, id_field="id")
    assert [s.data for s in from_object.all()] == ROWS
    assert sorted(s.id for s in draw(from_object, 7)) == sorted(r["id"] for r in ROWS)

    splits = datasets.DatasetDict({"train": table, "test": table.select(range(2))})
    assert len(scenarios_from_dataset(splits, split="test")) == 2
    with pytest.raises(TaskError, match="has splits train, test: name one"):
        scenarios_from_dataset(splits)
    with pytest.raises(TaskError, match="no split 'dev'"):
        scenarios_from_dataset(splits, split="dev")

    table.save_to_disk(str(tmp_path / "saved"))
    assert [s.data for s in scenarios_from_dataset(tmp_path / "saved").all()] == ROWS
    table.to_parquet(str(tmp_path / "rows.parquet"))
    from_parquet = scenarios_from_dataset(tmp_path / "rows.parquet", cache_dir=tmp_path / "cache")
    assert [s.data for s in from_parquet.all()] == ROWS and from_parquet.all()[0].id == "rows-0"


def test_a_hub_name_is_not_fetched(offline):
    with pytest.raises(TaskError, match="reads local files only"):
        scenarios_from_dataset("openai/gsm8k")
    with pytest.raises(TaskError, match="takes a datasets.Dataset"):
        scenarios_from_dataset(ROWS)
