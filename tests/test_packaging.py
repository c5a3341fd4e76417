"""The package installs under one import name, `tinker_tui`, and its public task API."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_wheel_installs_only_tinker_tui(tmp_path: Path) -> None:
    source = tmp_path / "source"  # a copy, so the build leaves nothing in the checkout
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(
        ROOT / "tinker_tui", source / "tinker_tui", ignore=shutil.ignore_patterns("__pycache__")
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--quiet",
            "-w",
            str(tmp_path),
            str(source),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("tinker_tui-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"tinker_tui"}
    for needed in (
        "tinker_tui/app/tinker_tui.tcss",
        "tinker_tui/app/cli.py",
        "tinker_tui/engine/local/weights/tiny-chat.safetensors",
        "tinker_tui/engine/store/codec.py",
        "tinker_tui/engine/local/tiny_chat_tokenizer/tokenizer.json",
        "tinker_tui/examples/yes_no_maybe.py",
        "tinker_tui/py.typed",
        "tinker_tui/agent_skill.md",
    ):
        assert needed in names


def test_the_installed_distribution_names_one_top_level_package() -> None:
    dist = metadata.distribution("tinker-tui")
    assert (dist.read_text("top_level.txt") or "").split() == ["tinker_tui"]
    (script,) = [e for e in dist.entry_points if e.name == "tinker-tui"]
    assert script.value == "tinker_tui.app.cli:main"


def test_no_top_level_app_or_engine_outside_the_checkout(tmp_path: Path) -> None:
    """From another folder, `app` and `engine` are not importable: a user's own `app`
    package is theirs."""
    code = (
        "import importlib.util as u; "
        "print([n for n in ('app', 'engine', 'examples') if u.find_spec(n)])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    assert out == "[]"


def test_public_task_api_is_lazy_and_complete(tmp_path: Path) -> None:
    code = (
        "import sys, tinker_tui; assert 'torch' not in sys.modules; "
        "assert 'tinker_tui.engine.rollouts.task' not in sys.modules; "
        "from tinker_tui import Scenario, Task, Trajectory; "
        "import tinker_tui.engine.rollouts.task as t; assert Task is t.Task; "
        "[getattr(tinker_tui, name) for name in tinker_tui.__all__]; "
        "print(sorted(tinker_tui.__all__))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    assert {
        "Scenario",
        "Task",
        "Trajectory",
        "mix_tasks",
        "scenarios_from_jsonl",
        "scenarios_from_dataset",
        "group_advantages",
    } <= set(ast.literal_eval(out))
