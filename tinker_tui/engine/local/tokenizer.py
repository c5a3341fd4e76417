"""An offline word-level tokenizer for the embedded model.

Why word-level: the local example must learn in seconds on a CPU, and it learns fastest when
the words that matter ("yes", "no", "maybe") are single tokens (measured on a 2-core CPU: 2–10 s to a mean reward of
0.9 word-level, 64–98 s with a 384-token byte-level BPE). Why hand-rolled: nothing may be downloaded, and tinker-cookbook's `role_colon`
renderer needs only `encode`, `decode` and the eos/bos attributes.

Scheme (GPT-2 style pre-tokenisation, then vocabulary lookup):

* Text is first split into pieces: a run of letters with an optional leading space
  (" maybe"), one digit with an optional leading space, one other symbol with an optional
  leading space (" ?", ":"), "\\n\\n", "\\n", or any other single whitespace character.
* A piece found in the vocabulary is one token. Otherwise it is covered greedily by the
  longest vocabulary entries (so "words" becomes "word" + "s"); a character with no entry
  becomes its UTF-8 bytes, one byte token each. Hence ``decode(encode(s)) == s`` for any
  string.
* Special tokens (``<pad>``, ``<eos>``) are matched in text like a Hugging Face tokenizer
  does. There is no BOS token.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Any

from tinker_tui.engine.local._words import CAPITALISED_WORDS, LOWER_WORDS

PAD_TOKEN = "<pad>"
EOS_TOKEN = "<eos>"
SPECIAL_TOKENS: tuple[str, ...] = (PAD_TOKEN, EOS_TOKEN)
NUM_BYTE_TOKENS = 256
_BYTE_BASE = len(SPECIAL_TOKENS)  # byte b has id _BYTE_BASE + b

# Every character is matched by exactly one alternative, so the pieces always concatenate
# back to the input.
_PIECE_RE = re.compile(r" ?[^\W\d_]+| ?\d| ?(?:[^\s\w]|_)|\n\n|\n|\s")
_SPECIAL_RE = re.compile("(" + "|".join(re.escape(t) for t in SPECIAL_TOKENS) + ")")
_PUNCTUATION = "".join(
    chr(c) for c in range(33, 127) if not chr(c).isalnum()
)  # ASCII symbols, e.g. ":" "?" "."


def _byte_token_name(b: int) -> str:
    return f"<0x{b:02X}>"


def _build_vocab() -> list[str]:
    """The ordered token strings. Byte tokens are stored by name ("<0x41>")."""
    tokens: list[str] = list(SPECIAL_TOKENS)
    tokens += [_byte_token_name(b) for b in range(NUM_BYTE_TOKENS)]
    singles = ["\n\n", "\n", "\t", " "]
    singles += [chr(c) for c in range(33, 127)]  # printable ASCII
    singles += [" " + p for p in _PUNCTUATION]
    singles += [" " + d for d in "0123456789"]
    singles += [" " + chr(c) for c in range(ord("a"), ord("z") + 1)]
    singles += [" " + chr(c) for c in range(ord("A"), ord("Z") + 1)]
    # Mid-sentence words carry their leading space, so common words get only " word"; the
    # short list of sentence starters also gets "Word", " Word" and "word". This keeps the
    # vocabulary (and so the per-token cost of the [tokens, vocab] logits) near 2,500.
    words: list[str] = [" " + w for w in LOWER_WORDS]
    for w in CAPITALISED_WORDS:
        cap = {"ai": "AI", "ok": "OK"}.get(w, w.capitalize())
        words += [cap, " " + cap, w, " " + w]
    seen: set[str] = set(tokens)
    for t in singles + words:
        if t not in seen:
            seen.add(t)
            tokens.append(t)
    return tokens


@lru_cache(maxsize=1)
def _shared_tables() -> tuple[tuple[str, ...], dict[str, int], int]:
    vocab = tuple(_build_vocab())
    lookup = {
        t: i for i, t in enumerate(vocab) if not (_BYTE_BASE <= i < _BYTE_BASE + NUM_BYTE_TOKENS)
    }
    max_len = max(len(t) for t in lookup)
    return vocab, lookup, max_len


class WordTokenizer:
    """Word-level tokenizer with byte fallback; HF-tokenizer-shaped where the cookbook looks.

    Compatible with `tinker_cookbook.renderers.get_renderer("role_colon", tok)`.
    """

    is_fast = False
    padding_side = "right"
    model_max_length = 2048

    def __init__(self, name_or_path: str = "tinker-tui/tiny-chat") -> None:
        self.name_or_path = name_or_path
        self._vocab, self._lookup, self._max_len = _shared_tables()
        self._piece_cache: dict[str, tuple[int, ...]] = {}

    # -- attributes the cookbook and HF-style callers read -------------------------------
    @property
    def pad_token(self) -> str:
        return PAD_TOKEN

    @property
    def pad_token_id(self) -> int:
        return self._lookup[PAD_TOKEN]

    @property
    def eos_token(self) -> str:
        return EOS_TOKEN

    @property
    def eos_token_id(self) -> int:
        return self._lookup[EOS_TOKEN]

    @property
    def bos_token(self) -> str | None:
        return None

    @property
    def bos_token_id(self) -> int | None:
        return None

    @property
    def unk_token(self) -> str | None:
        return None  # byte fallback: nothing is unknown

    @property
    def unk_token_id(self) -> int | None:
        return None

    @property
    def all_special_tokens(self) -> list[str]:
        return list(SPECIAL_TOKENS)

    @property
    def all_special_ids(self) -> list[int]:
        return [self._lookup[t] for t in SPECIAL_TOKENS]

    @property
    def special_tokens_map(self) -> dict[str, str]:
        return {"pad_token": PAD_TOKEN, "eos_token": EOS_TOKEN}

    @property
    def vocab_size(self) -> int:
        return len(self._vocab)

    def __len__(self) -> int:
        return len(self._vocab)

    def __repr__(self) -> str:
        return f"WordTokenizer(name_or_path={self.name_or_path!r}, vocab_size={self.vocab_size})"

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (WordTokenizer, (self.name_or_path,))

    # -- encoding -------------------------------------------------------------------------
    def encode(self, text: str, add_special_tokens: bool = False, **_: Any) -> list[int]:
        """Token ids of `text`. There is no BOS, so `add_special_tokens` changes nothing."""
        if not isinstance(text, str):
            raise TypeError(f"WordTokenizer.encode expects str, got {type(text).__name__}")
        ids: list[int] = []
        for i, part in enumerate(_SPECIAL_RE.split(text)):
            if not part:
                continue
            if i % 2 == 1:  # a captured special token
                ids.append(self._lookup[part])
                continue
            for piece in _PIECE_RE.findall(part):
                ids.extend(self._encode_piece(piece))
        return ids

    def _encode_piece(self, piece: str) -> tuple[int, ...]:
        cached = self._piece_cache.get(piece)
        if cached is not None:
            return cached
        tid = self._lookup.get(piece)
        if tid is not None:
            out: tuple[int, ...] = (tid,)
        else:
            found: list[int] = []
            pos, n = 0, len(piece)
            while pos < n:
                for end in range(min(n, pos + self._max_len), pos, -1):
                    tid = self._lookup.get(piece[pos:end])
                    if tid is not None:
                        found.append(tid)
                        pos = end
                        break
                else:  # no entry starts here: fall back to the character's UTF-8 bytes
                    raw = piece[pos].encode("utf-8", errors="surrogatepass")
                    found.extend(_BYTE_BASE + b for b in raw)
                    pos += 1
            out = tuple(found)
        if len(self._piece_cache) < 100_000:
            self._piece_cache[piece] = out
        return out

    def __call__(
        self, text: str | list[str], add_special_tokens: bool = False, **_: Any
    ) -> dict[str, Any]:
        if isinstance(text, str):
            ids = self.encode(text)
            return {"input_ids": ids, "attention_mask": [1] * len(ids)}
        batch = [self.encode(t) for t in text]
        return {"input_ids": batch, "attention_mask": [[1] * len(ids) for ids in batch]}

    # -- decoding -------------------------------------------------------------------------
    def decode(
        self,
        ids: int | Iterable[int],
        skip_special_tokens: bool = False,
        **_: Any,
    ) -> str:
        """Text of `ids`; consecutive byte tokens are joined and decoded as UTF-8."""
        if isinstance(ids, int):
            ids = [ids]
        special = set(self.all_special_ids)
        parts: list[str] = []
        pending = bytearray()
        n = len(self._vocab)
        for raw_id in ids:
            tid = int(raw_id)
            if not 0 <= tid < n:
                raise ValueError(f"token id {tid} is outside the vocabulary (size {n})")
            if _BYTE_BASE <= tid < _BYTE_BASE + NUM_BYTE_TOKENS:
                pending.append(tid - _BYTE_BASE)
                continue
            if pending:
                parts.append(_decode_bytes(pending))
                pending.clear()
            if skip_special_tokens and tid in special:
                continue
            parts.append(self._vocab[tid])
        if pending:
            parts.append(_decode_bytes(pending))
        return "".join(parts)

    def batch_decode(
        self, sequences: Iterable[Sequence[int]], skip_special_tokens: bool = False, **_: Any
    ) -> list[str]:
        return [self.decode(s, skip_special_tokens=skip_special_tokens) for s in sequences]

    # -- vocabulary -----------------------------------------------------------------------
    def get_vocab(self) -> dict[str, int]:
        return {t: i for i, t in enumerate(self._vocab)}

    def convert_ids_to_tokens(self, ids: int | Iterable[int]) -> str | list[str]:
        if isinstance(ids, int):
            return self._vocab[ids]
        return [self._vocab[int(i)] for i in ids]

    def convert_tokens_to_ids(self, tokens: str | Iterable[str]) -> int | None | list[int | None]:
        vocab = self.get_vocab() if not isinstance(tokens, str) else None
        if isinstance(tokens, str):
            tid = self._lookup.get(tokens)
            if tid is None and tokens.startswith("<0x"):
                return self.get_vocab().get(tokens)
            return tid
        assert vocab is not None
        return [vocab.get(t) for t in tokens]


def _decode_bytes(buf: bytearray) -> str:
    try:
        return bytes(buf).decode("utf-8", errors="surrogatepass")
    except UnicodeDecodeError:
        return bytes(buf).decode("utf-8", errors="replace")
