"""`tinker-tui chat RUN[@STEP]`: a kept checkpoint loaded with the run's backend, model and
renderer behind its policy server, talked to in turns (`--message`, and the chat window)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

os.environ.setdefault("TEXTUAL_ANIMATIONS", "none")

import pytest
import torch

from tinker_tui.app.cli import main as cli_main
from tinker_tui.app.commands.chat import resolve_target, split_ref
from tinker_tui.app.screens.chat import ChatApp
from tinker_tui.app.task_loader import layered_config, load_task
from tinker_tui.engine.chat_policy import ChatPolicy
from tinker_tui.engine.checkpoint_paths import local_folder
from tinker_tui.engine.errors import UsageError
from tinker_tui.engine.local import checkpoints
from tinker_tui.engine.run import Run


def test_run_at_step_is_split_and_a_bad_step_is_said():
    assert split_ref("abc") == ("abc", None)
    assert split_ref("abc@12") == ("abc", 12)
    assert split_ref("@0") == ("latest", 0)
    with pytest.raises(UsageError, match="must be a number"):
        split_ref("abc@best")


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[str, Path]:
    """The example, four steps on the local backend, checkpoints at steps 2 and 4."""
    folder = tmp_path_factory.mktemp("chat")
    task = load_task("example")
    config = layered_config(task, "local").with_overrides(
        {"max_steps": 4, "checkpoint_every": 2, "eval_every": 0, "eval_at_start": False}
    )
    run = Run(task=task, config=config, backend="local", db_path=folder / "runs.db")
    assert asyncio.run(run.run()) == "completed"
    return run.run_id, folder / "runs.db"


def _adapter(policy: ChatPolicy) -> dict[str, torch.Tensor]:
    return {
        k: v.detach().clone() for k, v in policy.session._training().adapter.state_dict().items()
    }


async def test_the_checkpoint_asked_for_is_the_one_loaded(trained):
    run_id, db = trained
    newest = await resolve_target(db, run_id)
    at_two = await resolve_target(db, f"{run_id}@2")
    base = await resolve_target(db, f"{run_id}@0")
    assert (newest.step, at_two.step, base.step, base.path) == (4, 2, 0, None)
    for target in (at_two, base):
        policy = await ChatPolicy.open(target)
        try:
            loaded = _adapter(policy)
            if target.path is not None:
                folder = local_folder(target.checkpoint_dir, target.path)
                _, saved, _ = checkpoints.load(folder, with_optimizer=False, path=target.path)
                assert loaded.keys() == saved.keys()
                assert all(torch.equal(loaded[k], saved[k]) for k in saved)
            else:  # the base weights: LoRA's B matrices start at zero
                b_matrices = [v for k, v in loaded.items() if k.lower().endswith("lora_b")]
                assert b_matrices and not any(v.any() for v in b_matrices)
            greedy = [
                await policy.reply(
                    [{"role": "user", "content": "What comes after 7?"}],
                    temperature=0.0,
                    max_tokens=8,
                )
                for _ in range(2)
            ]
            assert greedy[0].content == greedy[1].content and greedy[0].tokens > 0
            assert policy.renderer
        finally:
            await policy.close()


def test_a_step_without_a_checkpoint_is_one_line_naming_the_kept_ones(trained, capsys):
    run_id, db = trained
    assert cli_main(["chat", f"{run_id}@3", "--db", str(db), "--message", "hi"]) == 2
    err = capsys.readouterr().err.strip()
    assert "no checkpoint at step 3" in err and "steps 2, 4" in err and "\n" not in err


def test_messages_answer_in_turns_without_the_window(trained, capsys):
    run_id, db = trained
    code = cli_main(
        [
            "chat",
            run_id,
            "--db",
            str(db),
            "--message",
            "What comes after 3?",
            "--message",
            "And after that?",
            "--max-tokens",
            "6",
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"chat with {run_id} @ ") and "(step 4)" in out
    assert out.count("> ") == 2 and out.count(" tokens, ") == 2


async def test_the_window_at_80x24_answers_and_takes_settings(trained):
    run_id, db = trained
    target = await resolve_target(db, run_id)
    policy = await ChatPolicy.open(target)
    app = ChatApp(target, temperature=0.0, max_tokens=6, policy=policy)
    async with app.run_test(size=(80, 24)) as pilot:
        chat = app.chat
        box = chat.query_one("#say")
        for _ in range(100):
            if not box.disabled:
                break
            await pilot.pause(0.05)
        await pilot.press(*"/max 3", "enter")
        assert chat.max_tokens == 3 and "max 3" in str(chat.query_one("#status").render())
        await pilot.press(*"/temp 9", "enter")
        assert chat.temperature == 0.0  # refused, and said
        await pilot.press(*"What comes after 5?", "enter")
        for _ in range(200):
            if len(chat.history) == 2:
                break
            await pilot.pause(0.05)
        assert [m["role"] for m in chat.history] == ["user", "assistant"]
        texts = [str(w.render()) for w in chat.query(".meta")]
        assert any(" tokens, " in t for t in texts), texts
        await pilot.press("ctrl+r")
        await pilot.pause()
        assert chat.history == []
        await pilot.press("escape")
        await pilot.pause()
    assert app.return_code == 0


async def test_t_on_a_checkpoint_of_the_dashboard_opens_a_chat_with_it(trained):
    from tinker_tui.app.commands.show import shown_session
    from tinker_tui.app.screens.chat import ChatScreen
    from tinker_tui.app.tui import TinkerTuiApp
    from tinker_tui.app.widgets.checkpoints import CheckpointsTable
    from tinker_tui.engine.store import find_run

    run_id, db = trained
    app = TinkerTuiApp(shown_session(db, await find_run(db, run_id)), refresh_interval=0.05)
    async with app.run_test(size=(120, 40)) as pilot:
        await asyncio.wait_for(app.session.loaded.wait(), timeout=10)
        table = app.query_one(CheckpointsTable)
        for _ in range(100):
            if table.row_count:
                break
            await pilot.pause(0.05)
        table.focus()
        table.move_cursor(row=table.row_count - 1)  # oldest first from the bottom: step 2
        await pilot.press("t")
        for _ in range(100):
            if isinstance(app.screen, ChatScreen):
                break
            await pilot.pause(0.05)
        chat = app.screen
        assert isinstance(chat, ChatScreen) and chat.target.step == 2
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, ChatScreen)


def test_chat_with_a_tinker_runs_checkpoint_through_the_sdk_and_the_double(
    tmp_path, capsys, monkeypatch
):
    """`chat RUN@STEP` of a run on the Tinker backend (the real SDK, the service double):
    the run's full checkpoint is loaded (the service samples sampler weights only) and the
    turns are answered by a sampler made from those weights."""
    from tinker_runs import one_step_tinker_run

    with one_step_tinker_run(tmp_path, monkeypatch) as (double, db, run_id):
        capsys.readouterr()
        code = cli_main(
            ["chat", f"{run_id}@1", "--db", str(db), "--message", "Is it?", "--max-tokens", "4"]
        )
        out = capsys.readouterr().out
        assert code == 0, out
        assert out.startswith(f"chat with {run_id} @ ") and "(step 1)" in out
        assert out.count("> ") == 1 and " tokens, " in out
        loads = [c for c in double.service.calls if c[:2] == ("POST", "load_weights")]
        assert len(loads) == 1 and loads[0][-1] == 200, double.service.calls
