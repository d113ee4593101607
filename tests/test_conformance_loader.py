"""The loader gives every packed sub-sample what the real processor gives it alone, for every table row with a
``loader`` (``tests/_families_table.py``).

The pipeline runs for real (scan -> bucket -> plan -> write) on a generated dataset with the row's processor
folder; the loader (``PackEncoder.from_packed_dir``) turns every pack into a ``PackBatch``. The oracle is the
row's real processor (transformers' own class from the folder) run on each sub-sample alone: its own chat
template's text, the decoded images, and for videos every decoded frame with its ``VideoMetadata`` (the
processor samples them itself). Per segment:

- it has the plan's length, its ``input_ids`` equal the oracle's (and ``token_type_ids`` where the model takes
  them), and its labelled tokens decode to the assistant answers, each as the row's template ends a turn;
- positions: the model's own ``get_rope_index`` on the oracle's output where the row names one, else 1-D
  positions restarting at 0;

per pack, the vision inputs are exactly the row's fields, each the sub-samples' concatenated (the same image
processor runs on both sides, so exactly equal). A row whose packs hold videos its oracle cannot process
without torchvision (GLM) expects one clear error for those packs there. Minima on what was seen (images, packs
with images, the row's own counts) make a check that skipped everything fail.
"""

from __future__ import annotations

import pytest
import torch
from _conformance import Row, every_frame
from _families_table import ROWS
from _family_kit import packed_dataset, processor_on, read_packs, sub_sample_images
from transformers.utils import is_torchvision_available

from vlmpack_offline.loader import PackEncoder

pytestmark = pytest.mark.slow

CASES = [pytest.param(r, layout, marks=[pytest.mark.torchvision] if r.torchvision else [], id=f"{r.id}-{layout}")
         for r in ROWS if r.loader for layout in r.loader.layouts]  # fmt: skip


def _has_video(sub) -> bool:
    return any(isinstance(item, dict) and item.get("type") == "video" for m in sub.messages for item in m["content"])


def _oracle_on(r: Row, oracle, sub, media) -> tuple[list, dict]:
    """(its images, the oracle's output) for one sub-sample alone; videos as every frame + metadata."""
    if r.videos != "every_frame" or not _has_video(sub):
        return processor_on(oracle, sub, media)
    parts = [i["video"] for m in sub.messages for i in m["content"] if isinstance(i, dict) and i.get("type") == "video"]
    decoded = [every_frame(media[part]) for part in parts]
    images = sub_sample_images(sub, media)
    text = oracle.apply_chat_template(list(sub.messages), tokenize=False)
    return images, oracle(text=[text], images=images or None, videos=[f for f, _ in decoded],
                          video_metadata=[m for _, m in decoded], return_tensors="pt")  # fmt: skip


def _answers(sub) -> list[str]:
    return [m["content"] if isinstance(m["content"], str) else "".join(i["text"] for i in m["content"])
            for m in sub.messages if m["role"] == "assistant"]  # fmt: skip


@pytest.mark.parametrize(("r", "layout"), CASES)
def test_every_pack_equals_the_real_processor_on_each_sub_sample(tmp_path, r: Row, layout: str):
    spec = r.loader
    packed_dir, folder = packed_dataset(tmp_path, r.model_type, layout, seed=spec.seed,
                                        max_token_len=spec.max_token_len, videos=spec.videos)  # fmt: skip
    encoder = PackEncoder.from_packed_dir(packed_dir, folder)
    oracle = r.oracle(folder)
    rope = spec.rope(folder) if spec.rope else None
    seen = {"images": 0, "packs_with_images": 0, "video_packs": 0}
    for pack, media in read_packs(packed_dir):
        if r.videos == "elsewhere" and any(_has_video(sub) for sub in pack.samples):
            seen["video_packs"] += 1  # counted; their tensors need the video processor (the row's video checks)
            if not is_torchvision_available():  # a clear error, not wrong tensors
                with pytest.raises(ValueError, match="needs torchvision"):
                    encoder.encode(pack, media)
            continue
        batch = encoder.encode(pack, media)
        bounds = batch.cu_seqlens.tolist()
        parts: dict[str, list] = {}
        for index, sub in enumerate(pack.samples):
            images, expected = _oracle_on(r, oracle, sub, media)
            start, end = bounds[index], bounds[index + 1]
            assert end - start == sub.token_len  # the plan's length
            assert torch.equal(batch.input_ids[0, start:end], expected["input_ids"][0])
            if spec.token_type_ids:
                assert torch.equal(batch.token_type_ids[0, start:end], expected["token_type_ids"][0])
            positions = None
            if rope is not None:
                positions = rope(expected)
                assert positions.shape == (3, 1, end - start)
                assert torch.equal(batch.position_ids[..., start:end], positions)
            for name in spec.fields:
                if name in expected:
                    parts.setdefault(name, []).append(expected[name])
            seen["images"] += len(images)
            for name, hits in (spec.count(images, expected, positions) if spec.count else {}).items():
                seen[name] = seen.get(name, 0) + hits
            labels = batch.labels[0, start:end]
            learned = oracle.tokenizer.decode(batch.input_ids[0, start:end][labels != -100])
            ends = [r.answer_end.format(answer=a) for a in _answers(sub)]
            assert learned == spec.turns_joined_by.join(ends)
        assert set(batch.vision) == set(parts)  # nothing else is a model input (Gemma3's num_crops is not)
        for name, tensors in parts.items():
            assert torch.equal(batch.vision[name], torch.cat(tensors)), name
        seen["packs_with_images"] += "pixel_values" in parts
        if not spec.token_type_ids:
            assert batch.token_type_ids is None
        if rope is None:
            assert batch.position_ids.shape == (1, batch.seq_len)  # 1-D positions, restarting per segment
            assert torch.equal(batch.position_ids, batch.text_position_ids())
    assert all(seen.get(name, 0) >= n for name, n in spec.at_least.items()), seen
