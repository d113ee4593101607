"""Varlen attention over one pack: each sub-sample attends only to itself.

``cu_seqlens`` (int32, ``[n+1]``) marks where each sub-sample starts::

    tokens      a a a b b c c c c
    cu_seqlens  [0, 3, 5, 9]         max_seqlen 4

Three backends give the same result (within the dtype's tolerance):

* ``flash_attn_varlen_func`` when the ``flash-attn`` package imports (GPU);
* ``torch.nn.attention.varlen.varlen_attn`` on CUDA (PyTorch's own flash kernel);
* SDPA with a block-diagonal causal mask everywhere else (CPU, tests).

``block_causal_mask`` builds the 4D boolean mask HF's ``sdpa`` / ``eager``
attention accept as ``attention_mask`` (``True`` = may attend), which is how
an HF model runs a pack on CPU.
"""

from __future__ import annotations

import functools
import importlib.util
import inspect

import torch
import torch.nn.functional as F

__all__ = ["varlen_attention", "varlen_backend", "segment_ids", "block_causal_mask", "layer_type_masks"]


def _flash_attn_func():
    if importlib.util.find_spec("flash_attn") is None:
        return None
    try:
        from flash_attn import flash_attn_varlen_func
    except ImportError:  # installed but built for another torch/CUDA: fall back, don't crash
        return None
    return flash_attn_varlen_func


def _torch_varlen_func():
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    return varlen_attn


@functools.cache
def _varlen_keywords(varlen) -> frozenset[str]:
    """The keywords this torch's ``varlen_attn`` takes (its signature moved between releases: 2.10 has
    ``is_causal`` and no ``scale``; 2.12 ``window_size``, ``scale`` and ``enable_gqa``), read from the function
    rather than the version number."""
    return frozenset(inspect.signature(varlen).parameters)


def varlen_backend(device: torch.device | str) -> str:
    """Which backend ``varlen_attention`` uses for tensors on ``device``: ``flash_attn`` | ``torch_varlen`` | ``sdpa``."""
    if torch.device(device).type == "cuda":
        if _flash_attn_func() is not None:
            return "flash_attn"
        if _torch_varlen_func() is not None:
            return "torch_varlen"
    return "sdpa"


def segment_ids(cu_seqlens: torch.Tensor) -> torch.Tensor:
    """``[S]`` sub-sample index of every token: ``[0,3,5]`` -> ``[0,0,0,1,1]``."""
    lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).long()
    return torch.repeat_interleave(torch.arange(len(lengths), device=cu_seqlens.device), lengths)


def block_causal_mask(cu_seqlens: torch.Tensor, *, causal: bool = True) -> torch.Tensor:
    """4D bool mask ``[1, 1, S, S]``: token i may attend to token j iff same sub-sample (and j <= i if causal)."""
    seg = segment_ids(cu_seqlens)
    mask = seg[:, None] == seg[None, :]
    if causal:
        n = seg.shape[0]
        mask &= torch.ones(n, n, dtype=torch.bool, device=seg.device).tril()
    return mask[None, None]


def layer_type_masks(
    cu_seqlens: torch.Tensor, *, sliding_window: int, token_type_ids: torch.Tensor | None = None
) -> dict[str, torch.Tensor]:
    """``{"full_attention": M, "sliding_attention": M}`` 4D bool masks of a pack, for models that take one per layer type.

    Within each sub-sample, as HF builds them for the sub-sample alone (Gemma3's
    ``create_masks_for_vision_model``): full = causal OR same image block; sliding = that AND
    ``j > i - sliding_window``. An image block is a run of tokens with ``token_type_ids == 1``;
    its tokens see each other both ways. Across sub-samples nothing is visible. (HF's own
    packed-sequence path gets the sliding layers wrong when image blocks are present: it reads
    the block ids at the remapped positions.)
    """
    same = block_causal_mask(cu_seqlens, causal=False)[0, 0]
    n = same.shape[0]
    index = torch.arange(n, device=cu_seqlens.device)
    visible = index[None, :] <= index[:, None]  # causal
    if token_type_ids is not None:
        image = token_type_ids.reshape(-1) == 1
        starts = image & ~torch.nn.functional.pad(image, (1, 0))[:-1]
        block = torch.where(image, torch.cumsum(starts.long(), 0) - 1, -1)
        visible = visible | ((block[:, None] == block[None, :]) & (block[:, None] >= 0))
    full = visible & same
    window = index[None, :] > index[:, None] - sliding_window
    return {"full_attention": full[None, None], "sliding_attention": (full & window)[None, None]}


def varlen_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens: torch.Tensor,
    max_seqlen: int,
    causal: bool = True,
    *,
    scale: float | None = None,
) -> torch.Tensor:
    """Attention for packed ``q, k, v`` of shape ``[S, heads, head_dim]``; returns ``[S, heads, head_dim]``.

    ``k``/``v`` may have fewer heads than ``q`` (grouped-query attention).
    """
    cu_seqlens = cu_seqlens.to(device=q.device, dtype=torch.int32)
    backend = varlen_backend(q.device)
    if backend == "flash_attn":
        flash = _flash_attn_func()
        return flash(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, causal=causal, softmax_scale=scale)
    if backend == "torch_varlen":
        varlen = _torch_varlen_func()
        takes = _varlen_keywords(varlen)
        kwargs: dict = {}
        if scale is not None and "scale" in takes:
            kwargs["scale"] = scale
        elif scale is not None:  # torch 2.10's takes none: its default 1/sqrt(head_dim), the queries rescaled
            q = q * (scale * q.shape[-1] ** 0.5)
        if "window_size" in takes:  # torch >= 2.12; before it, is_causal
            kwargs["window_size"] = (-1, 0) if causal else (-1, -1)
        else:
            kwargs["is_causal"] = causal
        if k.shape[1] != q.shape[1]:
            if "enable_gqa" in takes:
                kwargs["enable_gqa"] = True
            else:  # a torch whose varlen_attn takes no enable_gqa: every query head gets its key / value head
                k, v = (t.repeat_interleave(q.shape[1] // t.shape[1], dim=1) for t in (k, v))
        return varlen(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, **kwargs)
    mask = block_causal_mask(cu_seqlens, causal=causal)
    out = F.scaled_dot_product_attention(
        q.transpose(0, 1)[None],
        k.transpose(0, 1)[None],
        v.transpose(0, 1)[None],
        attn_mask=mask,
        scale=scale,
        enable_gqa=k.shape[1] != q.shape[1],
    )
    return out[0].transpose(0, 1)
