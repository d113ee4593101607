"""The conformance table (not a test module): one row per model type the conformance checks read.

Each ``Row`` (``tests/_conformance.py``) says how to build the model type's processor folder
(``synthetic/processor_dir.py``), how to build its real processor from that folder (the oracle: transformers'
own class, never our code), the data its counts are checked on, and what the checks must see. The checks are
``tests/test_conformance_counts.py`` (the scan and ``materialize`` vs the oracle, ``processor_kwargs``
variants, the settings read from both layouts, a video for a type without video) and
``tests/test_conformance_loader.py`` (every pack vs the oracle per sub-sample); a model type's truly specific
checks stay in its own ``tests/test_family_<type>.py``.

Adding a model type is one ``Row`` in ``ROWS`` (and a module only for what no table check covers).
"""

from __future__ import annotations

from pathlib import Path

from _conformance import LAYOUTS, AnyresData, EdgeData, Loader, Refusal, Row, Stress, Variant, auto_processor
from _family_kit import images_only
from transformers import Glm4vProcessor, Glm46VProcessor, InternVLProcessor, LlavaOnevisionProcessor

from vlmpack_offline.reasons import Reason
from vlmpack_offline.synthetic import folder_qwen3_5
from vlmpack_offline.synthetic.folder_llava_onevision import PINPOINTS

__all__ = ["ROWS", "row"]


# -- each model type's edge sizes ------------------------------------------------------------------------------

# Gemma3: extreme aspect ratios and images placed before, between and after text (every image is one square)
GEMMA3_SIZES = ((1, 1), (2000, 10), (10, 2000), (896, 896), (897, 300))
# GLM-4V (width, height): tiny (scaled up to the factor), square, around the factor, wide / tall, at and past the
# 200:1 limit (2000x10 becomes 5600x28: exactly 200, kept; 5000x1 and 1x5000: refused), large (max_pixels).
GLM4V_SIZES = (
    (1, 1), (27, 27), (28, 28), (29, 57), (100, 100), (448, 448), (1000, 300), (300, 1000), (2000, 10),
    (10, 2000), (5000, 1), (1, 5000), (1920, 1080), (777, 333), (4000, 3000), (3000, 4000), (6000, 40),
)  # fmt: skip
# InternVL: square, tile-sized, just over a tile, tie-breaks between grids of the same aspect ratio (896 and
# 1344 squares), wide / tall, and extreme ratios up to 5000:1.
INTERNVL_SIZES = (
    (1, 1), (100, 100), (448, 448), (449, 300), (896, 896), (1344, 1344), (1000, 300), (300, 1000),
    (896, 448), (448, 1344), (2000, 10), (10, 2000), (5000, 1), (1, 5000), (1920, 1080), (777, 333),
)  # fmt: skip

# Mistral3 (Pixtral): tiny (padded up to one 28 px patch), 1 x N and N x 1 (kept, and past the point where a
# side floors to 0 px: refused), around the patch, at and just past longest_edge, huge, odd aspects.
MISTRAL3_SIZES = (
    (1, 1), (1, 40), (40, 1), (27, 27), (28, 28), (29, 57), (100, 100), (1540, 1540), (1541, 1540),
    (1000, 300), (300, 1000), (3000, 3), (3, 3000), (5000, 1), (1, 5000), (1920, 1080), (777, 333),
    (4500, 3000), (8000, 60),
)  # fmt: skip
# Kimi-K2.5: below one patch, one patch, around the 28 px factor, wide / tall, 5000:1, past the 16384-patch
# budget (2100x1600: 150 x 114 patches), past 512 patches on one side (8000x100, 100x8000)
KIMI_K25_SIZES = (
    (1, 1), (13, 13), (14, 14), (27, 29), (28, 28), (100, 100), (1000, 300), (300, 1000), (5000, 1), (1, 5000),
    (1920, 1080), (777, 333), (2100, 1600), (8000, 100), (100, 8000),
)  # fmt: skip
# LLaVA-OneVision: tile-sized, under and over a tile, every grid shape's edge, ties between grids, wide and tall
# up to 5000:1 (the anyres_max_9 shrink and the unpadding round there), 1x1.
LLAVA_ONEVISION_SIZES = (
    (1, 1), (100, 100), (384, 384), (385, 383), (768, 384), (384, 768), (1000, 300), (300, 1000),
    (2304, 2304), (4000, 3000), (1920, 1080), (777, 333), (2000, 10), (10, 2000), (5000, 1), (1, 5000),
)  # fmt: skip

# Qwen3.5 (width, height): tiny, factor-sized, wide / tall up to 200:1 (counted), past it (refused by both)
QWEN3_5_SIZES = ((1, 1), (31, 33), (32, 32), (100, 100), (1920, 1080), (777, 333), (200, 1), (1, 200), (250, 1))
# (frames, fps, width, height): short, odd count, longer at 25 fps, portrait, slow
QWEN3_5_CLIPS = ((30, 10, 96, 64), (7, 5, 64, 48), (100, 25, 160, 90), (48, 24, 48, 96), (9, 3, 320, 240))

GLM4V_DATA = EdgeData(seed=11, samples_per_shard=12, sizes=GLM4V_SIZES)
INTERNVL_DATA = EdgeData(seed=7, samples_per_shard=12, sizes=INTERNVL_SIZES)


def _glm_max_pixels(processor, sizes, media_tokens) -> bool:
    """An image past the folder's pixel budget (GLM's size.longest_edge counts 2 frames of pixels)."""
    return any(2 * w * h > processor.image_processor.size["longest_edge"] for w, h in sizes)


def _internvl_tiles(processor, sizes, media_tokens) -> bool:
    """More tokens than one tile per image: the processor tiled an image."""
    return media_tokens > processor.image_seq_length * len(sizes)


def _mistral3_resized(processor, sizes, media_tokens) -> bool:
    """An image past longest_edge: the processor shrinks it."""
    return any(max(w, h) > processor.image_processor.size["longest_edge"] for w, h in sizes)


def _kimi_budget(processor, sizes, media_tokens) -> bool:
    """An image past the patch budget or past the patches allowed on one side: NaViT shrinks it."""
    ip = processor.image_processor
    return any((h // ip.patch_size) * (w // ip.patch_size) > ip.max_patches
               or max(h, w) > ip.size["max_height"] * ip.patch_size for w, h in sizes)  # fmt: skip


def _glm_rope(folder: Path):
    """Positions from a tiny random ``Glm4vModel`` of the folder's config (its token ids), shrunk: its own
    ``get_rope_index`` on the oracle's ``input_ids``, ``mm_token_type_ids`` and ``image_grid_thw``."""
    import torch
    from transformers import AutoConfig, Glm4vModel

    config = AutoConfig.from_pretrained(str(folder))
    text, vision = config.text_config, config.vision_config
    text.hidden_size, text.intermediate_size, text.num_hidden_layers = 64, 64, 1
    text.num_attention_heads, text.num_key_value_heads, text.vocab_size = 2, 1, 151680
    vision.hidden_size, vision.intermediate_size, vision.depth, vision.num_heads, vision.out_hidden_size = 32, 32, 1, 2, 64
    model = Glm4vModel(config).eval()

    def positions(expected: dict):
        with torch.no_grad():
            return model.get_rope_index(expected["input_ids"], mm_token_type_ids=expected["mm_token_type_ids"],
                                        image_grid_thw=expected.get("image_grid_thw"))[0]  # fmt: skip

    return positions


def _glm_2d(images, expected, positions) -> dict[str, int]:
    return {"2d_positions": int(not bool((positions[1] == positions[2]).all()))}  # image tokens: rows != columns


def _internvl_multi_tile(images, expected, positions) -> dict[str, int]:
    return {"multi_tile": int(bool(images) and len(expected["pixel_values"]) > len(images))}


def _kimi_videos(images, expected, positions) -> dict[str, int]:
    return {"videos": len(expected.get("video_grid_thw", []))}


_GLM_PATH = "{}: fast path (patch grid from headers: patch 14, merge 2, 2 * pixels in 12544..9633792)"
_GLM_RULES = {"fast": True, "patch_size": 14, "merge_size": 2, "temporal_patch_size": 2, "min_pixels": 12544,
              "max_pixels": 9633792}  # fmt: skip


def _glm_row(model_type: str, processor_cls: type, image_processor: str, **extra) -> Row:
    """GLM-4.1V (``glm4v``), GLM-4.5V (``glm4v_moe``: ``Glm4vProcessor``) and GLM-4.6V (``glm46v``: its own
    ``Glm46VProcessor``). The oracle is the real class restricted to its image processor and tokenizer
    (GLM's video processor imports torchvision); GLM videos are counted (``test_family_glm4v_video.py``)."""
    return Row(
        id=model_type, model_type=model_type, oracle=images_only(processor_cls).from_pretrained,
        facts={"__class__.__name__": f"{processor_cls.__name__}ImagesOnly",
               "image_processor.__class__.__name__": image_processor,
               "image_processor.size.longest_edge": 9633792},
        path_line=_GLM_PATH.format(model_type), media_ids=lambda p: {p.image_token_id}, data=GLM4V_DATA,
        videos="elsewhere", refusal=Refusal(reason=Reason.UNSUPPORTED_ASPECT, says=("aspect ratio",), count=2),
        stress=Stress(name="max_pixels", hit=_glm_max_pixels), **extra,
    )  # fmt: skip


_THINKING = "\n\n</think>\n\n{answer}<|im_end|>"  # what follows the generation prompt's <think>


def _qwen3_5_row(model_type: str, layouts: tuple[str, ...], tokenizer: str, answer_end: str, *, slow: bool = False) -> Row:
    """Qwen3.5 (``qwen3_5``, ``qwen3_5_moe``) and Qwen3-VL MoE (``qwen3_vl_moe``): Qwen/Qwen3.5-9B's published
    settings and template (``synthetic/folder_qwen3_5.py``); ``AutoProcessor`` resolves the classes transformers
    registers for the type and samples each video's frames itself. The MoE folders differ from the dense one in
    config.json only: their scans are slow tests. Qwen3.5's template labels what follows the prompt's
    ``<think>``; Qwen3-VL's has no thinking block."""
    return Row(
        id=model_type, model_type=model_type, oracle=auto_processor, torchvision=True, slow=slow, layouts=layouts,
        folder_video=True, build=lambda target, layout, video: folder_qwen3_5.build(
            target, layout=layout, video=video, model_type=model_type),
        facts={"__class__.__name__": "Qwen3VLProcessor", "video_processor.__class__.__name__": "Qwen3VLVideoProcessor",
               "tokenizer.__class__.__name__": tokenizer},
        path_line=f"{model_type}: fast path", media_ids=lambda p: set(p.tokenizer.convert_tokens_to_ids(
            ["<|image_pad|>", "<|video_pad|>"])),
        data=EdgeData(seed=11, samples_per_shard=8, sizes=QWEN3_5_SIZES, clips=QWEN3_5_CLIPS), videos="every_frame",
        answer_end=answer_end, max_token_len=262144,
        refusal=Refusal(reason=Reason.UNSUPPORTED_ASPECT, says=("aspect ratio",), count=1),
        at_least={"text": 1, "image": 2, "multi": len(QWEN3_5_SIZES) - 1, "video": len(QWEN3_5_CLIPS) + 2},
    )  # fmt: skip


ROWS: tuple[Row, ...] = (
    Row(
        id="gemma3", model_type="gemma3", oracle=auto_processor,
        facts={"__class__.__name__": "Gemma3Processor", "image_seq_length": 256},
        path_line="gemma3: fast path (256 tokens per image)",
        media_ids=lambda p: {p.tokenizer.image_token_id},
        data=EdgeData(seed=5, samples_per_shard=14, sizes=GEMMA3_SIZES, second_image=(300, 200)),
        videos="dropped", answer_end="{answer}<end_of_turn>", max_token_len=16384, per_image=256,
        at_least={"text": 3, "image": 5, "multi": 8, "video": 2, "checked": 15},
        rules={"model_type": "gemma3", "fast": True, "tokens_per_image": 256},
        no_video="gemma3 takes no video",
        loader=Loader(layouts=LAYOUTS, seed=5, max_token_len=2048, token_type_ids=True, at_least={"images": 5}),
    ),
    _glm_row(
        "glm4v", Glm4vProcessor, "Glm4vImageProcessorPil",
        at_least={"text": 2, "image": 4, "multi": len(GLM4V_SIZES) - 2, "video": 2, "max_pixels": 2, "checked": 20},
        rules={"model_type": "glm4v", **_GLM_RULES},
        loader=Loader(layouts=("transformers5",), seed=7, max_token_len=8192, fields=("pixel_values", "image_grid_thw"),
                      turns_joined_by="<|user|>", rope=_glm_rope, count=_glm_2d,
                      at_least={"images": 5, "packs_with_images": 2, "2d_positions": 5, "video_packs": 1}),
        variants=(Variant(
            id="size", layout="transformers5",
            kwargs={"size": {"shortest_edge": 56 * 56, "longest_edge": 2 * 28 * 28 * 64}},
            path_line="glm4v: fast path (patch grid from headers: patch 14, merge 2, 2 * pixels in 3136..100352)",
            facts={"image_processor.size.longest_edge": 2 * 28 * 28 * 64},
            at_least={"multi": len(GLM4V_SIZES) - 2, "max_pixels": len(GLM4V_SIZES) - 2},
        ),),
    ),  # fmt: skip
    _glm_row("glm4v_moe", Glm4vProcessor, "Glm4vImageProcessorPil", layouts=("transformers5",), slow=True,
             at_least={"multi": len(GLM4V_SIZES) - 2, "video": 2}),  # fmt: skip
    _glm_row("glm46v", Glm46VProcessor, "Glm46VImageProcessorPil", layouts=("transformers5",), slow=True,
             at_least={"multi": len(GLM4V_SIZES) - 2, "video": 2}),  # fmt: skip
    Row(
        id="internvl", model_type="internvl", oracle=images_only(InternVLProcessor).from_pretrained,
        facts={"image_processor.__class__.__name__": "GotOcr2ImageProcessorPil", "image_seq_length": 256,
               "image_processor.max_patches": 12},
        path_line="internvl: fast path (256 tokens per 448x448 tile, 1..12 tiles + thumbnail)",
        media_ids=lambda p: {p.image_token_id}, data=INTERNVL_DATA, videos="elsewhere",
        answer_end="{answer}<|im_end|>", stress=Stress(name="tiles>1", hit=_internvl_tiles),
        at_least={"text": 2, "image": 4, "multi": len(INTERNVL_SIZES), "video": 2, "tiles>1": 10, "checked": 20},
        rules={"model_type": "internvl", "fast": True, "tokens_per_image": 256, "tile_size": (448, 448),
               "min_tiles": 1, "max_tiles": 12},
        # image packs: InternVL video tensors need torchvision (tests/test_internvl_video.py loads video packs)
        loader=Loader(layouts=("transformers5",), seed=7, max_token_len=16384, videos=False, count=_internvl_multi_tile,
                      at_least={"images": 5, "multi_tile": 3}),
        variants=(
            Variant(id="tiles", layout="hub",
                    kwargs={"min_patches": 2, "max_patches": 6, "size": {"height": 224, "width": 224},
                            "image_seq_length": 64},
                    path_line="internvl: fast path (64 tokens per 224x224 tile, 2..6 tiles + thumbnail)",
                    facts={"image_processor.min_patches": 2, "image_processor.max_patches": 6, "image_seq_length": 64},
                    at_least={"multi": len(INTERNVL_SIZES), "tiles>1": len(INTERNVL_SIZES)}),
            # the folder's crop_to_patches: false is overridden by the processor's call default (the default scan
            # tiles); the same key in model.processor_kwargs reaches the processor call and turns tiling off
            Variant(id="crop_to_patches_false", layout="transformers5", kwargs={"crop_to_patches": False},
                    path_line="internvl: fast path (256 tokens per image, one 448x448 tile)",
                    at_least={"multi": len(INTERNVL_SIZES)}, exactly={"tiles>1": 0}),
        ),
    ),  # fmt: skip
    Row(
        id="mistral3", model_type="mistral3", oracle=auto_processor, torchvision=True, slow=True,
        facts={"__class__.__name__": "PixtralProcessor", "patch_size": 14, "spatial_merge_size": 2,
               "image_processor.size.longest_edge": 1540},
        path_line=("mistral3: fast path ([IMG] rows from headers: longest edge 1540, patch 14 x merge 2, "
                   "[IMG_BREAK] / [IMG_END] per row)"),
        media_ids=lambda p: set(p.image_token_ids),  # [IMG], [IMG_BREAK], [IMG_END]
        data=EdgeData(seed=13, samples_per_shard=12, sizes=MISTRAL3_SIZES), videos="dropped",
        answer_end="{answer}</s>",
        refusal=Refusal(reason=Reason.UNSUPPORTED_ASPECT, says=("height", "width"), count=2),  # a 0-pixel side
        stress=Stress(name="resized", hit=_mistral3_resized),
        at_least={"text": 2, "image": 3, "multi": len(MISTRAL3_SIZES) - 2, "video": 2, "resized": 4},
        rules={"model_type": "mistral3", "fast": True, "patch_size": 14, "merge_size": 2, "max_size": (1540, 1540)},
        no_video="mistral3 takes no video (PixtralProcessor has no video processor)",
    ),
    Row(
        id="kimi_k25", model_type="kimi_k25", oracle=auto_processor, torchvision=True, slow=True,
        facts={"__class__.__name__": "Kimi_K25Processor", "image_processor.__class__.__name__": "Kimi_K25ImageProcessor",
               "image_processor.max_patches": 16384, "image_token": "<|media_pad|>"},
        path_line=("kimi_k25: fast path (NaViT patch grid from headers: patch 14, merge 2, max 16384 patches, 512 per "
                   "side; videos: 2.0 fps, chunks of 4 frames, max 4096 patches per frame)"),
        media_ids=lambda p: {p.image_token_id, p.video_token_id},
        data=EdgeData(seed=13, samples_per_shard=12, sizes=KIMI_K25_SIZES), videos="every_frame",
        answer_end="</think>{answer}<|im_end|>",  # what the model generates after <think>
        stress=Stress(name="budget", hit=_kimi_budget),
        at_least={"text": 2, "image": 4, "multi": len(KIMI_K25_SIZES), "video": 2, "budget": 3, "checked": 20},
        rules={"model_type": "kimi_k25", "fast": True, "patch_size": 14, "merge_size": 2, "max_patches": 16384,
               "max_side_patches": 512},
        loader=Loader(layouts=("transformers5",), seed=9, max_token_len=4096,
                      fields=("pixel_values", "image_grid_thw", "pixel_values_videos", "video_grid_thw"),
                      count=_kimi_videos, at_least={"images": 5, "packs_with_images": 2, "videos": 2}),
        variants=(Variant(
            id="patches", layout="transformers5", kwargs={"max_patches": 256, "size": {"max_height": 24, "max_width": 24}},
            path_line=("kimi_k25: fast path (NaViT patch grid from headers: patch 14, merge 2, max 256 patches, 24 per "
                       "side; videos: 2.0 fps, chunks of 4 frames, max 256 patches per frame)"),  # both processors take them
            facts={"image_processor.max_patches": 256},
            at_least={"multi": len(KIMI_K25_SIZES), "budget": len(KIMI_K25_SIZES), "video": 2},
        ),),
    ),
    # LLaVA-OneVision: in .venv the real class restricted to its image processor (its video processor needs
    # torchvision), in .venv-ref AutoProcessor with videos; a sample's images go in as one list
    # (``images=[images]``, what apply_chat_template does: test_family_llava_onevision.py checks it)
    Row(
        id="llava_onevision", model_type="llava_onevision", oracle=images_only(LlavaOnevisionProcessor).from_pretrained,
        slow=True, facts={"image_processor.__class__.__name__": "LlavaOnevisionImageProcessorPil",
                          "num_image_tokens": 729, "vision_aspect_ratio": "anyres_max_9"},
        path_line="llava_onevision: fast path (729 tokens per 384x384 tile, anyres_max_9 over 36 grids",
        media_ids=lambda p: {p.image_token_id, p.video_token_id},
        data=AnyresData(sizes=LLAVA_ONEVISION_SIZES), videos="elsewhere", nested_images=True,
        answer_end="{answer}<|im_end|>", scan_sections={"video": {"max_frames": 12}}, max_token_len=1_000_000,
        at_least={"text": 2, "image": len(LLAVA_ONEVISION_SIZES), "multi": len(LLAVA_ONEVISION_SIZES) + 1,
                  "checked": 2 * len(LLAVA_ONEVISION_SIZES) + 5},
        rules={"model_type": "llava_onevision", "fast": True, "tokens_per_image": 729, "tile_size": (384, 384),
               "vision_aspect_ratio": "anyres_max_9", "feature_select_strategy": "full", "temporal_patch_size": 1,
               "grid_pinpoints": tuple(tuple(p) for p in PINPOINTS)},
    ),
    Row(
        id="llava_onevision-video", model_type="llava_onevision", oracle=auto_processor, folder_video=True,
        torchvision=True, slow=True,
        facts={"video_processor.__class__.__name__": "LlavaOnevisionVideoProcessor",
               "video_processor.do_sample_frames": False},  # it takes every frame it is given
        path_line="llava_onevision: fast path (729 tokens per 384x384 tile, anyres_max_9 over 36 grids",
        media_ids=lambda p: {p.image_token_id, p.video_token_id},
        data=AnyresData(sizes=LLAVA_ONEVISION_SIZES), videos="sampled", nested_images=True,
        answer_end="{answer}<|im_end|>", scan_sections={"video": {"max_frames": 12}}, max_token_len=1_000_000,
        at_least={"video": 2, "image": len(LLAVA_ONEVISION_SIZES), "multi": len(LLAVA_ONEVISION_SIZES)},
    ),
    _qwen3_5_row("qwen3_5", LAYOUTS, "Qwen3_5Tokenizer", _THINKING),
    _qwen3_5_row("qwen3_5_moe", ("transformers5",), "Qwen3_5Tokenizer", _THINKING, slow=True),
    _qwen3_5_row("qwen3_vl_moe", ("hub",), "Qwen2Tokenizer", "{answer}<|im_end|>", slow=True),
)

_BY_ID = {r.id: r for r in ROWS}


def row(row_id: str) -> Row:
    """The row of ``row_id`` (a family module's specific checks read its row's data and oracle)."""
    return _BY_ID[row_id]
