"""The type of a model the local backend runs, in a module of its own: `model` builds one
and `lora` adapts one, and a name both need lives where neither imports the other."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from tinker_tui.engine.local.llama import LlamaForCausalLM

#: A causal LM as the backend runs it: the embedded model's own module, or a transformers
#: model loaded from a folder (both give get_output_embeddings, base_model, tie_weights).
CausalLM: TypeAlias = "LlamaForCausalLM | PreTrainedModel"
