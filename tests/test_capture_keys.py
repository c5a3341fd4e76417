"""A reply the server files under a capture key goes under the opening of the key it came in
under: a reply that outlives that opening is dropped, even when the key has been opened
again (a reused key)."""

from __future__ import annotations

from tinker_tui.engine.server.capture import Captures


def test_a_reply_that_outlived_its_keys_opening_is_not_filed_under_the_next():
    captures = Captures()
    key = captures.open("k")
    straggler = captures.opening(key)  # a request came in under the first opening
    assert captures.close(key) == []
    assert captures.opening(key) is None  # a request now would be refused
    captures.open(key)  # the key reused for the next rollout
    captures.record(key, [{"index": 0}], opening=straggler)
    captures.record(key, [{"index": 1}], opening=captures.opening(key))
    assert captures.close(key) == [{"index": 1}]
