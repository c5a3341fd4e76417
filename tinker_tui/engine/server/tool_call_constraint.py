"""A forced tool call as a constraint on the reply's text, for backends that sample here.

With tool_choice "required" or a named function, the text protocol (engine.server.tools)
prefills the start of the call, ``{"name": "...", "arguments":``, and the model writes the
rest. Where the sampler runs in this process (the local backend), it can also keep every
token it samples within the call's shape: ``{"name": <one of the tools>, "arguments":
{...}}``, JSON with those two keys in that order, the arguments an object, single spaces
between tokens (JSON allows any run of whitespace, and a small model given that freedom
fills `max_tokens` with newlines). The sampler asks, for each token it draws, whether the
reply can still become such a call, redraws one that cannot, and stops the sample once the
call is whole (see `engine.local.generation`). So a forced call that ends within
`max_tokens` always parses.

The arguments also follow the top level of the tool's `parameters` schema (`ArgumentRules`):
only its declared properties as keys, each at most once; a value of the property's `type`
(string, number, integer, boolean, null, object, array, or a list of them) and, with an
`enum`, one of its values; the object closes only once every `required` property is there.
Deeper levels are plain JSON. Without this, the untrained model given only the JSON shape
wrote keys of its own and rarely closed a call within a small `max_tokens`. Tinker samples on the service, which offers no such
constraint: there the prefill alone steers the model, and a reply that does not parse
comes back as plain content.

`ToolCallConstraint.start(text)` scans the reply so far once; `ScanState.feed(piece)` then
tries a token's text on a copy, character by character, so the sampler can try many
candidate tokens per step cheaply.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from tinker_tui.engine.errors import TinkerTuiError

Verdict = Literal["reject", "continue", "done"]

_WHITESPACE = " \t\n\r"
_HEX = set("0123456789abcdefABCDEF")
_LITERALS = ("true", "false", "null")
_NUMBER = re.compile(r"-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?")
#: What a number can start with: a prefix of `_NUMBER`. A digit follows a "." before any
#: exponent ("3.e8" is no number: accepting it left the sampler no way to go on).
_NUMBER_START = re.compile(r"-?((0|[1-9]\d*)(\.(\d+([eE][+-]?\d*)?)?|[eE][+-]?\d*)?)?")
_INTEGER = re.compile(r"-?(0|[1-9]\d*)")
_INTEGER_START = re.compile(r"-?((0|[1-9]\d*))?")
#: The longest number a call may hold: the longest a float64 takes in JSON
#: (-2.2250738585072014e-308). A small model otherwise writes digits until `max_tokens`.
MAX_NUMBER_LENGTH = 24
#: JSON Schema's types, as the kinds of value this scanner tells apart.
_KINDS = frozenset({"string", "number", "integer", "boolean", "null", "object", "array"})
#: The keys of a call object, in order.
CALL_KEYS = ("name", "arguments")


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class ArgumentRules:
    """What a tool's `parameters` schema says of its arguments object's top level, with keys
    and string values as JSON writes them (without quotes). `keys` None: any key (the schema
    declares no properties); a property missing from `kinds` takes any value."""

    keys: tuple[str, ...] | None = None
    required: frozenset[str] = frozenset()
    kinds: Mapping[str, frozenset[str]] = field(default_factory=dict)
    enums: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def from_schema(cls, schema: Mapping[str, Any] | None) -> ArgumentRules:
        """The rules of a `parameters` schema; parts it cannot use (not a mapping, unknown
        types) constrain nothing rather than everything."""
        if not isinstance(schema, Mapping):
            return cls()
        properties = schema.get("properties")
        if not isinstance(properties, Mapping) or not properties:
            return cls()
        keys = tuple(_json(str(k))[1:-1] for k in properties)
        required = schema.get("required")
        kinds: dict[str, frozenset[str]] = {}
        enums: dict[str, tuple[str, ...]] = {}
        for name, key in zip(properties, keys, strict=True):
            spec = properties[name]
            if not isinstance(spec, Mapping):
                continue
            declared = spec.get("type")
            types = [declared] if isinstance(declared, str) else declared
            if isinstance(types, list) and types and set(types) <= _KINDS:
                kinds[key] = frozenset(types)
            enum = spec.get("enum")
            if (
                isinstance(enum, list)
                and enum
                and all(isinstance(v, str | int | float | bool) or v is None for v in enum)
            ):
                enums[key] = tuple(_json(v) for v in enum)
        return cls(
            keys=keys,
            required=frozenset(_json(str(k))[1:-1] for k in required if k in properties)
            if isinstance(required, list)
            else frozenset(),
            kinds=kinds,
            enums=enums,
        )

    def allows(self, key: str, kind: str) -> bool:
        kinds = self.kinds.get(key)
        if kinds is None:
            return True
        return kind in kinds or (kind == "integer" and "number" in kinds)


@dataclass(frozen=True, slots=True)
class ToolCallConstraint:
    """The reply (prefill included) must be one call of `tool_names`, its arguments within
    `arguments[name]` where given; see the module docstring."""

    tool_names: tuple[str, ...]
    arguments: Mapping[str, ArgumentRules] = field(default_factory=dict)
    #: Each tool's `parameters` schema as given, for a sampler that builds a grammar of the
    #: call (`engine.local.token_masks`).
    schemas: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def for_tools(cls, tools: list[dict[str, Any]], names: tuple[str, ...]) -> ToolCallConstraint:
        """A call of one of `names`, each with its tool's `parameters` (tools as the handler
        lists them: name, description, parameters)."""
        return cls(
            names,
            {
                t["name"]: ArgumentRules.from_schema(t.get("parameters"))
                for t in tools
                if t["name"] in names
            },
            {t["name"]: t.get("parameters") for t in tools if t["name"] in names},
        )

    def start(self, text: str) -> ScanState:
        """The scan of `text` (check its `verdict`)."""
        state = ScanState(
            tuple(_json(n)[1:-1] for n in self.tool_names),
            {_json(n)[1:-1]: rules for n, rules in self.arguments.items()},
        )
        state.feed(text)
        return state

    def check(self, text: str) -> Verdict:
        """ "reject" if `text` can no longer become a call, "done" once it is one (nothing
        may follow), else "continue"."""
        return self.start(text).verdict

    def completion(self, scan: ScanState) -> str | None:
        """The shortest text that makes `scan`'s call whole (`engine.server.call_completion`)."""
        from tinker_tui.engine.server.call_completion import completion

        return completion(scan)


class _Reject(TinkerTuiError):
    """The reply can no longer become a call (raised and caught inside `ScanState.feed`)."""


class ScanState:
    """A JSON scanner over the reply so far, with the call's rules at the top level.

    `stack` holds, per open container, [kind, what it expects next]: an object expects
    "key_or_end" (after "{"), "key", ":", "value" or "comma_or_end"; an array
    "value_or_end" (after "["), "value" or "comma_or_end". Inside a string or a bare
    scalar, `mode` says so and `buffer` holds its text as written. The arguments object is
    the one object two levels down (the call's only object value)."""

    __slots__ = (
        "names",
        "rules",
        "name",
        "stack",
        "keys",
        "arg_keys",
        "mode",
        "buffer",
        "is_key",
        "unicode_left",
        "last",
        "started",
        "done",
        "verdict",
    )

    def __init__(
        self, names: tuple[str, ...], rules: Mapping[str, ArgumentRules] | None = None
    ) -> None:
        self.names = names  # as JSON writes them, without quotes
        self.rules = rules or {}  # per name, as JSON writes it
        self.name = ""  # the tool called, once its name is written
        self.stack: list[list[str]] = []
        self.keys: list[str] = []  # keys of the call object so far
        self.arg_keys: list[str] = []  # keys of the arguments object so far
        self.mode = "normal"  # normal, string, escape, unicode, scalar
        self.buffer = ""
        self.is_key = False
        self.unicode_left = 0
        self.last = ""
        self.started = False
        self.done = False
        self.verdict: Verdict = "continue"

    def copy(self) -> ScanState:
        other = ScanState.__new__(ScanState)
        other.names, other.rules, other.name = self.names, self.rules, self.name
        other.stack = [frame[:] for frame in self.stack]
        other.keys = self.keys[:]
        other.arg_keys = self.arg_keys[:]
        other.mode, other.buffer, other.is_key = self.mode, self.buffer, self.is_key
        other.unicode_left, other.last = self.unicode_left, self.last
        other.started, other.done, other.verdict = self.started, self.done, self.verdict
        return other

    def feed(self, text: str) -> Verdict:
        """Scan more of the reply; returns (and keeps) the verdict."""
        if self.verdict == "reject":
            return "reject"
        try:
            for c in text:
                self._char(c)
        except _Reject:
            self.verdict = "reject"
            return "reject"
        self.verdict = "done" if self.done else "continue"
        return self.verdict

    # -- one character -------------------------------------------------------------------
    def _char(self, c: str) -> None:
        if self.done:
            raise _Reject  # nothing after the call
        mode = self.mode
        if mode == "string":
            self._in_string(c)
        elif mode == "escape":
            if c == "u":
                self.mode, self.unicode_left = "unicode", 4
            elif c in '"\\/bfnrt':
                self.mode = "string"
            else:
                raise _Reject
            self.buffer += c
        elif mode == "unicode":
            if c not in _HEX:
                raise _Reject
            self.buffer += c
            self.unicode_left -= 1
            if not self.unicode_left:
                self.mode = "string"
        elif mode == "scalar":
            if c in _WHITESPACE or c in ",]}":
                self._end_scalar()
                self._normal(c)
            else:
                self.buffer += c
                self._check_scalar(ended=False)
        else:
            self._normal(c)
        self.last = c

    def _in_string(self, c: str) -> None:
        if c == '"':
            self.mode = "normal"
            self._end_string()
            return
        if ord(c) < 0x20:
            raise _Reject
        if c == "\\":
            self.mode = "escape"
        self.buffer += c
        self._check_top_string(closed=False)

    def _normal(self, c: str) -> None:
        if c in _WHITESPACE:
            if c != " " or self.last == " ":
                raise _Reject  # single spaces only
            return
        if not self.started:
            if c != "{":
                raise _Reject  # the call is one object
            self.started = True
            self.stack.append(["object", "key_or_end"])
            return
        frame = self.stack[-1]
        kind, expecting = frame
        if c == '"':
            if expecting in ("key", "key_or_end"):
                self.is_key = True
                frame[1] = ":"
            elif expecting in ("value", "value_or_end"):
                self._top_value("string")
                self.is_key = False
                frame[1] = "comma_or_end"
            else:
                raise _Reject
            self.mode, self.buffer = "string", ""
            self._check_top_string(closed=False)
        elif expecting == ":":
            if c != ":":
                raise _Reject
            frame[1] = "value"
        elif expecting == "comma_or_end":
            if c == ("}" if kind == "object" else "]"):
                self._close()
            elif c == ",":
                if len(self.stack) == 1 and len(self.keys) >= len(CALL_KEYS):
                    raise _Reject  # only name and arguments
                if len(self.stack) == 2 and self._keys_left() == []:
                    raise _Reject  # every declared property is there
                frame[1] = "key" if kind == "object" else "value"
            else:
                raise _Reject
        elif expecting == "key_or_end":
            if c != "}" or len(self.stack) == 1:
                raise _Reject  # the call object is not empty
            self._close()
        elif expecting in ("value", "value_or_end"):
            if c == "]" and expecting == "value_or_end":
                self._close()
            elif c in "{[":
                self._top_value("object" if c == "{" else "array")
                frame[1] = "comma_or_end"
                self.stack.append(
                    ["object", "key_or_end"] if c == "{" else ["array", "value_or_end"]
                )
            else:
                self._top_value("scalar")
                frame[1] = "comma_or_end"
                self.mode, self.buffer = "scalar", c
                self._check_scalar(ended=False)
        else:
            raise _Reject

    def _close(self) -> None:
        if len(self.stack) == 2:
            rules = self._rules()
            if rules is not None and not rules.required <= set(self.arg_keys):
                raise _Reject  # a required property is missing
        self.stack.pop()
        if not self.stack:
            if tuple(self.keys) != CALL_KEYS:
                raise _Reject
            self.done = True

    # -- strings and scalars -------------------------------------------------------------
    def _end_string(self) -> None:
        self._check_top_string(closed=True)
        if self.is_key and len(self.stack) == 1:
            self.keys.append(self.buffer)
        elif self.is_key and len(self.stack) == 2:
            self.arg_keys.append(self.buffer)
        elif len(self.stack) == 1 and self.keys and self.keys[-1] == "name":
            self.name = self.buffer

    def _rules(self) -> ArgumentRules | None:
        return self.rules.get(self.name)

    def _keys_left(self) -> list[str] | None:
        """The declared properties not yet written (None: any key may come)."""
        rules = self._rules()
        if rules is None or rules.keys is None:
            return None
        return [k for k in rules.keys if k not in self.arg_keys]

    def _check_top_string(self, *, closed: bool) -> None:
        """A key of the call object must be the next of CALL_KEYS, its name one of the
        tools', both as JSON writes them (no escapes they do not need)."""
        if len(self.stack) == 2:
            self._check_argument_string(closed=closed)
            return
        if len(self.stack) != 1:
            return
        raw = self.buffer
        if self.is_key:
            wanted = CALL_KEYS[len(self.keys)] if len(self.keys) < len(CALL_KEYS) else ""
            if not wanted.startswith(raw) or (closed and raw != wanted):
                raise _Reject
        elif self.keys and self.keys[-1] == "name":
            if not any(name.startswith(raw) for name in self.names) or (
                closed and raw not in self.names
            ):
                raise _Reject

    def _check_argument_string(self, *, closed: bool) -> None:
        """A key of the arguments object: a declared property not yet written. A string
        value: one of its property's enum, if it has one."""
        raw = self.buffer
        if self.is_key:
            left = self._keys_left()
            if left is not None and (
                not any(k.startswith(raw) for k in left) or (closed and raw not in left)
            ):
                raise _Reject
            return
        rules = self._rules()
        enum = rules.enums.get(self.arg_keys[-1]) if rules is not None else None
        if enum is not None:
            quoted = '"' + raw + ('"' if closed else "")
            if not any(v.startswith(quoted) for v in enum):
                raise _Reject

    def _top_value(self, kind: str) -> None:
        """The call's name is a string, its arguments an object; an argument's value is of
        its property's type (a scalar's is checked as it is written)."""
        if len(self.stack) == 2 and kind != "scalar":
            rules = self._rules()
            if rules is not None and not rules.allows(self.arg_keys[-1], kind):
                raise _Reject
            return
        if len(self.stack) != 1:
            return
        key = self.keys[-1] if self.keys else ""
        if (key == "name" and kind != "string") or (key == "arguments" and kind != "object"):
            raise _Reject

    def _end_scalar(self) -> None:
        self.mode = "normal"
        self._check_scalar(ended=True)

    def _check_scalar(self, *, ended: bool) -> None:
        word = self.buffer
        if word[:1] in "-0123456789":
            whole = _NUMBER.fullmatch(word) is not None
            if not (whole or not ended and _NUMBER_START.fullmatch(word)):
                raise _Reject
            # An unfinished number needs one character more, so at the longest it is whole.
            if len(word) > MAX_NUMBER_LENGTH or len(word) == MAX_NUMBER_LENGTH and not whole:
                raise _Reject
            if whole and not math.isfinite(float(word)):
                raise _Reject  # beyond a float64: more exponent digits only make it larger
        elif not any(lit == word if ended else lit.startswith(word) for lit in _LITERALS):
            raise _Reject
        if len(self.stack) == 2:
            self._check_argument_scalar(word, ended=ended)

    def _check_argument_scalar(self, word: str, *, ended: bool) -> None:
        """A number, true/false or null as an argument: of its property's type and in its
        enum, if it has them."""
        rules = self._rules()
        if rules is None:
            return
        key = self.arg_keys[-1]
        enum = rules.enums.get(key)
        if enum is not None and not any(v == word if ended else v.startswith(word) for v in enum):
            raise _Reject
        if key not in rules.kinds:
            return
        if word[:1] in "-0123456789":
            whole = (_INTEGER if ended else _INTEGER_START).fullmatch(word) is not None
            if not (rules.allows(key, "number") or (whole and rules.allows(key, "integer"))):
                raise _Reject
        elif not any(
            rules.allows(key, kind) and (lit == word if ended else lit.startswith(word))
            for kind, lit in (("boolean", "true"), ("boolean", "false"), ("null", "null"))
        ):
            raise _Reject
