"""A packed Gemma3 forward equals each sub-sample run alone, for text packs; what is not equal yet is stated.

Gemma3's text model alternates sliding-window and full attention layers. A 4D block-causal
mask replaces HF's own mask, so it widens the sliding layers to the whole sub-sample:
``PackBatch.model_kwargs`` leaves it out for such models and HF builds the block-diagonal,
windowed mask from the restarting ``position_ids``. Tiny random Gemma3 (hidden 64, window 8,
CPU, fp32, sdpa), sub-samples longer than the window, built by the real loader from a Gemma3
processor folder; the reference runs each sub-sample alone with only its ``input_ids``.

Not covered: packs with images. Gemma3 lets the tokens of one image attend to each other
both ways (``token_type_ids``); with that overlay a packed forward of this transformers
version differs from the sub-samples run alone, so image packs are not claimed equal.
"""

from __future__ import annotations

import pytest
import torch
from transformers import AutoProcessor, Gemma3Config, Gemma3ForConditionalGeneration

from vlmpack_offline.config import config_from_dict
from vlmpack_offline.loader import EncoderOptions, PackEncoder
from vlmpack_offline.loader.attention import block_causal_mask
from vlmpack_offline.packed_format import PackedSample, PackedSubSample
from vlmpack_offline.synthetic.processor_dir import build_processor_dir

TOL = 1e-4


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    folder = build_processor_dir(tmp_path_factory.mktemp("gemma3_fwd"), "gemma3")
    tokenizer = AutoProcessor.from_pretrained(folder).tokenizer
    ids = tokenizer.convert_tokens_to_ids
    config = Gemma3Config(
        text_config=dict(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, sliding_window=8,
                         layer_types=["sliding_attention", "full_attention"], max_position_embeddings=4096),
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                           image_size=896, patch_size=14),
        mm_tokens_per_image=256, boi_token_index=ids("<start_of_image>"), eoi_token_index=ids("<end_of_image>"),
        image_token_index=ids("<image_soft_token>"),
    )  # fmt: skip
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = Gemma3ForConditionalGeneration(config).eval()
    loader_config = config_from_dict(
        {"model": {"processor_kwargs": {"pretrained_model_name_or_path": str(folder)}}}, source="test"
    )
    return model, PackEncoder(loader_config, EncoderOptions(check_lengths=False))


def _text_pack() -> PackedSample:
    turns = [("Say hello to everyone in this room, please.", "Hello there, everyone in the room!"),
             ("Count from one to ten.", "One, two, three, four, five, six, seven, eight, nine, ten."),
             ("Name a colour.", "Blue is a colour that many people like a lot.")]  # fmt: skip
    samples = tuple(
        PackedSubSample(id=f"s{i}", token_len=0, media_tokens=0, messages=(
            {"role": "user", "content": [{"type": "text", "text": question}]},
            {"role": "assistant", "content": [{"type": "text", "text": answer}]},
        ))  # fmt: skip
        for i, (question, answer) in enumerate(turns)
    )
    return PackedSample(pack_id=0, capacity=4096, split="train", samples=samples)


def test_a_text_pack_forward_equals_each_sub_sample_alone(setup):
    model, encoder = setup
    batch = encoder.encode(_text_pack(), {})
    assert batch.sliding_window and min(torch.diff(batch.cu_seqlens).tolist()) > 8  # longer than the window
    kwargs = batch.model_kwargs("sdpa", with_labels=False)
    assert "attention_mask" not in kwargs
    bounds = batch.cu_seqlens.tolist()
    with torch.no_grad():
        packed = model(**kwargs).logits
        alone = torch.cat([model(input_ids=batch.input_ids[:, s:e], use_cache=False).logits
                           for s, e in zip(bounds[:-1], bounds[1:], strict=True)], dim=1)  # fmt: skip
        widened = model(**kwargs, attention_mask=block_causal_mask(batch.cu_seqlens)).logits
    assert (packed - alone).abs().max() < TOL
    assert (widened - alone).abs().max() > 1e-3  # why the 4D mask is left out for sliding-window models
