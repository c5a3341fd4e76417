"""Each test's tier, read from its source, so a developer can run one tier alone
(tests/README.md says how) and nobody marks a thousand tests by hand.

- `slow`: marked slow (learning runs of minutes); a plain run skips them.
- `browser`: drives a browser (Playwright).
- `e2e`: starts a process: `python -m tinker_tui ...`, a probe interpreter, a tool.
- `ui`: drives the dashboard in-process (Textual's pilot, `run_test`, or a snapshot,
  `snap_compare`): no process either, but each pays an app's start and its frames.
- `fast`: everything else: in-process, no app, no engine process, no browser.

A test's source is its function, the fixtures it uses, and every function or class of the
tests' own modules they name (followed through helpers such as `private_mount`, and
`self.` methods of a test class). A name that starts a process (`subprocess`,
`sys.executable`, `asyncio.create_subprocess_exec`...) or a fixture in `PROCESS_FIXTURES`
makes it `e2e`; Playwright makes it `browser`; Textual's pilot or a snapshot makes it `ui`. A tier marker put on a test by hand wins (for a test whose process is started by
the code under test, which the rule does not read).

`ProcessGuard` keeps the rule honest: a `fast` test that starts a process anyway fails,
naming the command, so it is classified (by hand) instead of slowing the fast tier (a
`ui` test is held to the same).
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import os
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FunctionType, ModuleType
from typing import Any

import pytest

TESTS = Path(__file__).resolve().parent
TIERS = ("fast", "ui", "e2e", "browser", "slow")

#: Names that start a process, as a name or as `owner.attribute`.
PROCESS_NAMES = frozenset(
    {
        "subprocess",
        "Popen",
        "create_subprocess_exec",
        "create_subprocess_shell",
        "pexpect",
        "posix_spawn",
        # the project's own: the dashboard's engine, a sweep's runs
        "EngineProcess",
        "start_scheduler",
    }
)
PROCESS_ATTRIBUTES = frozenset(
    {("sys", "executable"), ("os", "system"), ("os", "fork"), ("os", "execv"), ("os", "execvp")}
)
BROWSER_NAMES = frozenset({"async_playwright", "sync_playwright", "playwright"})
#: Names that drive a Textual app in-process: its pilot, a snapshot of it.
UI_NAMES = frozenset({"run_test", "snap_compare"})
#: Fixtures whose library starts a process of its own, and which.
PROCESS_FIXTURES = {"offline_wandb": "W&B runs its service, wandb-core, in a process"}


def _ours(obj: object) -> bool:
    """Whether `obj` (a function, class or module) is defined in the tests' own files."""
    try:
        path = inspect.getsourcefile(obj)  # type: ignore[arg-type]
    except TypeError:
        return False
    return path is not None and Path(path).resolve().is_relative_to(TESTS)


class Reader:
    """What a test's source reaches ({"process", "browser", "ui"}), cached per function."""

    def __init__(self) -> None:
        self._seen: dict[object, frozenset[str]] = {}

    def reaches(self, func: Callable[..., Any], owner: type | None = None) -> frozenset[str]:
        func = inspect.unwrap(func)
        code = getattr(func, "__code__", None)
        if code is None or not _ours(func):
            return frozenset()
        if code in self._seen:
            return self._seen[code]
        self._seen[code] = frozenset()  # recursion stops here
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(func)))
        except (OSError, SyntaxError):
            return frozenset()
        found: set[str] = set()
        namespace = getattr(func, "__globals__", {})
        for node in ast.walk(tree):
            if isinstance(node, ast.Name):
                found |= self._name(node.id, namespace)
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                found |= self._attribute(node.value.id, node.attr, namespace, owner)
            elif isinstance(node, ast.Attribute) and node.attr in PROCESS_NAMES:
                found.add("process")
            elif isinstance(node, ast.Attribute) and node.attr in UI_NAMES:
                found.add("ui")
        self._seen[code] = frozenset(found)
        return self._seen[code]

    def _name(self, name: str, namespace: dict[str, Any]) -> set[str]:
        if name in PROCESS_NAMES:
            return {"process"}
        if name in BROWSER_NAMES:
            return {"browser"}
        if name in UI_NAMES:
            return {"ui"}
        return self._object(namespace.get(name))

    def _attribute(
        self, base: str, attr: str, namespace: dict[str, Any], owner: type | None
    ) -> set[str]:
        if (base, attr) in PROCESS_ATTRIBUTES or attr in PROCESS_NAMES:
            return {"process"}
        if attr in BROWSER_NAMES:
            return {"browser"}
        if attr in UI_NAMES:
            return {"ui"}
        if base in ("self", "cls") and owner is not None:
            return self._object(inspect.getattr_static(owner, attr, None), owner)
        value = namespace.get(base)
        if isinstance(value, ModuleType) and _ours(value):
            return self._object(getattr(value, attr, None))
        return set()

    def _object(self, value: object, owner: type | None = None) -> set[str]:
        if isinstance(value, staticmethod | classmethod):
            value = value.__func__
        if isinstance(value, FunctionType):
            return set(self.reaches(value, owner))
        if isinstance(value, type) and _ours(value):
            found: set[str] = set()
            for member in vars(value).values():
                if isinstance(member, staticmethod | classmethod):
                    member = member.__func__
                if isinstance(member, FunctionType):
                    found |= self.reaches(member, value)
            return found
        return set()


def hand_tiers(item: pytest.Item) -> list[str]:
    return [mark.name for mark in item.iter_markers() if mark.name in TIERS]


def tier_of(item: pytest.Item, reader: Reader) -> str:
    """The tier the rule gives `item` (one marked by hand keeps its own)."""
    marked = hand_tiers(item)
    if marked:
        return marked[0]
    found: set[str] = set()
    function = getattr(item, "function", None)
    if function is not None:
        found |= reader.reaches(function, getattr(item, "cls", None))
    info = getattr(item, "_fixtureinfo", None)
    for name in getattr(item, "fixturenames", ()):
        if name in PROCESS_FIXTURES:
            found.add("process")
        if name in UI_NAMES:
            found.add("ui")
        for fixture in info.name2fixturedefs.get(name, ()) if info is not None else ():
            found |= reader.reaches(fixture.func)
    for tier in ("browser", "e2e", "ui"):
        if {"e2e": "process"}.get(tier, tier) in found:
            return tier
    return "fast"


def classify(items: list[pytest.Item]) -> None:
    """Mark every item with its tier."""
    reader = Reader()
    for item in items:
        if not hand_tiers(item):
            item.add_marker(tier_of(item, reader))


class ProcessGuard:
    """Records the processes a `fast` test starts (Python's audit events, so a process the
    code under test starts counts too); `check` fails the test, naming them."""

    EVENTS = frozenset({"subprocess.Popen", "os.system", "os.posix_spawn", "os.fork", "os.exec"})
    #: The platform probes libraries run on their own (`platform.processor()` runs uname,
    #: ctypes runs ldconfig): a few milliseconds, not a process the test is about.
    PROBES = frozenset({"uname", "ldconfig", "gcc", "cc", "ld", "objdump", "lscpu"})

    def __init__(self) -> None:
        self.watching: pytest.Item | None = None
        self.started: list[str] = []
        sys.addaudithook(self._audit)

    def _audit(self, event: str, args: tuple[Any, ...]) -> None:
        if self.watching is None or event not in self.EVENTS:
            return
        program = args[0] if args and isinstance(args[0], str | bytes) else ""
        if (
            event == "subprocess.Popen"
            and program
            and os.path.basename(os.fsdecode(program)) in self.PROBES
        ):
            return
        self.started.append(f"{event} {args[:2]!r}"[:200])

    @contextlib.contextmanager
    def watch(self, item: pytest.Item) -> Iterator[None]:
        fast = any(mark.name in ("fast", "ui") for mark in item.iter_markers())
        self.watching, self.started = (item if fast else None), []
        try:
            yield
        finally:
            self.watching = None

    def check(self) -> None:
        if self.started:
            started, self.started = self.started, []
            raise AssertionError(
                "a test of the fast or ui tier started a process (" + "; ".join(started) + "): "
                "mark it e2e (see tests/tiers.py), or keep the process out of it"
            )


#: The suite's guard (conftest.py installs it).
PROCESS_GUARD = pytest.StashKey[ProcessGuard]()
