"""The recipe bench's readings (bench/bench_recipes.py): collapses and no-signal stops counted
from a run's store by the commands' source, and the table's per-recipe figures."""

import sqlite3

from bench.bench_recipes import _stops, last10, table
from tinker_tui.engine.metrics.collapse_memory import AUTOMATIC


def test_collapses_and_no_signal_stops_are_counted_from_the_commands_source(tmp_path):
    db = tmp_path / "run.db"
    with sqlite3.connect(db) as conn:
        conn.execute(
            "CREATE TABLE commands (id INTEGER PRIMARY KEY, run_id TEXT, time REAL, "
            "command TEXT, args TEXT DEFAULT '{}', source TEXT DEFAULT '')"
        )
        conn.executemany(
            "INSERT INTO commands (run_id, command, source) VALUES (?, ?, ?)",
            [
                ("r", "pause", "user"),
                ("r", "stop", AUTOMATIC),
                ("r", "stop", "on_health_pause"),
                ("other", "stop", AUTOMATIC),
            ],
        )
    assert _stops(db, "r") == (1, 1)
    assert _stops(db, None) == (0, 0)
    assert _stops(tmp_path / "missing.db", "r") == (0, 0)


def test_the_table_gives_each_recipe_its_seeds_mean_collapses_and_difference():
    def run(recipe, seed, rewards, collapses=0):
        return {
            "recipe": recipe,
            "seed": seed,
            "rewards": rewards,
            "collapses": collapses,
            "no_signal": 0,
            "training": 60.0,
            "load_start": (2.0, 2.0),
            "load_end": (3.0, 2.5),
        }

    assert last10([0.0] * 5 + [1.0] * 10) == 1.0
    results = [
        run("default", 0, [0.5] * 20),
        run("cookbook", 0, [0.7] * 20),
        run("default", 1, [0.3] * 20, collapses=1),
        run("cookbook", 1, [0.5] * 20),
    ]
    text = table(results, ["default", "cookbook"], [0, 1])
    assert "| default | 0.500 | 0.300 | 0.400 | 1 | 0 | 2.0 min | 2.0–3.0 |" in text
    assert "| cookbook | 0.700 | 0.500 | 0.600 | 0 | 0 | 2.0 min | 2.0–3.0 |" in text
    assert "cookbook − default, mean of the last-10 means: +0.200" in text
