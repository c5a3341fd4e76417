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
`max_tokens` always parses. Tinker samples on the service, which offers no such
constraint: there the prefill alone steers the model, and a reply that does not parse
comes back as plain content.

`ToolCallConstraint.start(text)` scans the reply so far once; `ScanState.feed(piece)` then
tries a token's text on a copy, character by character, so the sampler can try many
candidate tokens per step cheaply.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Literal

from tinker_tui.engine.errors import TinkerTuiError

Verdict = Literal["reject", "continue", "done"]

_WHITESPACE = " \t\n\r"
_HEX = set("0123456789abcdefABCDEF")
_LITERALS = ("true", "false", "null")
_NUMBER = re.compile(r"-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?")
_NUMBER_START = re.compile(r"-?((0|[1-9]\d*)(\.\d*)?([eE][+-]?\d*)?)?")
#: The keys of a call object, in order.
CALL_KEYS = ("name", "arguments")


@dataclass(frozen=True, slots=True)
class ToolCallConstraint:
    """The reply (prefill included) must be one call of `tool_names`; see the module
    docstring."""

    tool_names: tuple[str, ...]

    def start(self, text: str) -> ScanState:
        """The scan of `text` (check its `verdict`)."""
        state = ScanState(tuple(json.dumps(n, ensure_ascii=False)[1:-1]
                                for n in self.tool_names))
        state.feed(text)
        return state

    def check(self, text: str) -> Verdict:
        """"reject" if `text` can no longer become a call, "done" once it is one (nothing
        may follow), else "continue"."""
        return self.start(text).verdict


class _Reject(TinkerTuiError):
    """The reply can no longer become a call (raised and caught inside `ScanState.feed`)."""


class ScanState:
    """A JSON scanner over the reply so far, with the call's rules at the top level.

    `stack` holds, per open container, [kind, what it expects next]: an object expects
    "key_or_end" (after "{"), "key", ":", "value" or "comma_or_end"; an array
    "value_or_end" (after "["), "value" or "comma_or_end". Inside a string or a bare
    scalar, `mode` says so and `buffer` holds its text as written."""

    __slots__ = ("names", "stack", "keys", "mode", "buffer", "is_key", "unicode_left",
                 "last", "started", "done", "verdict")

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names  # as JSON writes them, without quotes
        self.stack: list[list[str]] = []
        self.keys: list[str] = []  # keys of the call object so far
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
        other.names = self.names
        other.stack = [frame[:] for frame in self.stack]
        other.keys = self.keys[:]
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
                self.stack.append(["object", "key_or_end"] if c == "{"
                                  else ["array", "value_or_end"])
            else:
                self._top_value("scalar")
                frame[1] = "comma_or_end"
                self.mode, self.buffer = "scalar", c
                self._check_scalar(ended=False)
        else:
            raise _Reject

    def _close(self) -> None:
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

    def _check_top_string(self, *, closed: bool) -> None:
        """A key of the call object must be the next of CALL_KEYS, its name one of the
        tools', both as JSON writes them (no escapes they do not need)."""
        if len(self.stack) != 1:
            return
        raw = self.buffer
        if self.is_key:
            wanted = CALL_KEYS[len(self.keys)] if len(self.keys) < len(CALL_KEYS) else ""
            if not wanted.startswith(raw) or (closed and raw != wanted):
                raise _Reject
        elif self.keys and self.keys[-1] == "name":
            if not any(name.startswith(raw) for name in self.names) or \
                    (closed and raw not in self.names):
                raise _Reject

    def _top_value(self, kind: str) -> None:
        """The call's name is a string, its arguments an object."""
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
            pattern = _NUMBER if ended else _NUMBER_START
            if pattern.fullmatch(word) is None:
                raise _Reject
        elif not any(lit == word if ended else lit.startswith(word) for lit in _LITERALS):
            raise _Reject

