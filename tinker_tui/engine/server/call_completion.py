"""The shortest text that makes a forced tool call whole, from where its reply stands.

A sampler that keeps a forced call within its shape (`engine.server.tool_call_constraint`,
`engine.server.native_calls`) can still run out of `max_tokens` in the middle of a long
string. With this completion it can see, before each token, how many tokens the call needs
at the least to close (close the string, add the required arguments with the smallest value
of their type, close the objects, write the frame's closing), and, once the budget is down to
that, write exactly those: a forced call then always closes within `max_tokens` whenever a
minimal valid call fits. Each piece is checked by the scanner itself, so the completion is
whole by the same rules the sampler applies.
"""

from __future__ import annotations

from typing import Any

#: The smallest value of each JSON Schema type, as JSON text.
_SMALLEST = {
    "string": '""',
    "integer": "0",
    "number": "0",
    "boolean": "false",
    "null": "null",
    "object": "{}",
    "array": "[]",
}
_ANY_VALUE = ('""', "0", "null", "false", "{}", "[]")


def completion(scan: Any, limit: int = 256) -> str | None:
    """The text that completes `scan` (a `ScanState` or a `FramedScan`): "" once it is
    whole, None if none is found within `limit` pieces."""
    inner = getattr(scan, "inner", scan)
    framed = inner is not scan
    out = ""
    if framed and inner is None:
        return None  # still in the opening (a prefill always covers it)
    state = inner.copy()
    for _ in range(limit):
        if state.done:
            break
        for piece in _pieces(state):
            trial = state.copy()
            if trial.feed(piece) != "reject":
                state, out = trial, out + piece
                break
        else:
            return None
    else:
        return None
    if framed:
        out += scan.constraint.closing[len(scan.tail) :]
    return out


def _pieces(s: Any) -> list[str]:
    """Candidate next pieces for scanner state `s`, the most direct first."""
    depth = len(s.stack)
    if s.mode == "escape":
        return ["n"]
    if s.mode == "unicode":
        return ["0" * s.unicode_left]
    if s.mode == "string":
        return [_finish_string(s, depth)]
    if s.mode == "scalar":
        word = s.buffer
        if word[:1] in "-0123456789":
            if word[-1] in "-.eE+":
                return ["0"]
        else:
            for literal in ("true", "false", "null"):
                if literal.startswith(word) and literal != word:
                    return [literal[len(word) :]]
        return [*_after_value(s, depth)]
    if not s.stack:
        return ["{"]
    kind, expect = s.stack[-1]
    if kind == "object":
        if expect in ("key_or_end", "comma_or_end"):
            missing = _missing(s, depth)
            if missing:
                return ['"'] if expect == "key_or_end" else [", ", ","]
            return ["}"]
        if expect == "key":
            return ['"']
        if expect == ":":
            return [": ", ":"]
        return _values(s, depth)
    if expect in ("value_or_end", "comma_or_end"):
        return ["]"]
    return list(_ANY_VALUE)


def _after_value(s: Any, depth: int) -> list[str]:
    if not s.stack:
        return []
    kind = s.stack[-1][0]
    return ["}", ", ", ","] if kind == "object" else ["]"]


def _missing(s: Any, depth: int) -> bool:
    """Whether the object at the top needs another key before it may close."""
    if depth == 1:
        return len(s.keys) < 2
    if depth == 2:
        rules = s._rules()
        return rules is not None and not rules.required <= set(s.arg_keys)
    return False


def _finish_string(s: Any, depth: int) -> str:
    raw = s.buffer
    if depth == 1 and s.is_key:
        wanted = ("name", "arguments")[min(len(s.keys), 1)]
        return wanted[len(raw) :] + '"'
    if depth == 1 and s.keys and s.keys[-1] == "name":
        names = sorted((n for n in s.names if n.startswith(raw)), key=len)
        return (names[0][len(raw) :] if names else "") + '"'
    if depth == 2 and s.is_key:
        rules = s._rules()
        left = s._keys_left()
        if left is not None:
            required = [k for k in left if rules is not None and k in rules.required]
            fits = sorted((k for k in (required or left) if k.startswith(raw)), key=len) or sorted(
                (k for k in left if k.startswith(raw)), key=len
            )
            return (fits[0][len(raw) :] if fits else "") + '"'
        return '"'
    if depth == 2 and not s.is_key:
        rules = s._rules()
        enum = rules.enums.get(s.arg_keys[-1]) if rules is not None else None
        if enum:
            quoted = '"' + raw
            fits = sorted((v for v in enum if v.startswith(quoted)), key=len)
            if fits:
                return str(fits[0][len(quoted) :])
    return '"'


def _values(s: Any, depth: int) -> list[str]:
    if depth == 1:
        key = s.keys[-1] if s.keys else ""
        return ['"'] if key == "name" else ["{"] if key == "arguments" else list(_ANY_VALUE)
    if depth == 2:
        rules = s._rules()
        if rules is not None and s.arg_keys:
            key = s.arg_keys[-1]
            enum = rules.enums.get(key)
            if enum:
                return sorted(enum, key=len)
            kinds = rules.kinds.get(key)
            if kinds:
                return sorted((_SMALLEST[k] for k in kinds if k in _SMALLEST), key=len) or list(
                    _ANY_VALUE
                )
    return list(_ANY_VALUE)
