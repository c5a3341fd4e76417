"""Finding a user's task, checking it, and layering its run settings.

``tinker-tui run TASK`` accepts:

* a built-in name: ``example`` (yes/no/maybe), ``binary_prefix_tool``, ``next_number``,
  ``cookbook_yes_no_maybe`` (the example as a tinker-cookbook environment);
* a task file: ``path/to/task.py`` (its module-level ``TASK``) or ``path/to/task.py:NAME``;
* an importable module: ``package.module`` (its ``TASK``) or ``package.module:NAME``;
* an installed verifiers environment: ``vf:ENV_ID`` (`Task.from_verifiers`, with the
  environment's default config; a task file configures it otherwise).

Settings are layered, later wins: the engine's defaults, the task's ``settings``, a TOML file
(``--config``; top-level keys are run settings, the same names as the flags with ``_``), then
command-line flags. Every mistake becomes a `TaskLoadError` (a usage error: one line, exit 2)
that names the file and says what is expected.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import importlib.util
import re
import sys
import tomllib
import traceback
import types
import typing
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tinker_tui.engine.errors import UsageError

if TYPE_CHECKING:
    from tinker_tui.engine.config import RunConfig
    from tinker_tui.engine.rollouts.task import Task

#: Built-in task names and where they live.
BUILTIN_TASKS = {
    "example": "tinker_tui.examples.yes_no_maybe:TASK",
    "yes_no_maybe": "tinker_tui.examples.yes_no_maybe:TASK",
    "binary_prefix_tool": "tinker_tui.examples.binary_prefix_tool:TASK",
    "next_number": "tinker_tui.examples.next_number:TASK",
    "cookbook_yes_no_maybe": "tinker_tui.examples.cookbook_yes_no_maybe:TASK",
    "subprocess_agent": "tinker_tui.examples.subprocess_agent:TASK",
}

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


class TaskLoadError(UsageError):
    """The task (or its config file) cannot be used; the message names the file and says
    what is expected."""


# ---------------------------------------------------------------------- tasks
def load_task(spec: str) -> Task:
    """The checked `Task` named by `spec` (a built-in name, a file or a module)."""
    from tinker_tui.engine.config import SETTINGS
    from tinker_tui.engine.rollouts.task import TaskError, check_task

    if spec.startswith(VERIFIERS_PREFIX):
        return _verifiers_task(spec)
    target, attribute = _split(BUILTIN_TASKS.get(spec, spec))
    if _looks_like_path(target):
        module, where = _import_file(Path(target)), target
    elif _MODULE.fullmatch(target):
        module, where = _import_module(target, spec), f"module {target}"
    else:
        raise TaskLoadError(_unknown(spec))
    name = attribute or "TASK"
    if not hasattr(module, name):
        hint = (
            "a module-level TASK = Task(...) (from tinker_tui import Task)"
            if not attribute
            else f"a module-level {name} = Task(...)"
        )
        raise TaskLoadError(f"{where} defines no {name}: expected {hint}")
    try:
        task = check_task(getattr(module, name), known_settings=SETTINGS)
    except TaskError as exc:
        raise TaskLoadError(f"{where}: {name}: {exc}") from None
    return _located(task, where)


#: `run vf:ENV_ID`: a verifiers environment, by the id its installed package answers to.
VERIFIERS_PREFIX = "vf:"


def _verifiers_task(spec: str) -> Task:
    from tinker_tui.engine.config import SETTINGS
    from tinker_tui.engine.rollouts.task import Task, TaskError, check_task

    env_id = spec[len(VERIFIERS_PREFIX) :].strip()
    if not env_id:
        raise TaskLoadError(
            "vf: needs an environment id: tinker-tui run vf:ENV_ID (an installed "
            "verifiers environment)"
        )
    try:
        return check_task(Task.from_verifiers(env_id), known_settings=SETTINGS)
    except TaskError as exc:
        raise TaskLoadError(f"{spec}: {exc}") from None
    except Exception as exc:  # the environment's own code failed to build it
        raise TaskLoadError(
            f"{spec}: building the verifiers environment failed: {type(exc).__name__}: {exc}"
        ) from None


def spec_to_store(spec: str) -> str:
    """How a run's task is written down for later commands (`run TASK --resume RUN` printed
    by `show`, `attach`, another folder): a built-in or a module as given, a task file by
    its absolute path."""
    if spec in BUILTIN_TASKS:
        return spec
    target, attribute = _split(spec)
    if not _looks_like_path(target):
        return spec
    return str(Path(target).expanduser().resolve()) + (f":{attribute}" if attribute else "")


def _split(spec: str) -> tuple[str, str | None]:
    """'file.py:NAME' / 'pkg.mod:NAME' -> (target, NAME); a drive letter is no NAME."""
    head, sep, tail = spec.rpartition(":")
    if sep and head and _IDENTIFIER.fullmatch(tail):
        return head, tail
    return spec, None


def _looks_like_path(target: str) -> bool:
    return target.endswith(".py") or "/" in target or "\\" in target or Path(target).is_file()


def _unknown(spec: str) -> str:
    from tinker_tui.engine.did_you_mean import did_you_mean

    names = ", ".join(n for n in BUILTIN_TASKS if n != "yes_no_maybe")
    hint = did_you_mean(spec, [*BUILTIN_TASKS, *_task_files_here()])
    return (
        f"unknown task {spec!r}{hint}: expected a built-in task ({names}), a task file "
        "(path/to/task.py[:NAME]) or an importable module (package.module[:NAME])"
    )


def _task_files_here() -> list[str]:
    """Python files in the current folder: what a mistyped task file may have meant."""
    try:
        return sorted(p.name for p in Path.cwd().glob("*.py"))[:200]
    except OSError:
        return []


def _import_file(path: Path) -> types.ModuleType:
    if not path.is_file():
        what = "is a directory, not a Python file" if path.is_dir() else "not found"
        hint = ""
        if not path.exists():
            from tinker_tui.engine.did_you_mean import did_you_mean

            parent = path.parent
            try:
                near = [str(parent / p.name) for p in parent.glob("*.py")][:200]
            except OSError:
                near = []
            hint = did_you_mean(str(path), near)
        raise TaskLoadError(
            f"task file {str(path)!r} {what}{hint}: expected a Python file "
            "that defines TASK = Task(...)"
        )
    resolved = path.resolve()
    digest = hashlib.sha1(str(resolved).encode()).hexdigest()[:8]
    module_name = re.sub(r"\W", "_", f"tinker_tui_task_{resolved.stem}_{digest}")
    spec = importlib.util.spec_from_file_location(module_name, resolved)
    if spec is None or spec.loader is None:
        raise TaskLoadError(f"task file {str(path)!r} cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    # Helper modules next to the task file import like they would from a script.
    folder = str(resolved.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    _cookbook_names_embedded_models(resolved)
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        sys.modules.pop(module_name, None)
        raise TaskLoadError(
            f"task file {str(path)!r} has a syntax error at line {exc.lineno}: {exc.msg}"
        ) from None
    except Exception as exc:
        sys.modules.pop(module_name, None)
        raise TaskLoadError(_import_failure(f"task file {str(path)!r}", exc, resolved)) from None
    return module


def _cookbook_names_embedded_models(source: Path | None) -> None:
    """A task that uses the tinker-cookbook builds its datasets (and their tokenizers, by
    model name) as it is imported: make the cookbook's `get_tokenizer` know the embedded
    models first, so a recipe's builder given `--base-model`'s embedded name works offline.
    Read from the task's source, so a task that does not use the cookbook does not pay for
    importing it."""
    try:
        text = source.read_text(errors="replace") if source is not None else ""
    except OSError:
        return
    if "tinker_cookbook" in text:
        from tinker_tui.engine.local.model import register_cookbook_tokenizers

        register_cookbook_tokenizers()


def _module_source(name: str) -> Path | None:
    try:
        found = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    origin = getattr(found, "origin", None)
    return Path(origin) if origin and origin.endswith(".py") else None


def _import_module(name: str, spec: str) -> types.ModuleType:
    _cookbook_names_embedded_models(_module_source(name))
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and (name == exc.name or name.startswith(exc.name + ".")):
            raise TaskLoadError(_unknown(spec)) from None
        raise TaskLoadError(_import_failure(f"task module {name}", exc, None)) from None
    except SyntaxError as exc:
        raise TaskLoadError(
            f"task module {name} has a syntax error in {exc.filename} at line "
            f"{exc.lineno}: {exc.msg}"
        ) from None
    except Exception as exc:
        raise TaskLoadError(_import_failure(f"task module {name}", exc, None)) from None


def _import_failure(what: str, exc: BaseException, path: Path | None) -> str:
    """'<what> failed to load (line N): Error: message', the line in the task's own file."""
    frames = traceback.extract_tb(exc.__traceback__)
    line = ""
    if path is not None:
        own = [f for f in frames if Path(f.filename) == path]
        if own:
            line = f" at line {own[-1].lineno}"
    elif frames:
        line = f" at {frames[-1].filename}:{frames[-1].lineno}"
    from tinker_tui.engine.rollouts.task import TaskError

    kind = "" if isinstance(exc, TaskError) else f"{type(exc).__name__}: "
    return f"{what} failed to load{line}: {kind}{exc}{_keyword_hint(exc)}"


_UNEXPECTED_KEYWORD = re.compile(
    r"^(\w+)\.__init__\(\) got an unexpected keyword argument "
    r"'(\w+)'"
)


def _keyword_hint(exc: BaseException) -> str:
    """For `Task(setting=...)` and the like (a keyword that one of tinker_tui's classes does
    not take), " (did you mean 'settings'?)" and what it takes, as a misnamed setting gets."""
    match = _UNEXPECTED_KEYWORD.match(str(exc)) if isinstance(exc, TypeError) else None
    if match is None:
        return ""
    import tinker_tui

    cls = (
        getattr(tinker_tui, match.group(1), None) if match.group(1) in tinker_tui.__all__ else None
    )
    if cls is None or not dataclasses.is_dataclass(cls):
        return ""
    from tinker_tui.app.cli import did_you_mean

    takes = [f.name for f in dataclasses.fields(cls) if f.init]
    return did_you_mean(match.group(2), takes) + f"; {match.group(1)} takes {', '.join(takes)}"


def _located(task: Task, where: str) -> Task:
    """The task with its rollout wrapped so rollout mistakes name the task's file."""
    from tinker_tui.engine.rollouts.task import group_rollout_of

    group_rollout = group_rollout_of(task)
    if group_rollout is not None:
        return dataclasses.replace(
            task, rollout=None, group_rollout=_NamedGroupRollout(group_rollout, where)
        )
    return dataclasses.replace(task, rollout=_NamedRollout(task.rollout, where))


class _NamedRollout:
    """Calls the user's rollout; a bad result or reward is a TrajectoryError naming the file.
    (The pipeline counts any rollout exception as an error group, never a crash.)"""

    def __init__(self, rollout: Any, where: str) -> None:
        self.rollout = rollout
        self.where = where
        self.__wrapped__ = rollout  # inspect.unwrap finds the task's own function

    async def __call__(self, client: Any, model: str, scenario: Any) -> Any:
        from tinker_tui.engine.rollouts.task import Trajectory, TrajectoryError
        from tinker_tui.engine.rollouts.trajectory import Reward

        try:
            result = await self.rollout(client, model, scenario)
        except TrajectoryError as exc:
            raise TrajectoryError(f"{exc} (in the rollout of {self.where})") from exc
        # A reward alone: the pipeline builds the trajectory from the turns it captured.
        if not isinstance(result, Trajectory) and Reward.of(result) is None:
            raise TrajectoryError(
                f"the rollout of {self.where} returned {_kind(result)}; expected a Trajectory "
                "(return Trajectory.from_choices(choices, reward=...)) or a reward for the "
                "turns the server captured (a number or a Reward)"
            )
        return result


class _NamedGroupRollout:
    def __init__(self, group_rollout: Any, where: str) -> None:
        self.group_rollout = group_rollout
        self.where = where
        self.__wrapped__ = group_rollout  # inspect.unwrap finds the task's own function

    async def __call__(self, client: Any, model: str, scenario: Any, n: int) -> Any:
        from tinker_tui.engine.rollouts.task import TrajectoryError

        try:
            result = await self.group_rollout(client, model, scenario, n)
        except TrajectoryError as exc:
            raise TrajectoryError(f"{exc} (in the group_rollout of {self.where})") from exc
        if isinstance(result, str | bytes) or not isinstance(result, typing.Sequence):
            raise TrajectoryError(
                f"the group_rollout of {self.where} returned {_kind(result)}; "
                "expected a list of n Trajectory objects (or n rewards)"
            )
        return result


def _kind(value: Any) -> str:
    return "None" if value is None else f"a {type(value).__name__}"


# ---------------------------------------------------------------------- settings
def load_config_file(path: Path) -> dict[str, Any]:
    """Run settings from a TOML file: top-level keys named like RunConfig fields."""
    from tinker_tui.engine.config import SETTINGS

    where = f"config file {str(path)!r}"
    try:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
    except FileNotFoundError:
        raise TaskLoadError(f"{where} not found") from None
    except IsADirectoryError:
        raise TaskLoadError(f"{where} is a directory, expected a TOML file") from None
    except tomllib.TOMLDecodeError as exc:
        raise TaskLoadError(f"{where} is not valid TOML: {exc}") from None
    for key, value in data.items():
        if key not in SETTINGS:
            from tinker_tui.engine.did_you_mean import did_you_mean

            hint = did_you_mean(key, SETTINGS, else_list="known settings")
            raise TaskLoadError(f"{where}: unknown setting {key!r}{hint}")
        expected = SETTINGS[key].value_type
        if not _fits(value, expected):
            raise TaskLoadError(
                f"{where}: setting {key!r} must be {_type_name(expected)}, got {value!r}"
            )
        if expected is float:
            data[key] = float(value)
    return data


def _fits(value: Any, expected: Any) -> bool:
    if expected is bool:
        return isinstance(value, bool)
    if expected is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if expected is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if expected is str:
        return isinstance(value, str)
    return True


def _type_name(expected: Any) -> str:
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(
        expected, str(expected)
    )


def layered_config(
    task: Task,
    backend: str,
    file_settings: dict[str, Any] | None = None,
    flags: dict[str, Any] | None = None,
    *,
    config_path: Path | None = None,
    where: str | None = None,
) -> RunConfig:
    """RunConfig from, later winning: engine defaults (the backend's own, `BACKEND_DEFAULTS`),
    the task's settings, the task's settings for this backend, the TOML file, flags. A bad
    value is a usage error naming where it came from."""
    from tinker_tui.engine.config import BACKEND_DEFAULTS, ConfigError, RunConfig

    config = RunConfig().with_overrides(dict(BACKEND_DEFAULTS.get(backend, {})))
    of_task = f"task {task.name!r}" if where is None else where
    layers = [
        (dict(task.settings), f"the settings of {of_task}"),
        (dict(task.backend_settings.get(backend, {})), f"the {backend} settings of {of_task}"),
        (file_settings or {}, f"config file {str(config_path)!r}"),
        (flags or {}, ""),
    ]
    for overrides, source in layers:
        if not overrides:
            continue
        try:
            config = config.with_overrides(overrides)
        except ConfigError as exc:
            raise TaskLoadError(f"{source}: {exc}" if source else str(exc)) from None
    return config


def task_source(task: Task) -> str | None:
    """Where a loaded task came from (its file or module), for messages."""
    from tinker_tui.engine.rollouts.task import group_rollout_of

    named = group_rollout_of(task) or task.rollout
    return named.where if isinstance(named, _NamedRollout | _NamedGroupRollout) else None
