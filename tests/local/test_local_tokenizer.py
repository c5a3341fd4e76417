"""WordTokenizer: exact round trips, the pieces the example relies on, renderer compatibility."""

from __future__ import annotations

import random

import pytest

from tinker_tui.engine.local import WordTokenizer


@pytest.fixture(scope="module")
def tok() -> WordTokenizer:
    return WordTokenizer()


@pytest.mark.parametrize(
    "text",
    [
        "",
        "User: Answer with one word: yes, no or maybe. Is the sky blue?\n\nAssistant: maybe",
        "héllo wörld 😀 — ünïcödé, 中文, عربى",
        "lone surrogate \ud800 and tabs\t\tand\r\nCRLF",
        "<eos> specials <pad> inside text",
        "  leading spaces, trailing   ",
        "snake_case __init__ 3.14159 x=1+2",
    ],
)
def test_round_trip(tok: WordTokenizer, text: str):
    assert tok.decode(tok.encode(text)) == text


def test_round_trip_random_strings(tok: WordTokenizer):
    rng = random.Random(0)
    alphabet = "ab yesno\n\n:.,?!é😀\t_0123" + "".join(chr(c) for c in range(0x400, 0x410))
    for _ in range(200):
        s = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 30)))
        assert tok.decode(tok.encode(s)) == s


def test_words_carry_their_leading_space(tok: WordTokenizer):
    assert len(tok.encode(" maybe")) == 1
    assert len(tok.encode("maybe")) == 1
    assert tok.encode(" maybe") != tok.encode("maybe")
    for piece in ["\n\n", "\n", ":", " yes", " no", "Yes", " Is", "User", "Assistant"]:
        assert len(tok.encode(piece)) == 1, piece
    assert tok.encode("\n\nUser:") == tok.encode("\n\n") + tok.encode("User") + tok.encode(":")


def test_hf_style_attributes(tok: WordTokenizer):
    assert tok.bos_token is None and tok.bos_token_id is None
    assert tok.decode([tok.eos_token_id]) == tok.eos_token
    assert tok.encode(tok.eos_token) == [tok.eos_token_id]
    assert tok.decode(tok.encode("a<eos>b"), skip_special_tokens=True) == "ab"
    assert len(tok) == tok.vocab_size == len(tok.get_vocab())
    assert tok.convert_ids_to_tokens(tok.encode(" maybe")) == [" maybe"]
    assert tok.pad_token_id != tok.eos_token_id


def test_role_colon_renderer_round_trip(tok: WordTokenizer):
    from tinker_cookbook.renderers import get_renderer

    renderer = get_renderer("role_colon", tok)
    question = "Answer with one word: yes, no or maybe. Is the sky blue?"
    prompt = renderer.build_generation_prompt([{"role": "user", "content": question}])
    text = tok.decode(prompt.to_ints())
    assert text == f"User: {question}\n\nAssistant:"
    message, _ = renderer.parse_response(tok.encode(" maybe\n\nUser:"))
    assert message["content"] == "maybe"
