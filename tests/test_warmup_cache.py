"""The format warm-up's result is reused by an identical run in the same store (bit for bit
the same weights), recomputed when anything that decides it changes, and recomputed when the
saved result is damaged."""

from __future__ import annotations

from pathlib import Path

import torch

from tinker_tui.app.task_loader import layered_config, load_task
from tinker_tui.engine.events import LogEmitted
from tinker_tui.engine.local import peft_format
from tinker_tui.engine.run import Run
from tinker_tui.engine.training.warmup_cache import CACHE_DIR, KEEP


async def run_example(tmp_path: Path, **overrides) -> tuple[list[str], Path]:
    task = load_task("example")
    config = layered_config(task, "local").with_overrides(
        {
            "max_steps": 1,
            "warmup_steps": 6,
            "checkpoint_every": 0,
            "sampler_checkpoint_every": 1,
            **overrides,
        }
    )
    run = Run(task=task, config=config, backend="local", db_path=tmp_path / "runs.db")
    logs: list[str] = []
    run.events.subscribe(lambda e: logs.append(e.message) if isinstance(e, LogEmitted) else None)
    assert await run.run() == "completed"
    warmup = [m for m in logs if m.startswith("format warm-up")]
    saved = next((tmp_path / "checkpoints").glob("*/sampler_weights/step-000000-warmup"))
    return warmup, saved


def weights(folder: Path) -> dict[str, torch.Tensor]:
    return peft_format.read_adapter(folder)


def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


async def test_identical_run_reuses_the_warmup(tmp_path):
    first, first_weights = await run_example(tmp_path)
    assert len(first) == 1 and "6 supervised steps" in first[0] and "reused" not in first[0]
    assert len(list((tmp_path / "checkpoints" / CACHE_DIR).iterdir())) == 1
    second, second_weights = await run_example(tmp_path)
    assert len(second) == 1 and "reused" in second[0], second
    assert first[0].split("final loss ")[1][:5] == second[0].split("final loss ")[1][:5]
    assert same(weights(first_weights), weights(second_weights))


async def test_a_different_warmup_is_not_reused(tmp_path):
    await run_example(tmp_path)
    changes = [{"seed": 1}, {"warmup_learning_rate": 1e-3}, {"warmup_steps": 5}, {"lora_rank": 8}]
    for change in changes:
        log, _ = await run_example(tmp_path, **change)
        assert "reused" not in log[0], change
    # one entry per distinct warm-up, the least recently used beyond KEEP deleted
    assert len(list((tmp_path / "checkpoints" / CACHE_DIR).iterdir())) == KEEP


async def test_a_damaged_entry_is_recomputed(tmp_path):
    _, first_weights = await run_example(tmp_path)
    (entry,) = (tmp_path / "checkpoints" / CACHE_DIR).iterdir()
    (entry / peft_format.WEIGHTS_FILE).write_bytes(b"not a tensor file")
    log, second_weights = await run_example(tmp_path)
    assert any("could not be loaded" in m for m in log), log
    assert "reused" not in log[-1] and "6 supervised steps" in log[-1]
    assert same(weights(first_weights), weights(second_weights))
    log, _ = await run_example(tmp_path)  # the recomputed result replaced the damaged one
    assert "reused" in log[0]
