"""Rules with one home, kept so: read from the source, each names the module that breaks one.

- Signals: only `app.interrupts` installs signal handlers (`signal.signal`,
  `loop.add_signal_handler`), so every command takes the same signals (never one the
  process was started ignoring) and leaves with the same codes; and only `app.exit_codes`,
  where every exit code is listed, spells the signals' exit codes (129, 130, 143).
- "did you mean": only `engine.did_you_mean` asks difflib for a close match, so every
  mistyped name is answered by one rule in one wording.
"""

from __future__ import annotations

import ast

import import_graph
import pytest

MODULES = import_graph.project_modules()
SIGNALS_HOME = "tinker_tui.app.interrupts"
EXIT_CODES_HOME = "tinker_tui.app.exit_codes"
DID_YOU_MEAN_HOME = "tinker_tui.engine.did_you_mean"
SIGNAL_EXIT_CODES = {129, 130, 143}


def _trees():
    for name, path in MODULES.items():
        yield name, ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def test_only_the_signals_module_installs_signal_handlers():
    found = []
    for name, tree in _trees():
        if name == SIGNALS_HOME:
            continue
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and (
                    node.func.attr in ("add_signal_handler", "remove_signal_handler")
                    or (
                        node.func.attr == "signal"
                        and isinstance(node.func.value, ast.Name)
                        and node.func.value.id == "signal"
                    )
                )
            ):
                found.append(f"{name} line {node.lineno}: {node.func.attr}(...)")
    assert not found, f"signal handlers belong in {SIGNALS_HOME} (take_signals):\n" + "\n".join(
        found
    )


def test_only_the_signals_module_spells_their_exit_codes():
    found = [
        f"{name} line {node.lineno}: {node.value}"
        for name, tree in _trees()
        if name != EXIT_CODES_HOME
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and type(node.value) is int
        and node.value in SIGNAL_EXIT_CODES
    ]
    assert not found, (
        f"name the exit code from {EXIT_CODES_HOME} (EXIT_SIGTERM, "
        "EXIT_INTERRUPTED...):\n" + "\n".join(found)
    )


def test_only_did_you_mean_asks_difflib():
    found = [
        f"{edge.importer} line {edge.line}"
        for edge in import_graph.edges(MODULES)
        if edge.imported.split(".")[0] == "difflib" and edge.importer != DID_YOU_MEAN_HOME
    ]
    assert not found, f"a close-match suggestion comes from {DID_YOU_MEAN_HOME}:\n" + "\n".join(
        found
    )


def test_did_you_mean_words_a_suggestion_or_lists_the_names():
    from tinker_tui.engine.did_you_mean import did_you_mean

    assert did_you_mean("lokal", ["local", "tinker"]) == " (did you mean 'local'?)"
    assert did_you_mean("zzz", ["local", "tinker"]) == ""
    assert (
        did_you_mean("zzz", ["seed", "max_steps"], else_list="known settings")
        == "; known settings: max_steps, seed"
    )


def test_a_tasks_unknown_setting_is_answered_as_a_settings_files_is():
    from tinker_tui import Task
    from tinker_tui.engine.rollouts.task import TaskError, check_task

    async def rollout(client, model, scenario):
        raise AssertionError("not called")

    task = Task(
        name="t", scenarios=lambda rng: iter(()), rollout=rollout, settings={"max_stepz": 3}
    )
    with pytest.raises(TaskError) as info:
        check_task(task, known_settings={"max_steps", "seed"})
    assert "unknown setting 'max_stepz' (did you mean 'max_steps'?)" in str(info.value)
