"""The docs say what the code does: the generated reference pages are current, and every code
block of the README, CONTRIBUTING.md and docs/ is run, cheaply.

Each fence names its kind. `bash`: each `tinker-tui` command goes through the real parser
(commands, flags, choices, value types), and the read-only ones (`runs`, `show`, `export`)
run against a run the test trains; `python -m pytest` paths and markers, scripts and
modules with their flags, `pip` extras and the torch pin must exist. `python`: a page's
blocks are one task file, in order; each `TASK` is loaded as `tinker-tui run FILE` loads it,
and the first trains two steps on the local backend. `toml`: read as a `--config` file.
`text`: output and diagrams, shown only. Square brackets in a command mark optional parts,
as in a usage line; RUN, FOLDER, PATH, COOKBOOK_DIR (a cookbook run folder), ART_MODEL_DIR
(an ART model folder) are placeholders.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

import pytest

from tinker_tui.app import reference_docs
from tinker_tui.app.cli import main, parse
from tinker_tui.app.task_loader import layered_config, load_config_file, load_task
from tinker_tui.engine.events import GroupDiscarded, GroupSampled

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]
ART_MODEL = ROOT / "tests" / "data" / "art_model" / "mail" / "models" / "agent-001"
KINDS = ("bash", "python", "toml", "text")
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
#: Programs a command block may use that the project does not ship: shell built-ins and
#: tools named for the reader's own machine (their arguments are theirs), and `prime`, the
#: Environments Hub's command that the verifiers extra installs.
OUTSIDE = {".", "export", "kill", "wait", "ssh", "...", "prime"}
#: `tinker-tui` commands that only read a store: run for real against the test's run.
READ_ONLY = {"runs", "show", "export"}


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    kind: str
    text: str

    def __str__(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    found, lines, start, kind = [], page.read_text().splitlines(), None, ""
    for number, line in enumerate(lines, 1):
        if line.startswith("```"):
            if start is None:
                start, kind = number, line[3:].strip()
            else:
                found.append(Block(page, start, kind, "\n".join(lines[start : number - 1]) + "\n"))
                start = None
    assert start is None, f"{page}: a code block opened at line {start} never closes"
    return found


ALL = [block for page in PAGES for block in blocks(page)]


def of_kind(kind: str) -> list[Block]:
    return [block for block in ALL if block.kind == kind]


# ------------------------------------------------------------------ generated reference
def test_the_reference_pages_are_generated_from_the_settings_and_the_parser() -> None:
    for path, text in reference_docs.pages().items():
        assert (ROOT / path).read_text() == text, (
            f"{path} is stale: run `{reference_docs.REGENERATE}` and commit it"
        )


def test_every_setting_and_flag_is_in_the_reference() -> None:
    from tinker_tui.engine.config import SETTINGS

    settings = reference_docs.settings_page()
    cli = reference_docs.cli_page()
    for name in SETTINGS:
        assert f"| `{name}` |" in settings
    for flag in (
        "--steps N",
        "--resume [RUN]",
        "--format {jsonl,csv,wandb,tensorboard}",
        "--read-only",
        "--grid NAME=V1,V2,...",
    ):
        assert f"`{flag}`" in cli


def test_the_site_lists_every_page() -> None:
    """`mkdocs build --strict` fails on a page left out of the navigation, but runs in CI
    only; this says so in the suite."""
    nav = (ROOT / "mkdocs.yml").read_text()
    for page in (ROOT / "docs").rglob("*.md"):
        assert str(page.relative_to(ROOT / "docs")) in nav, f"{page} is not in mkdocs.yml's nav"


def test_the_readme_is_a_first_screen() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.encode()) <= 12 * 1024
    assert "tinker-tui run example" in readme and "python -m pytest -q" in readme


def test_relative_links_of_the_readme_and_contributing_resolve() -> None:
    """The site checks its own links (`mkdocs build --strict`); these two pages are read
    on GitHub."""
    for page in (ROOT / "README.md", ROOT / "CONTRIBUTING.md"):
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if "://" in target or target.startswith("#"):
                continue
            path = ROOT / unquote(target.split("#", 1)[0])
            assert path.exists(), f"{page.name} links to {target}, which does not exist"


# ------------------------------------------------------------------ code blocks
def test_every_code_block_names_its_kind() -> None:
    assert ALL
    unnamed = [f"{block}: ```{block.kind}" for block in ALL if block.kind not in KINDS]
    assert not unnamed, f"a code block must be one of {KINDS}: {unnamed}"


def commands(block: Block) -> list[list[str]]:
    """The simple commands of a bash block: continuations joined, comments dropped, split at
    `&&`, `||`, `;`, `|` and `&`, environment assignments in front dropped."""
    found = []
    for line in block.text.replace("\\\n", " ").splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = "#"
        words: list[str] = []
        for token in [*lexer, ";"]:
            if token in ("&&", "||", ";", "|", "&"):
                while words and re.fullmatch(r"[A-Za-z_]+=\S*", words[0]):
                    words.pop(0)
                if words:
                    found.append(words)
                words = []
            else:
                words.append(token)
    return found


def unbracket(words: list[str]) -> list[str]:
    """A usage line's optional parts as given: `[-o FOLDER]` -> `-o FOLDER`, `[...]` gone."""
    return [w for w in (word.strip("[]") for word in words) if w and w != "..."]


def source_of(words: list[str]) -> str:
    """The source text of the script or module a `python` command runs."""
    if words[1] == "-m":  # tests/ is on the path, as `PYTHONPATH=tests` puts it there
        spec = importlib.util.find_spec(words[2])
        assert spec is not None and spec.origin, f"no module {words[2]}"
        path = Path(spec.origin)
        files = sorted(path.parent.glob("*.py")) if path.name == "__init__.py" else [path]
        return "".join(file.read_text() for file in files)
    return (ROOT / words[1]).read_text()


def check_command(words: list[str], where: Block) -> None:
    program = words[0]
    if program == "tinker-tui":
        try:
            parse(unbracket(words[1:]))
        except SystemExit as exc:
            pytest.fail(f"{where}: `{shlex.join(words)}` does not parse (exit {exc.code})")
    elif program in ("python", "python3") and words[1:3] == ["-m", "pytest"]:
        args = words[3:]
        for index, arg in enumerate(args):
            if arg == "-m":
                markers = PYPROJECT["tool"]["pytest"]["ini_options"]["markers"]
                assert any(m.startswith(args[index + 1] + ":") for m in markers), where
            elif arg.startswith("tests/"):
                assert (ROOT / arg.split("::")[0]).exists(), f"{where}: no {arg}"
    elif program in ("python", "python3") and words[1:3] == ["-m", "venv"]:
        pass
    elif program in ("python", "python3"):
        target = words[2] if words[1] == "-m" else words[1]
        assert words[1] == "-m" or (ROOT / target).is_file(), f"{where}: no {target}"
        source = source_of(words)
        for flag in (w.split("=", 1)[0] for w in unbracket(words[2:]) if w.startswith("--")):
            assert f'"{flag}"' in source, f"{where}: {target} takes no {flag}"
    elif program == "pip":
        extras = set(PYPROJECT["project"]["optional-dependencies"])
        ci = (ROOT / ".ci" / "run").read_text()
        for arg in words[2:]:
            named = re.fullmatch(r"\.\[([\w,]+)\]", arg)
            if named:
                unknown = set(named.group(1).split(",")) - extras
                assert not unknown, f"{where}: no extra {unknown} in pyproject.toml"
            if arg.startswith("torch=="):
                assert f'"{arg}"' in ci, f"{where}: {arg} is not the torch CI installs"
    elif program == "mkdocs":
        assert words[1] in ("build", "serve") and (ROOT / "mkdocs.yml").is_file(), where
    elif program in ("ruff", "mypy", "lint-imports"):  # the static checks, configured here
        section = {"ruff": "ruff", "mypy": "mypy", "lint-imports": "importlinter"}[program]
        assert section in PYPROJECT["tool"], f"{where}: no [tool.{section}] in pyproject.toml"
        assert program != "ruff" or words[1] in ("check", "format"), where
        assert f"\n{shlex.join(words)}" in (ROOT / ".ci" / "run").read_text(), (
            f"{where}: `{shlex.join(words)}` is not a step of .ci/run"
        )
    else:
        assert program in OUTSIDE, (
            f"{where}: `{program}` is a program the docs check does "
            f"not know: add a rule for it in {Path(__file__).name}"
        )


def test_every_command_in_the_docs_is_a_command_that_works() -> None:
    checked = 0
    for block in of_kind("bash"):
        for words in commands(block):
            check_command(words, block)
            checked += 1
    assert checked > 40


def test_a_mistyped_command_in_the_docs_would_fail() -> None:
    """The check is not one that cannot fail."""
    block = Block(ROOT / "README.md", 1, "bash", "tinker-tui run example --learning-rat 1e-3\n")
    with pytest.raises(pytest.fail.Exception):
        check_command(commands(block)[0], block)
    with pytest.raises(AssertionError):
        check_command(["python", "bench/bench_ui.py", "--no-such-flag"], block)
    with pytest.raises(AssertionError):
        check_command(["pip", "install", ".[nosuchextra]"], block)


# ------------------------------------------------------------------ tasks
def page_python(page: Path) -> list[tuple[Block, str]]:
    """Each python block of a page with the module it makes: every block up to it."""
    so_far, out = "", []
    for block in blocks(page):
        if block.kind == "python":
            so_far += block.text + "\n"
            out.append((block, so_far))
    return out


def binds_task(source: str) -> bool:
    return any(
        isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "TASK" for t in node.targets)
        for node in ast.parse(source).body
    )


#: Optional extras a docs task may need, by the module that says it is installed: a block
#: that names one is loaded where it is installed (CI's own venv for it), compiled elsewhere.
EXTRA_MODULES = {"verifiers": "verifiers"}


def missing_extra(text: str) -> bool:
    return any(
        word in text and importlib.util.find_spec(module) is None
        for word, module in EXTRA_MODULES.items()
    )


def task_pages() -> list[Path]:
    return [page for page in PAGES if page_python(page)]


@pytest.mark.parametrize("page", task_pages(), ids=lambda page: page.name)
def test_every_task_in_the_docs_loads_as_run_loads_it(page: Path, tmp_path: Path) -> None:
    for name in ("train.jsonl", "test.jsonl"):  # the data the examples name, beside the file
        (tmp_path / name).write_text(
            '{"id": "a", "question": "1 + 1"}\n{"id": "b", "question": "2 + 2"}\n'
        )
    loaded = 0
    for number, (block, source) in enumerate(page_python(page)):
        path = tmp_path / f"block{number}.py"
        path.write_text(source)
        compile(source, str(block), "exec")
        if binds_task(block.text) and not missing_extra(block.text):
            task = load_task(str(path))
            for toml in of_kind("toml"):
                if toml.page == page:
                    config = tmp_path / "run.toml"
                    config.write_text(toml.text)
                    layered_config(task, "local", load_config_file(config), config_path=config)
            loaded += 1
    assert loaded


def first_task_source() -> str:
    (page,) = [p for p in task_pages() if p.name == "writing-a-task.md"]
    return page_python(page)[0][0].text


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """The docs' first task, two steps on the local backend: (run id, store)."""
    import asyncio

    from tinker_tui.engine.run import Run

    folder = tmp_path_factory.mktemp("docs_task")
    path = folder / "blue.py"
    path.write_text(first_task_source())
    task = load_task(str(path))
    config = layered_config(task, "local").with_overrides({"max_steps": 2, "checkpoint_every": 0})
    run = Run(task=task, config=config, backend="local", db_path=folder / "runs.db")
    events: list[object] = []
    run.events.subscribe(events.append)
    assert asyncio.run(run.run()) == "completed"
    assert not [e for e in events if isinstance(e, GroupDiscarded) and e.reason == "error"]
    assert [e for e in events if isinstance(e, GroupSampled)]
    return run.run_id, folder / "runs.db"


def test_the_docs_first_task_is_complete_and_trains(trained_run: tuple[str, Path]) -> None:
    run_id, db = trained_run
    assert run_id.startswith("blue-") and db.exists()


def cookbook_folder(folder: Path) -> Path:
    """A finished tinker-cookbook run folder, written by the cookbook's own writer."""
    from tinker_cookbook.stores import LocalStorage, TrainingRunStore

    store = TrainingRunStore(LocalStorage(folder))
    store.write_config({"model_name": "Qwen/Qwen3-4B-Instruct-2507"})
    for batch in range(2):
        store.write_metrics(
            {"env/all/reward/total": 0.5, "progress/done_frac": (batch + 1) / 2}, step=batch
        )
    store.write_checkpoint({"name": "final", "batch": 2, "state_path": "tinker://x/final"})
    return folder


def test_the_read_only_commands_in_the_docs_run(
    trained_run: tuple[str, Path], tmp_path: Path, monkeypatch, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id, db = trained_run
    monkeypatch.chdir(tmp_path)
    values = {
        "RUN": run_id,
        "RUN_ID": run_id,
        "FOLDER": str(tmp_path) + "/",
        "PATH": str(db),
        "COOKBOOK_DIR": str(cookbook_folder(tmp_path / "cookbook-run")),
        "ART_MODEL_DIR": str(ART_MODEL),
    }
    ran = 0
    for block in of_kind("bash"):
        for words in commands(block):
            if words[0] != "tinker-tui" or words[1] not in READ_ONLY:
                continue
            args = [values.get(word, word) for word in unbracket(words[1:])]
            if "--format" in args and args[args.index("--format") + 1] in ("wandb", "tensorboard"):
                continue  # the trackers' own tests write those (optional extras)
            if "--db" not in args:
                args += ["--db", str(db)]
            assert main(args) == 0, f"{block}: `tinker-tui {shlex.join(args)}` failed"
            ran += 1
    capsys.readouterr()
    assert ran >= 4
