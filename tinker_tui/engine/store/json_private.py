"""Every use the run store makes of the json module's undocumented internals, in one module.

`json.JSONEncoder.encode` builds a C encoder (`json.encoder.c_make_encoder`) on every call;
the store encodes two JSON columns per rollout, and building it was most of each call's
cost, so the codec builds one once (`c_encoder`). Both names it uses are undocumented (not
underscored, but not the module's API either); they are in `PRIVATE_NAMES`, and the suite
checks this Python still has them (tests/test_private_names.py).
"""

from __future__ import annotations

import json
import json.encoder
from collections.abc import Callable
from typing import Any

#: (owner, name): the internals used below.
PRIVATE_NAMES = (
    ("json.encoder", "c_make_encoder"),
    ("json.encoder", "encode_basestring_ascii"),
)


def c_encoder(encoder: json.JSONEncoder) -> Callable[[Any, int], list[str]] | None:
    """The C encoder `encoder.encode` would build for each call, with the same settings but
    no circular-reference bookkeeping (one shared `markers` dict would be left dirty by an
    error: a cyclic value is then a RecursionError); None where Python has no C encoder."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return None
    encode: Callable[[Any, int], list[str]] = make(
        None,
        encoder.default,
        json.encoder.encode_basestring_ascii,
        None,
        encoder.key_separator,
        encoder.item_separator,
        encoder.sort_keys,
        encoder.skipkeys,
        encoder.allow_nan,
    )
    return encode
