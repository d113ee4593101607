"""A hand-made text pack whose every value can be read off by hand, for adapter tests."""

from __future__ import annotations

import torch

from vlmpack_offline.loader import PackBatch, VisionInputs


def text_pack(lengths: list[int]) -> PackBatch:
    """Token ids 1.. in order, every token after a sub-sample's first one scored, positions restarting per
    sub-sample (``lengths`` gives each sub-sample's tokens)."""
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    ids = torch.arange(1, sum(lengths) + 1)[None]
    labels = ids.clone()
    labels[0, cu[:-1].long()] = -100
    positions = torch.cat([torch.arange(n) for n in lengths])[None]
    return PackBatch(pack_id=7, sample_ids=tuple(f"s{i}" for i in range(len(lengths))), input_ids=ids,
                     labels=labels, position_ids=positions, cu_seqlens=cu, max_seqlen=max(lengths),
                     vision=VisionInputs(), n_images_per_sample=torch.zeros(len(lengths), dtype=torch.long),
                     n_videos_per_sample=torch.zeros(len(lengths), dtype=torch.long))
