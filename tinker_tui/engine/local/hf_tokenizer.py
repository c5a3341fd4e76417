"""The embedded model's tokenizer as a Hugging Face tokenizer folder (`TOKENIZER_DIR`).

Why: a Tinker service names a model's tokenizer in `get_info` (`model_data.tokenizer_id`) and
the tinker SDK loads it with `AutoTokenizer.from_pretrained(tokenizer_id)`. A service that
serves the embedded model (the test double in tests/tinker_double) answers with this folder, so
the SDK path gets the tokenizer exactly as it gets Qwen's, and the token ids are the ones
`tokenizer.WordTokenizer` gives (a test checks both agree, and that the shipped folder is what
`build()` writes).

How the `tokenizers` pipeline reproduces `WordTokenizer`:

* pre-tokenizer: the same piece regex (`_PIECE_RE`, "isolated"), then GPT-2's byte-level
  mapping (every UTF-8 byte becomes one printable character);
* model: WordPiece with no continuation prefix, i.e. greedy longest match inside a piece,
  which is `WordTokenizer`'s rule. Every byte has an entry (the word-level single character
  where there is one, else the byte token), so a character with no entry falls back to its
  UTF-8 byte tokens, as in `WordTokenizer`;
* byte tokens of bytes that also have a single-character entry (printable ASCII, tab, newline,
  space) are never produced by encoding; they keep `WordTokenizer`'s names (`<0x41>`) and the
  `ByteFallback` decoder turns them back into their byte;
* `<pad>` and `<eos>` are special tokens, matched in text before splitting.

Rebuild after changing the vocabulary: `python -m tinker_tui.engine.local.hf_tokenizer`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tinker_tui.engine.local.tokenizer import (
    _BYTE_BASE,
    _PIECE_RE,
    EOS_TOKEN,
    NUM_BYTE_TOKENS,
    PAD_TOKEN,
    SPECIAL_TOKENS,
    _shared_tables,
)

#: The folder `AutoTokenizer.from_pretrained` loads (shipped with the package).
TOKENIZER_DIR = Path(__file__).parent / "tiny_chat_tokenizer"

TOKENIZER_CONFIG: dict[str, Any] = {
    "tokenizer_class": "PreTrainedTokenizerFast",
    "eos_token": EOS_TOKEN,
    "pad_token": PAD_TOKEN,
    "bos_token": None,
    "unk_token": None,
    "add_bos_token": False,
    "add_eos_token": False,
    # decode(encode(s)) == s: no space clean-up ("a ." must stay "a .").
    "clean_up_tokenization_spaces": False,
    "model_max_length": 2048,
}


def _byte_to_char() -> dict[int, str]:
    """GPT-2's reversible map from bytes to printable characters (the `ByteLevel` alphabet)."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    chars = list(printable)
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(printable, chars, strict=True)}


def _vocab() -> dict[str, int]:
    """`WordTokenizer`'s vocabulary, each entry spelt in the byte-level alphabet."""
    vocab_list, lookup, _ = _shared_tables()
    to_char = _byte_to_char()

    def spelt(text: str) -> str:
        return "".join(to_char[b] for b in text.encode("utf-8"))

    vocab: dict[str, int] = {}
    for index, token in enumerate(vocab_list):
        if index < _BYTE_BASE:
            entry = token  # special tokens, matched as added tokens
        elif index < _BYTE_BASE + NUM_BYTE_TOKENS:
            byte = index - _BYTE_BASE
            has_word_entry = byte < 128 and chr(byte) in lookup
            entry = token if has_word_entry else to_char[byte]
        else:
            entry = spelt(token)
        if entry in vocab:
            raise AssertionError(f"two tokens spelt {entry!r}: {vocab[entry]} and {index}")
        vocab[entry] = index
    return vocab


def build_tokenizer() -> Any:
    """The `tokenizers.Tokenizer` equivalent of `WordTokenizer`."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

    # The unknown token is never produced: every byte has an entry.
    model = models.WordPiece(
        _vocab(),
        unk_token="<unk>",
        continuing_subword_prefix="",
        max_input_chars_per_word=1_000_000_000,
    )
    tokenizer = Tokenizer(model)
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_PIECE_RE.pattern), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.ByteLevel()])
    tokenizer.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS]
    )
    return tokenizer


def files() -> dict[str, str]:
    """The folder's files and their text."""
    tokenizer_json = json.dumps(
        json.loads(build_tokenizer().to_str()), indent=1, ensure_ascii=False, sort_keys=True
    )
    return {
        "tokenizer.json": tokenizer_json + "\n",
        "tokenizer_config.json": json.dumps(TOKENIZER_CONFIG, indent=1, sort_keys=True) + "\n",
    }


def build(folder: Path = TOKENIZER_DIR) -> Path:
    """Write the tokenizer folder (the shipped one by default)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files().items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


if __name__ == "__main__":
    print(build())
