"""Position ids of one sub-sample, computed by the model's own rope-index function.

mRoPE models (Qwen-VL, GLM-4V, Ernie-4.5-VL, PaddleOCR-VL, Qwen-Omni, HunYuan-VL, MiniCPM-V 4.7, ...)
compute positions in ``<Model>.get_rope_index`` from the token ids and the media fields. We call
the model's own code, so every sub-sample gets exactly the positions it would get if it were run
alone. Where the function lives (``model_classes.find_class``): any class of the model's type, or of
a sub-config's type (Qwen-Omni: ``thinker_config`` -> ``Qwen3OmniMoeThinkerModel``), through its MRO
(a mixin's method counts). The class is built on the meta device (``with torch.device("meta"):
cls(config)``: no weights, ~0.1 s even for a 30B default config, measured in tests/test_rope_index.py's
docstring), so attributes its ``__init__`` sets (``spatial_merge_size``) exist as in the model.

How it is called: the way the model's own ``forward`` calls it. Every transformers 5.24 model with a
``get_rope_index`` has ``compute_3d_position_ids`` whose parameters carry the ``forward``'s names
(``image_grid_thw``, ``video_second_per_grid``, ``target_sizes``, ``mm_token_type_ids``, ...), and maps
them onto ``get_rope_index``'s own (Qwen-Omni's ``second_per_grids``, passed positionally). So the
loader hands it the processor's fields by name, ``attention_mask`` of ones and no cache; a class
without it gets ``get_rope_index`` with the keyword arguments its signature names. What the forward derives
before the call is derived the same way: Qwen-Omni's ``audio_feature_lengths`` = ``feature_attention_mask``
summed over time (modeling_qwen3_omni_moe.py / modeling_qwen2_5_omni.py Thinker ``forward``), each audio's
mel frames, from which its rope index counts the audio's tokens (``_get_feat_extract_output_lengths``) when
the sample also holds an image or a video (audio alone, like text alone, gets 1-D positions on every axis).
The result is whatever the model uses: ``[3, B, L]`` (mRoPE), ``[A, B, L]`` (HunYuan-VL's N-axis xdrope). A model
where no class defines one gets plain 1-D positions ``[1, L]``.

The config is ``AutoConfig.from_pretrained(processor_dir)``: a real checkpoint folder carries the full
``config.json``; a folder holding only ``model_type`` gets HF's defaults for that family, which must
then also be what the trained model uses (HunYuan-VL's defaults have no ``mrope_section`` and no
model can be built from them: refused, ``RopeError``).
"""

from __future__ import annotations

import inspect
from functools import partial
from pathlib import Path
from typing import Any

import torch
from transformers import AutoConfig

from ..remote_code import load_pretrained
from .model_classes import ModelClass, config_chain, find_class

__all__ = ["RopeIndex", "RopeError", "MM_TEXT", "MM_IMAGE", "MM_VIDEO", "recurrent_layer_types"]

# HF's mm_token_type_ids values (ProcessorMixin.create_mm_token_type_ids).
MM_TEXT, MM_IMAGE, MM_VIDEO = 0, 1, 2

# get_rope_index parameters named otherwise than the forward's (and the processor's) field, for a class
# without compute_3d_position_ids: Qwen-Omni's second_per_grids is the processor's video_second_per_grid, its
# audio_seqlens the forward's audio_feature_lengths.
_ALIASES = {"second_per_grids": ("video_second_per_grid", "second_per_grid_ts"),
            "second_per_grid_ts": ("video_second_per_grid",), "audio_seqlens": ("audio_feature_lengths",)}  # fmt: skip


# Models whose forward raises on the leading text row of positions (``RopeIndex.takes_text_row``).
_NO_TEXT_ROW = frozenset({"hunyuan_vl"})


class RopeError(ValueError):
    """The model's rope-index function cannot be built or called for this config (the reason in the text)."""


def recurrent_layer_types() -> frozenset[str]:
    """Layer types whose state runs from token to token: those HF masks with ``create_recurrent_attention_mask``
    (``masking_utils.LAYER_PATTERN_TO_MASK_FUNCTION_MAPPING``: ``linear_attention`` (Qwen3.5's Gated DeltaNet,
    GLM-5-Next's KDA, MiniCPM-V 4.7), ``conv`` (LFM3's short convolutions), ``hybrid`` ...)."""
    from transformers.masking_utils import (
        LAYER_PATTERN_TO_MASK_FUNCTION_MAPPING,
        create_recurrent_attention_mask,
    )

    def recurrent(fn) -> bool:
        if isinstance(fn, dict):
            return any(recurrent(value) for value in fn.values())
        return (fn.func if isinstance(fn, partial) else fn) is create_recurrent_attention_mask

    return frozenset(name for name, fn in LAYER_PATTERN_TO_MASK_FUNCTION_MAPPING.items() if recurrent(fn))


def _layer_types(config: Any) -> set[str]:
    """Every layer type of the config and its sub-configs (text_config, a thinker's text_config, ...)."""
    found = set(getattr(config, "layer_types", None) or ())
    for path, sub in config_chain(config):
        if path:
            found |= _layer_types(sub)
    return found


def _arguments(fn, available: dict[str, Any]) -> dict[str, Any]:
    """``fn``'s named parameters taken from ``available``; a required one it lacks is passed as None (the
    forward passes ``inputs_embeds=None``, ``cache=None`` the same way)."""
    out = {}
    for name, parameter in inspect.signature(fn).parameters.items():
        if parameter.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            continue
        if name in available:
            out[name] = available[name]
        elif parameter.default is inspect.Parameter.empty:
            out[name] = None
    return out


class RopeIndex:
    """``positions(input_ids, ...) -> [A, B, L]`` (the model's rope index) or ``[B, L]`` (1-D)."""

    def __init__(self, config) -> None:
        self.config = config
        self.model_type = config.model_type
        self.source: ModelClass | None = find_class(config, "get_rope_index")
        self._model = self._build() if self.source is not None else None
        self.image_token_id = getattr(config, "image_token_id", None)
        self.video_token_id = getattr(config, "video_token_id", None)
        # GLM-4V: video frames are <|image|> tokens between <|begin_of_video|> and <|end_of_video|>
        glm = str(self.model_type).startswith("glm")
        self.video_start_token_id = getattr(config, "video_start_token_id", None) if glm else None
        self.video_end_token_id = getattr(config, "video_end_token_id", None) if glm else None

    def _build(self):
        """The rope class on the meta device: its ``__init__`` runs (attributes as in the model), no weights."""
        source = self.source
        try:
            with torch.device("meta"):
                return source.cls(source.config)
        except Exception as exc:  # noqa: BLE001 - any failure of the model's own __init__ on this config
            raise RopeError(
                f"{self.model_type}: the model's rope index ({source.describe()}.get_rope_index) needs the model "
                f"built from its config, which fails: {type(exc).__name__}: {exc}. Put the checkpoint's own "
                "config.json in the processor folder"
            ) from exc

    def __reduce__(self):  # DataLoader workers: rebuild the meta instance there instead of pickling it
        return (RopeIndex, (self.config,))

    @classmethod
    def from_processor_dir(cls, path: str | Path, *, model_type: str | None = None,
                           trust_remote_code: bool = False) -> RopeIndex:
        """The folder's ``config.json``; HF's defaults for ``model_type`` when the folder has none."""
        if (Path(path) / "config.json").is_file():
            config = load_pretrained(AutoConfig.from_pretrained, str(path), trust_remote_code=trust_remote_code)
            if model_type is None or config.model_type == model_type:
                return cls(config)
        if model_type is None:
            raise ValueError(f"{path} has no config.json: pass model_type")
        return cls(AutoConfig.for_model(model_type))

    @property
    def _function(self):
        """What ``positions`` calls: the forward's ``compute_3d_position_ids`` where the class has it."""
        return getattr(self._model, "compute_3d_position_ids", None) or self._model.get_rope_index

    @property
    def uses_seconds(self) -> bool:
        """Whether the rope index spaces video frames in time by ``second_per_grid_ts`` (Qwen2.5-VL)."""
        return self._model is not None and "second_per_grid_ts" in inspect.signature(self._function).parameters

    @property
    def takes_text_row(self) -> bool:
        """Whether the model's forward takes ``[A + 1, B, L]`` positions, a text row before its ``A`` rope rows, and
        finds packed sub-samples from it (Qwen-VL, ERNIE-4.5-VL, PaddleOCR-VL, Qwen-Omni). HunYuan-VL's does not:
        its text model reads the text row but never drops it before checking for ``A`` rows, so it raises
        (transformers 5.24 models/hunyuan_vl/modeling_hunyuan_vl.py:803-813)."""
        return self.model_type not in _NO_TEXT_ROW

    @property
    def is_mrope(self) -> bool:
        return self._model is not None

    @property
    def has_linear_attention(self) -> bool:
        """Whether the text model has recurrent layers (``recurrent_layer_types``: linear attention, short convs).

        Such a layer carries its state from one token to the next and sees sub-sample boundaries only
        through ``cu_seq_lens_q`` / ``seq_idx``: a block mask or restarting positions do not stop it.
        """
        return bool(_layer_types(self.config) & recurrent_layer_types())

    @property
    def sliding_window(self) -> int | None:
        """The window of the text model's sliding-window layers (Gemma3), or None when it has none."""
        text = getattr(self.config, "text_config", None) or self.config
        if "sliding_attention" not in (getattr(text, "layer_types", None) or ()):
            return None
        return int(text.sliding_window)

    def mm_token_type_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        """HF's per-token modality ids: 0 text, 1 image placeholder, 2 video placeholder."""
        types = torch.zeros_like(input_ids, dtype=torch.int32)
        if self.image_token_id is not None:
            types[input_ids == self.image_token_id] = MM_IMAGE
        if self.video_token_id is not None:
            types[input_ids == self.video_token_id] = MM_VIDEO
        if self.image_token_id is not None and self.video_start_token_id is not None and self.video_end_token_id is not None:
            # Glm4vProcessor.create_mm_token_type_ids: image tokens inside a video segment are video tokens
            inside = (input_ids == self.video_start_token_id).cumsum(-1) > (input_ids == self.video_end_token_id).cumsum(-1)
            types[(input_ids == self.image_token_id) & inside] = MM_VIDEO
        return types

    def positions(
        self,
        input_ids: torch.Tensor,
        *,
        attention_mask: torch.Tensor | None = None,
        mm_token_type_ids: torch.Tensor | None = None,
        **fields: torch.Tensor | None,
    ) -> torch.Tensor:
        """Positions of ``input_ids`` ``[B, L]`` (one sub-sample per row; ``attention_mask`` marks a padded
        batch's real tokens), each row starting at 0. ``fields``: the media fields by the forward's names
        (``image_grid_thw``, ``video_grid_thw``, ``second_per_grid_ts``, ``video_second_per_grid``, ...)."""
        mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask
        if self._model is None:
            return (mask.long().cumsum(-1) - 1).clamp(min=0)
        if mm_token_type_ids is None:
            mm_token_type_ids = self.mm_token_type_ids(input_ids)
        available = {name: value for name, value in fields.items() if value is not None}
        if "audio_feature_lengths" not in available and "feature_attention_mask" in available:  # as the forward
            available["audio_feature_lengths"] = available["feature_attention_mask"].sum(-1)
        available.update(input_ids=input_ids, attention_mask=mask, mm_token_type_ids=mm_token_type_ids)
        with torch.no_grad():
            compute = getattr(self._model, "compute_3d_position_ids", None)
            if compute is not None:
                self._model.rope_deltas = None  # the forward's own state: never reuse another call's deltas
                positions = compute(**_cloned(_arguments(compute, available)))
                if positions is not None:
                    return positions
                # HunYuan-VL returns None without images: its text model then uses arange on every axis,
                # which its get_rope_index gives too (one call, every axis)
            for name, sources in _ALIASES.items():
                available.setdefault(name, next((available[s] for s in sources if s in available), None))
            positions, _ = self._model.get_rope_index(**_cloned(_arguments(self._model.get_rope_index, available)))
        return positions


def _cloned(arguments: dict[str, Any]) -> dict[str, Any]:
    """The tensors among ``arguments`` copied: some rope functions edit their inputs in place."""
    return {name: value.clone() if torch.is_tensor(value) else value for name, value in arguments.items()}
