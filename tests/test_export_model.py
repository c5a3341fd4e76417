"""`export-model` writes checkpoints that transformers + peft load with the logits the local
backend computes: a LoRA adapter on the real-format Qwen3 fixture (peft layout) and on the
embedded model (a transformers Llama), merged or not. Old `adapter.pt` checkpoints still load.

Tolerance: the peft adapter's logits equal ours to 1e-5 (absolute; peft computes the same
``W x + scale * B (A x)`` in float32, they are in fact bit-equal here); merged weights to
1e-4 (``W + scale * B A`` is rounded once to float32, on logits of magnitude up to ~50).
"""

from __future__ import annotations

import asyncio
import json
import warnings
from pathlib import Path

import pytest
import tinker
import torch

from tinker_tui.app.cli import main
from tinker_tui.app.task_loader import layered_config, load_task
from tinker_tui.engine.checkpoint_paths import run_checkpoint_dir
from tinker_tui.engine.local import LocalServiceClient, checkpoints, lora, peft_format
from tinker_tui.engine.local.model import load_base
from tinker_tui.engine.run import Run

ADAPTER_TOLERANCE = 1e-5
MERGED_TOLERANCE = 1e-4
TOKENS = [3, 17, 42, 7, 99, 5, 11, 64, 2, 30]


def trained_checkpoint(checkpoint_dir: Path, base_model: str) -> str:
    """A sampler checkpoint after three real training steps (B is no longer zero)."""
    service = LocalServiceClient(checkpoint_dir=checkpoint_dir)
    client = service.create_lora_training_client(base_model=base_model, rank=4).result()
    datum = tinker.Datum(
        model_input=tinker.ModelInput.from_ints(TOKENS[:-1]),
        loss_fn_inputs={"target_tokens": TOKENS[1:], "weights": [1.0] * (len(TOKENS) - 1)},
    )
    for _ in range(3):
        client.forward_backward([datum], "cross_entropy").result()
        client.optim_step(tinker.AdamParams(learning_rate=1e-2)).result()
    return client.save_weights_for_sampler("exported").result().path


def our_logits(checkpoint_dir: Path, path: str) -> torch.Tensor:
    folder = checkpoints.resolve(checkpoint_dir, path)
    meta, state, _ = checkpoints.load(folder, with_optimizer=False, path=path)
    base = load_base(meta["base_model"])
    adapter = checkpoints.restore_adapter(meta, state, base, path)
    with torch.no_grad(), lora.activate(base.layers, adapter):
        return base.module(torch.tensor([TOKENS])).logits.float()


def their_logits(out: Path, *, merged: bool) -> torch.Tensor:
    from transformers import AutoModelForCausalLM

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if merged:
            model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
        else:
            from peft import AutoPeftModelForCausalLM

            model = AutoPeftModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    with torch.no_grad():
        return model(torch.tensor([TOKENS])).logits.float()


def export(db: Path, spec: str, out: Path, *extra: str) -> int:
    return main(["export-model", spec, str(out), "--db", str(db), *extra])


@pytest.mark.parametrize("merged", [False, True])
def test_qwen3_adapter_loads_in_peft_with_our_logits(tmp_path, qwen3_folder, capsys, merged):
    db = tmp_path / "runs.db"
    path = trained_checkpoint(run_checkpoint_dir(db), str(qwen3_folder))
    out = tmp_path / "hf"
    assert export(db, path, out, *(["--merge"] if merged else [])) == 0
    assert f"to {out}" in capsys.readouterr().out
    if not merged:
        config = json.loads((out / peft_format.CONFIG_FILE).read_text())
        assert config["base_model_name_or_path"] == str(qwen3_folder)
        assert config["target_modules"] == sorted(
            ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head"]
        )
    ours = our_logits(run_checkpoint_dir(db), path)
    theirs = their_logits(out, merged=merged)
    assert ours.shape == theirs.shape == (1, len(TOKENS), 151_936)
    tolerance = MERGED_TOLERANCE if merged else ADAPTER_TOLERANCE
    assert (ours - theirs).abs().max().item() <= tolerance
    base = their_logits_of_base(qwen3_folder)
    assert (ours - base).abs().max().item() > 100 * tolerance  # the adapter changed them


def their_logits_of_base(folder: Path) -> torch.Tensor:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    with torch.no_grad():
        return model(torch.tensor([TOKENS])).logits.float()


async def test_embedded_run_exports_by_run_and_step(tmp_path, capsys):
    """A real run of the example task; RUN@STEP names its checkpoint; transformers + peft
    load the embedded model's adapter (the base written beside it) and the merged model."""
    task = load_task("example")
    config = layered_config(task, "local").with_overrides(
        {"max_steps": 2, "warmup_steps": 0, "checkpoint_every": 1}
    )
    db = tmp_path / "runs.db"
    run = Run(task=task, config=config, backend="local", db_path=db)
    assert await run.run() == "completed"
    spec = f"{run.run_id}@2"
    # the command runs its own event loop: off this test's one
    assert await asyncio.to_thread(export, db, spec, tmp_path / "adapter") == 0
    assert await asyncio.to_thread(export, db, spec, tmp_path / "merged", "--merge") == 0
    lines = capsys.readouterr().out
    assert f"wrote {spec} as a peft adapter" in lines and "base/model.safetensors" in lines
    from tinker_tui.app.checkpoint_ref import resolve

    ref = await resolve(db, spec)
    ours = our_logits(run_checkpoint_dir(db), ref.path)
    for folder, merged in ((tmp_path / "adapter", False), (tmp_path / "merged", True)):
        theirs = their_logits(folder, merged=merged)
        tolerance = MERGED_TOLERANCE if merged else ADAPTER_TOLERANCE
        assert (ours - theirs).abs().max().item() <= tolerance, folder


def test_bad_references_are_one_line(tmp_path, capsys):
    db = tmp_path / "runs.db"
    path = trained_checkpoint(run_checkpoint_dir(db), "tinker-tui/tiny-chat")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    assert export(db, path, tmp_path / "full") == 2
    assert export(db, path.replace("exported", "missing"), tmp_path / "new") == 2
    assert export(db, "somerun@x", tmp_path / "new") == 2
    err = capsys.readouterr().err
    assert "not an empty folder" in err and "not found" in err and "step number" in err
    assert "Traceback" not in err


def test_old_torch_pickle_checkpoints_still_load(tmp_path):
    """A format-2 folder (adapter.pt) loads as before, to the same matrices."""
    folder = checkpoints.resolve(tmp_path, trained_checkpoint(tmp_path, "tinker-tui/tiny-chat"))
    meta = json.loads((folder / "meta.json").read_text())
    state = peft_format.read_adapter(folder)
    torch.save(state, folder / checkpoints.OLD_MODEL_FILE)
    (folder / peft_format.WEIGHTS_FILE).unlink()
    (folder / "meta.json").write_text(json.dumps({**meta, "format": 2}))
    _, loaded, _ = checkpoints.load(folder, with_optimizer=False, path=str(folder))
    assert loaded.keys() == state.keys()
    assert all(torch.equal(loaded[k], state[k]) for k in state)


async def test_a_tinker_checkpoint_downloads_through_the_sdk(tmp_path, monkeypatch, capsys):
    """On Tinker (real SDK → the service double): export-model RUN@STEP loads the checkpoint,
    saves it as external weights, downloads the files from their signed URLs and deletes
    the temporary export; peft loads the adapter onto the base with our logits."""
    from peft import PeftModel
    from tinker_double import TinkerDouble

    from tinker_tui.app.checkpoint_ref import resolve
    from tinker_tui.engine.local import DEFAULT_BASE_MODEL
    from tinker_tui.engine.local.hf_export import base_module

    db = tmp_path / "runs.db"
    argv = ["--backend", "tinker", "--base-model", DEFAULT_BASE_MODEL, "--eval-every", "0"]
    argv += ["--steps", "2", "--checkpoint-every", "1", "--warmup-steps", "0", "--no-ui"]
    with TinkerDouble(tmp_path / "service") as double:
        for name, value in double.env().items():
            monkeypatch.setenv(name, value)
        code = await asyncio.to_thread(main, ["run", "example", "--db", str(db), *argv])
        assert code == 0
        run_id = (await asyncio.to_thread(find_newest, db)).run_id
        out = tmp_path / "hf"
        assert await asyncio.to_thread(export, db, f"{run_id}@2", out) == 0
        assert await asyncio.to_thread(export, db, f"{run_id}@2", tmp_path / "m", "--merge") == 2
        printed = capsys.readouterr()
        assert "as the service exported it" in printed.out and "--merge" in printed.err
        ref = await resolve(db, f"{run_id}@2")
        assert ref.path.startswith("tinker://") and "/weights/" in ref.path
        service = double.service
        external = [p for p in service.checkpoints if "/external_weights/" in p]
        assert not external and any("/external_weights/" in p for p in service.deleted)
        local = service.local_path(ref.path)
        ours = our_logits(service.checkpoint_dir, local)
    assert sorted(p.name for p in out.iterdir()) == [
        peft_format.CONFIG_FILE,
        peft_format.WEIGHTS_FILE,
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = PeftModel.from_pretrained(base_module(DEFAULT_BASE_MODEL), out)
    with torch.no_grad():
        theirs = model(torch.tensor([TOKENS])).logits.float()
    assert (ours - theirs).abs().max().item() <= ADAPTER_TOLERANCE


def find_newest(db: Path):
    from tinker_tui.engine.store import find_run

    return asyncio.run(find_run(db, None))
