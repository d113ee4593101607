"""Models with linear-attention layers (Qwen3.5's Gated DeltaNet) never mix packed sub-samples silently.

A Gated DeltaNet layer runs a 4-tap causal convolution and then a recurrent delta rule; the 4D
block mask and restarting positions that separate sub-samples for softmax attention reach
neither. Shown on tiny random Qwen3.5 models (CPU, fp32): with the mask alone a sub-sample's
logits differ from running it alone. ``PackBatch.model_kwargs`` therefore passes
``cu_seq_lens_q/k`` (HF hands them to flash-linear-attention's delta rule) and ``seq_idx``
(HF hands it to causal-conv1d) for such models. Without those GPU packages (this machine) HF
refuses with its own error. With kernels that honour those two arguments, stood in for here
by HF's own reference functions run on each sub-sample (the kernels are CUDA / Triton), the
packed forward of a real pack from our encoder equals every sub-sample run alone.
"""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch
from transformers import Qwen3_5TextConfig
from transformers.models.qwen3_5 import modeling_qwen3_5
from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5ForCausalLM

from vlmpack_offline.loader import EncoderOptions, PackEncoder
from vlmpack_offline.loader.batch import PackBatch
from vlmpack_offline.loader.rope import RopeIndex
from vlmpack_offline.loader.vision_inputs import VisionInputs
from vlmpack_offline.packed_format import PackedSample, PackedSubSample
from vlmpack_offline.synthetic.processor_dir import build_processor_dir
from vlmpack_offline.synthetic.shards import image_bytes, video_bytes
from vlmpack_offline.synthetic.tiny_models import tiny_qwen_vl

TOL = 1e-4

HAS_KERNELS = all(importlib.util.find_spec(name) is not None for name in ("fla", "causal_conv1d"))


def _tiny() -> Qwen3_5ForCausalLM:
    config = Qwen3_5TextConfig(
        vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, linear_key_head_dim=16, linear_value_head_dim=16, linear_num_key_heads=2,
        linear_num_value_heads=4, layer_types=["linear_attention", "full_attention"], max_position_embeddings=512,
    )  # fmt: skip
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return Qwen3_5ForCausalLM(config).eval()


def _pack(a: torch.Tensor, b: torch.Tensor, *, linear_attention: bool) -> PackBatch:
    ids = torch.cat([a, b], dim=1)
    cu = torch.tensor([0, a.shape[1], ids.shape[1]], dtype=torch.int32)
    positions = torch.cat([torch.arange(a.shape[1]), torch.arange(b.shape[1])])[None]
    return PackBatch(
        pack_id=0, sample_ids=("a", "b"), input_ids=ids, labels=ids.clone(), position_ids=positions, cu_seqlens=cu,
        max_seqlen=int(max(a.shape[1], b.shape[1])), vision=VisionInputs({}),
        n_images_per_sample=torch.zeros(2, dtype=torch.long), n_videos_per_sample=torch.zeros(2, dtype=torch.long),
        linear_attention=linear_attention,
    )  # fmt: skip


def test_a_block_mask_alone_lets_a_linear_attention_layer_mix_sub_samples():
    model = _tiny()
    a, b = torch.randint(0, 1000, (1, 7)), torch.randint(0, 1000, (1, 5))
    kwargs = _pack(a, b, linear_attention=False).model_kwargs("sdpa", with_labels=False)
    assert "cu_seq_lens_q" not in kwargs
    with torch.no_grad():
        packed = model(**kwargs).logits
        alone = model(input_ids=b, use_cache=False).logits
    assert (packed[:, 7:] - alone).abs().max() > 1e-3  # the state of sub-sample a leaked into b


def test_model_kwargs_pass_the_boundaries_for_linear_attention_so_hf_separates_or_refuses():
    model = _tiny()
    a, b = torch.randint(0, 1000, (1, 7)), torch.randint(0, 1000, (1, 5))
    kwargs = _pack(a, b, linear_attention=True).model_kwargs("sdpa", with_labels=False)
    assert torch.equal(kwargs["cu_seq_lens_q"], torch.tensor([0, 7, 12], dtype=torch.int32))
    assert torch.equal(kwargs["seq_idx"], torch.tensor([[0] * 7 + [1] * 5], dtype=torch.int32))
    if not HAS_KERNELS:
        with pytest.raises(ValueError, match="can't keep packed sequences apart"):
            model(**kwargs)
        return
    with torch.no_grad():  # pragma: no cover - only where both kernel packages are installed
        packed = model(**kwargs).logits
        alone = torch.cat([model(input_ids=a, use_cache=False).logits, model(input_ids=b, use_cache=False).logits], 1)
    assert (packed - alone).abs().max() < 1e-4


@pytest.mark.parametrize(("model_type", "expected"), [("qwen3_5", True), ("qwen3_vl", False)])
def test_the_rope_index_knows_whether_the_folder_s_model_has_linear_attention(tmp_path, model_type, expected):
    folder = build_processor_dir(tmp_path / "proc", "qwen3_vl")
    (folder / "config.json").write_text(json.dumps({"model_type": model_type}))
    assert RopeIndex.from_processor_dir(folder, model_type=model_type).has_linear_attention is expected


def _spans(boundaries: torch.Tensor) -> list[tuple[int, int]]:
    return list(zip(boundaries[:-1].tolist(), boundaries[1:].tolist(), strict=True))


@pytest.fixture
def varlen_kernels(monkeypatch):
    """Stand-ins for causal-conv1d (``seq_idx``) and flash-linear-attention (``cu_seqlens``).

    Each runs HF's own reference function on every sub-sample the argument marks, which is
    what those kernels compute; without the argument, on the whole row. Sets which arguments
    they honour through the returned dict, so a test can show each one is needed.
    """
    conv, delta = modeling_qwen3_5.causal_conv1d_fn, modeling_qwen3_5.torch_chunk_gated_delta_rule
    honour = {"seq_idx": True, "cu_seqlens": True}

    def conv_fn(x, weight, bias=None, activation=None, seq_idx=None, **_):
        if seq_idx is None or not honour["seq_idx"]:
            return conv(x, weight, bias, activation=activation)
        counts = torch.bincount(seq_idx[0].long())
        bounds = torch.cat([counts.new_zeros(1), counts.cumsum(0)])
        return torch.cat([conv(x[..., s:e], weight, bias, activation=activation) for s, e in _spans(bounds)], -1)

    def delta_fn(query, key, value, g, beta, cu_seqlens=None, **kwargs):
        kwargs = {k: v for k, v in kwargs.items() if k in ("initial_state", "output_final_state", "use_qk_l2norm_in_kernel")}
        if cu_seqlens is None or not honour["cu_seqlens"]:
            return delta(query, key, value, g=g, beta=beta, **kwargs)
        outs = [delta(query[:, s:e], key[:, s:e], value[:, s:e], g=g[:, s:e], beta=beta[:, s:e], **kwargs)[0]
                for s, e in _spans(cu_seqlens)]  # fmt: skip
        return torch.cat(outs, dim=1), None

    monkeypatch.setattr(modeling_qwen3_5, "causal_conv1d_fn", conv_fn)
    monkeypatch.setattr(modeling_qwen3_5, "torch_chunk_gated_delta_rule", delta_fn)
    return honour


def _without_state_decay(model: torch.nn.Module) -> torch.nn.Module:
    """Random tiny layers forget their state within a few tokens; a trained one keeps it much longer."""
    with torch.no_grad():
        for module in model.modules():
            if hasattr(module, "A_log"):
                module.A_log.fill_(-10.0)
    return model


def test_with_kernels_that_take_both_boundaries_a_packed_text_forward_equals_each_sub_sample(varlen_kernels):
    model = _without_state_decay(_tiny())
    a, b = torch.randint(0, 1000, (1, 9)), torch.randint(0, 1000, (1, 6))
    kwargs = _pack(a, b, linear_attention=True).model_kwargs("sdpa", with_labels=False)
    with torch.no_grad():
        alone = torch.cat([model(input_ids=a, use_cache=False).logits, model(input_ids=b, use_cache=False).logits], 1)
        assert (model(**kwargs).logits - alone).abs().max() < TOL
        for missing in ("seq_idx", "cu_seqlens"):  # either boundary alone still lets a leak through
            varlen_kernels[missing] = False
            assert (model(**kwargs).logits[:, 9:] - alone[:, 9:]).abs().max() > 1e-3, missing
            varlen_kernels[missing] = True


def _turns(user: list[dict], answer: str) -> tuple[dict, ...]:
    return ({"role": "user", "content": user}, {"role": "assistant", "content": [{"type": "text", "text": answer}]})


def test_a_qwen3_5_pack_of_text_images_and_a_video_from_the_encoder_trains_as_each_sub_sample_alone(
    varlen_kernels, make_config, tmp_path
):
    folder = build_processor_dir(tmp_path / "proc", "qwen3_5", video=True)
    video = {"min_pixels": 4 * 32 * 32, "max_pixels": 16 * 32 * 32, "min_frames": 4, "fps": 2.0}
    config = make_config(wds_dir=tmp_path, processor_dir=folder, video=video)
    encoder = PackEncoder(config, EncoderOptions(check_lengths=False))
    subs = (
        _turns([{"type": "text", "text": "Say hello."}], "Hello!"),
        _turns([{"type": "image", "image": "m0.jpg"}, {"type": "text", "text": "What is it?"}], "A square."),
        _turns([{"type": "image", "image": "m1.png"}, {"type": "image", "image": "m2.jpg"}], "Two pictures."),
        _turns([{"type": "video", "video": "m3.mp4"}, {"type": "text", "text": "Describe."}], "It moves."),
    )
    media = {
        "m0.jpg": image_bytes(60, 44, seed=1), "m1.png": image_bytes(30, 90, fmt="PNG", seed=2),
        "m2.jpg": image_bytes(70, 70, seed=3), "m3.mp4": video_bytes(8, 8, 64, 48, seed=4),
    }  # fmt: skip
    samples = tuple(
        PackedSubSample(id=f"s{i}", token_len=0, media_tokens=0, messages=m) for i, m in enumerate(subs)
    )
    pack = PackedSample(pack_id=1, capacity=8192, split="train", samples=samples)
    batch = encoder.encode(pack, media)
    assert batch.linear_attention and batch.n_videos_per_sample.tolist() == [0, 0, 0, 1]
    model = _without_state_decay(tiny_qwen_vl("qwen3_5").eval())
    with torch.no_grad():
        packed = model(**batch.model_kwargs("sdpa")).logits
        for index, (start, end) in enumerate(_spans(batch.cu_seqlens)):
            single = encoder.encode(PackedSample(pack_id=0, capacity=8192, split="train", samples=(samples[index],)), media)
            alone = model(
                input_ids=single.input_ids, mm_token_type_ids=encoder.rope.mm_token_type_ids(single.input_ids),
                **single.vision,
            ).logits  # no positions, no mask, no boundaries: the model's own rope index on one sample
            assert torch.equal(batch.input_ids[:, start:end], single.input_ids)
            assert (packed[:, start:end] - alone).abs().max() < TOL, f"sub-sample {index}"
        for missing in ("seq_idx", "cu_seqlens"):  # each boundary is needed
            varlen_kernels[missing] = False
            assert (model(**batch.model_kwargs("sdpa")).logits - packed).abs().max() > 1e-3, missing
            varlen_kernels[missing] = True
