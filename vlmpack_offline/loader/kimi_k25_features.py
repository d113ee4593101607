"""Kimi-K2.5's vision features chunk by chunk, for packs with videos its HF forward cannot take itself.

Kimi's processor cuts a video into chunks of ``temporal_patch_size`` (4) frames, one ``video_grid_thw``
row ``[t, h, w]`` each, and writes ``h * w / merge**2`` placeholders per chunk (the vision tower pools a
chunk's ``t`` frames into one). transformers 5.23's ``Kimi_K25Model.get_video_features`` splits the
pooled features by ``t * h * w / merge**2`` per row instead, so any chunk of more than one frame raises in
``torch.split``, and one tower call over chunks of 4 and fewer frames raises in its temporal merge index.
``kimi_k25_model_kwargs`` hands the model its own features instead (``mm_encoder_outputs``): the vision
tower and projector run once for the images (as ``get_image_features`` does) and once per run of video
chunks with the same frame count (the tower's attention never crosses a chunk), split by what the
pooling leaves::

    video_grid_thw [[4, 8, 12], [4, 8, 12], [2, 8, 12]]  ->  3 chunks of 8 * 12 / 4 = 24 features
                                                           ->  72 rows for the 72 <|media_pad|> video tokens

    kwargs = kimi_k25_model_kwargs(model, batch.to("cuda"), "flash_attention_2")
    loss = model(**kwargs).loss

``tests/test_kimi_k25_packed_forward.py`` checks a packed forward through it against each sub-sample run
alone with the tower called chunk by chunk, and a one-frame chunk (which HF's split handles) against HF's
own ``get_video_features``. Once transformers splits by the pooled size, ``batch.model_kwargs`` is enough.
"""

from __future__ import annotations

from .batch import PackBatch

__all__ = ["kimi_k25_encoder_outputs", "kimi_k25_model_kwargs"]

def kimi_k25_encoder_outputs(model, vision) -> dict:
    """``mm_encoder_outputs`` for ``Kimi_K25ForConditionalGeneration`` (or its ``Kimi_K25Model``) from
    the loader's vision fields: images as ``get_image_features`` computes them, videos chunk by chunk."""
    from transformers.modeling_outputs import BaseModelOutputWithPooling

    inner = getattr(model, "model", model)
    out = {}
    if vision.get("pixel_values") is not None:
        out["image"] = inner.get_image_features(vision["pixel_values"], vision["image_grid_thw"], return_dict=True)
    if vision.get("pixel_values_videos") is not None:
        pixels, grids = vision["pixel_values_videos"], vision["video_grid_thw"]
        merge = inner.vision_tower.merge_kernel_size[0] * inner.vision_tower.merge_kernel_size[1]
        chunks, start = [], 0
        for run in _equal_frame_runs(grids):  # one tower call per run of chunks with the same frame count
            end = start + int(run.prod(-1).sum())
            pooled = inner.mm_projector(inner.vision_tower(pixels[start:end], grid_thw=run).pooler_output).squeeze(1)
            chunks.extend(pooled.split((run[:, 1] * run[:, 2] // merge).tolist()))  # t frames pool into one
            start = end
        if start != len(pixels):
            raise ValueError(f"video_grid_thw covers {start} patch rows, pixel_values_videos holds {len(pixels)}")
        out["video"] = BaseModelOutputWithPooling(pooler_output=tuple(chunks))
    return out


def _equal_frame_runs(grids):
    """``video_grid_thw`` cut into runs of consecutive rows with the same ``t``: the tower's temporal merge
    index stacks a call's chunks, so chunks of 4 and of fewer frames cannot share a call (an hour-long video is
    1800 chunks of 4 and one shorter: two calls, not 1801)."""
    cuts = [0, *(i for i in range(1, len(grids)) if grids[i, 0] != grids[i - 1, 0]), len(grids)]
    return [grids[a:b] for a, b in zip(cuts[:-1], cuts[1:], strict=True)]


def kimi_k25_model_kwargs(
    model, batch: PackBatch, attn_implementation: str = "sdpa", *, with_labels: bool = True
) -> dict:
    """``batch.model_kwargs(...)`` with the vision tensors replaced by ``mm_encoder_outputs`` (HF takes one
    or the other, never both). Gradients flow through the vision tower as in the model's own forward."""
    kwargs = batch.model_kwargs(attn_implementation, with_labels=with_labels)
    vision = {name: kwargs.pop(name) for name in batch.vision}  # the fields model_kwargs took from it
    if vision:
        kwargs["mm_encoder_outputs"] = kimi_k25_encoder_outputs(model, vision)
    return kwargs
