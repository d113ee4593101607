"""varlen_attention and the block mask: each sub-sample attends only to itself, causally."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from vlmpack_offline.loader import block_causal_mask, varlen_attention, varlen_backend
from vlmpack_offline.loader.media_processor import MediaProcessor


def test_block_causal_mask_is_block_diagonal_and_causal():
    mask = block_causal_mask(torch.tensor([0, 2, 5], dtype=torch.int32))[0, 0]
    expected = torch.tensor(
        [
            [1, 0, 0, 0, 0],
            [1, 1, 0, 0, 0],
            [0, 0, 1, 0, 0],
            [0, 0, 1, 1, 0],
            [0, 0, 1, 1, 1],
        ],
        dtype=torch.bool,
    )
    assert torch.equal(mask, expected)


def test_cpu_varlen_attention_equals_attention_per_sub_sample():
    torch.manual_seed(0)
    lengths = [3, 7, 1, 5]
    q, k, v = (torch.randn(sum(lengths), 4, 8) for _ in range(3))
    k, v = k[:, :2], v[:, :2]  # grouped-query: 2 kv heads for 4 query heads
    cu = torch.tensor(np.cumsum([0, *lengths]), dtype=torch.int32)
    assert varlen_backend("cpu") == "sdpa"
    out = varlen_attention(q, k, v, cu, max(lengths))
    for start, end in zip(cu[:-1].tolist(), cu[1:].tolist(), strict=True):
        ref = F.scaled_dot_product_attention(
            q[start:end].transpose(0, 1), k[start:end].transpose(0, 1).repeat_interleave(2, 0),
            v[start:end].transpose(0, 1).repeat_interleave(2, 0), is_causal=True,
        ).transpose(0, 1)  # fmt: skip
        assert (out[start:end] - ref).abs().max() < 1e-5


def _torch_2_10_varlen_attn(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, is_causal=False, return_aux=None):
    """torch 2.10's ``varlen_attn`` signature (no ``scale``, ``window_size`` or ``enable_gqa``: equal heads only),
    computed per segment with its default scale."""
    assert key.shape[1] == query.shape[1], "this varlen_attn takes no grouped-query keys"
    out = torch.empty_like(query)
    for start, end in zip(cu_seq_q[:-1].tolist(), cu_seq_q[1:].tolist(), strict=True):
        out[start:end] = F.scaled_dot_product_attention(
            *(t[start:end].transpose(0, 1) for t in (query, key, value)), is_causal=is_causal).transpose(0, 1)
    return out


def test_an_older_torch_varlen_signature_gets_the_same_attention(monkeypatch):
    """A device's torch may predate ``varlen_attn``'s ``scale`` / ``window_size`` / ``enable_gqa``: the call adapts
    to the signature it finds (grouped-query heads repeated, the scale folded into the queries)."""
    from vlmpack_offline.loader import attention

    monkeypatch.setattr(attention, "varlen_backend", lambda device: "torch_varlen")
    monkeypatch.setattr(attention, "_torch_varlen_func", lambda: _torch_2_10_varlen_attn)
    torch.manual_seed(1)
    lengths = [4, 2, 6]
    q, k, v = (torch.randn(sum(lengths), 4, 8) for _ in range(3))
    k, v = k[:, :2], v[:, :2]
    cu = torch.tensor(np.cumsum([0, *lengths]), dtype=torch.int32)
    for causal in (True, False):
        out = attention.varlen_attention(q, k, v, cu, max(lengths), causal=causal, scale=0.3)
        for start, end in zip(cu[:-1].tolist(), cu[1:].tolist(), strict=True):
            ref = F.scaled_dot_product_attention(
                q[start:end].transpose(0, 1), k[start:end].transpose(0, 1).repeat_interleave(2, 0),
                v[start:end].transpose(0, 1).repeat_interleave(2, 0), is_causal=causal, scale=0.3,
            ).transpose(0, 1)  # fmt: skip
            assert (out[start:end] - ref).abs().max() < 1e-5


def test_video_patches_of_two_identical_frames_equal_the_image_patches(qwen25_processor_dir):
    processor = MediaProcessor.from_processor_dir(qwen25_processor_dir)
    rng = np.random.default_rng(0)
    frame = rng.integers(0, 255, (56, 84, 3), dtype=np.uint8)
    image = processor.image_processor(images=[frame], return_tensors="pt")
    video = processor.frames(np.stack([frame, frame]))
    assert torch.equal(video["video_grid_thw"], image["image_grid_thw"])
    assert torch.equal(video["pixel_values_videos"], image["pixel_values"])


def test_video_patches_put_consecutive_frames_on_the_temporal_axis(qwen25_processor_dir):
    processor = MediaProcessor.from_processor_dir(qwen25_processor_dir)
    rng = np.random.default_rng(1)
    frames = rng.integers(0, 255, (3, 28, 56, 3), dtype=np.uint8)  # 3 frames: the last is repeated to 4
    video = processor.frames(frames)
    assert video["video_grid_thw"].tolist() == [[2, 2, 4]]
    per_frame = [processor.image_processor(images=[f], do_resize=False, return_tensors="pt")["pixel_values"] for f in frames]
    rows = video["pixel_values_videos"].view(2, 8, 3, 2, 14, 14)  # (t, patches, C, temporal, p, p)
    for group, (a, b) in enumerate([(0, 1), (2, 2)]):
        assert torch.equal(rows[group, :, :, 0], per_frame[a].view(8, 3, 2, 14, 14)[:, :, 0])
        assert torch.equal(rows[group, :, :, 1], per_frame[b].view(8, 3, 2, 14, 14)[:, :, 0])
