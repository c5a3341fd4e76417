"""The private names of other libraries the project relies on: each library's in one module
(`*_private.py`: app/textual_private.py, app/textual_serve_private.py,
app/argparse_private.py, engine/backend/tinker_private.py, engine/rendering/cookbook_private.py,
engine/store/json_private.py, engine/local/torch_private.py,
engine/trackers/tensorboardx_private.py, engine/uvicorn_private.py), each listed in its
`PRIVATE_NAMES`.

- An upgrade that removes or renames one fails here, naming it and the module that needs
  it, instead of failing somewhere in a dashboard or a run (or, for an override, silently:
  a method overridden under a name the library no longer calls is simply never called).
- No other module reaches into a library's private names (read from the source: an
  attribute, a `getattr` name or an import starting with one underscore that the project
  does not define itself), so the list stays the whole story.
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.metadata
import inspect
import re

import import_graph
import pytest

MODULES = import_graph.project_modules()
#: Underscored names that are not another library's privates, and why.
NOT_PRIVATE = {
    "_exit": "os._exit is documented API",
    "_shown_subtitle": "the project's own attribute, kept on a widget by app.widgets.updates",
}
#: Packages of optional extras a module may need (tinker_tui/examples/verifiers_yes_no_maybe.py):
#: its classes are checked where the extra is installed (CI runs this file there too).
OPTIONAL_EXTRAS = {"verifiers"}
PRIVATE_MODULES = sorted(name for name in MODULES if name.endswith("_private"))


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _guarded() -> list[tuple[str, str, str]]:
    """(guard module, owner, name) for every name the guard modules list."""
    found = []
    for module in PRIVATE_MODULES:
        for owner, name in importlib.import_module(module).PRIVATE_NAMES:
            found.append((module, owner, name))
    return found


def _resolve(owner: str):
    """The module or class `owner` (dotted) names: the longest importable module, then
    attributes. pytest.skip when its distribution is not installed (an optional extra)."""
    parts = owner.split(".")
    try:
        importlib.import_module(parts[0])
    except ImportError:
        pytest.skip(f"{parts[0]} is not installed (an optional extra)")
    for split in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for attr in parts[split:]:
            obj = getattr(obj, attr)
        return obj
    raise AssertionError(f"cannot import {owner}")


def _assigned_in_init(cls: type, name: str) -> bool:
    """Whether some class of `cls`'s MRO assigns `self.<name>` (an instance attribute), in
    the files its methods come from (a class re-exported under another module's name, as
    `tinker.ServiceClient`, has no source of its own to ask for)."""
    pattern = re.compile(rf"\bself\.{re.escape(name)}\b\s*(:[^=\n]*)?=")
    return any(pattern.search(_text(path)) for path in _source_files(cls))


@functools.cache
def _source_files(cls: type) -> tuple[str, ...]:
    """The files `cls`'s MRO's methods come from (asked once per class: the override check
    asks for every private name of every base)."""
    files = {
        value.__code__.co_filename
        for klass in cls.__mro__
        for value in vars(klass).values()
        if hasattr(value, "__code__")
    }
    return tuple(sorted(path for path in files if path.endswith(".py")))


@functools.cache
def _text(path: str) -> str:
    with open(path, encoding="utf-8") as file:
        return file.read()


def _version(owner: str) -> str:
    top = owner.split(".")[0]
    dist = {
        "tinker_cookbook": "tinker-cookbook",
        "textual_serve": "textual-serve",
        "tensorboardX": "tensorboardX",
    }.get(top, top)
    try:
        return f"{dist} {importlib.metadata.version(dist)}"
    except importlib.metadata.PackageNotFoundError:
        return f"Python {'.'.join(map(str, __import__('sys').version_info[:3]))}"


@pytest.mark.parametrize(
    ("module", "owner", "name"),
    _guarded(),
    ids=[f"{owner}.{name}" for _, owner, name in _guarded()],
)
def test_each_private_name_relied_on_still_exists(module, owner, name):
    obj = _resolve(owner)
    present = hasattr(obj, name) or (inspect.isclass(obj) and _assigned_in_init(obj, name))
    assert present, (
        f"{owner}.{name} is gone in {_version(owner)}: {module} relies on it "
        f"(see its docstring for what for); adapt that module, then its "
        f"PRIVATE_NAMES"
    )


def _guarded_parameters() -> list[tuple[str, str, str]]:
    """(guard module, callable, parameter) for the private parameters a guard passes."""
    return [
        (module, owner, name)
        for module in PRIVATE_MODULES
        for owner, name in getattr(importlib.import_module(module), "PRIVATE_PARAMETERS", ())
    ]


@pytest.mark.parametrize(
    ("module", "owner", "name"),
    _guarded_parameters(),
    ids=[f"{owner}({name}=)" for _, owner, name in _guarded_parameters()],
)
def test_each_private_parameter_passed_still_exists(module, owner, name):
    assert name in inspect.signature(_resolve(owner)).parameters, (
        f"{owner} takes no {name} in {_version(owner)}: {module} passes it "
        f"(see its docstring for what for); adapt that module, then its PRIVATE_PARAMETERS"
    )


def test_every_guard_module_lists_something():
    assert len(PRIVATE_MODULES) >= 9, PRIVATE_MODULES
    for module in PRIVATE_MODULES:
        assert importlib.import_module(module).PRIVATE_NAMES, module


# ---------------------------------------------------------------------- the source


def _trees():
    for name, path in MODULES.items():
        yield name, ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _defined_by_project() -> set[str]:
    """The underscored names the project defines itself (outside the guard modules):
    functions, classes, module and class attributes, `self._x` / `cls._x` assignments,
    parameters, and its own modules."""
    names = {part for module in MODULES for part in module.split(".") if _private(part)}
    for module, tree in _trees():
        if module in PRIVATE_MODULES:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Store)
                and isinstance(node.value, ast.Name)
                and node.value.id in ("self", "cls")
            ):
                names.add(node.attr)
            elif isinstance(node, ast.alias) and node.asname:
                names.add(node.asname)
    return {name for name in names if _private(name)} | set(NOT_PRIVATE)


def _reaches(tree: ast.AST, own: set[str]) -> list[tuple[int, str]]:
    """(line, name) of each private name of something else `tree` uses."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr) and node.attr not in own:
            found.append((node.lineno, node.attr))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr", "hasattr", "delattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and _private(node.args[1].value)
            and node.args[1].value not in own
        ):
            found.append((node.lineno, node.args[1].value))
        elif (
            isinstance(node, ast.ImportFrom)
            and node.module
            and not node.level
            and not node.module.startswith(import_graph.PACKAGE)
        ):
            found += [(node.lineno, part) for part in node.module.split(".") if _private(part)]
            found += [(node.lineno, alias.name) for alias in node.names if _private(alias.name)]
        elif isinstance(node, ast.Import):
            found += [
                (node.lineno, part)
                for alias in node.names
                if not alias.name.startswith(import_graph.PACKAGE)
                for part in alias.name.split(".")
                if _private(part)
            ]
    return found


def test_no_module_but_the_guards_reaches_into_a_librarys_private_names():
    own = _defined_by_project()
    found = [
        f"{module} line {line}: {name}"
        for module, tree in _trees()
        if module not in PRIVATE_MODULES
        for line, name in _reaches(tree, own)
    ]
    assert not found, (
        "a library's private name outside its *_private module (add it there, "
        "to PRIVATE_NAMES, and call that module):\n" + "\n".join(found)
    )


@pytest.mark.parametrize("module", PRIVATE_MODULES)
def test_a_guard_module_lists_every_private_name_it_uses(module):
    listed = {name for _, name in importlib.import_module(module).PRIVATE_NAMES}
    own = {
        node.name
        for node in ast.walk(ast.parse(MODULES[module].read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    }
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    unlisted = sorted({name for _, name in _reaches(tree, own)} - listed)
    assert not unlisted, f"{module} uses {', '.join(unlisted)} without listing it in PRIVATE_NAMES"


def _class_private_names(tree: ast.Module) -> dict[str, set[str]]:
    """Class name -> the underscored names its body defines: methods, and `self._x` it sets."""
    found: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            names = found.setdefault(node.name, set())
            for part in ast.walk(node):
                if isinstance(part, ast.FunctionDef | ast.AsyncFunctionDef) and _private(part.name):
                    names.add(part.name)
                elif (
                    isinstance(part, ast.Attribute)
                    and isinstance(part.ctx, ast.Store)
                    and isinstance(part.value, ast.Name)
                    and part.value.id == "self"
                    and _private(part.attr)
                ):
                    names.add(part.attr)
    return found


def test_no_class_but_the_guards_overrides_a_library_bases_private_names():
    """A class that subclasses a library's and defines (or sets) one of that base's
    private names overrides a private: that belongs in the library's guard module too."""
    found = []
    for module, tree in _trees():
        if module in PRIVATE_MODULES:
            continue
        try:
            imported = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name in OPTIONAL_EXTRAS:
                continue  # an example of an optional extra: checked where it is installed
            raise
        for class_name, names in _class_private_names(tree).items():
            cls = getattr(imported, class_name, None)
            if not inspect.isclass(cls):
                continue
            bases = [
                base
                for base in cls.__mro__[1:]
                if base is not object and not base.__module__.startswith(import_graph.PACKAGE)
            ]
            for name in sorted(names):
                owners = [
                    base for base in bases if name in vars(base) or _assigned_in_init(base, name)
                ]
                if owners:
                    found.append(
                        f"{module}.{class_name}.{name} overrides "
                        f"{owners[0].__module__}.{owners[0].__qualname__}.{name}"
                    )
    assert not found, "\n".join(found)
