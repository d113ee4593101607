"""The loader's ``varlen_attention`` as an HF attention implementation, so an HF model trains a pack through it.

Without flash-attn an HF model runs a pack with ``sdpa`` and the 4D block mask: every token pair of
the pack is computed and then masked. ``varlen_attention`` (flash-attn, else torch's
``varlen_attn`` on CUDA, else SDPA with the block mask) computes only each sub-sample's own pairs.
Registered under ``VARLEN`` it serves both halves of a Qwen2.5-VL model:

* the text layers call it with ``position_ids`` (the text row, restarting at 0 per sub-sample):
  the boundaries come from transformers' own ``prepare_fa_kwargs_from_position_ids``, or from
  ``cu_seq_lens_q`` when the batch passes them (packs without media, ``PackBatch.model_kwargs``);
* the vision tower calls it with ``cu_seq_lens_q`` (its windows and images): transformers hands
  those only to implementations whose name contains "flash" (``is_flash_attention_requested``,
  transformers/utils/generic.py), hence the name; without them it would loop over the windows
  one SDPA call each.

A batch of several rows (the padded baseline) is one sequence per row: with right padding and
causal attention a real token never sees a pad, so its output is exact and the pads are the
wasted work padding costs. Masks are never built for ``VARLEN`` (transformers' masking_utils
skips implementations it has no mask function for).
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.modeling_flash_attention_utils import prepare_fa_kwargs_from_position_ids

from vlmpack_offline.loader import varlen_attention

__all__ = ["VARLEN", "register", "use_attention", "hf_varlen_attention"]

VARLEN = "vlmpack_flash_varlen"  # "flash": transformers gives the vision tower's cu_seqlens only to such names


def _boundaries(batch: int, length: int, device, position_ids, cu_seq_lens_q, max_length_q) -> tuple[torch.Tensor, int]:
    if cu_seq_lens_q is not None:
        if batch != 1:
            raise ValueError(f"{VARLEN}: cu_seq_lens_q describes one packed row, got a batch of {batch}")
        return cu_seq_lens_q, int(max_length_q if max_length_q is not None else cu_seq_lens_q.diff().max())
    if batch == 1 and position_ids is not None and position_ids.ndim == 2:  # the text row of a pack (or one sample)
        (cu, _), (longest, _) = prepare_fa_kwargs_from_position_ids(position_ids)
        return cu, int(longest)
    return torch.arange(0, (batch + 1) * length, length, dtype=torch.int32, device=device), length


def hf_varlen_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    is_causal: bool | None = None,
    position_ids: torch.Tensor | None = None,
    cu_seq_lens_q: torch.Tensor | None = None,
    max_length_q: int | torch.Tensor | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function contract: ``[B, heads, S, D]`` in, ``([B, S, heads, D], None)`` out."""
    if dropout:
        raise ValueError(f"{VARLEN} has no attention dropout; the suite's configs set attention_dropout 0")
    batch, heads, length, dim = query.shape
    causal = getattr(module, "is_causal", True) if is_causal is None else is_causal
    cu, longest = _boundaries(batch, length, query.device, position_ids, cu_seq_lens_q, max_length_q)

    def flat(t: torch.Tensor) -> torch.Tensor:  # [B, h, S, D] -> [B * S, h, D]
        return t.transpose(1, 2).reshape(batch * length, t.shape[1], dim)

    out = varlen_attention(flat(query), flat(key), flat(value), cu, longest, causal=causal, scale=scaling)
    return out.reshape(batch, length, heads, dim), None


def register() -> str:
    """Make ``VARLEN`` a valid ``attn_implementation`` (idempotent); returns the name."""
    AttentionInterface.register(VARLEN, hf_varlen_attention)
    return VARLEN


def use_attention(model: torch.nn.Module, name: str) -> None:
    """Switch a built model's text and vision attention to ``name`` (every module reads its config per call)."""
    configs = [model.config, getattr(model.config, "text_config", None), getattr(model.config, "vision_config", None)]
    for config in (c for c in configs if c is not None):
        config._attn_implementation = name
