"""A small Llama-style decoder in plain torch: the runtime form of the embedded models.

Why not `transformers.LlamaForCausalLM`: importing it pulls in most of transformers and
torch._dynamo (several seconds and about 100 MB of memory before the first step), and its
generic forward (mask builders, output capture, cache classes) costs more than the arithmetic
of a model this small. This module computes the same function with the same parameter names
(``model.layers.N.self_attn.q_proj.weight``, ``lm_head.weight``, ...), so the shipped weights,
the LoRA layer names and saved adapters are unchanged; a test checks its logits against
transformers' on the shipped weights. `pretrain` still builds the transformers model (the
reference the weights were trained on).

Only what the local backend calls is here: a causal forward over right-padded batches (no
mask needed), a left-padded prefill with an attention mask and position ids, a forward with a
given 4-D mask (shared-prefix training batches), and cached decoding (`KVCache`, with
`batch_select_indices` to drop finished rows).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class LlamaConfig:
    """The architecture (the fields the backend reads keep transformers' names)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    max_position_embeddings: int
    pad_token_id: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    model_type: str = "llama"

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads


@dataclass
class BackboneOutput:
    last_hidden_state: torch.Tensor


@dataclass
class CausalLMOutput:
    logits: torch.Tensor


class KVCache:
    """Keys and values of every layer, ``[batch, heads, positions, head_dim]``."""

    def __init__(self) -> None:
        self.layers: list[tuple[torch.Tensor, torch.Tensor]] = []

    def update(
        self, layer: int, key: torch.Tensor, value: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if layer == len(self.layers):
            self.layers.append((key, value))
        else:
            old_k, old_v = self.layers[layer]
            self.layers[layer] = (torch.cat([old_k, key], dim=2), torch.cat([old_v, value], dim=2))
        return self.layers[layer]

    def batch_select_indices(self, index: torch.Tensor) -> None:
        """Keep (or repeat) the rows in `index`, in that order."""
        self.layers = [(k.index_select(0, index), v.index_select(0, index)) for k, v in self.layers]


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Attention(nn.Module):
    def __init__(self, config: LlamaConfig, index: int) -> None:
        super().__init__()
        hidden, self.heads, self.head_dim = (
            config.hidden_size,
            config.num_attention_heads,
            config.head_dim,
        )
        self.index = index
        self.q_proj = nn.Linear(hidden, hidden, bias=False)
        self.k_proj = nn.Linear(hidden, hidden, bias=False)
        self.v_proj = nn.Linear(hidden, hidden, bias=False)
        self.o_proj = nn.Linear(hidden, hidden, bias=False)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: torch.Tensor | None,
        cache: KVCache | None,
    ) -> torch.Tensor:
        batch, length, _ = x.shape
        shape = (batch, length, self.heads, self.head_dim)
        q = self.q_proj(x).view(shape).transpose(1, 2)
        k = self.k_proj(x).view(shape).transpose(1, 2)
        v = self.v_proj(x).view(shape).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if cache is not None:
            k, v = cache.update(self.index, k, v)
        # A mask is given for padded batches; otherwise plain causal attention (a single new
        # token attends to the whole cache).
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=mask is None and length > 1
        )
        projected: torch.Tensor = self.o_proj(out.transpose(1, 2).reshape(batch, length, -1))
        return projected


class MLP(nn.Module):
    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        down: torch.Tensor = self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        return down


class DecoderLayer(nn.Module):
    def __init__(self, config: LlamaConfig, index: int) -> None:
        super().__init__()
        self.self_attn = Attention(config, index)
        self.mlp = MLP(config)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: torch.Tensor | None,
        cache: KVCache | None,
    ) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask, cache)
        out: torch.Tensor = x + self.mlp(self.post_attention_layernorm(x))
        return out


class LlamaModel(nn.Module):
    """The transformer without its output projection (returns normalised hidden states)."""

    rope_cos: torch.Tensor  # buffers (registered in __init__)
    rope_sin: torch.Tensor

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, config.pad_token_id)
        self.layers = nn.ModuleList(
            [DecoderLayer(config, i) for i in range(config.num_hidden_layers)]
        )
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        dim = config.head_dim
        inv_freq = 1.0 / (
            config.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim)
        )
        angles = torch.arange(config.max_position_embeddings).float()[:, None] * inv_freq
        angles = torch.cat((angles, angles), dim=-1)
        # Rotary tables by position (the same values transformers computes per call).
        self.register_buffer("rope_cos", angles.cos(), persistent=False)
        self.register_buffer("rope_sin", angles.sin(), persistent=False)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        past_key_values: KVCache | None = None,
    ) -> BackboneOutput:
        batch, length = input_ids.shape
        past = (
            past_key_values.layers[0][0].shape[2]
            if past_key_values and past_key_values.layers
            else 0
        )
        if position_ids is None:
            position_ids = torch.arange(past, past + length, device=input_ids.device)[None]
        cos = self.rope_cos[position_ids].unsqueeze(1).to(self.embed_tokens.weight.dtype)
        sin = self.rope_sin[position_ids].unsqueeze(1).to(self.embed_tokens.weight.dtype)
        mask = None
        if attention_mask is not None and attention_mask.dim() == 4:
            mask = attention_mask  # [batch, 1, length, past + length] bool: given as is
        elif attention_mask is not None and not bool(attention_mask.all()):
            keys = attention_mask.bool()[:, None, None, :]  # [batch, 1, 1, past + length]
            if length > 1:
                causal = torch.ones(
                    (length, past + length), dtype=torch.bool, device=input_ids.device
                ).tril(past)
                # A padding position attends to itself only: its output is never used, and
                # a row with nothing to attend to would be NaN (and poison the cache).
                eye = torch.zeros_like(causal)
                eye[:, past:].fill_diagonal_(True)
                mask = (causal & keys) | eye
            else:
                mask = keys
        x = self.embed_tokens(input_ids)
        for layer in self.layers:
            x = layer(x, cos, sin, mask, past_key_values)
        return BackboneOutput(self.norm(x))


class LlamaForCausalLM(nn.Module):
    """Backbone plus the output projection (tied to the embedding, as in tiny-chat)."""

    base_model_prefix = "model"
    generation_config = None
    #: `forward` takes a 4-D boolean attention mask with position ids (packed training
    #: batches, `tinker_tui.engine.local.packing`).
    supports_tree_attention = True

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.config = config
        self.model = LlamaModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    @property
    def base_model(self) -> LlamaModel:
        return self.model

    def get_output_embeddings(self) -> nn.Module:
        return self.lm_head

    def tie_weights(self) -> None:
        self.lm_head.weight = self.model.embed_tokens.weight

    def new_cache(self) -> KVCache:
        return KVCache()

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        past_key_values: KVCache | None = None,
        use_cache: bool = False,
        logits_to_keep: int = 0,
    ) -> CausalLMOutput:
        hidden = self.model(input_ids, attention_mask, position_ids, past_key_values)
        states = hidden.last_hidden_state
        if logits_to_keep:
            states = states[:, -logits_to_keep:]
        return CausalLMOutput(self.lm_head(states))
