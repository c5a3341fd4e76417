"""What keeping each step's trained tokens costs: store bytes per step, and the token view's
open time on a long run.

    python bench/bench_token_store.py            # a few minutes on 2 busy cores
    python bench/bench_token_store.py --quick    # 200 steps instead of 2,000

1. example: the built-in example on the local backend (6 steps, every step's tokens kept):
   bytes per trained step in `trained_tokens` (and the one-off `token_pieces`), per token,
   and the ratio to the same arrays as JSON floats.
2. real format: one step of 4 groups x 8 two-turn tool conversations in Qwen3's tokens (the
   real-format fixture's BPE tokenizer, tests/real_format.py), encoded as the store does:
   bytes per step and per token, and the ratio to JSON.
3. open: a store of N steps (GroupSampled, StepTrained and the real-format TokensTrained per
   step; the default keep_token_steps = 100), then what `enter` on a trajectory of the last
   step costs: opening the store read-only and reading its tokens, and the token view's
   first draw (a headless app; beside a plain screen's, Textual's own share) — with the
   file's size.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import numpy as np  # noqa: E402

from tinker_tui.engine.events import (  # noqa: E402
    GroupSampled,
    RunStarted,
    StepTrained,
    TokensTrained,
    TrajectorySummary,
    TrajectoryTokens,
)
from tinker_tui.engine.store.codec import TOKEN_ARRAYS, Rows, encode  # noqa: E402

BLOBS = " + ".join(f"coalesce(length({name}), 0)" for name, _ in TOKEN_ARRAYS)
GROUPS, GROUP_SIZE = 4, 8


def as_json(t: TrajectoryTokens) -> int:
    """The bytes of the same arrays as JSON lists (what a naive store would keep)."""
    return len(
        json.dumps(
            {
                name: np.asarray(getattr(t, name)).tolist()
                for name, _ in TOKEN_ARRAYS
                if getattr(t, name) is not None
            }
        )
    )


def example() -> None:
    from tinker_tui.app.cli import main
    from tinker_tui.engine.local import DEFAULT_BASE_MODEL
    from tinker_tui.engine.store.codec import decode_tokens

    with tempfile.TemporaryDirectory() as folder:
        db = Path(folder) / "runs.db"
        code = main(
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
                "--steps",
                "6",
                "--eval-every",
                "0",
                "--keep-token-steps",
                "0",
            ]
        )
        assert code == 0
        conn = sqlite3.connect(db)
        conn.row_factory = sqlite3.Row
        rows = conn.execute(f"select *, {BLOBS} as bytes from trained_tokens").fetchall()
        pieces = conn.execute(
            "select count(*), sum(length(piece) + 8) from token_pieces"
        ).fetchone()
        conn.close()
    steps = {r["step"] for r in rows}
    stored = sum(r["bytes"] for r in rows)
    tokens = sum(r["length"] for r in rows)
    naive = sum(as_json(decode_tokens(r)) for r in rows)
    print(
        f"example: {len(steps)} trained steps, {len(rows) / len(steps):.0f} trajectories "
        f"and {tokens / len(steps):.0f} tokens a step: {stored / len(steps):,.0f} bytes a step "
        f"({stored / tokens:.1f} a token; JSON floats {naive / stored:.1f}x larger); "
        f"pieces once per run: {pieces[0]} ids, ~{pieces[1] or 0:,} bytes"
    )


def real_format_step(tokenizer, rng: np.random.Generator, step: int) -> TokensTrained:
    """A step of two-turn tool conversations in Qwen3's tokens, seeded."""
    cities = ["Zürich", "Paris", "Tokyo", "Lagos", "Lima", "Oslo", "Cairo", "Perth"]
    trajectories = []
    for g in range(GROUPS):
        for i in range(GROUP_SIZE):
            city = cities[(g + i) % len(cities)]
            words = " ".join(
                rng.choice(
                    [
                        "the",
                        "weather",
                        "is",
                        "mild",
                        "and",
                        "it",
                        "may",
                        "rain",
                        "later",
                        "so",
                        "bring",
                        "a",
                        "coat",
                    ],
                    size=int(rng.integers(20, 120)),
                )
            )
            parts = [
                tokenizer.encode(text, add_special_tokens=False)
                for text in (
                    f'Let me check.\n<tool_call>\n{{"name": "get_weather", "arguments": '
                    f'{{"city": "{city}"}}}}\n</tool_call><|im_end|>',
                    f'\n<|im_start|>user\n<tool_response>\n{{"temp_c": {int(rng.integers(-5, 30))}'
                    "}\n</tool_response><|im_end|>\n<|im_start|>assistant\n",
                    f"In {city} {words}.<|im_end|>",
                )
            ]
            n = sum(map(len, parts))
            mask = np.array(
                [1] * len(parts[0]) + [0] * len(parts[1]) + [1] * len(parts[2]), np.uint8
            )
            sampled = np.where(mask > 0, -rng.gamma(0.6, 0.8, n), 0).astype(np.float32)
            trajectories.append(
                TrajectoryTokens(
                    group_id=step * GROUPS + g,
                    index=i,
                    tokens=np.array([t for p in parts for t in p], np.int32),
                    sampled=sampled,
                    trainer=(sampled + rng.normal(0, 1e-3, n) * mask).astype(np.float32),
                    advantage=np.where(mask > 0, rng.normal(), 0).astype(np.float32),
                    mask=mask,
                    version=np.where(mask > 0, step - 1, -1).astype(np.int32),
                    entropy=np.where(mask > 0, rng.gamma(1.0, 0.7, n), 0).astype(np.float32),
                )
            )
    return TokensTrained(
        time=float(step), step=step, trajectories=tuple(trajectories), keep_steps=100
    )


def tokenizer_of_fixture(folder: Path):
    from real_format import write_qwen3_tokenizer
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(write_qwen3_tokenizer(folder)))


def real_format(tokenizer) -> TokensTrained:
    event = real_format_step(tokenizer, np.random.default_rng(1), 1)
    rows = Rows()
    encode(rows, "bench", event)
    stored = sum(
        len(b) for row in rows.by_statement.values() for r in row for b in r if isinstance(b, bytes)
    )
    tokens = sum(len(t.tokens) for t in event.trajectories)
    naive = sum(as_json(t) for t in event.trajectories)
    print(
        f"real format (Qwen3 BPE): {len(event.trajectories)} trajectories, {tokens:,} tokens "
        f"a step: {stored:,} bytes a step ({stored / tokens:.1f} a token; JSON floats "
        f"{naive / stored:.1f}x larger)"
    )
    return event


async def long_store(db: Path, tokenizer, steps: int) -> tuple[int, int, float]:
    from tinker_tui.engine.store import RunStore
    from tinker_tui.engine.training.trained_tokens import PieceBook

    rng = np.random.default_rng(2)
    book = PieceBook(tokenizer)
    started = time.perf_counter()
    store = await RunStore.open(db)
    store.start()
    store.handle(
        RunStarted(
            time=0.0,
            run_id="long",
            name="bench",
            backend="local",
            base_model="qwen3",
            max_steps=steps,
            start_step=0,
        )
    )
    for step in range(1, steps + 1):
        event = real_format_step(tokenizer, rng, step)
        for g in range(GROUPS):
            members = [t for t in event.trajectories if t.group_id == step * GROUPS + g]
            store.handle(
                GroupSampled(
                    time=float(step),
                    group_id=step * GROUPS + g,
                    scenario_id=f"q{g}",
                    policy_version=step - 1,
                    num_trajectories=len(members),
                    num_tokens=sum(len(t.tokens) for t in members),
                    reward_mean=0.5,
                    trajectories=tuple(
                        TrajectorySummary(
                            reward=float(i % 2), policy_version=step - 1, num_tokens=len(t.tokens)
                        )
                        for i, t in enumerate(members)
                    ),
                )
            )
        store.handle(
            StepTrained(
                time=float(step),
                step=step,
                policy_version=step,
                metrics={"reward/mean": 0.5},
                group_ids=tuple(step * GROUPS + g for g in range(GROUPS)),
            )
        )
        store.handle(
            TokensTrained(
                time=float(step),
                step=step,
                trajectories=event.trajectories,
                pieces=book.new_pieces(event.trajectories),
                keep_steps=100,
            )
        )
        if step % 50 == 0:
            await store.flush()
    await store.close()
    return steps * GROUPS, (steps) * GROUPS * GROUP_SIZE, time.perf_counter() - started


async def open_view(db: Path) -> tuple[float, float, float]:
    """(seconds to open the store and read the last step's trajectory, seconds to the token
    view's first draw, seconds to push a screen of one line of text: Textual's own share)."""
    from textual.app import App
    from textual.screen import Screen
    from textual.widgets import Static

    from tinker_tui.app.screens.tokens import TokensScreen
    from tinker_tui.engine.store import StoreReader

    with sqlite3.connect(db) as conn:
        group, idx = conn.execute(
            "select group_id, idx from trained_tokens order by step desc limit 1"
        ).fetchone()
    started = time.perf_counter()
    reader = await StoreReader.open_readonly(db)
    found = await reader.trained_tokens("long", group, idx)
    await reader.close()
    read = time.perf_counter() - started
    assert found is not None
    step, tokens, pieces = found
    css = str(ROOT / "tinker_tui" / "app" / "tinker_tui.tcss")

    class ViewApp(App[None]):
        CSS_PATH = css

    class Plain(Screen[None]):
        def compose(self):  # type: ignore[no-untyped-def]
            yield Static("text", id="plain")

    app = ViewApp()
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        started = time.perf_counter()
        await app.push_screen(Plain())
        await pilot.pause()
        plain = time.perf_counter() - started
        app.pop_screen()
        await pilot.pause()
        started = time.perf_counter()
        await app.push_screen(TokensScreen("bench", step, tokens, pieces))
        await pilot.pause()
        while not app.screen.query_one("#tokens-body").render().plain:  # type: ignore[attr-defined]
            await pilot.pause(0.005)
        drawn = time.perf_counter() - started
    return read, drawn, plain


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="200 steps instead of 2,000")
    args = parser.parse_args()
    steps = 200 if args.quick else 2000
    example()
    with tempfile.TemporaryDirectory() as folder:
        tokenizer = tokenizer_of_fixture(Path(folder) / "qwen3")
        real_format(tokenizer)
        db = Path(folder) / "long.db"
        groups, trajectories, seconds = asyncio.run(long_store(db, tokenizer, steps))
        with sqlite3.connect(db) as conn:
            kept = conn.execute("select count(distinct step) from trained_tokens").fetchone()[0]
        size = db.stat().st_size
        print(
            f"store of {steps:,} steps ({groups:,} groups, {trajectories:,} trajectories; "
            f"tokens of the last {kept} steps kept) written in {seconds:.1f} s: "
            f"{size / 2**20:.1f} MiB"
        )
        read, drawn, plain = asyncio.run(open_view(db))
        print(
            f"open the token view on its last step: store read {read * 1e3:.1f} ms, "
            f"first draw {drawn * 1e3:.1f} ms, total {(read + drawn) * 1e3:.1f} ms "
            f"(a screen of one line of text, pushed the same way: {plain * 1e3:.1f} ms)"
        )


if __name__ == "__main__":
    main()
