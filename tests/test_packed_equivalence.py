"""The loader's proof: a packed forward equals running each sub-sample alone.

A tiny random Qwen2-VL / Qwen2.5-VL / Qwen3-VL (built from a config: hidden 64, 2 layers, no
downloaded weights, vision patch/merge matching the processor directory) runs
once on a pack of text-only, image, multi-image and video sub-samples (CPU,
fp32, ``sdpa`` with the 4D block-causal mask) and once per sub-sample alone with
nothing from the loader but its ``input_ids``/labels/pixels: the model computes
its own rope index there. Logits and summed loss must agree (max abs diff < 1e-4).
"""

from __future__ import annotations

import pytest
import torch

from vlmpack_offline.loader import EncoderOptions, PackEncoder
from vlmpack_offline.packed_format import PackedSample, PackedSubSample
from vlmpack_offline.synthetic.processor_dir import build_processor_dir
from vlmpack_offline.synthetic.shards import image_bytes, video_bytes
from vlmpack_offline.synthetic.tiny_models import tiny_qwen_vl

TOL = 1e-4
TINY_VIDEO = {"min_pixels": 4 * 28 * 28, "max_pixels": 16 * 28 * 28, "min_frames": 4, "fps": 2.0}


def _turns(user: list[dict], answer: str) -> tuple[dict, ...]:
    return (
        {"role": "user", "content": user},
        {"role": "assistant", "content": [{"type": "text", "text": answer}]},
    )


def _mixed_pack() -> tuple[PackedSample, dict[str, bytes]]:
    text = [{"type": "text", "text": "Say hello."}]
    subs = (
        _turns(text, "Hello!"),
        _turns([{"type": "image", "image": "m0000.jpg"}, {"type": "text", "text": "What is it?"}], "A square."),
        _turns(
            [
                {"type": "image", "image": "m0001.png"},
                {"type": "text", "text": "and"},
                {"type": "image", "image": "m0002.jpg"},
            ],
            "Two pictures.",
        ),
        _turns([{"type": "video", "video": "m0003.mp4"}, {"type": "text", "text": "Describe."}], "It moves."),
    )
    media = {
        "m0000.jpg": image_bytes(60, 44, seed=1),
        "m0001.png": image_bytes(30, 90, fmt="PNG", seed=2),
        "m0002.jpg": image_bytes(70, 70, seed=3),
        "m0003.mp4": video_bytes(8, 8, 64, 48, seed=4),
    }
    samples = tuple(
        PackedSubSample(id=f"s{i}", token_len=0, media_tokens=0, messages=messages) for i, messages in enumerate(subs)
    )
    return PackedSample(pack_id=7, capacity=8192, split="train", samples=samples), media


def _model(family: str):
    return tiny_qwen_vl(family, "sdpa", seed=0).eval()


def _summed_loss(loss: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """HF returns the mean over scored (shifted) labels; times their count gives the sum."""
    return loss * (labels[..., 1:] != -100).sum()


@pytest.mark.parametrize(
    "family",
    ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"],
)
def test_packed_forward_equals_each_sub_sample_alone(family, request, make_config, tmp_path):
    if family == "qwen2_vl":
        processor_dir = build_processor_dir(tmp_path / "proc", "qwen2_vl")
    else:
        processor_dir = request.getfixturevalue("qwen25_processor_dir" if family == "qwen2_5_vl" else "qwen3_processor_dir")
    config = make_config(wds_dir=tmp_path, processor_dir=processor_dir, video=TINY_VIDEO)
    encoder = PackEncoder(config, EncoderOptions(check_lengths=False))
    pack, media = _mixed_pack()
    batch = encoder.encode(pack, media)
    assert batch.n_images_per_sample.tolist() == [0, 1, 2, 0]
    assert batch.n_videos_per_sample.tolist() == [0, 0, 0, 1]
    model = _model(family)

    with torch.no_grad():
        packed = model(**batch.model_kwargs("sdpa"))
        packed_sum = _summed_loss(packed.loss, batch.labels)
        # the processor dirs carry the published (marker-free) template: every sub-sample still learns
        assert torch.isfinite(packed.loss)
        for start, end in zip(batch.cu_seqlens[:-1].tolist(), batch.cu_seqlens[1:].tolist(), strict=True):
            assert (batch.labels[0, start:end] != -100).any()
        by_positions = batch.model_kwargs("sdpa")
        del by_positions["attention_mask"]  # HF derives the block mask from the text row of position_ids
        assert (model(**by_positions).logits - packed.logits).abs().max().item() < TOL
        alone_sum = torch.zeros(())
        for index, sub in enumerate(pack.samples):
            single = encoder.encode(PackedSample(pack_id=0, capacity=8192, split="train", samples=(sub,)), media)
            alone = model(
                input_ids=single.input_ids,
                labels=single.labels,
                mm_token_type_ids=encoder.rope.mm_token_type_ids(single.input_ids),
                **single.vision,
            )  # no position_ids, no mask: the model's own rope index and causal mask
            start, end = int(batch.cu_seqlens[index]), int(batch.cu_seqlens[index + 1])
            assert torch.equal(batch.input_ids[:, start:end], single.input_ids)
            diff = (packed.logits[:, start:end] - alone.logits).abs().max().item()
            assert diff < TOL, f"{family} sub-sample {index}: logits differ by {diff}"
            alone_sum = alone_sum + _summed_loss(alone.loss, single.labels)
    assert abs(packed_sum.item() - alone_sum.item()) < TOL * max(1.0, abs(alone_sum.item()))


def test_dummy_image_changes_no_logit_or_loss_of_a_text_pack(make_config, tmp_path):
    config = make_config(wds_dir=tmp_path)
    pack, media = _mixed_pack()
    text_pack = PackedSample(pack_id=1, capacity=8192, split="train", samples=pack.samples[:1])
    plain = PackEncoder(config, EncoderOptions(check_lengths=False)).encode(text_pack, media)
    dummy = PackEncoder(config, EncoderOptions(check_lengths=False, dummy_image_for_text_packs=True)).encode(
        text_pack, media
    )
    assert dummy.n_dummy_segments == 1 and "pixel_values" in dummy.vision and "pixel_values" not in plain.vision
    assert dummy.seq_len == plain.seq_len + 1  # one <|image_pad|> token: S <= capacity + 1
    assert dummy.n_images_per_sample.tolist() == [0, 1]
    model = _model("qwen2_5_vl")
    with torch.no_grad():
        a = model(**plain.model_kwargs("sdpa"))
        b = model(**dummy.model_kwargs("sdpa"))
    assert (a.logits - b.logits[:, : plain.seq_len]).abs().max().item() < TOL
    assert abs(_summed_loss(a.loss, plain.labels).item() - _summed_loss(b.loss, dummy.labels).item()) < TOL
