"""The loader serves the 2026 processor families exactly: inputs, positions and a packed forward per sub-sample.

For each model type without a hand-written module (``FAMILIES``: Gemma 4, ERNIE-4.5-VL, Qwen3-Omni, ...), one
pack of three sub-samples (text, one image, two images; with a video where the family takes video) goes
through the real loader: ``PackEncoder`` on the folder ``synthetic/folder_<type>`` builds, whose
``config.json`` is the tiny model's own. Each sub-sample is compared with the oracles, run on it alone:

- (a) inputs: the real processor class (``AutoProcessor``; in the core env the class's own image processor and
  tokenizer, ``_family_kit.images_only``) on the sub-sample's text (its own ``apply_chat_template``) and media
  (images as opened; every decoded frame of a video with its ``VideoMetadata``, the processor sampling them by
  its own rule): ``input_ids``, every per-token field (``mm_token_type_ids``, ``moe_mm_token_type_ids``) and
  every media field the model's forward takes (pixel tensors, grids, Qwen-Omni's ``video_second_per_grid``,
  Gemma 4's ``image_position_ids``), concatenated over the pack; the labels score the answer and nothing
  of the prompt;
- (b) positions: the model's own ``get_rope_index`` on the processor's output, ``[A, 1, L]`` (never 1-D for a
  model with one), else ``arange(L)``;
- (c) a tiny random model (the folder's config with small sizes, fp32, sdpa, eval, seed 0): the packed forward
  (``PackBatch.model_kwargs``) equals each sub-sample's forward on the processor's output alone, where the model
  computes its own positions and mask: the last hidden state at every position, the logits at every scored one;
  read as one sequence (positions running on) the pack gives other states, so the check can fail. A model with
  recurrent text layers (LFM3's short convolutions, GLM-5-Next's KDA) keeps packed sub-samples apart only with
  causal-conv1d / flash-linear-attention (CUDA): without them HF refuses the packed forward, which is checked.
  Where the model's own forward fails on a sample alone, the comparison is skipped naming the error (Llama 4 in
  transformers 5.24: ``Llama4ForConditionalGeneration`` reads ``outputs.image_outputs`` off its language model's
  ``MoeCausalLMOutputWithPast``, modeling_llama4.py); it runs once a release fixes it. Llama 4's image processor
  gives bfloat16 pixels (it normalizes in bfloat16), cast to the fp32 tiny model's dtype for that call.

Families whose processor runs without torchvision (a PIL image class, a processor class that builds without its
video processor: ERNIE, LFM3, GLM-5-Next, PaddleOCR-VL, HunYuan-VL) run their image packs in the core env; videos,
Gemma 4's and Qwen-Omni's processors (their classes need the video processor) and Molmo2's torchvision-only image
processor run where torchvision is (``-m torchvision`` in .venv-ref). Molmo2's forward refuses images and videos
in one call, so its video pack is video / text / video, and its pooling indices point into the pack's patches.
Llama 4 (the slow path: no generic rule for its tiles) runs where torchvision is: its image processor needs it.
"""

from __future__ import annotations

import importlib
import io
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
from _family_kit import forward_fields, images_only, segment_bounds, text_item
from _folders_2026 import every_frame
from PIL import Image

from vlmpack_offline.config import config_from_dict
from vlmpack_offline.loader import EncoderOptions, PackEncoder
from vlmpack_offline.loader.labels import IGNORE_INDEX
from vlmpack_offline.packed_format import PackedSample, PackedSubSample
from vlmpack_offline.synthetic.processor_dir import build_processor_dir
from vlmpack_offline.synthetic.shards import image_bytes, video_bytes

TOL = 1e-4
TEXT = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            head_dim=16)  # fmt: skip
VISION = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
              head_dim=16)  # fmt: skip
QWEN_VISION = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64)


def _rope_ernie_like(model, out):
    """``get_rope_index(input_ids, mm_token_type_ids, image_grid_thw, video_grid_thw)`` (ERNIE, PaddleOCR-VL)."""
    return model.model.get_rope_index(out["input_ids"], out["mm_token_type_ids"], out.get("image_grid_thw"),
                                      out.get("video_grid_thw"))[0]  # fmt: skip


def _rope_hunyuan(model, out):
    return model.model.get_rope_index(out["input_ids"], out["mm_token_type_ids"], out.get("image_grid_thw"))[0]


def _rope_omni(model, out):
    """The Thinker's (its mixin's) ``get_rope_index``, as its forward calls it (with the attention mask); video
    frames spaced by the processor's seconds per grid."""
    return model.model.get_rope_index(out["input_ids"], out.get("image_grid_thw"), out.get("video_grid_thw"),
                                      out["attention_mask"], second_per_grids=out.get("video_second_per_grid"))[0]  # fmt: skip


@dataclass(frozen=True, slots=True)
class Family:
    """One row of the table: how to build the tiny model from the folder's config, and what the family takes."""

    model_class: str  # the class a VLM is fine-tuned as (transformers' image-text-to-text mapping)
    shrink: dict  # nested overrides of the folder's config.json (small sizes; token ids and patch sizes kept)
    sub_config: str = ""  # the model is built from this sub-config (Qwen-Omni: its Thinker)
    video: tuple[int, int, int, int] | None = None  # (frames, fps, width, height) of its clip; None: no video
    core_images: bool = True  # its image processor runs without torchvision (a PIL class)
    rope: Callable | None = None  # the model's own rope index on one sample's processor output; None: 1-D
    vocab_keys: tuple[str, ...] = ("text_config.vocab_size",)  # set to the tokenizer's length
    rope_shape: int = 3  # axes of its positions
    oracle_kwargs: dict = field(default_factory=dict)  # processor call kwargs the model's forward needs
    recurrent: bool = False  # recurrent text layers (conv, KDA): packed only with their kernels (causal-conv1d, fla)
    mixes_media: bool = True  # its forward takes images and videos together (Molmo2's refuses both at once)
    pointers: dict = field(default_factory=dict)  # field -> the pixel field its indices point into (Molmo2's pooling)


FAMILIES: dict[str, Family] = {
    "gemma4": Family(
        "Gemma4ForConditionalGeneration",
        {"text_config": {**TEXT, "hidden_size_per_layer_input": 16, "sliding_window": 8,
                         "layer_types": ["sliding_attention", "full_attention"]},
         "vision_config": VISION},
        video=(32, 8, 64, 48), vocab_keys=("text_config.vocab_size", "text_config.vocab_size_per_layer_input"),
        core_images=False,  # Gemma4Processor needs its video processor, which needs torchvision
    ),
    "ernie4_5_vl_moe": Family(
        "Ernie4_5_VLMoeForConditionalGeneration",
        {"text_config": {**TEXT, "moe_k": 2, "moe_num_experts": 4, "moe_num_shared_experts": 1,
                         "moe_intermediate_size": [32, 32],
                         "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0, "mrope_section": [3, 3, 2]}},
         "vision_config": {**QWEN_VISION}},
        video=(16, 8, 64, 48), rope=_rope_ernie_like, oracle_kwargs={"return_mm_token_type_ids": True},
    ),
    "qwen3_omni_moe": Family(
        "Qwen3OmniMoeThinkerForConditionalGeneration",
        {"thinker_config": {
            "text_config": {**TEXT, "moe_intermediate_size": 32, "num_experts": 4, "num_experts_per_tok": 2,
                            "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0,
                                                "mrope_section": [2, 3, 3], "interleaved": True}},
            "vision_config": {**QWEN_VISION, "deepstack_visual_indexes": [0]},
            "audio_config": {"encoder_layers": 1, "encoder_attention_heads": 2, "encoder_ffn_dim": 64, "d_model": 32,
                             "output_dim": 64, "downsample_hidden_size": 16}}},
        sub_config="thinker_config", video=(8, 4, 64, 48), rope=_rope_omni, core_images=False,
        vocab_keys=("thinker_config.text_config.vocab_size",),
    ),
    "lfm3_vl": Family(
        "Lfm3VlForConditionalGeneration",
        {"text_config": {**TEXT, "layer_types": ["conv", "full_attention"]},
         "vision_config": {**VISION, "num_hidden_layers": 2, "layer_types": ["conv", "full_attention"]},
         "projector_hidden_size": 64},
        video=(16, 8, 64, 48), recurrent=True,
    ),
    "glm5_next": Family(
        "Glm5NextForConditionalGeneration",
        {"text_config": {**TEXT, "num_key_value_heads": 4, "moe_intermediate_size": 32, "n_routed_experts": 4,
                         "n_shared_experts": 1, "num_experts_per_tok": 2, "kv_lora_rank": 16, "q_lora_rank": 32,
                         "v_head_dim": 16, "qk_nope_head_dim": 16, "qk_head_dim": 16, "index_head_dim": 16,
                         "index_n_heads": 2, "linear_head_dim": 16, "linear_num_heads": 4,
                         "layer_types": ["linear_attention", "indexed_attention"], "mlp_layer_types": ["dense", "sparse"],
                         "indexer_types": ["full", "full"]},
         "vision_config": {**QWEN_VISION, "projection_intermediate_size": 64}},
        video=(16, 8, 64, 48), recurrent=True,
    ),
    "molmo2": Family(
        "Molmo2ForConditionalGeneration",
        {"text_config": {**TEXT, "rope_scaling_layers": [0, 1]},
         "vision_config": {**VISION, "num_hidden_layers": 2},
         "adapter_config": {**VISION, "vision_feature_layer": [-1, -2], "text_hidden_size": 64}},
        video=(16, 8, 64, 48), core_images=False, vocab_keys=(),  # its image processor needs torchvision
        mixes_media=False, pointers={"image_token_pooling": "pixel_values", "video_token_pooling": "pixel_values_videos"},
    ),
    "qwen2_5_omni": Family(
        "Qwen2_5OmniThinkerForConditionalGeneration",
        {"thinker_config": {
            "text_config": {**TEXT, "layer_types": ["full_attention"] * 2, "max_window_layers": 2,
                            "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0,
                                                "mrope_section": [2, 3, 3]}},
            "vision_config": {**QWEN_VISION, "fullatt_block_indexes": [0]},
            "audio_config": {"encoder_layers": 1, "encoder_attention_heads": 2, "encoder_ffn_dim": 64, "d_model": 32,
                             "output_dim": 64}}},
        sub_config="thinker_config", video=(8, 4, 64, 48), rope=_rope_omni, core_images=False,
        vocab_keys=("thinker_config.text_config.vocab_size",),
    ),
    "paddleocr_vl": Family(
        "PaddleOCRVLForConditionalGeneration",
        {"text_config": {**TEXT, "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0,
                                                     "mrope_section": [2, 3, 3]}},
         "vision_config": VISION},
        rope=_rope_ernie_like, oracle_kwargs={"return_mm_token_type_ids": True},
    ),
    "hunyuan_vl": Family(
        "HunYuanVLForConditionalGeneration",
        {"text_config": {**TEXT, "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0,
                                                     "mrope_section": [2, 2, 2, 2]}},
         "vision_config": {**VISION, "out_hidden_size": 64, "text_hidden_size": 64}},
        rope=_rope_hunyuan, rope_shape=4, oracle_kwargs={"return_mm_token_type_ids": True},
    ),
    "llama4": Family(
        "Llama4ForConditionalGeneration",
        {"text_config": {**TEXT, "intermediate_size_mlp": 128, "num_local_experts": 2},
         "vision_config": {**VISION, "intermediate_size": 128,  # 4 x hidden: its pixel shuffle's MLP input
                           "vision_output_dim": 64, "projector_input_dim": 64, "projector_output_dim": 64}},
        core_images=False,  # Llama4ImageProcessor is torchvision only
    ),
}  # fmt: skip

ANSWERS = ("Hello there, everyone in the room!", "A square on a plain ground.", "Two pictures, one tall.",
           "A bar that drifts to the right.")  # fmt: skip
MEDIA = {"m0.jpg": image_bytes(224, 224, seed=1), "m1.png": image_bytes(120, 300, fmt="PNG", seed=2),
         "m2.jpg": image_bytes(400, 150, seed=3)}  # fmt: skip


def _turns(family: Family, video: bool) -> list[tuple[list[dict], str]]:
    """Text, one image, two images; with a video in place of the text sub-sample where the family takes one (a
    family that takes no images and videos together: video, text, video)."""
    text = ([text_item("Say hello to everyone in this room, please.")], ANSWERS[0])
    clip = ([{"type": "video", "video": "v0.mp4"}, text_item("What moves?")], ANSWERS[3])
    if video and not family.mixes_media:
        return [clip, text, ([{"type": "video", "video": "v1.mp4"}, text_item("And here?")], ANSWERS[3])]
    return [clip if video else text, ([{"type": "image", "image": "m0.jpg"}, text_item("What is it?")], ANSWERS[1]),
            ([{"type": "image", "image": "m1.png"}, text_item("and"), {"type": "image", "image": "m2.jpg"}], ANSWERS[2])]


def _set(raw: dict, dotted: str, value) -> None:
    *path, last = dotted.split(".")
    for key in path:
        raw = raw.setdefault(key, {})
    raw[last] = value


def _merged(raw: dict, overrides: dict) -> dict:
    """``raw`` with ``overrides`` merged in, section by section; a rope-parameters mapping replaces the folder's."""
    out = dict(raw)
    for key, value in overrides.items():
        out[key] = _merged(out.get(key) or {}, value) if isinstance(value, dict) and "rope_type" not in value else value
    return out


def tiny_model(model_type: str, folder: Path):
    """The family's trained class from the folder's config with small sizes, fp32, sdpa, eval, seed 0; the shrunk
    config is written back into the folder (a checkpoint folder: the loader reads the model's config there)."""
    import transformers
    from transformers import AutoConfig, AutoTokenizer

    family = FAMILIES[model_type]
    raw = _merged(json.loads((folder / "config.json").read_text()), family.shrink)
    for key in family.vocab_keys:
        _set(raw, key, len(AutoTokenizer.from_pretrained(folder)))
    (folder / "config.json").write_text(json.dumps(raw))
    config = AutoConfig.from_pretrained(folder)
    config = getattr(config, family.sub_config) if family.sub_config else config
    config._attn_implementation = "sdpa"
    for sub in ("text_config", "vision_config", "audio_config"):
        if getattr(config, sub, None) is not None:
            getattr(config, sub)._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return getattr(transformers, family.model_class)(config).eval()


def oracle_processor(folder: Path, video: bool):
    """The real processor class: ``AutoProcessor``; without torchvision the class itself with its image processor
    and tokenizer (its video processor needs torchvision), built by keyword from the folder's parts."""
    from transformers import AutoImageProcessor, AutoProcessor, AutoTokenizer
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES
    from transformers.utils import is_torchvision_available

    if is_torchvision_available():
        return AutoProcessor.from_pretrained(folder)
    assert not video
    name = json.loads((folder / "processor_config.json").read_text())["processor_class"]
    module = next(t for t, n in PROCESSOR_MAPPING_NAMES.items() if n == name)
    cls = getattr(importlib.import_module(f"transformers.models.{module}.processing_{module}"), name)
    return images_only(cls)(image_processor=AutoImageProcessor.from_pretrained(folder),
                            tokenizer=AutoTokenizer.from_pretrained(folder),
                            chat_template=(folder / "chat_template.jinja").read_text())  # fmt: skip


def alone(processor, family: Family, sub: PackedSubSample, media: dict[str, bytes]) -> dict:
    """The real processor's output for one sub-sample alone (module doc, (a))."""
    messages = [{"role": m["role"], "content": [c if c["type"] == "text" else {"type": c["type"]} for c in m["content"]]}
                for m in sub.messages]  # fmt: skip
    text = processor.apply_chat_template(messages, tokenize=False)
    parts = [(c["type"], c[c["type"]]) for m in sub.messages for c in m["content"] if c["type"] != "text"]
    images = [Image.open(io.BytesIO(media[p])) for kind, p in parts if kind == "image"]
    videos = [every_frame(media[p]) for kind, p in parts if kind == "video"]
    kwargs = dict(family.oracle_kwargs)
    if videos:
        kwargs.update(videos=[v for v, _ in videos], video_metadata=[m for _, m in videos])
    out = processor(text=[text], images=images or None, return_tensors="pt", **kwargs)
    return dict(out)


@dataclass(frozen=True, slots=True)
class Case:
    family: Family
    model: torch.nn.Module
    processor: object
    encoder: PackEncoder
    pack: PackedSample
    media: dict[str, bytes]
    oracle: list[dict]  # the processor's output per sub-sample


_CASES: dict[tuple[str, bool], Case] = {}


@pytest.fixture(scope="module", autouse=True)
def _forget_cases():
    """The built cases are this module's (proof verdicts go to the run's cache, tests/conftest.py)."""
    yield
    _CASES.clear()


@pytest.fixture
def case(request, tmp_path_factory) -> Case:
    """The folder, tiny model, loader and oracle outputs of one (type, with video) case, built once."""
    model_type, video = request.param
    if (model_type, video) in _CASES:
        return _CASES[model_type, video]
    family = FAMILIES[model_type]
    folder = build_processor_dir(tmp_path_factory.mktemp(model_type), model_type, layout="transformers5",
                                 video=family.video is not None)  # fmt: skip
    model = tiny_model(model_type, folder)  # before the loader: it reads the model's config from the folder
    media = dict(MEDIA)
    if video:
        media.update({f"v{i}.mp4": video_bytes(*family.video, seed=4 + i) for i in range(2)})
    processor = oracle_processor(folder, video)
    subs = []
    for index, (user, answer) in enumerate(_turns(family, video)):
        messages = ({"role": "user", "content": user}, {"role": "assistant", "content": [text_item(answer)]})
        subs.append(PackedSubSample(id=f"s{index}", token_len=0, media_tokens=0, messages=messages))
    oracle = [alone(processor, family, sub, media) for sub in subs]
    subs = [PackedSubSample(id=s.id, token_len=len(o["input_ids"][0]), media_tokens=0, messages=s.messages)
            for s, o in zip(subs, oracle, strict=True)]  # the planned lengths: the real processor's
    pack = PackedSample(pack_id=0, capacity=sum(s.token_len for s in subs), split="train", samples=tuple(subs))
    config = config_from_dict({"model": {"processor_kwargs": {"pretrained_model_name_or_path": str(folder)}}},
                              source="test")  # fmt: skip
    _CASES[model_type, video] = Case(family, model, processor, PackEncoder(config, EncoderOptions()), pack, media, oracle)
    return _CASES[model_type, video]


def _params() -> list:
    """An image pack where the core env runs it, or no video pack holds images too; a video pack where it takes
    video (it holds image sub-samples too, ``_turns``)."""
    out = []
    for model_type, family in FAMILIES.items():
        if family.core_images or family.video is None or not family.mixes_media:
            marks = [] if family.core_images else [pytest.mark.torchvision]
            out.append(pytest.param((model_type, False), id=f"{model_type}-images", marks=marks))
        if family.video is not None:
            out.append(pytest.param((model_type, True), id=f"{model_type}-video", marks=[pytest.mark.torchvision]))
    return out


def _recurrent_kernels() -> bool:
    """Whether the kernels that keep packed sub-samples apart in recurrent layers are installed (CUDA only)."""
    import importlib.util

    return all(importlib.util.find_spec(name) is not None for name in ("causal_conv1d", "fla"))


@pytest.mark.slow
@pytest.mark.parametrize("case", _params(), indirect=True)
def test_the_loaders_inputs_are_the_processors_on_each_sub_sample(case):
    batch = case.encoder.encode(case.pack, case.media)
    tokenizer = case.processor.tokenizer
    bounds = segment_bounds(batch)
    assert len(bounds) == len(case.oracle) == 3
    forward = forward_fields(case.model, {k: None for o in case.oracle for k in o})
    for (start, end), out, sub in zip(bounds, case.oracle, case.pack.samples, strict=True):
        assert batch.input_ids[0, start:end].tolist() == out["input_ids"][0].tolist(), sub.id
        for name in (k for k in batch.vision if k.endswith("token_type_ids")):  # ERNIE's moe ids, Gemma 4's types
            assert batch.vision[name][0, start:end].tolist() == out[name][0].tolist(), (sub.id, name)
        labels = batch.labels[0, start:end]
        scored = tokenizer.decode(batch.input_ids[0, start:end][labels != IGNORE_INDEX])
        answer = sub.messages[1]["content"][0]["text"]
        # the answer and its end of turn (<|end_of_sentence|>: 19 characters), or GLM's empty <think></think>\n
        assert answer in scored and len(scored) - len(answer) < 24, (sub.id, scored)
    media_names = {k for k in forward if not k.endswith("token_type_ids") and k != "input_ids" and k != "attention_mask"}
    assert media_names == set(batch.vision) - {k for k in batch.vision if k.endswith("token_type_ids")}
    for name in media_names:
        expected = torch.cat(_pointing_into_the_pack(case.oracle, name, case.family.pointers.get(name)))
        assert torch.equal(batch.vision[name], expected), name


def _pointing_into_the_pack(oracle: list[dict], name: str, pixels: str | None) -> list[torch.Tensor]:
    """Each sub-sample's ``name``; indices into its own patches (``pixels``, flattened) moved past the patches of the
    sub-samples before it, where the pack's field points into the pack's patches (-1 stays: no patch)."""
    out, before = [], 0
    for o in oracle:
        if name in o:
            value = o[name]
            out.append(torch.where(value >= 0, value + before, value) if pixels else value)
        if pixels and pixels in o:
            before += o[pixels].shape[0] * o[pixels].shape[1]
    return out


@pytest.mark.slow
@pytest.mark.parametrize("case", _params(), indirect=True)
def test_positions_are_the_models_own_rope_index_on_each_sub_sample(case):
    batch = case.encoder.encode(case.pack, case.media)
    family = case.family
    if family.rope is None:
        assert batch.position_ids.shape == (1, batch.seq_len)
    else:
        assert batch.position_ids.shape == (family.rope_shape, 1, batch.seq_len)
    for (start, end), out in zip(segment_bounds(batch), case.oracle, strict=True):
        if family.rope is None:
            expected = torch.arange(end - start)[None]
        else:
            with torch.no_grad():
                expected = family.rope(case.model, out)
        assert torch.equal(batch.position_ids[..., start:end], expected)


def _skip_where_the_forward_fails_alone(case) -> None:
    """The capability, detected: where the model's own forward fails on one sub-sample alone (not our input), there
    is nothing to compare the pack with; skipped with the error, so the check runs once a release fixes it."""
    inputs = forward_fields(case.model, case.oracle[0])
    floats = {k: v.to(case.model.dtype) for k, v in inputs.items() if torch.is_tensor(v) and v.is_floating_point()}
    try:
        with torch.no_grad():
            case.model(**{**inputs, **floats})
    except Exception as exc:  # noqa: BLE001 - the model's own failure, named in the skip
        import transformers

        pytest.skip(f"{type(case.model).__name__}.forward fails on a sample alone in transformers "
                    f"{transformers.__version__}: {type(exc).__name__}: {exc}")  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("case", _params(), indirect=True)
def test_a_packed_forward_equals_each_sub_sample_alone(case):
    batch = case.encoder.encode(case.pack, case.media)
    kwargs = batch.model_kwargs("sdpa", with_labels=False)
    assert batch.linear_attention == case.family.recurrent
    _skip_where_the_forward_fails_alone(case)
    if case.family.recurrent and not _recurrent_kernels():  # HF refuses to mix sub-samples' states, never mixes them
        with torch.no_grad(), pytest.raises(ValueError, match="packed sequences"):
            case.model(**kwargs)
        return
    scored = batch.labels[0] != IGNORE_INDEX
    # logits at the scored positions only where the forward can (a video pack's [S, vocab 151k] is gigabytes)
    keep = "logits_to_keep" in forward_fields(case.model, {"logits_to_keep": None})

    def logits_at(where: torch.Tensor) -> dict:
        return {"logits_to_keep": torch.nonzero(where)[:, 0]} if keep else {}

    with torch.no_grad():
        packed = case.model(**kwargs, **logits_at(scored), output_hidden_states=True)
        hidden = [case.model(**forward_fields(case.model, out), **logits_at(scored[start:end]), use_cache=False,
                             output_hidden_states=True) for out, (start, end) in zip(case.oracle, segment_bounds(batch), strict=True)]  # fmt: skip
    alone_hidden = torch.cat([h.hidden_states[-1] for h in hidden], dim=1)
    alone_logits = torch.cat([h.logits for h in hidden], dim=1)
    assert packed.hidden_states[-1].shape == alone_hidden.shape
    assert (packed.hidden_states[-1] - alone_hidden).abs().max() < TOL
    if not keep:
        packed_logits, alone_logits = packed.logits[0, scored], alone_logits[0, scored]
    else:
        packed_logits, alone_logits = packed.logits[0], alone_logits[0]
    assert packed_logits.shape == (int(scored.sum()), case.model.config.get_text_config().vocab_size)
    assert (packed_logits - alone_logits).abs().max() < TOL
    # the packing is visible: read as one sequence (positions running on, no mask) the pack gives other states
    positions = kwargs["position_ids"]
    whole = {k: v for k, v in kwargs.items() if k != "attention_mask"}
    whole["position_ids"] = torch.arange(positions.shape[-1]).expand_as(positions)
    with torch.no_grad():
        whole = case.model(**whole, **({"logits_to_keep": 1} if keep else {}), output_hidden_states=True)
    assert (whole.hidden_states[-1] - alone_hidden).abs().max() > 1e-3
