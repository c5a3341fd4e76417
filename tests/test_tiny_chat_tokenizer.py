"""The embedded model's tokenizer as a Hugging Face folder: loaded the way the tinker SDK loads
tokenizers, it gives exactly the token ids (and text) of the local backend's WordTokenizer."""

from __future__ import annotations

import json
import random

import pytest
from tinker.lib.public_interfaces.sampling_client import _load_tokenizer_from_model_info

from tinker_tui.engine.local import DEFAULT_BASE_MODEL, hf_tokenizer
from tinker_tui.engine.local.tokenizer import WordTokenizer, _shared_tables
from tinker_tui.examples import yes_no_maybe


@pytest.fixture(scope="module")
def sdk_tokenizer():
    # What tinker.TrainingClient.get_tokenizer() does with get_info's tokenizer_id.
    return _load_tokenizer_from_model_info(DEFAULT_BASE_MODEL, str(hf_tokenizer.TOKENIZER_DIR))


def corpus() -> list[str]:
    rng = random.Random(0)
    vocab = list(_shared_tables()[0][258:])
    texts = [yes_no_maybe.prompt_for(q) for q in yes_no_maybe.QUESTIONS]
    texts += [
        "User: Answer with one word.\n\nAssistant: maybe<eos>",
        "<pad><eos>x<eos>",
        "",
        "café naïve 日本語 😀 \r\n\t",
        " \xa0 e\u0301 \u2003end",
        "a_b 3.14 12345 ZZZ",
        "words wordsmith Xylophone\n\n\nworld  two  spaces",
        "<0x41> <eos",
        "\x00\x7f\x1b",
    ]
    alphabet = "abcXYZ 019.,!?_-\n\t\r<>éü日😀\xa0\u0301\x00"
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40))) for _ in range(1500)]
    texts += [
        "".join(
            rng.choice(vocab) + rng.choice(["", " ", "s", "ing", "\n", "é"])
            for _ in range(rng.randint(1, 12))
        )
        for _ in range(1500)
    ]
    return texts


def test_the_shipped_folder_is_what_the_builder_writes():
    for name, text in hf_tokenizer.files().items():
        shipped = (hf_tokenizer.TOKENIZER_DIR / name).read_text(encoding="utf-8")
        assert json.loads(shipped) == json.loads(text), (
            f"{name} is stale: rebuild with `python -m tinker_tui.engine.local.hf_tokenizer`"
        )


def test_the_sdk_loaded_tokenizer_gives_the_word_tokenizers_ids_and_text(sdk_tokenizer):
    word = WordTokenizer()
    assert len(sdk_tokenizer) == len(word)
    assert (sdk_tokenizer.eos_token_id, sdk_tokenizer.pad_token_id, sdk_tokenizer.bos_token_id) == (
        word.eos_token_id,
        word.pad_token_id,
        None,
    )
    for text in corpus():
        ids = word.encode(text)
        assert sdk_tokenizer.encode(text) == ids, text
        assert sdk_tokenizer.encode(text, add_special_tokens=True) == ids, text
        assert sdk_tokenizer.decode(ids) == word.decode(ids), text
        assert sdk_tokenizer.decode(ids, skip_special_tokens=True) == word.decode(
            ids, skip_special_tokens=True
        ), text
    # Every single id decodes the same, byte tokens included (a sampler may emit any id).
    for token_id in range(len(word)):
        assert sdk_tokenizer.decode([token_id]) == word.decode([token_id]), token_id


def test_role_colon_renders_the_same_tokens_with_either_tokenizer(sdk_tokenizer):
    from tinker_cookbook.renderers import get_renderer

    ours, theirs = (
        get_renderer("role_colon", WordTokenizer()),
        get_renderer("role_colon", sdk_tokenizer),
    )
    for conversation in yes_no_maybe.WARMUP[:6]:
        messages = list(conversation)
        a, wa = ours.build_supervised_example(messages)
        b, wb = theirs.build_supervised_example(messages)
        assert a.to_ints() == b.to_ints() and wa.tolist() == wb.tolist()
        prompt = messages[:1]
        assert (
            ours.build_generation_prompt(prompt).to_ints()
            == theirs.build_generation_prompt(prompt).to_ints()
        )
    assert ours.get_stop_sequences() == theirs.get_stop_sequences()
