"""The token view (`enter` on a trajectory in the rollouts view): its maths, snapshots at
80x24 and 160x48 with the real-format fixture's BPE pieces (Qwen3's tokenizer), its keys, and
opening it from `show` of a real local run's store."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("TEXTUAL_ANIMATIONS", "none")

from textual.app import App

from tinker_tui.app import token_channels as tc
from tinker_tui.app.screens.tokens import TokensScreen
from tinker_tui.engine.events import TrajectoryTokens
from tinker_tui.engine.training.trained_tokens import PieceBook

CSS = Path(__file__).parent.parent / "tinker_tui" / "app" / "tinker_tui.tcss"

#: A two-turn tool conversation as Qwen3 writes it: a tool call, the tool's answer (context,
#: not trained), the final answer.
FIRST_TURN = (
    'I will look the weather up.\n<tool_call>\n{"name": "get_weather", '
    '"arguments": {"city": "Zürich"}}\n</tool_call><|im_end|>'
)
CONTEXT = (
    '\n<|im_start|>user\n<tool_response>\n{"temp_c": 7, "sky": "overcast"}\n'
    "</tool_response><|im_end|>\n<|im_start|>assistant\n"
)
SECOND_TURN = "It is 7 °C and overcast in Zürich: take a coat. 🧥<|im_end|>"


def fixture_tokens(tokenizer) -> tuple[TrajectoryTokens, dict[int, str]]:
    """The conversation's real token ids, with seeded logprobs: the trainer agrees with the
    sampler to 1e-3 except at one token of the second turn (Δ 0.4), sampled a version later."""
    parts = [
        tokenizer.encode(text, add_special_tokens=False)
        for text in (FIRST_TURN, CONTEXT, SECOND_TURN)
    ]
    ids = np.array([t for p in parts for t in p], dtype=np.int32)
    mask = np.array([1] * len(parts[0]) + [0] * len(parts[1]) + [1] * len(parts[2]), np.uint8)
    rng = np.random.default_rng(7)
    sampled = np.where(mask > 0, -rng.gamma(0.6, 0.8, len(ids)), 0.0).astype(np.float32)
    trainer = (sampled + np.where(mask > 0, rng.normal(0, 1e-3, len(ids)), 0)).astype(np.float32)
    worst = len(parts[0]) + len(parts[1]) + 5
    trainer[worst] = sampled[worst] - 0.4
    version = np.array([3] * len(parts[0]) + [-1] * len(parts[1]) + [4] * len(parts[2]), np.int32)
    tokens = TrajectoryTokens(
        group_id=12,
        index=2,
        tokens=ids,
        sampled=sampled,
        trainer=trainer,
        advantage=np.where(mask > 0, 0.375, 0.0).astype(np.float32),
        mask=mask,
        version=version,
        entropy=np.where(mask > 0, rng.gamma(1.0, 0.7, len(ids)), 0).astype(np.float32),
    )
    book = PieceBook(tokenizer)
    pieces = book.new_pieces([tokens])
    return tokens, pieces


@pytest.fixture(scope="module")
def qwen3(qwen3_tokenizer_folder):
    from transformers import AutoTokenizer

    return fixture_tokens(AutoTokenizer.from_pretrained(str(qwen3_tokenizer_folder)))


class TokensApp(App[None]):
    CSS_PATH = str(CSS)

    def __init__(self, tokens: TrajectoryTokens, pieces: dict[int, str]) -> None:
        super().__init__()
        self.tokens, self.pieces = tokens, pieces

    def on_mount(self) -> None:
        self.push_screen(
            TokensScreen(
                "Group 12 · trajectory 3 · weather-q07 · reward 1", 18, self.tokens, self.pieces
            )
        )


# ------------------------------------------------------------------ maths


def test_the_pieces_are_the_tokenizers_and_whitespace_shows(qwen3):
    tokens, pieces = qwen3
    texts, breaks = tc.piece_texts(tokens, pieces)
    assert "<tool_call>" in texts and "<|im_end|>" in texts  # added tokens, whole
    # the coat emoji (and the space before it) is split over byte-level tokens: shown by
    # their bytes
    joined = "".join(texts).replace("↵", "\n")
    assert joined.split("‹")[0] + " 🧥<|im_end|>" == FIRST_TURN + CONTEXT + SECOND_TURN
    assert joined.replace("›‹", " ").endswith("‹20 f0 9f a7 a5›<|im_end|>")
    assert sum(breaks) == (FIRST_TURN + CONTEXT).count("\n")
    assert tc.shown_piece("", 42) == "⟨42⟩"


def test_the_largest_mismatch_is_found_among_sampled_tokens(qwen3):
    tokens, _ = qwen3
    worst = tc.largest_mismatch(tokens)
    assert tokens.mask[worst] == 1
    assert tc.differences(tokens)[worst] == pytest.approx(0.4, abs=1e-5)
    assert set(tc.turns(tokens)[tokens.mask == 1].tolist()) == {1, 2}
    assert tc.version_order(tokens) == (3, 4)
    assert tc.colour(tc.CHANNELS[0], -1.0, sampled=False) is None  # context: uncoloured


def test_layout_wraps_at_the_width_and_breaks_after_newlines():
    lines = tc.layout(["ab", "cd↵", "e", "fgh", "ijklmnop"], [False, True, False, False, False], 5)
    assert lines == [[0, 1], [2, 3], [4]]


# ------------------------------------------------------------------ snapshots


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
def test_snapshot_token_view(snap_compare, qwen3, size):
    """Opened on the difference channel, the cursor on the first sampled token."""
    assert snap_compare(TokensApp(*qwen3), terminal_size=size)


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
def test_snapshot_token_view_versions_at_the_largest_mismatch(snap_compare, qwen3, size):
    """`c` three times: the policy version channel; `m`: the cursor on the worst token."""
    assert snap_compare(TokensApp(*qwen3), terminal_size=size, press=["c", "c", "c", "m"])


async def test_keys_move_the_cursor_and_cycle_the_channels(qwen3):
    app = TokensApp(*qwen3)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, TokensScreen)
        assert screen.channel.name == "diff" and screen.cursor == 0
        await pilot.press("right", "right")
        assert screen.cursor == 2
        await pilot.press("down")
        assert screen._line_of[screen.cursor] == 1
        await pilot.press("m")
        assert screen.cursor == tc.largest_mismatch(screen.tokens)
        assert "Δ -0.4" not in str(screen.query_one("#tokens-info").render())
        assert "Δ +0.4000" in str(screen.query_one("#tokens-info").render())
        names = []
        for _ in screen.channels:
            await pilot.press("c")
            names.append(screen.channel.name)
        assert sorted(names) == sorted(tc.CHANNEL_NAMES)  # entropy too: the fixture has it
        await pilot.press("q")
        assert not isinstance(app.screen, TokensScreen)


# ------------------------------------------------------------------ from `show`


async def test_enter_on_a_trajectory_of_a_stored_run_opens_its_tokens(tmp_path):
    """A real local run, then its store as `show` reads it: `2`, a trained trajectory in
    the tree, `enter`: the token view with that trajectory's tokens."""
    from tinker_tui.app.cli import main
    from tinker_tui.app.store_session import StoreSession
    from tinker_tui.app.tui import TinkerTuiApp
    from tinker_tui.app.widgets.rollouts_tree import RolloutRef, RolloutsTree
    from tinker_tui.engine.local import DEFAULT_BASE_MODEL
    from tinker_tui.engine.store import find_run

    db = tmp_path / "runs.db"
    code = await asyncio.to_thread(
        main,
        [
            "run",
            "example",
            "--backend",
            "local",
            "--no-ui",
            "--db",
            str(db),
            "--base-model",
            DEFAULT_BASE_MODEL,
            "--warmup-steps",
            "0",
            "--steps",
            "2",
            "--group-size",
            "4",
            "--groups-per-step",
            "2",
            "--rollout-workers",
            "1",
            "--eval-every",
            "0",
        ],
    )
    assert code == 0
    import sqlite3

    with sqlite3.connect(db) as conn:
        step, group, idx, length = conn.execute(
            "select step, group_id, idx, length from trained_tokens limit 1"
        ).fetchone()
    run = await find_run(db, None)
    app = TinkerTuiApp(StoreSession(db, run), refresh_interval=0.05)
    app.animation_level = "none"
    async with app.run_test(size=(120, 40)) as pilot:
        await asyncio.wait_for(app.session.loaded.wait(), timeout=10)
        await pilot.press("2")
        await pilot.pause(0.3)
        tree = app.screen.query_one(RolloutsTree)
        assert tree.reveal(RolloutRef("trajectory", step, group, idx))
        await pilot.pause()
        await pilot.press("enter")
        for _ in range(50):
            if isinstance(app.screen, TokensScreen):
                break
            await pilot.pause(0.05)
        assert isinstance(app.screen, TokensScreen)
        assert len(app.screen.tokens.tokens) == length
        assert app.screen.title_text.startswith(f"Group {group} · trajectory {idx + 1}")
